"""SIGHUP (the terminal closed), SIGTERM and SIGQUIT stop a run the way Ctrl-C does (issue 21).

Before, SIGHUP killed `conclave run` with no message: its agents ran on under pid 1, the
guard hook stayed in the repository, and no summary was written.  Each test sends the signal
to a run with two agents (one ignores SIGTERM) and checks what a person would: the exit code
documented for that signal (a silent death reads -N here, never 128+N), the summary, every
agent's process gone, the hooks removed, and the journal's last line.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agents.harness import make_repo
from broker.entry import conclave_argv
from broker.sandbox import guardhook

TEAM = """
[[agent]]
name = "calm"
command = ["sleep", "301"]

[[agent]]
name = "stubborn"
command = ["sh", "-c", "trap '' TERM; sleep 302 & wait"]
sandbox = "off"  # unboxed: the person's hooks directory gets conclave's guard for the run
"""


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}


def prepare(tmp_path: Path) -> tuple[list[str], Path, Path]:
    """`conclave run`'s command line for the team on a scratch repository; the repository; the state directory."""
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    team.write_text(TEAM)
    state = tmp_path / "state"
    return conclave_argv("run", "--team", str(team), "--repo", str(repo), "--state-dir", str(state), "--grace", "1"), repo, state


def journal(state: Path) -> list[dict]:
    path = state / "logs" / "run-1.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for_agents(state: Path, repo: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        spawned = [e for e in journal(state) if e["kind"] == "spawn"]
        if len(spawned) == 2 and running("sleep 301") and running("sleep 302") and ours(repo):
            return
        time.sleep(0.05)
    raise TimeoutError(f"the agents did not start: {journal(state)}")


def running(command: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").strip() == command.encode():
                    found.append(int(name))
            except OSError:
                continue
    return found


def ours(repo: Path) -> list[Path]:
    """Hooks conclave installed in the repository (while an unboxed agent runs)."""
    hooks = repo / ".git" / "hooks"
    return [p for p in hooks.iterdir() if p.is_file() and guardhook.is_ours(p.read_bytes())] if hooks.is_dir() else []


def stopped_cleanly(state: Path, repo: Path, sig: signal.Signals) -> None:
    deadline = time.monotonic() + 5
    while (running("sleep 301") or running("sleep 302")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running("sleep 301") == [] and running("sleep 302") == [], "an agent outlived the run"
    assert ours(repo) == [], "the guard hook was left in the repository"
    end = journal(state)[-1]
    assert end["kind"] == "end" and f"stopped by {sig.name}" in end["text"] and f"exit code {128 + sig}" in end["text"], end


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_stops_the_run_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    argv, repo, state = prepare(tmp_path)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        wait_for_agents(state, repo)
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    # Before: SIGHUP and SIGQUIT killed it outright (-1, -3 here), with nothing printed.
    assert process.returncode == 128 + sig, (process.returncode, err)
    assert "run 1 summary" in out and f"stopped by {sig.name}" in out and f"exit code {128 + sig}" in out, out
    assert "Traceback" not in err, err
    stopped_cleanly(state, repo, sig)


def test_a_closed_terminal_stops_the_run_and_the_summary_is_kept_in_the_journal(tmp_path: Path) -> None:
    """The run's terminal goes away (a closed window, a dropped ssh): the kernel sends SIGHUP, and
    every write to the terminal fails from then on.  No traceback, no lost summary, exit 129."""
    master, slave = os.openpty()
    errors = tmp_path / "stderr"
    seen: list[bytes] = []
    closing = threading.Event()

    def drain() -> None:
        """A terminal someone reads, until it is closed.  Never blocked in read() when the test closes
        it: a read in progress holds the terminal open, and the hang-up would wait for the next byte."""
        while not closing.is_set():
            if select.select([master], [], [], 0.05)[0]:
                try:
                    seen.append(os.read(master, 4096))
                except OSError:
                    return

    argv, repo, state = prepare(tmp_path)
    with errors.open("w") as err:
        # setsid -c: the terminal on stdin becomes the run's controlling terminal, as a login shell's is.
        process = subprocess.Popen(["setsid", "-c", *argv], stdin=slave, stdout=slave, stderr=err, env=env())
    os.close(slave)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        wait_for_agents(state, repo)
        assert b"sandbox" in b"".join(seen)  # control: the terminal showed the run
        closing.set()
        reader.join()
        os.close(master)  # the terminal closes
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGHUP, errors.read_text()
    assert "Traceback" not in errors.read_text(), errors.read_text()
    stopped_cleanly(state, repo, signal.SIGHUP)
    exits = [e for e in journal(state) if e["kind"] == "exit"]
    assert len(exits) == 2  # the summary's lines, one per agent, in the journal


def test_control_a_process_on_the_same_terminal_without_a_handler_dies_of_the_hangup(tmp_path: Path) -> None:
    """What `conclave run` did before: the same hang-up kills a process that does not handle it."""
    master, slave = os.openpty()
    process = subprocess.Popen(["setsid", "-c", "sleep", "60"], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    # Only once `sleep` runs with the terminal as its controlling one does closing the master hang it up
    # (a fixed pause was too short on a loaded machine: the terminal closed before setsid took it).
    deadline = time.monotonic() + 10
    while not _on_its_terminal(process.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.close(master)
    assert process.wait(timeout=10) == -signal.SIGHUP


def _on_its_terminal(pid: int) -> bool:
    """Whether ``pid`` is ``sleep`` (setsid has exec'd it) with a controlling terminal (/proc/PID/stat: comm, tty_nr)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    return comm == "sleep" and int(stat.rsplit(")", 1)[1].split()[4]) != 0


def test_a_signal_while_the_team_is_still_being_spawned_stops_every_agent_at_once(tmp_path: Path) -> None:
    """SIGTERM as soon as the first of sixteen agents is recorded, while the rest are being spawned: an agent
    whose spawn was being recorded when the stop came used to be left unwatched -- never sent SIGTERM, and the
    broker's stop waiting on its output until a second signal.  Now the run ends with 143 at once and every
    agent it started has ended (each spawn in the journal has its exit; none of their processes is left)."""
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    team.write_text("".join(f'[[agent]]\nname = "a{i}"\ncommand = ["sleep", "303"]\n\n' for i in range(16)))
    state = tmp_path / "state"
    argv = conclave_argv("run", "--team", str(team), "--repo", str(repo), "--state-dir", str(state), "--grace", "1", "--accept-team")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        deadline = time.monotonic() + 60
        while not any(e["kind"] == "spawn" for e in journal(state)):
            assert process.poll() is None and time.monotonic() < deadline, "no agent was ever spawned"
            time.sleep(0.005)
        process.send_signal(signal.SIGTERM)
        # Bounded, not timed: without the fix the run waited for a second signal (the test's timeout).
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, err[-2000:]
    lines = journal(state)
    spawned = {e["principal"]: int(e["text"].split("pid ")[1].split(",")[0]) for e in lines if e["kind"] == "spawn"}
    ended = {e["principal"] for e in lines if e["kind"] == "exit"}
    assert spawned and set(spawned) <= ended, (sorted(spawned), sorted(ended))
    assert lines[-1]["kind"] == "end", lines[-3:]
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == b"sleep\x00303\x00":
                left.append(int(entry.name))
        except OSError:
            continue
    assert not left, f"agents of the stopped run still running: {left}"
