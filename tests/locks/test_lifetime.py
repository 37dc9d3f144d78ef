"""How long a lock lives: until released, until its holder's process dies, until
its connection closes (``exec``), and how tokens outlive the broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from agents.harness import Run
from broker.errors import ErrorCode
from tests.locks.conftest import SLOTS, events_of, held, later, refusal, waiting


def test_agent_killed_with_sigkill_releases_its_locks_to_the_next_waiter(start_run) -> None:
    run = start_run([{"name": "alice"}, {"name": "bob"}, {"name": "carol"}], extra_toml=SLOTS)
    alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
    alice.call("lock.acquire", resources=["k/file.txt", "git", "slot://pair"])
    carol.call("slot.acquire", name="pair")
    bob_waits = later(bob.call, "lock.acquire", resources=["k/file.txt", "git"], wait=30)
    waiting(run, bob.key)
    # alice cannot clean up after herself: no handler runs on SIGKILL.
    os.kill(alice.pid, signal.SIGKILL)
    result = bob_waits.result(timeout=20)
    assert [g["resource"] for g in result["grants"]] == ["k/file.txt", "git"]
    # Her slot unit came back too: bob can take the second one beside carol.
    bob.call("slot.acquire", name="pair")
    released = [e for e in events_of(run, "lock.release") if e["payload"]["holder"] == alice.key]
    assert released and released[-1]["actor"] == "broker" and "exited" in released[-1]["payload"]["reason"]
    assert alice.key not in run.op("lock.list")["holdings"].__repr__()


def test_fencing_tokens_keep_growing_across_broker_restarts(start_run) -> None:
    run = start_run([{"name": "alice"}])
    before = run.puppet("alice").call("lock.acquire", resources=["f.txt"])["grants"][0]["token"]
    run.stop()
    run.start()
    after = run.puppet("alice").call("lock.acquire", resources=["f.txt"])["grants"][0]["token"]
    assert after > before


def test_exec_holds_the_lock_only_while_the_command_runs(run: Run) -> None:
    alice = run.puppet("alice")
    # The command itself looks at what alice holds while it runs.
    script = "conclave lock list --mine --json > inside.json; exit 3"
    out = alice.conclave("exec", "--lock", "e/one.txt", "--lock", "git", "--", "sh", "-c", script)
    assert out.returncode == 3, out.stderr  # the command's own exit code
    inside = json.loads((run.repo / "inside.json").read_text())
    assert {h["resource"] for h in inside["holdings"]} == {"e/one.txt", "git"}
    assert {h["scope"] for h in inside["holdings"]} == {"connection"}
    assert held(run) == {}  # released although the command failed
    (run.repo / "inside.json").unlink()


def test_exec_releases_when_the_command_is_killed(run: Run) -> None:
    out = run.puppet("alice").conclave("exec", "--lock", "e/two.txt", "--", "sh", "-c", "kill -9 $$")
    assert out.returncode == 128 + signal.SIGKILL
    assert held(run) == {}


def test_exec_killed_itself_releases_through_its_closed_connection(run: Run) -> None:
    # exec gets no chance to release: SIGKILL.  The broker sees its connection close.
    alice = run.puppet("alice")
    script = (
        "conclave exec --lock e/three.txt -- sleep 3 >/dev/null 2>&1 & p=$!; "
        "for i in $(seq 50); do conclave lock list --mine --json | grep -q e/three.txt && break; sleep 0.1; done; "
        "kill -9 $p; wait $p; exit 0"
    )
    assert alice.sh("sh", "-c", script).returncode == 0
    run.wait_until(lambda: held(run) == {}, timeout=10, what="the exec lock to be released")
    assert events_of(run, "lock.release")[-1]["payload"]["reason"] == "its connection closed"


def test_exec_refused_without_wait_names_the_holder_and_runs_nothing(run: Run) -> None:
    bob, alice = run.puppet("bob"), run.puppet("alice")
    bob.call("lock.acquire", resources=["e/four.txt"])
    out = alice.conclave("exec", "--lock", "e/four.txt", "--", "touch", "ran.txt")
    assert out.returncode == 1 and bob.key in out.stderr and "[locked]" in out.stderr
    assert not (run.repo / "ran.txt").exists()
    # With --wait it queues, and runs once bob lets go.
    pending = later(alice.conclave, "exec", "--lock", "e/four.txt", "--wait", "30", "--json", "--", "touch", "ran.txt")
    waiting(run, alice.key)
    bob.call("lock.release", resources=["e/four.txt"])
    out = pending.result(timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["exit_code"] == 0
    assert (run.repo / "ran.txt").exists()
    (run.repo / "ran.txt").unlink()


def test_exec_of_a_missing_command_releases_and_exits_127(run: Run) -> None:
    out = run.puppet("alice").conclave("exec", "--lock", "e/five.txt", "--", "no-such-command-here")
    assert out.returncode == 127 and "cannot run" in out.stderr
    assert held(run) == {}


def test_connection_scoped_lock_dies_with_its_connection(run: Run) -> None:
    alice = run.puppet("alice")
    # `fresh` sends the call on a new connection that closes right after the reply.
    alice.call("lock.acquire", fresh=True, resources=["cs/conn.txt"], scope="connection")
    run.wait_until(lambda: "cs/conn.txt" not in held(run), timeout=10, what="the connection-scoped lock to go")
    # Positive control: an agent-scoped lock taken the same way stays with the agent.
    alice.call("lock.acquire", fresh=True, resources=["cs/agent.txt"])
    time.sleep(0.5)
    assert held(run) == {"cs/agent.txt": [alice.key]}


def test_operator_exec_is_refused(run: Run) -> None:
    where = ["--repo", str(run.repo), "--state-dir", str(run.state)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    out = subprocess.run([sys.executable, "-m", "broker.cli", "exec", *where, "--lock", "x.txt", "--", "true"], capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "acts as an agent" in out.stderr
    assert refusal(run.op, "lock.acquire", resources=["x.txt"]).code is ErrorCode.FORBIDDEN
