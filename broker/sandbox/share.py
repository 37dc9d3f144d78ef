"""An agent's share of processes, and the room the broker keeps for itself and the person.

Without a share, one agent that forks without end takes every process the
uid may have (``ulimit -u``): the person's shell cannot start ``ls``, another
agent cannot restart, the broker cannot run ``git``.  So each agent gets a
share, ``max_processes`` in the team file (default
:data:`DEFAULT_MAX_PROCESSES`), enforced by the kernel:

* in ``strict``, as ``RLIMIT_NPROC`` set *inside* the agent's own user
  namespace.  Since Linux 5.14 the count is kept per user namespace and uid
  (``ucounts``): a fork is refused once the agent's namespace holds its
  share, and every level above is checked against the limit its creator had
  (``kernel/ucount.c``: ``is_rlimit_overlimit`` walks up, comparing each
  level with ``ns->rlimit_max``).  A process of uid 0 is exempt (``copy_process``
  lets ``INIT_USER`` through), so a root broker's agents have no share;
* where a delegated cgroup v2 has the ``pids`` controller, as ``pids.max``.

When the broker's own ``RLIMIT_NPROC`` is finite, the share is cut so that
every agent the team may run at once, each at its share, still leaves
:func:`reserve` processes for the broker and the person.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Final, final

import attrs

#: An agent's share when the team file does not say (a toolchain's compilers and language servers fit).
DEFAULT_MAX_PROCESSES: Final = 512
#: Below this an agent cannot run a shell and its tools at all: a share is never cut lower.
MIN_SHARE: Final = 16


def reserve(limit: int) -> int:
    """Processes of a finite ``ulimit -u`` kept for the broker (git, helpers) and the person's shell."""
    return max(64, limit // 8)


@final
@attrs.frozen
class ProcessShares:
    """The broker's ``RLIMIT_NPROC`` (None when unlimited), what the uid already runs, and how many
    agents may run at once; :meth:`share` is one agent's cut of what is left over."""

    limit: int | None
    in_use: int
    slots: int

    def share(self, asked: int | None) -> int:
        wanted = asked if asked is not None else DEFAULT_MAX_PROCESSES
        if self.limit is None:
            return wanted
        room = self.limit - self.in_use - reserve(self.limit)
        return min(wanted, max(MIN_SHARE, room // max(1, self.slots)))


def measure(slots: int) -> ProcessShares:
    """The shares for a run of ``slots`` agents at once, from this process's limit and the uid's tasks now."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    limit = None if soft == resource.RLIM_INFINITY else soft
    return ProcessShares(limit=limit, in_use=uid_tasks(os.getuid()) if limit is not None else 0, slots=slots)


def uid_tasks(uid: int) -> int:
    """Tasks (threads: what RLIMIT_NPROC counts) of ``uid`` now."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += os.stat(f"/proc/{name}/task").st_nlink - 2
        except OSError:
            continue
    return count


def limit_cgroup(cgroup: Path, share: int) -> bool:
    """Write ``pids.max`` where the cgroup has the pids controller; False where it has not."""
    try:
        (cgroup / "pids.max").write_text(str(share))
    except OSError:
        return False
    return True


def cgroup_refusals(cgroup: Path) -> int:
    """How many forks ``pids.max`` has refused in ``cgroup`` (``pids.events``), 0 if it has none."""
    try:
        text = (cgroup / "pids.events").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "max":
            return int(value)
    return 0
