"""An agent's output reaches its log through the broker, capped: a flood is counted, reported, survived.

Issue 22: each agent used to hold a descriptor into its log, and one filled the
file system until the broker died.  Now the broker reads the agents' pipes and
writes the logs itself (``broker.capture``), keeping at most ``log_cap`` bytes of
each: the first segment and the newest, with what was dropped between them
counted, recorded as an event, said in the run view and the summary, and marked
in the log itself.  (A full file system under the logs, and a log the agent tries
to rewrite, are attacks in tests/containment/test_logs.py.)
"""

from __future__ import annotations

import json
import sys

from agents.harness import Run
from broker.runlog import segments
from tests.eventlog import events_of

CAP = 256 * 1024
FLOOD_LINES = 60_000  # about 4.4 MB: 17 times the cap
FLOOD = f"""
import sys
for i in range({FLOOD_LINES}):
    sys.stdout.write(f"flood line {{i:06d}} " + "x" * 60 + "\\n")
sys.stdout.write("flood done\\n")
"""


def test_a_flood_past_the_cap_is_counted_reported_and_the_broker_is_fine(tmp_path):
    """Attack: an agent prints 17 times its log_cap.  The log stays within the cap (its first and
    latest output kept), every dropped byte and line is counted in an event, the exit and the
    journal; the broker goes on serving another agent.  Control: a quiet agent with the same cap
    loses nothing and raises no report."""
    team = [
        {"name": "flood", "command": [sys.executable, "-c", FLOOD], "log_cap": "256KiB"},
        {"name": "quiet", "command": [sys.executable, "-c", "print('just one line')"], "log_cap": "256KiB"},
        {"name": "bob"},
    ]
    run = Run(tmp_path, team).start(wait_for=["bob"])
    try:
        bob = run.puppet("bob")
        run.wait_until(lambda: {r["agent"] for r in run.op("agents") if r["ended_at"]} >= {"flood", "quiet"}, timeout=120, what="flood and quiet to end")
        # The broker is fine: it answers and stores.
        assert bob.call("whoami")["agent"] == "bob"
        claim = bob.call("memory.remember", kind="discovery", text="The flood agent printed far past its log cap.")
        assert claim["tier"] == "unverified"
        bob.exit()
        summary = run.wait_exit(timeout=60)
    finally:
        run.close()
    logs = run.state / "logs"
    (flood_log,) = [p.name for p in logs.glob("flood-*.log")]
    on_disk = segments(logs, flood_log)
    assert sum(p.stat().st_size for p in on_disk) <= CAP + 1024, [(p.name, p.stat().st_size) for p in on_disk]
    text = b"".join(p.read_bytes() for p in on_disk).decode()
    assert text.startswith("flood line 000000 ") and text.endswith("flood done\n")  # the first and the latest output
    assert "of this agent's output were dropped before this line to keep its log within log_cap = 256 KiB" in text
    dropped = events_of(run.state, "agent.output_dropped")
    assert dropped and {e["subject"].split(":")[0] for e in dropped} == {"flood"}
    assert dropped[-1]["cap"] == CAP
    (exit_flood,) = [e for e in events_of(run.state, "agent.exit") if e["subject"].startswith("flood:")]
    kept_lines = text.count("\n")
    out = exit_flood["output"]
    assert out["dropped_bytes"] == dropped[-1]["total_bytes"] > 0 and out["lost_bytes"] == 0
    # Every line is accounted for: kept (less the marker lines) or counted as dropped.
    markers = text.count("[conclave: ")
    assert kept_lines - markers + out["dropped_lines"] == FLOOD_LINES + 1
    journal = [json.loads(x) for x in (logs / "run-1.jsonl").read_text().splitlines()]
    assert any(n["kind"] == "output_dropped" and n["principal"].startswith("flood:") for n in journal)
    by_agent = {a["agent"]: a for a in summary["agents"]}
    assert "bytes dropped past its log_cap" in by_agent["flood"]["status"]
    # Control: the quiet agent, same cap: everything kept, nothing reported.
    assert by_agent["quiet"]["output"] == {"bytes": len("just one line\n"), "dropped_bytes": 0, "dropped_lines": 0, "lost_bytes": 0, "lost_lines": 0}
    assert by_agent["quiet"]["status"] == "exit 0"
    (quiet_log,) = logs.glob("quiet-*.log")
    assert quiet_log.read_text() == "just one line\n"
