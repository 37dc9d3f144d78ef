"""What a killed broker leaves behind: written down as it runs, ended by the next broker.

A broker that is SIGKILLed (or OOM-killed) runs no cleanup.  Its agents'
launchers notice -- their lifeline pipe reaches end of file -- and end their
agents within a second; this ledger is for what even that misses: a
launcher that was stopped, or an agent outside every box that killed its own.
As it runs, the broker keeps one file per process tree it answers for in
``<state>/processes/``:

* ``broker.json`` -- its own pid and start time;
* ``agent-<session>.json`` -- the agent's principal, its launcher's pid, start
  time and path, and its cgroup;

and removes each once it has cleaned up after that tree (``broker.json`` at
a clean stop).  The next broker on the state directory, holding its lock,
reads what is left.  A launcher still alive is ended only if it is the same
process: a pidfd is opened first and the start time checked through it, so
a reused pid is never signalled; and only if it runs the launcher the
record names (an agent with write access to the state directory must not
turn this into a way to kill the person's processes).  Its whole tree is
frozen and killed (``sweep.end_tree``), its cgroup killed where it is one
of ours, and :meth:`Ended.line` says so in one line.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, final

import attrs

from broker.identity import process_start_time
from broker.sandbox import sweep

BROKER_FILE = "broker.json"


@final
@attrs.frozen
class Ended:
    """What the previous broker on this state directory left, and what this one ended of it."""

    broker_pid: int | None
    broker_started_at: str | None
    #: Principals whose launcher was still running (and is now ended).
    agents: tuple[str, ...]
    #: Processes killed, launchers included.
    processes: int
    #: Principals recorded as running whose launcher was already gone.
    gone: tuple[str, ...] = ()

    def line(self) -> str:
        who = f"the broker before this one (pid {self.broker_pid}, started {self.broker_started_at})" if self.broker_pid else "an earlier broker"
        if not self.agents:
            already = f"; its {len(self.gone)} agent(s) had already ended with it" if self.gone else ""
            return f"{who} was killed without stopping its agents{already}"
        return (
            f"{who} was killed without stopping its agents; ended what was still running: "
            f"{', '.join(self.agents)} ({self.processes} process(es) in all)"
        )

    def payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@final
class Ledger:
    """The broker's record of the process trees it answers for (see the module docstring)."""

    def __init__(self, directory: Path, *, cgroup_base: Path | None = None) -> None:
        self.directory = directory
        self.cgroup_base = cgroup_base

    def begin(self) -> Ended | None:
        """End what a killed broker left here (None if the last one stopped cleanly); then record this broker.
        Call while holding the state directory's lock."""
        self.directory.mkdir(mode=0o700, exist_ok=True)
        ended = self._end_leftovers()
        self._write(BROKER_FILE, {"pid": os.getpid(), "started": process_start_time(os.getpid())})
        return ended

    def agent_started(self, principal: str, pid: int, cgroup: Path | None, launcher: str) -> None:
        self._write(
            _agent_file(principal),
            {"principal": principal, "pid": pid, "started": process_start_time(pid), "cgroup": str(cgroup) if cgroup else None, "launcher": launcher},
        )

    def agent_ended(self, principal: str) -> None:
        (self.directory / _agent_file(principal)).unlink(missing_ok=True)

    def close(self) -> None:
        """A clean stop (every agent ended, the orphans swept): nothing is left to answer for."""
        for path in self.directory.glob("*.json"):
            path.unlink(missing_ok=True)

    # -- the next broker ----------------------------------------------------------

    def _end_leftovers(self) -> Ended | None:
        records = {p.name: _read(p) for p in sorted(self.directory.glob("*.json"))}
        if not records:
            return None
        broker = records.pop(BROKER_FILE, None) or {}
        ended, gone, killed = [], [], 0
        for name, record in records.items():
            principal = str(record.get("principal") or name)
            count = self._end_tree(record)
            count += self._end_cgroup(record.get("cgroup"))
            if count:
                ended.append(principal)
                killed += count
            else:
                gone.append(principal)
            (self.directory / name).unlink(missing_ok=True)
        (self.directory / BROKER_FILE).unlink(missing_ok=True)
        started = broker.get("started")
        return Ended(
            broker_pid=broker.get("pid"), broker_started_at=_boot_relative(started) if isinstance(started, int) else None,
            agents=tuple(ended), processes=killed, gone=tuple(gone),
        )  # fmt: skip

    def _end_tree(self, record: dict[str, Any]) -> int:
        pid, started, launcher = record.get("pid"), record.get("started"), record.get("launcher")
        if not isinstance(pid, int) or not isinstance(started, int) or not isinstance(launcher, str) or pid <= 1:
            return 0
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return 0  # gone
        try:
            # Checked after the pidfd pinned it: if this is the same start time, it is the same process.
            if process_start_time(pid) != started or not _runs(pid, launcher) or pid in _our_ancestry():
                return 0

            def send(sig: signal.Signals) -> bool:
                try:
                    signal.pidfd_send_signal(pidfd, sig)
                except OSError:
                    return False
                return True

            return sweep.end_tree(pid, stop_root=lambda: send(signal.SIGSTOP), kill_root=lambda: send(signal.SIGKILL))
        finally:
            os.close(pidfd)

    def _end_cgroup(self, recorded: object) -> int:
        """Kill a recorded agent cgroup, if it is one of ours: ``<base>/conclave-<pid>/agent-<session>``."""
        if not isinstance(recorded, str) or self.cgroup_base is None:
            return 0
        path = Path(recorded)
        if path.parent.parent != self.cgroup_base or not path.parent.name.startswith("conclave-") or not path.name.startswith("agent-"):
            return 0
        from broker.sandbox.box import kill_cgroup

        return len(kill_cgroup(path))

    def _write(self, name: str, record: dict[str, Any]) -> None:
        tmp = self.directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(record).encode())
        finally:
            os.close(fd)
        os.replace(tmp, self.directory / name)


def _agent_file(principal: str) -> str:
    return "agent-" + principal.replace("/", "__").replace(":", "_") + ".json"


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _runs(pid: int, launcher: str) -> bool:
    """Is ``pid`` running the launcher at ``launcher`` (its argv holds that path)?"""
    if not launcher.endswith(os.path.join("broker", "sandbox", "launcher.py")):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.fsencode(launcher) in argv[:6]


def _our_ancestry() -> set[int]:
    from broker.identity import ancestry

    return set(ancestry(os.getpid()))


def _boot_relative(ticks: int) -> str:
    """A start time in clock ticks since boot, as a wall-clock time."""
    import time
    from datetime import datetime, timezone

    try:
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except OSError:
        return f"{ticks} ticks after boot"
    at = time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
