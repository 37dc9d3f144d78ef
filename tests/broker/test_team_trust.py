"""The team file is trusted configuration, and lives in the tree agents write.

The attack: an agent edits team.toml -- its own box off, a wider allow_write,
a preloaded library in its environment, a weaker trust policy, another store
-- and the edit gets committed; at the person's next ``conclave run`` it would
have all of that.  ``conclave run`` keeps what the operator last ran (in the
state directory, which no box reaches) and refuses a trust-relevant change,
showing it field by field, until the operator accepts it.  Controls: the
first run records the file and runs; an accepted change runs; a change to a
field that is not trust-relevant (the prompt) runs without asking.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agents.harness import make_repo
from tests.conclave_run import conclave as conclave_command

BEFORE = """
[[agent]]
name = "alice"
command = ["sh", "-c", "echo ran >> {marker}"]
sandbox = "{level}"

[policy]
quorum = 2
"""


def conclave(*args: str) -> subprocess.CompletedProcess[str]:
    """The operator's `conclave` in a process of its own (forked warm: tests/conclave_run.py)."""
    return conclave_command(*args)


def setup(tmp_path: Path) -> tuple[Path, Path, Path, list[str]]:
    from broker.sandbox import machine

    repo = make_repo(tmp_path)
    team = repo / "team.toml"
    marker = repo / "ran.txt"  # the box writes the work tree
    level = machine.probe().strongest
    team.write_text(BEFORE.format(marker=marker, level=level))
    where = ["--repo", str(repo), "--state-dir", str(tmp_path / "state")]
    return repo, team, marker, where


def runs(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_a_trust_relevant_edit_is_shown_and_refused_until_the_operator_accepts_it(tmp_path: Path) -> None:
    repo, team, marker, where = setup(tmp_path)
    # A first run records the team file as it is, and runs.
    first = conclave("run", "--team", str(team), *where, "--json")
    assert first.returncode == 0 and runs(marker) == 1, first.stderr
    # What an agent writes into the tree: its box off, more to write, a library preloaded, a weaker policy.
    edited = team.read_text().replace('sandbox = "strict"', 'sandbox = "off"').replace('sandbox = "landlock"', 'sandbox = "off"')
    edited = edited.replace('sandbox = "off"', 'sandbox = "off"\nallow_write = ["/tmp"]\nenv = { LD_PRELOAD = "/tmp/evil.so", API_TOKEN = "hunter2" }')
    team.write_text(edited.replace("quorum = 2", "quorum = 1"))
    refused = conclave("run", "--team", str(team), *where)
    assert refused.returncode == 2 and runs(marker) == 1, refused.stdout + refused.stderr  # nothing ran
    for field in ("agent 'alice'.sandbox", "agent 'alice'.allow_write", "agent 'alice'.env.LD_PRELOAD", "[policy] quorum"):
        assert field in refused.stdout, (field, refused.stdout)
    assert '"/tmp/evil.so"' in refused.stdout and "hunter2" not in refused.stdout + refused.stderr  # a secret's value is never shown
    assert "conclave team accept" in refused.stderr and "--accept-team" in refused.stderr
    # --json says the same, as data.
    as_json = conclave("run", "--team", str(team), *where, "--json")
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and report["refused"] == "team_changed"
    assert {c["field"] for c in report["changes"]} >= {"agent 'alice'.sandbox", "[policy] quorum"}
    # The operator reads them and accepts; then it runs.
    accepted = conclave("team", "accept", str(team), *where, "--json")
    assert accepted.returncode == 0 and len(json.loads(accepted.stdout)["changes"]) == len(report["changes"]), accepted.stderr
    again = conclave("run", "--team", str(team), *where, "--json")
    assert again.returncode == 0 and runs(marker) == 2, again.stderr


def test_run_accept_team_accepts_and_runs_in_one_step(tmp_path: Path) -> None:
    repo, team, marker, where = setup(tmp_path)
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 0
    team.write_text(team.read_text().replace("quorum = 2", "quorum = 3"))
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 2 and runs(marker) == 1
    out = conclave("run", "--team", str(team), *where, "--accept-team")
    assert out.returncode == 0 and runs(marker) == 2, out.stderr
    assert "accepted 1 change(s)" in out.stdout and "[policy] quorum: 2 -> 3" in out.stdout


def test_a_change_to_the_prompt_is_not_trust_relevant_and_runs_without_asking(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    team = repo / "team.toml"
    marker = repo / "ran.txt"  # the box writes the work tree
    body = '[[agent]]\nname = "alice"\npreset = "command"\ncommand = ["sh", "-c", "cat {{prompt_file}} >> {marker}"]\nprompt = "{task}"\n'
    where = ["--repo", str(repo), "--state-dir", str(tmp_path / "state")]
    team.write_text(body.format(marker=marker, task="first task"))
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 0
    team.write_text(body.format(marker=marker, task="second task"))
    out = conclave("run", "--team", str(team), *where, "--json")
    assert out.returncode == 0, out.stderr
    text = marker.read_text()
    assert "first task" in text and "second task" in text.split("first task", 1)[1]  # both ran, in turn
    # Control: the same file with its command changed is asked about.
    team.write_text(body.format(marker=marker, task="second task").replace("cat ", "cat -n "))
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 2


def test_an_agent_cannot_accept_a_change_for_the_operator(start_run, tmp_path: Path) -> None:
    """An unboxed agent that can write the team file and run conclave still cannot accept it: it descends from a broker."""
    run = start_run([{"name": "carol", "sandbox": "off"}])
    repo, team, marker, where = setup(tmp_path)
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 0
    team.write_text(team.read_text().replace("quorum = 2", "quorum = 1"))
    from broker.entry import conclave_argv

    out = run.puppet("carol").sh(*conclave_argv("team", "accept", str(team), *where))
    assert out.returncode == 1 and "descends from a running conclave broker" in out.stderr, out.stderr
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 2  # still refused
    # Control: the operator's own terminal accepts it.
    assert conclave("team", "accept", str(team), *where).returncode == 0
    assert conclave("run", "--team", str(team), *where, "--json").returncode == 0


def test_status_after_a_team_accepted_before_any_run_waits_for_a_broker_and_a_deleted_key_is_still_refused(tmp_path: Path) -> None:
    """`conclave team accept` before the first `conclave run` makes the state directory and writes only
    its record there: no operator key, since no broker has made one.  `status` must say that no broker
    runs and how to start one (exit 3), and `status --watch` wait for the broker -- never refuse over a
    key the person never had.

    The attack the refusal exists for stays refused: a state directory a broker ran on whose operator key
    is then deleted, or replaced, behind its back is named and refused as before -- with the team
    record beside it, which proves nothing about a directory holding anything else."""
    import os
    import select
    import signal
    import time

    from broker.entry import conclave_argv
    from tests.conclave_run import operator_env

    repo, team, marker, where = setup(tmp_path)
    state = tmp_path / "state"
    team.write_text(team.read_text().replace('"echo ran >> {marker}"'.format(marker=marker), '"echo ran >> {marker}; sleep 60"'.format(marker=marker)))
    assert conclave("team", "accept", str(team), *where).returncode == 0
    assert sorted(p.name for p in state.iterdir()) == ["accepted-teams.json"]

    status = conclave("status", *where)
    assert status.returncode == 3, status.stderr
    assert "no broker is running" in status.stderr and "conclave run --team" in status.stderr and "operator key" not in status.stderr
    as_json = json.loads(conclave("status", "--json", *where).stderr)["error"]
    assert as_json["code"] == "no_broker" and "conclave run" in as_json["fix"]

    # --watch started now says it waits (before the fix: refused after 5 s), and follows the broker that starts.
    def watch(*args: str, sigint: object = signal.SIG_DFL) -> subprocess.Popen[str]:
        argv = conclave_argv("status", "--watch", "--interval", "0.2", *args, *where)
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=operator_env(),
                                preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))  # type: ignore[arg-type]

    def line(process: subprocess.Popen[str]) -> str:
        assert process.stdout is not None
        return process.stdout.readline() if select.select([process.stdout], [], [], 60)[0] else ""

    person, script = watch(), watch("--json")
    broker = None
    try:
        first = line(person)
        assert first.startswith(f"waiting for a broker on {state}") and "conclave run --team" in first, (first, person.poll())
        # Ctrl-C ends a waiting watch even when it was started with SIGINT ignored (a background job of a
        # script inherits that; Python then installs no handler of its own, and the watch waited for ever).
        background = watch(sigint=signal.SIG_IGN)
        assert line(background).startswith("waiting for a broker"), background.poll()
        background.send_signal(signal.SIGINT)
        out, err = background.communicate(timeout=10)
        assert background.returncode == 0 and "Traceback" not in out + err, (background.returncode, out, err)
        broker = subprocess.Popen(conclave_argv("run", "--team", str(team), *where, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=operator_env())
        board = json.loads(line(script) or "null")
        assert board is not None and [a["agent"] for a in board["agents"]] == ["alice"], (board, script.poll())
        assert person.poll() is None  # still watching, not refused
        broker.send_signal(signal.SIGTERM)
        broker.communicate(timeout=60)
        script.communicate(timeout=30)
        assert script.returncode == 0  # the broker stopped: the watch ends by itself
        # The person's watch too, if it connected in time; else it still waits for a broker (Ctrl-C ends it).
        try:
            out, err = person.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            person.send_signal(signal.SIGINT)
            out, err = person.communicate(timeout=30)
        assert person.returncode == 0 and "operator key" not in out + err, (out, err)
    finally:
        for process in (broker, person, script):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()

    # Control: the same directory, now run on, with its key deleted behind the broker's back: refused, named.
    assert {"operator.key", "conclave.db", "accepted-teams.json"} <= {p.name for p in state.iterdir()}
    key = (state / "operator.key").read_text()
    os.unlink(state / "operator.key")
    for args in (["status"], ["status", "--watch"]):
        refused = conclave(*args, *where)
        assert refused.returncode == 1 and f"no operator key at {state / 'operator.key'}" in refused.stderr, refused.stderr
    # ... and with another key in its place: the store answers to the first one.
    (state / "operator.key").write_text("0" * 64 + "\n")
    replaced = conclave("status", *where)
    assert replaced.returncode == 1 and "answers to another operator key" in replaced.stderr, replaced.stderr
    # ... and emptied (as a rewrite in place leaves it for an instant): refused, named, no traceback (the dashboard's
    # reconnect crashed on it, NoIdentityError).
    (state / "operator.key").write_text("")
    emptied = conclave("status", *where)
    assert emptied.returncode == 1 and f"the operator key at {state / 'operator.key'} is empty" in emptied.stderr, emptied.stderr
    assert "Traceback" not in emptied.stderr
    # Control of the control: the key put back, status works.
    (state / "operator.key").write_text(key)
    assert conclave("status", *where).returncode == 0
