"""Knowing that nothing moved in some directories, without walking a path.

:class:`locks.resources.Normalizer` keeps the parse of plain paths it has
seen, but a path's meaning can change under it: a directory on the way
replaced by a symlink, a missing name created as a directory.  Asking the
filesystem again on every lock request costs a path walk -- the largest
single cost of a lock request once the broker is idle between requests.

Linux's inotify answers the same question more cheaply.  A watched directory
queues an event for every name created, deleted or moved in it (and for its
own deletion or move), *inside* the system call that made the change.  So if
the queue is empty when :meth:`DirectoryWatch.changed` looks -- one
``FIONREAD`` ioctl, no path walk -- then nothing has been created, deleted or
renamed in any watched directory since its watch was set, and every answer
that depends only on those names still holds.  File contents are not
watched: writing a file changes nothing a lock depends on.

Setting a watch goes through ``ctypes`` (Python has no inotify binding); that
happens once per directory.  The per-request check is the ioctl alone.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import sys
import termios
import weakref
from typing import Final, final

IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC
#: Names coming, going or moving, here or of the directory itself.  Only a
#: directory, never through a symlink.
MASK: Final = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW
#: Most directories one watch follows (the kernel's own limit is per user).
MAX_DIRECTORIES: Final = 4096

_libc = ctypes.PyDLL(None, use_errno=True)


@final
class DirectoryWatch:
    """Directories watched for names created, deleted or moved.  See the module docstring."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._watched: set[str] = set()
        self._count = bytearray(4)
        weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls) -> DirectoryWatch | None:
        """A new watch, or None where inotify is not available."""
        try:
            fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except AttributeError:
            return None
        return cls(fd) if fd >= 0 else None

    def watch(self, directory: str) -> bool:
        """Watch ``directory`` (not through a symlink); False when it cannot be watched.

        Set again even when a directory of that name is watched already: it
        may be a new directory by the same name.
        """
        if directory not in self._watched and len(self._watched) >= MAX_DIRECTORIES:
            return False
        if _libc.inotify_add_watch(self._fd, os.fsencode(directory), MASK) < 0:
            return False
        self._watched.add(directory)
        return True

    def changed(self) -> bool:
        """Whether a name came, went or moved in a watched directory since the last look.

        Reading the queue empties it, so each change is reported once.
        """
        fcntl.ioctl(self._fd, termios.FIONREAD, self._count, True)
        if not int.from_bytes(self._count, sys.byteorder):
            return False
        while True:
            try:
                if not os.read(self._fd, 65536):
                    break
            except BlockingIOError:
                break
        return True
