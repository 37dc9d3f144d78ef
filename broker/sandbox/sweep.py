"""The broker's last line against leftovers: freeze and sweep what its agents' launchers missed.

Each agent's launcher ends what its agent leaves (``keeper.py``: a PID
namespace, the agent's cgroup, or its own sweep as the agent's child
subreaper).  What can still reach the broker is what an unboxed agent undid
that with (it killed its launcher, say): the broker is a child subreaper
too, so such orphans become its children.  The broker's own helpers
(``git`` for the commit guard) run in the broker's process group, which no
agent descendant can join (another session), so every other child of the
broker that is not a live launcher is an orphan.

:func:`sweep` stops (SIGSTOP) every orphan and all its descendants first,
so nothing can fork its way out during the kill, then SIGKILLs them, and
repeats until a pass finds none.  Where the broker has a delegated cgroup
v2 (``broker.sandbox.machine``), ``cgroup.kill`` catches even a process
that escaped the tree, and the sweep runs after it anyway.  :func:`end_tree`
does the same for one pinned process and everything below it (the next
broker, ending what a killed one left: ``leftovers.py``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterable

MAX_PASSES = 50
#: Where cgroup v2 is mounted (as broker.sandbox.machine looks for it).
CGROUP_MOUNTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, pgid, state) from /proc/<pid>/stat, or None if it is gone."""
    # os.read, not open(): this runs for every process on the machine, several times per broker.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)  # one line, well under a page
    except OSError:
        return None
    finally:
        os.close(fd)
    rest = raw[raw.rindex(b")") + 2 :].split()
    return int(rest[1]), int(rest[2]), rest[0].decode()


def process_table() -> dict[int, tuple[int, int, str]]:
    """Every process: pid -> (ppid, pgid, state)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                table[int(name)] = info
    return table


def group_members(pgid: int) -> set[int]:
    """Live processes in process group ``pgid`` (what killing the group is about to take)."""
    return {pid for pid, (_, group, state) in process_table().items() if group == pgid and pid != pgid and state != "Z"}


def in_cgroup(pid: int, cgroups: Iterable[Path]) -> bool:
    """Is ``pid`` in exactly one of ``cgroups`` (live agents' cgroup directories)?  That agent's exit
    kills it there, and counts it for that agent.  (Not merely a path named like one: an agent can
    make directories in a delegated hierarchy.)"""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    if own is None:
        return False
    return any(mount / own.lstrip("/") in cgroups for mount in CGROUP_MOUNTS)


def orphans(broker: int, live: Iterable[int], spare: Callable[[int], bool] = lambda pid: False) -> list[int]:
    """Every process under the broker that no live agent accounts for (zombies and ``spare`` excluded)."""
    table = process_table()
    keep = set(live)
    own_group = os.getpgid(broker)
    roots = [
        pid for pid, (ppid, pgid, state) in table.items()
        if ppid == broker and pid not in keep and pgid != own_group and state != "Z" and not spare(pid)
    ]  # fmt: skip
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], list(roots)
    while stack:
        pid = stack.pop()
        if table[pid][2] != "Z":
            found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def sweep(broker: int, live: Iterable[int], spare: Callable[[int], bool] = lambda pid: False) -> set[int]:
    """Kill every orphan under ``broker`` and everything below it; return the pids killed.

    ``spare`` leaves a process to someone else (another agent's cgroup, which that agent's
    exit kills and counts); without cgroups an orphan is counted for the exit that found it.
    """
    keep = frozenset(live)
    killed: set[int] = set()
    for _ in range(MAX_PASSES):
        found = orphans(broker, keep, spare)
        if not found:
            break
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        for pid in found:
            if _signal(pid, signal.SIGKILL):
                killed.add(pid)
        time.sleep(0.001)  # let the kernel re-parent the children of the dead
    return killed


def subtree(root: int, table: dict[int, tuple[int, int, str]]) -> list[int]:
    """``root`` (if it is in ``table``) and everything below it, parents before children."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], [root] if root in table else []
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def end_tree(root: int, *, stop_root: Callable[[], bool], kill_root: Callable[[], bool]) -> int:
    """Freeze ``root`` and everything below it, then kill them all; how many were alive.

    A stopped process cannot fork, and a stopped parent cannot reap, so once a pass finds
    nothing new the set is closed and no pid in it can have been reused.  ``root`` is
    signalled through the caller's callables (a pidfd pinned to the process it checked).
    """
    if not stop_root():
        return 0
    frozen: dict[int, str] = {}
    for _ in range(MAX_PASSES):
        table = process_table()
        new = [pid for pid in subtree(root, table) if pid not in frozen and pid != root]
        settling = [pid for pid in frozen if table.get(pid, (0, 0, "Z"))[2] not in ("T", "t", "Z", "X")]
        if not new and not settling:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
            frozen[pid] = table[pid][2]
        time.sleep(0.001)
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    kill_root()
    return 1 + sum(1 for state in frozen.values() if state != "Z")


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
