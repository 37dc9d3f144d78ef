"""Time budgets (issue 23): an agent that runs too long, or sits idle, is stopped like Ctrl-C, and says so.

``timeout`` and ``idle_timeout`` per agent, in ``[defaults]``, and for the
whole run (``conclave run --timeout``).  Each stop is paired with a control on
the same team: an agent within its limits runs to its end.  (Budgets of
tokens and dollars need a binary that reports usage: tests/agents/test_real_agents.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.harness import Run, make_repo
from broker import composition
from broker.entry import conclave_argv
from broker.team import TeamError, parse
from store.database import connect


def exits(state: Path) -> dict[str, dict]:
    conn = connect(state / "conclave.db", readonly=True)
    try:
        rows = conn.execute("SELECT subject, payload FROM events WHERE kind = 'agent.exit' ORDER BY seq").fetchall()
    finally:
        conn.close()
    return {s.split(":")[0]: json.loads(p) for s, p in rows}


#: Imports first and says so (so a slow start is not the silence tested), then waits 3 s inside one broker call.
WAITER = """
from broker.client import BlockingClient
print("ready", flush=True)
with BlockingClient.for_agent() as client:
    client.call("msg.inbox", {"wait": 3})
print("waited", flush=True)
"""


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    """One run: a sleeper past its timeout, a quick agent within the same timeout, an idle agent,
    a busy agent with the same idle_timeout, one idle in a broker call (waiting for mail), and
    one that takes its timeout from [defaults]."""
    chatty = "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 0.3; done"
    team = [
        {"name": "sleeper", "command": ["sh", "-c", "echo starting; exec sleep 60"], "timeout": "1s"},
        {"name": "quick", "command": ["sh", "-c", "sleep 0.2; echo done"], "timeout": "5s"},
        {"name": "dozer", "command": ["sh", "-c", "echo once; exec sleep 60"], "idle_timeout": 1.5, "timeout": "30s"},
        {"name": "busy", "command": ["sh", "-c", chatty], "idle_timeout": 1.5, "timeout": "30s"},
        {"name": "waiter", "command": [sys.executable, "-c", WAITER], "idle_timeout": 1.5, "timeout": "30s"},
        {"name": "defaulted", "command": ["sleep", "60"]},
    ]
    root = tmp_path_factory.mktemp("timed")
    run = Run(root, team, extra_toml='\n[defaults]\ntimeout = "2s"\n')
    run.start(wait_for=[])
    started = time.monotonic()
    try:
        summary = run.wait_exit(timeout=120)
    finally:
        run.close()
    yield {"summary": summary, "state": run.state, "seconds": time.monotonic() - started, "run": run}


def outcome(timed, name: str) -> dict:
    return next(a for a in timed["summary"]["agents"] if a["agent"] == name)


def test_an_agent_past_its_timeout_is_stopped_like_ctrl_c_and_the_exit_says_timed_out(timed):
    sleeper = outcome(timed, "sleeper")
    assert sleeper["ended_by"] == "timeout" and sleeper["failed"]
    assert sleeper["status"] == "timed out: timeout = 1s ran out; killed by SIGTERM"  # SIGTERM first, as at shutdown
    event = exits(timed["state"])["sleeper"]
    assert event["stopped"] == "timeout" and event["error"] == "timed out: timeout = 1s ran out"
    # Control: an agent that finishes within its timeout.
    quick = outcome(timed, "quick")
    assert quick["status"] == "exit 0" and not quick["failed"] and quick["ended_by"] is None
    assert "stopped" not in exits(timed["state"])["quick"]


def test_an_idle_agent_is_stopped_and_a_busy_one_or_one_waiting_on_the_broker_is_not(timed):
    dozer = outcome(timed, "dozer")
    assert dozer["ended_by"] == "idle" and dozer["failed"]
    assert dozer["status"] == "idle: no output and no broker call for idle_timeout = 1.5s; killed by SIGTERM"
    # Controls: printing every 0.3 s for 3 s, and 3 s inside one broker call (inbox --wait), with the same idle_timeout.
    assert outcome(timed, "busy")["status"] == "exit 0"
    assert outcome(timed, "waiter")["status"] == "exit 0"


def test_defaults_give_every_agent_its_timeout_and_an_agents_own_wins(timed):
    assert outcome(timed, "defaulted")["status"] == "timed out: timeout = 2s ran out; killed by SIGTERM"
    assert outcome(timed, "sleeper")["status"].startswith("timed out: timeout = 1s")  # its own 1s, not the default 2s
    assert timed["summary"]["exit_code"] == 1 and set(timed["summary"]["failed"]) == {
        f"{a['agent']}:{a['session']}" for a in timed["summary"]["agents"] if a["agent"] in ("sleeper", "dozer", "defaulted")
    }
    assert timed["seconds"] < 30


def test_the_run_view_says_why_an_agent_was_stopped(timed):
    journal = [json.loads(x) for x in (timed["state"] / "logs" / "run-1.jsonl").read_text().splitlines()]
    limits = {n["principal"].split(":")[0]: n["text"] for n in journal if n["kind"] == "limit"}
    assert limits == {
        "sleeper": "timed out: timeout = 1s ran out; stopping it",
        "dozer": "idle: no output and no broker call for idle_timeout = 1.5s; stopping it",
        "defaulted": "timed out: timeout = 2s ran out; stopping it",
    }


def test_the_whole_runs_timeout_stops_it_like_ctrl_c_with_exit_6(tmp_path):
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "long"\ncommand = ["sleep", "60"]\n\n[[agent]]\nname = "short"\ncommand = ["true"]\n')
    argv = conclave_argv("run", "--team", str(team), "--repo", str(repo), "--state-dir", str(tmp_path / "state"), "--grace", "1")
    started = time.monotonic()
    done = subprocess.run([*argv, "--timeout", "1.5s"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 6, done.stderr
    assert time.monotonic() - started < 20
    assert "the run timed out (timeout = 1.5s): stopping. SIGTERM sent to 1 agent(s)" in done.stdout
    assert "stopped by timeout; exit code 6" in done.stdout
    # Control: a run that ends before its timeout is not stopped (a team of its own: another state directory,
    # since dropping an agent is a trust-relevant change the operator would have to accept).
    team.write_text('[[agent]]\nname = "short"\ncommand = ["true"]\n')
    argv = conclave_argv("run", "--team", str(team), "--repo", str(repo), "--state-dir", str(tmp_path / "state2"), "--grace", "1")
    done = subprocess.run([*argv, "--timeout", "30s", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["stopped_by"] is None
    bad = subprocess.run([*argv, "--timeout", "soon"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--timeout" in bad.stderr and '"90s", "15m", "1h30m"' in bad.stderr


@pytest.mark.parametrize(
    ("entry", "extra", "needles"),
    [
        ({"timeout": "fortnight"}, "", ["timeout = 'fortnight' is not a duration", '"1h30m"']),
        ({"idle_timeout": -5}, "", ["idle_timeout must be more than 0 seconds"]),
        ({"max_tokens": 1000}, "", ["max_tokens need an agent whose binary reports its usage", 'preset = \\"claude-code\\"'.replace("\\", "")]),
        ({"max_cost_usd": 2.5, "preset": "codex", "prompt": "p"}, "", ["max_cost_usd cannot be enforced on preset 'codex'", "use max_tokens"]),
        ({"model": "opus"}, "", ["model is passed by a preset"]),
        ({"log_cap": "1KiB"}, "", ["log_cap must be a size of at least 256 KiB"]),
        ({}, '[defaults]\nretries = 3\n', ["[defaults] has unknown key(s) retries", "allowed: "]),
        ({}, '[run]\nmax_cost_usd = "lots"\n', ["[run]: max_cost_usd must be a number of dollars"]),
    ],
)
def test_a_limit_that_cannot_work_is_refused_at_team_load_naming_the_fix(tmp_path, entry, extra, needles):
    import tomllib

    raw = tomllib.loads(extra) if extra else {}
    raw["agent"] = [{"name": "alice", "command": ["true"], **entry}]
    with pytest.raises(TeamError) as refused:
        parse(raw, repo=tmp_path, rules=composition.team_rules(), check_commands=False)
    for needle in needles:
        assert needle in str(refused.value), str(refused.value)
    # Control: the same agent with sound limits loads.
    good = {"name": "alice", "command": ["true"], "timeout": "90m", "idle_timeout": 300, "log_cap": "1MiB"}
    team = parse({"agent": [good], "defaults": {"timeout": "2h"}, "run": {"max_cost_usd": 20}}, repo=tmp_path, rules=composition.team_rules(), check_commands=False)
    (spec,) = team.agents
    assert (spec.limits.timeout, spec.limits.idle_timeout, spec.log_cap, team.run_limits.max_cost_usd) == (5400.0, 300.0, 1 << 20, 20.0)


def test_defaults_budgets_reach_only_agents_that_report_usage(tmp_path):
    """A [defaults] max_tokens applies to the preset agents whose binaries report usage, and is
    left off a plain command (which reports none: it could never be enforced there)."""
    raw = {
        "defaults": {"max_tokens": 50_000, "timeout": "1h"},
        "agent": [{"name": "claude", "preset": "claude-code", "prompt": "p", "command": ["/bin/true"]}, {"name": "plain", "command": ["true"]}],
    }
    team = parse(raw, repo=tmp_path, rules=composition.team_rules(), check_commands=False)
    by = {a.name: a.limits for a in team.agents}
    assert (by["claude"].max_tokens, by["claude"].timeout) == (50_000, 3600.0)
    assert (by["plain"].max_tokens, by["plain"].timeout) == (None, 3600.0)


def test_budgets_add_up_restarts_per_agent_and_every_agent_per_run() -> None:
    """The meter behind max_tokens and max_cost_usd: an agent's restarts add up against its own
    budget, every agent against the run's; a cumulative report never lowers a figure; a cost
    budget waits for a cost (Codex reports none)."""
    from broker.limits import Limits, Meter, Usage

    meter = Meter(Limits(max_tokens=10_000, max_cost_usd=1.0))
    own = Limits(max_tokens=6_000)
    meter.report("alice:s1", "alice", Usage(3_000, 0, 500, 0.10))
    assert meter.crossed("alice", own) is None
    meter.report("alice:s1", "alice", Usage(1_000, 0, 100, 0.01))  # a lower cumulative figure changes nothing
    assert meter.by_principal["alice:s1"] == Usage(3_000, 0, 500, 0.10)
    meter.report("alice:s2", "alice", Usage(2_600, 0, 0, 0.05))  # its restart
    assert meter.crossed("alice", own) == ("agent", "over budget: max_tokens = 6,000 for alice crossed, 6,100 tokens used")
    meter.report("cody:c1", "cody", Usage(3_900, 0, 100))  # Codex: tokens, no cost
    assert meter.crossed("cody", Limits()) == ("run", "over budget: max_tokens = 10,000 for the run crossed, 10,100 tokens used")
    costly = Meter(Limits(max_cost_usd=1.0))
    costly.report("cody:c1", "cody", Usage(10**7, 0, 0))
    assert costly.crossed("cody", Limits()) is None  # no cost reported: a dollar budget cannot be crossed by it
    costly.report("ann:a1", "ann", Usage(10, 0, 10, 1.25))
    assert costly.crossed("ann", Limits()) == ("run", "over budget: max_cost_usd = 1 for the run crossed, $1.2500 spent")
