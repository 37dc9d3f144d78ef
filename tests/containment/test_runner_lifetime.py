"""Nothing `conclave scenario run` starts outlives it: not its zygote, not the brokers forked from it, not their agents.

The attack is the ordinary way a run ends badly: the runner is killed outright (SIGKILL, the OOM killer,
a CI job's timeout) while its brokers run.  Before, the zygote waited on for its monitors, each monitor
for its broker, and each broker for agents nobody would ever drive: a machine filled with brokers.  Now
each monitor holds its broker's report socket as a lifeline (scenarios/zygote.py): the runner gone, it
stops the broker (SIGTERM), kills it after a grace, and sweeps what the broker's death re-parented to it.

The control is the same run with the runner alive: its brokers and agents stay up, a lifeline that is
still held ends nothing.  SIGTERM (and Ctrl-C) is the clean stop: the runner stops every broker itself,
waits for them, and exits 143 with a sentence -- nothing of its tree is left by the time it has exited.

These run in the main suite and again as uid 65534 (tests/broker/test_as_user.py): signals, the child
subreaper and the agents' boxes are privilege-dependent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from agents.harness import operator_env
from broker.entry import conclave_argv
from broker.identity import process_start_time

SCENARIO = """name = "{name}"
tier = "T2"
description = "holds its broker and two agents up while the test kills the runner"

[[agents]]
name = "alice"

[[agents]]
name = "bob"

[[step]]
actor = "alice"
op = "whoami"

[[step]]
actor = "alice"
action = "sleep"
seconds = 120
"""

#: Two scenarios at once: two brokers, four agents.
SCENARIOS = ("held-one", "held-two")


def _tree(root: int) -> dict[int, tuple[int | None, str]]:
    """Every live descendant of ``root``: pid -> (start time, command line), from /proc's parent links."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if fields[0] != b"Z":  # a zombie has ended; only its reaping is left
            parents.setdefault(int(fields[1]), []).append(int(name))
    found: dict[int, tuple[int | None, str]] = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[pid] = (process_start_time(pid), cmdline)
        todo.extend(parents.get(pid, []))
    return found


def _alive(pid: int, started: int | None) -> bool:
    """Is this process (the one with this start time, not a later one given its pid) still there, not a zombie?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] != b"Z" and process_start_time(pid) == started


def _start_runner(tmp_path: Path) -> tuple[subprocess.Popen[str], dict[int, tuple[int | None, str]]]:
    """`conclave scenario run` on two held scenarios, and its tree once both brokers have both agents up."""
    for name in SCENARIOS:
        (tmp_path / f"{name}.toml").write_text(SCENARIO.format(name=name))
    scratch = tmp_path / "tmp"  # every scenario's repository and state under the test's own directory
    scratch.mkdir()
    env = operator_env(TMPDIR=str(scratch))
    argv = conclave_argv("scenario", "run", *(str(tmp_path / f"{name}.toml") for name in SCENARIOS), "--jobs", "2", "--json")
    runner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while True:
        tree = _tree(runner.pid)
        if sum("agents.puppet" in cmd for _, cmd in tree.values()) >= 4:
            return runner, tree
        if runner.poll() is not None or time.monotonic() > deadline:
            runner.kill()
            out, err = runner.communicate()
            raise AssertionError(f"the runner never had four agents up (exit {runner.returncode}): {err[-2000:]}{out[-1000:]}")
        time.sleep(0.1)


def _brokers(tree: dict[int, tuple[int | None, str]]) -> list[int]:
    """The forked brokers: the zygote's grandchildren (zygote -> monitor -> broker), each the parent of launchers."""
    [zygote] = [pid for pid, (_, cmd) in tree.items() if "scenarios.zygote" in cmd and _parent(pid) not in tree]
    monitors = [pid for pid in tree if _parent(pid) == zygote]
    return [pid for pid in tree if _parent(pid) in monitors]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[1])


def _left(tree: dict[int, tuple[int | None, str]]) -> dict[int, str]:
    return {pid: cmd for pid, (started, cmd) in tree.items() if _alive(pid, started)}


def test_a_killed_scenario_runner_leaves_no_zygote_broker_or_agent_running(tmp_path: Path) -> None:
    runner, tree = _start_runner(tmp_path)
    try:
        brokers = _brokers(tree)
        assert len(brokers) == 2, tree
        # Control: with the runner alive, its lifelines are held -- every broker and agent stays up.
        time.sleep(1.0)
        assert _left(tree).keys() == tree.keys(), set(tree) - set(_left(tree))

        # The attack: the runner killed outright, with no chance to clean up.
        runner.kill()
        runner.communicate(timeout=60)
        deadline = time.monotonic() + 30  # a broker's clean stop takes about a second; the monitor's grace is 15 s
        while _left(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _left(tree) == {}, f"outlived the killed runner: {_left(tree)}"
    finally:
        for pid, (started, _) in tree.items():
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_stops_every_broker_of_the_scenario_runner_before_it_exits(tmp_path: Path) -> None:
    runner, tree = _start_runner(tmp_path)
    try:
        assert len(_brokers(tree)) == 2, tree
        runner.send_signal(signal.SIGTERM)
        out, err = runner.communicate(timeout=120)
        # It stopped them itself, and waited: nothing of its tree is left once it has exited.
        assert runner.returncode == 128 + signal.SIGTERM, err
        assert "interrupted by SIGTERM after 0 of 2 scenario(s)" in err and "brokers it had started were stopped" in err, err
        assert _left(tree) == {}, f"outlived the runner's own stop: {_left(tree)}"
    finally:
        for pid, (started, _) in tree.items():
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)
