"""Looking at a repository path in one system call that refuses every symlink.

Locking a path must not lead outside the repository, so :mod:`locks.resources`
asks the kernel where a path really is.  Done by hand that is four system
calls (open the parent, read its real name back through ``/proc``, look at
the last name, close), and a lock request pays them on the broker's hot path.
Linux's ``openat2(2)`` (5.6 and later) answers the common case in one call:
resolved relative to the repository with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``, a path resolves only if it stays inside and crosses
no symlink; then its real name is simply the repository's plus the path.  A
symlink anywhere (``ELOOP``), or a race the kernel will not vouch for
(``EAGAIN``), is reported as :class:`NotPlain` and the caller goes the slow,
careful way.

Python has no ``os.openat2``, so this calls it through ``ctypes``.  Where the
kernel or a seccomp filter refuses it, :func:`open_beneath` returns None.
"""

from __future__ import annotations

import ctypes
import errno
import os
import weakref
from typing import Final, final

#: openat2's number is the same on every Linux architecture but alpha.
SYS_OPENAT2: Final = 437
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08


class NotPlain(OSError):
    """The path crosses a symlink, or the kernel could not vouch for it: look the slow way."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.PyDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
# O_DIRECTORY: a file or a missing name fails at once, with no descriptor to close.
# No O_NOFOLLOW: a symlink as the last name fails like any other (ELOOP).
_HOW: Final = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
_HOW_ADDRESS: Final = ctypes.addressof(_HOW)
_HOW_SIZE: Final = ctypes.sizeof(_HOW)


@final
class Beneath:
    """A directory, and a way to look at names inside it without following any symlink."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        weakref.finalize(self, os.close, fd)

    def is_directory(self, relative: str) -> bool:
        """Whether ``relative`` (``""`` is the directory itself) is a directory, crossing no symlink.

        One system call for anything but a directory: the path is opened as
        a directory, so a file answers ``ENOTDIR`` and a missing name
        ``ENOENT`` -- both without a descriptor to close.  Either way every
        name before the one that stopped the walk was a plain directory (a
        symlink earlier would have stopped it first), so the path's real
        name is the directory's plus ``relative``.

        Raises:
            NotPlain: a symlink on the way or as the last name, or a race the
                kernel would not vouch for.
            OSError: anything else (permissions, ...).
        """
        fd = _syscall(SYS_OPENAT2, self._fd, os.fsencode(relative or "."), _HOW_ADDRESS, _HOW_SIZE)
        if fd >= 0:
            os.close(fd)
            return True
        code = ctypes.get_errno()
        if code in (errno.ENOTDIR, errno.ENOENT):
            return False
        if code in (errno.ELOOP, errno.EXDEV, errno.EAGAIN):
            raise NotPlain(code, os.strerror(code), relative)
        raise OSError(code, os.strerror(code), relative)


def open_beneath(directory: str) -> Beneath | None:
    """A :class:`Beneath` for ``directory``, or None where ``openat2`` is not available."""
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    beneath = Beneath(fd)
    try:
        if beneath.is_directory(""):
            return beneath
    except OSError:  # ENOSYS (before Linux 5.6), EPERM (a seccomp filter), ...
        pass
    return None
