"""What agents changed in the work tree that review does not see: files git ignores.

The work tree is shared by design, and review (``git status``, ``git diff``),
the locks and the commit guard are the answer to what agents change there --
for the files git shows.  Files git *ignores* are as writable to every box
and shown by none of those: the project's own virtual environment (a ``.pth``
runs at your next ``python``), ``__pycache__`` (a ``.pyc`` whose header
claims the source's time and size is run in its place), ``node_modules``
(``npx``, ``npm test``), build outputs, ``.direnv``.  No box can keep agents
out of them without keeping agents from building; so ``conclave run`` lists,
after the run, every ignored file whose inode changed while it ran.  The
change time (``ctime``) is the kernel's: no process of the uid can set it
back (``utime`` sets the others and moves ``ctime`` forward), so a forged
modification time does not hide a file from this list.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Final

#: Nanoseconds the list reaches back before the run started: file times come from a clock that
#: is coarser (a timer tick) than the one the run's start is read from.
SLACK_NS: Final = 50_000_000
#: How many paths the summary names (the JSON has them all).
SHOWN: Final = 10


def changed_since(repo: Path, since_ns: int) -> list[str]:
    """The ignored files under ``repo`` (relative paths, sorted) whose inode changed at or after
    ``since_ns`` (``time.time_ns()``); empty when ``repo`` is no git work tree."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--others", "--ignored", "--exclude-standard"], capture_output=True, timeout=120
    )
    if out.returncode != 0:
        return []
    found = []
    for name in out.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if not name:
            continue
        try:
            changed = os.lstat(repo / name).st_ctime_ns
        except OSError:
            continue
        if changed >= since_ns - SLACK_NS:
            found.append(name)
    return sorted(found)


def describe(paths: list[str]) -> list[str]:
    """The summary's lines for ``paths`` (none when there are none)."""
    if not paths:
        return []
    lines = [
        f"{len(paths)} file(s) git ignores changed in the work tree during the run; review does not show them, and your "
        "tools may run them (a virtual environment, __pycache__, node_modules, build outputs): look before you run anything there"
    ]
    lines += [f"  {p}" for p in paths[:SHOWN]]
    if len(paths) > SHOWN:
        lines.append(f"  ... and {len(paths) - SHOWN} more (conclave run --json lists them all)")
    return lines
