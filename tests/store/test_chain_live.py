"""The running broker holds its head: an append or a cut behind its back stops it appending, and is remembered.

The attacker here holds even the chain key (a same-uid process outside every
sandbox can read it), so every link it writes verifies; what catches it is
the head the store owner keeps in memory, and after a restart the anchor.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from agents.harness import Run
from store import events
from store.chainkey import ChainKey

FACT = "The {} tests are flaky on arm64 CI because two workers share one temp directory."


def append_behind(state: Path) -> int:
    """Append a correctly keyed event to the live database with the stolen key; return its seq."""
    key = ChainKey.load(state / "chain-key")
    assert key is not None
    conn = apsw.Connection(str(state / "conclave.db"))
    conn.set_busy_timeout(5000)
    try:
        with conn:
            seq, prev = events.head(conn)
            at, payload = events.now(), events.canonical({"reason": "looked fine"})
            digest = events.keyed_digest(key, seq + 1, at, "memory.promote", "operator:x", "1", payload, prev)
            conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", (seq + 1, at, "memory.promote", "operator:x", "1", payload, prev, digest))
        return seq + 1
    finally:
        conn.close()


def test_an_append_behind_the_running_broker_stops_it_appending_until_a_restart_records_it(start_run, tmp_path: Path) -> None:
    run: Run = start_run([{"name": "alice"}])
    alice = run.puppet("alice")
    alice.call("memory.remember", kind="discovery", text=FACT.format("vm"))  # control: writes work
    assert run.op("broker.stats")["chain_refusing"] is None
    forged = append_behind(run.state)
    refused = alice.try_call("memory.remember", kind="discovery", text=FACT.format("kernel"))
    assert refused["ok"] is False and refused["error"]["code"] == "unavailable"
    assert "appended to behind the broker's back" in refused["error"]["message"]
    stats = run.op("broker.stats")
    assert "appended to behind the broker's back" in stats["chain_refusing"]
    live = run.cli("memory", "verify", "--json")
    assert live.returncode == 1 and "the broker refuses to append events" in live.stdout
    run.stop()
    # A new broker on the same state: the database runs past its anchor; it says so in the log and goes on.
    again = Run(run.root, [{"name": "alice"}], reuse=True)
    with again:
        again.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("kernel"))
        report = json.loads(again.cli("memory", "verify", "--json").stdout)
        assert report["ok"] is False
        text = "\n".join(p["problem"] for p in report["problems"])
        assert f"past the anchored head (event {forged - 1})" in text and "when the store was opened" in text
        mismatch = [e for e in again.op("memory.log", kind="store.anchor_mismatch")]
        assert len(mismatch) == 1 and mismatch[0]["detail"]["found"][0] == forged


def test_verify_through_a_live_broker_names_a_cut_made_while_it_runs(start_run) -> None:
    run: Run = start_run([{"name": "alice"}])
    alice = run.puppet("alice")
    for topic in ("vm", "kernel", "disk"):
        alice.call("memory.remember", kind="discovery", text=FACT.format(topic))
    assert run.cli("memory", "verify").returncode == 0  # control
    conn = apsw.Connection(str(run.state / "conclave.db"))
    conn.set_busy_timeout(5000)
    with conn:
        conn.execute("DROP TRIGGER events_append_only_delete")
        conn.execute("DELETE FROM events WHERE seq > (SELECT max(seq) - 2 FROM events)")
    conn.close()
    cut = run.cli("memory", "verify", "--json")
    assert cut.returncode == 1
    report = json.loads(cut.stdout)
    text = "\n".join(p["problem"] for p in report["problems"])
    assert "2 event(s) were cut behind its back" in text and "the event log was cut behind the broker's back" in text
