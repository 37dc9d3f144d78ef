"""Nothing an agent starts outlives it, and the broker's death ends every agent (issue 21, class 3).

The attacks are what an agent's shell can do to outlive its box:

* a **walker** -- a process that forks and lets its parent exit every few
  hundred microseconds, so any list of processes is stale by the time it is
  acted on (it outlived its agent and the broker in 4 of 5 strict runs when
  the broker swept orphans itself);
* a ``setsid``'d, double-forked **daemon**;
* waiting for the broker to be killed outright (SIGKILL, the OOM killer).

What catches them, by level (``Machine.leftovers`` says it in words): in
``strict``, the agent's own PID namespace -- its init exits with the agent
and the kernel kills the rest; elsewhere the launcher, which stays as the
agent's child subreaper and kills what is re-parented to it, and the
agent's cgroup where one is delegated.  When the broker dies, each launcher
sees its lifeline pipe reach end of file and does the same at once.  What
even that misses (a launcher someone stopped) the next broker on the state
directory ends from its ledger, pinning each pid by pidfd and start time.

These run in the main suite and again as uid 65534 (tests/broker/test_as_user.py):
as root this machine delegates a cgroup; as an ordinary uid it does not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agents.harness import Run, make_repo
from broker.identity import process_start_time
from broker.sandbox import machine as sandbox_machine
from broker.sandbox.leftovers import Ledger

MACHINE = sandbox_machine.probe()
LEVELS = [level for level in ("strict", "landlock") if MACHINE.offers(level) is None]

#: Forks and exits every 100-500 us; appends its pid to OUT every 10 ms; stops when STOP exists.
WALKER = textwrap.dedent(
    """
    import os, random, sys, time
    out, stop = sys.argv[1], sys.argv[2]
    last = 0.0
    while not os.path.exists(stop):
        try:
            if os.fork():
                os._exit(0)
        except OSError:
            time.sleep(0.01)
            continue
        now = time.monotonic()
        if now - last >= 0.01:
            with open(out, "a") as f:
                f.write(f"{os.getpid()}\\n")
            last = now
        time.sleep(random.uniform(0.0001, 0.0005))
    """
)
#: Leaves its session and its parent (double fork, setsid), then appends to OUT every 10 ms until STOP exists.
DAEMON = textwrap.dedent(
    """
    import os, sys, time
    out, stop = sys.argv[1], sys.argv[2]
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    while not os.path.exists(stop):
        with open(out, "a") as f:
            f.write("x\\n")
        time.sleep(0.01)
    """
)

#: The agent: starts each SCRIPT OUT pair, waits until every OUT is being written, then exits (or stays with --stay).
STARTER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    args, stay = [a for a in sys.argv[1:] if a != "--stay"], "--stay" in sys.argv
    stop = args.pop(0)
    pairs = list(zip(args[::2], args[1::2]))
    for script, out in pairs:
        subprocess.Popen([sys.executable, "-I", script, out, stop])
    def written(out):
        try:
            with open(out) as f:
                return f.read().count("\\n") >= 3
        except FileNotFoundError:
            return False
    while not all(written(out) for _, out in pairs):
        time.sleep(0.02)
    if stay:
        time.sleep(300)
    """
)


def scripts(repo: Path) -> tuple[Path, Path, Path]:
    """The walker and the daemon in the work tree (every box reads it), and the stop file's name."""
    walker, daemon = repo / "walker.py", repo / "daemon.py"
    walker.write_text(WALKER)
    daemon.write_text(DAEMON)
    (repo / "starter.py").write_text(STARTER)
    # What the agents write goes in out/: a landlock box cannot make new entries at the top of the tree.
    (repo / "out").mkdir(exist_ok=True)
    return walker, daemon, repo / "stop"


def agent(repo: Path, stop: Path, *pairs: tuple[Path, Path], stay: bool = False) -> list[str]:
    """An agent's command: start each (script, out) and wait until all of them write; exit, or stay."""
    return [sys.executable, "-I", str(repo / "starter.py"), str(stop), *(str(p) for pair in pairs for p in pair), *(["--stay"] if stay else [])]


def growing(path: Path, *, for_seconds: float = 0.4) -> bool:
    before = path.stat().st_size if path.exists() else 0
    time.sleep(for_seconds)
    return (path.stat().st_size if path.exists() else 0) > before


def running(marker: Path) -> list[int]:
    """Live processes whose command line names ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.fsencode(marker) not in Path(f"/proc/{name}/cmdline").read_bytes():
                continue
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for whoever adopted it to reap it is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def ended(run: Run, names: set[str]) -> bool:
    return {a["agent"] for a in run.op("agents") if a["agent"] in names and a["ended_at"]} == names


def launcher_pids(run: Run) -> dict[str, int]:
    return {a["agent"]: a["pid"] for a in run.op("agents") if a["pid"] and not a["ended_at"]}


def test_a_walker_does_not_outlive_its_agent_5_of_5_at_each_level(tmp_path: Path) -> None:
    """Five agents per level each start a walker and exit; within a second of the exits nothing
    of any walker runs, and its file stops growing."""
    repo = make_repo(tmp_path / "run")
    walker, _, stop = scripts(repo)
    team: list[dict[str, Any]] = [{"name": "keeper"}]  # a puppet that keeps the broker up
    outs: dict[str, Path] = {}
    for level in LEVELS:
        for i in range(5):
            name = f"{level}{i}"
            outs[name] = repo / "out" / f"walk-{name}"
            team.append({"name": name, "sandbox": level, "command": agent(repo, stop, (walker, outs[name]))})
    run = Run(tmp_path / "run", team, reuse=True)
    try:
        run.start(wait_for=["keeper"])
        run.wait_until(lambda: ended(run, set(outs)), timeout=60, what="every walker's agent to exit")
        time.sleep(1.0)  # "within a second"
        for name, out in outs.items():
            level = name.rstrip("0123456789")
            guarantee = MACHINE.leftovers(level)
            # Control: it walked while its agent lived (a new process, a new pid, every few hundred us).
            pids = {int(p) for p in out.read_text().split()}
            assert len(pids) >= 3, f"{name}: the walker never walked ({out.read_text()!r})"
            if level == "strict" and MACHINE.pid_namespaces:
                # The mechanism: it wrote the pids of a namespace of its own (numbered from 1), which
                # the kernel emptied when the agent's init exited.
                assert min(pids) < 100, (name, sorted(pids)[:5])
            assert not growing(out), f"{name} ({level}: {guarantee}): its walker outlived it"
        assert running(walker) == [], "a walker is still running"
        exits = {o["agent"]: o for o in run.op("agents")}
        assert all(exits[name]["exit_code"] == 0 for name in outs)  # each agent's own status, through its launcher
    finally:
        stop.write_text("")
        run.close()


def test_the_unboxed_control_a_walker_outlives_a_parent_that_does_not_keep_it(tmp_path: Path) -> None:
    """The attack works where nothing keeps the walker: a plain shell starts it and exits."""
    walker, _, stop = scripts(tmp_path)
    out = tmp_path / "walk"
    subprocess.run(["sh", "-c", f"{sys.executable} -I {walker} {out} {stop} >/dev/null 2>&1 & sleep 0.3; exit 0"], check=True)
    try:
        time.sleep(1.0)
        assert growing(out), "the walker stopped by itself: the attack would prove nothing"
    finally:
        stop.write_text("")
    deadline = time.monotonic() + 10
    while growing(out, for_seconds=0.1) and time.monotonic() < deadline:
        pass
    assert not growing(out)


def test_sigkill_to_the_broker_ends_every_agent_within_a_second_at_each_level(tmp_path: Path) -> None:
    """Each agent starts a walker and a setsid'd double-forked daemon and stays; the broker is
    SIGKILLed.  Within a second nothing of any agent runs: each launcher saw its lifeline end."""
    repo = make_repo(tmp_path / "run")
    walker, daemon, stop = scripts(repo)
    team, files = [], {}
    for level in (*LEVELS, "off"):
        name = f"a-{level}"
        files[name] = (repo / "out" / f"walk-{name}", repo / "out" / f"daemon-{name}")
        walk, daemon_out = files[name]
        team.append({"name": name, "sandbox": level, "command": agent(repo, stop, (walker, walk), (daemon, daemon_out), stay=True)})
    run = Run(tmp_path / "run", team, reuse=True)
    try:
        run.start(wait_for=[])
        run.wait_until(lambda: all(p.exists() for pair in files.values() for p in pair), timeout=30, what="every walker and daemon")
        launchers = launcher_pids(run)
        assert set(launchers) == set(files)
        for name, (walk, daemon_out) in files.items():
            assert growing(walk, for_seconds=0.2) and growing(daemon_out, for_seconds=0.2), f"{name}: control: both run while the broker lives"
        assert run.process is not None
        run.process.kill()  # SIGKILL: no cleanup of the broker's own runs
        run.process.wait()
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < 1.0 and (running(walker) or running(daemon)):
            time.sleep(0.02)
        assert running(walker) == [] and running(daemon) == [], f"alive {time.monotonic() - killed_at:.2f} s after the broker died"
        for name, (walk, daemon_out) in files.items():
            assert not growing(walk) and not growing(daemon_out), name
        assert [pid for pid in launchers.values() if alive(pid)] == []
    finally:
        stop.write_text("")
        if run.process is not None and run.process.poll() is None:
            run.process.kill()
        run.process = None
        run.close()


def test_the_next_run_ends_what_a_killed_broker_left_and_says_so(tmp_path: Path) -> None:
    """A launcher that cannot see its lifeline end (stopped, here by this test: a process outside
    any box) keeps its agent alive past the broker's SIGKILL.  The next `conclave run` on the same
    state directory finds it in the ledger, ends its whole tree, and says so in one line."""
    level = LEVELS[0] if LEVELS else "off"
    repo = make_repo(tmp_path / "run")
    _, daemon, stop = scripts(repo)
    out = repo / "out" / "daemon"
    team = [
        {"name": "stuck", "sandbox": level, "command": agent(repo, stop, (daemon, out), stay=True)},
        {"name": "other", "sandbox": level, "command": ["sleep", "300"]},
    ]
    run = Run(tmp_path / "run", team, reuse=True)
    try:
        run.start(wait_for=[])
        run.wait_until(out.exists, timeout=30, what="the daemon")
        launchers = run.wait_until(lambda: len(launcher_pids(run)) == 2 and launcher_pids(run), what="both launchers")
        os.kill(launchers["stuck"], signal.SIGSTOP)
        assert run.process is not None
        run.process.kill()
        run.process.wait()
        # Control: the other agent went with the broker; what was deliberately left is still there and acting.
        run.wait_until(lambda: not alive(launchers["other"]), timeout=5, what="the other agent to end with the broker")
        assert growing(out) and alive(launchers["stuck"])
        run.process = None
        nxt = Run(tmp_path / "run", [{"name": "x", "sandbox": "off", "command": ["true"]}], reuse=True)
        nxt.start(wait_for=[])
        summary = nxt.wait_exit(timeout=60)
        assert summary is not None and summary["exit_code"] == 0
        said = [line for line in nxt.stderr.splitlines() if "killed without stopping its agents" in line]
        assert len(said) == 1 and "stuck:" in said[0] and "other" not in said[0].split("still running:")[1], nxt.stderr
        assert not alive(launchers["stuck"])
        assert not growing(out) and running(daemon) == []
        journal = (nxt.state / "logs" / "run-2.jsonl").read_text()
        assert "killed without stopping its agents" in journal
        # A clean stop leaves nothing for the run after it to report.
        assert list((nxt.state / "processes").iterdir()) == []
    finally:
        stop.write_text("")
        for pid in locals().get("launchers", {}).values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if run.process is not None and run.process.poll() is None:
            run.process.kill()
        run.process = None
        run.close()


def test_the_ledger_never_ends_a_process_that_is_not_the_one_it_recorded(tmp_path: Path) -> None:
    """Pids are pinned: a record whose pid now belongs to another process (a start time that differs),
    or to a process that is not conclave's launcher (a record an unboxed agent planted to have the
    next broker kill the person's shell), is left alone.  Control: the recorded launcher itself is ended."""
    launcher = sandbox_machine.LAUNCHER
    kept = subprocess.Popen([*sandbox_machine.launcher_argv(), "--", "sleep", "300"], start_new_session=True)
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    reused = subprocess.Popen([*sandbox_machine.launcher_argv(), "--", "sleep", "300"], start_new_session=True)
    try:
        time.sleep(0.3)
        ledger = Ledger(tmp_path / "processes")
        ledger.directory.mkdir()
        records = {
            "kept": {"principal": "kept:1", "pid": kept.pid, "started": process_start_time(kept.pid), "launcher": str(launcher)},
            "bystander": {"principal": "bystander:1", "pid": bystander.pid, "started": process_start_time(bystander.pid), "launcher": str(launcher)},
            "reused": {"principal": "reused:1", "pid": reused.pid, "started": (process_start_time(reused.pid) or 0) - 1, "launcher": str(launcher)},
        }  # fmt: skip
        for name, record in records.items():
            (ledger.directory / f"agent-{name}.json").write_text(json.dumps(record))
        (ledger.directory / "broker.json").write_text(json.dumps({"pid": 999999, "started": 1}))
        ended = ledger.begin()
        assert ended is not None and ended.agents == ("kept:1",), ended
        assert kept.wait(timeout=5) == -signal.SIGKILL
        assert bystander.poll() is None and reused.poll() is None
        assert "ended what was still running: kept:1" in ended.line()
        assert [p.name for p in ledger.directory.iterdir()] == ["broker.json"]  # this broker, now
    finally:
        for process in (kept, bystander, reused):
            process.kill()
            process.wait()


@pytest.mark.parametrize("options", [[], ["--ns", "--pidns"]] if MACHINE.pid_namespaces else [[]])
def test_the_launcher_ends_with_its_agents_exact_status(tmp_path: Path, options: list[str]) -> None:
    """The broker registers the launcher; the summary must still read the agent's own end:
    an exit code as it was, a death by a signal as that signal (not 128+N)."""
    argv = [*sandbox_machine.launcher_argv(), *options, "--"]
    for command, expected in ((["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -SEGV $$"], -signal.SIGSEGV), (["true"], 0)):
        done = subprocess.run([*argv, *command], cwd="/", capture_output=True, timeout=30)
        assert done.returncode == expected, (command, done.stderr)
    # A step of the box that fails still refuses to start the agent (126), saying why.
    refused = subprocess.run([*argv[:-1], "--max-processes", "64", "--", "true"], cwd="/", capture_output=True, text=True, timeout=30)
    if "--ns" not in options:
        assert refused.returncode == 126 and "needs --ns" in refused.stderr
