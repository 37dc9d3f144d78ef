"""Unprivileged user and mount namespaces: an agent's private ``/tmp``, no deputies in sight.

In a new user namespace (the uid maps to itself, so the broker's
``SO_PEERCRED`` still sees the real uid) a process may own a new mount
namespace and mount in it.  The launcher uses that to give each agent:

* a private, empty ``/tmp``, ``/dev/shm`` and ``/run/user/<uid>`` -- where a
  terminal multiplexer, the D-Bus session bus, ssh-agent, gpg-agent and
  editor servers keep their sockets, which a Landlocked process could
  otherwise still ``connect`` to;
* a private home: an empty tmpfs over ``$HOME`` with only the granted paths
  (toolchains, the work tree, conclave) bound back, so the person's credentials
  are simply not there;
* named paths hidden (an empty read-only tmpfs over a directory, ``/dev/null``
  over a file or socket) -- container sockets, a secret inside a granted path;
* read-only views of files conclave or the person will later execute from a
  writable tree (``.git/hooks``, ``.git/config``): a bind mount of the same
  inode, so what the broker installs there stays visible;
* sockets that must stay reachable bound back in (the broker's, when it
  lives under ``/tmp``).

Order matters and this module keeps it: namespaces, then mounts, then
Landlock (its rules name inodes, and a Landlocked process may not mount).
Standard library only: the launcher imports it under ``python -I -S``.
"""

from __future__ import annotations

import ctypes
import os
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
# statvfs f_flag bits (ST_*) that a bind remount inside a user namespace must keep ("locked" flags).
_LOCKED = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME, 4096: MS_RELATIME}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]


class NamespaceError(OSError):
    """A namespace or mount step failed; the message names it."""


def _fail(what: str) -> None:
    err = ctypes.get_errno()
    raise NamespaceError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        _fail(f"mount {source or ''} on {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(*, pid: bool = False) -> None:
    """A new user and mount namespace with an identity uid/gid map; nothing propagates back out.

    With ``pid``, also a new PID namespace -- for the caller's *children*: the first one it
    forks is that namespace's init, and when the init dies the kernel kills everything in it.
    """
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | (CLONE_NEWPID if pid else 0)
    if _libc.unshare(flags) != 0:
        _fail("unshare(CLONE_NEWUSER | CLONE_NEWNS" + (" | CLONE_NEWPID)" if pid else ")"))
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    try:
        _write("/proc/self/setgroups", "deny\n")  # must precede gid_map for an unprivileged writer
    except FileNotFoundError:
        pass
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)


def private_tmpfs(path: str, mode: str, keep: dict[str, int]) -> bool:
    """An empty writable tmpfs over directory ``path``; bind back the kept sockets beneath it."""
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        return False
    _mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}")
    _restore(real, keep)
    return True


def links_on_the_way(bases, paths) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Symbolic links between each of ``bases`` (the private mounts) and the ``paths`` kept beneath
    it, with their targets (``~/.nvm`` -> ``/opt/nvm``, a home in /tmp that is a link), read before
    a private mount covers them; :func:`relink` makes them again afterwards."""
    links: dict[str, str] = {}
    for base in bases:
        base = base.rstrip("/")
        for path in paths:
            if not path.startswith(base + "/"):
                continue
            current = base
            for part in path[len(base) + 1 :].split("/"):
                current = f"{current}/{part}"
                if os.path.islink(current):
                    # Keyed by where it will be made: its real directory; then on from where it leads.
                    links[os.path.join(os.path.realpath(os.path.dirname(current)), part)] = os.readlink(current)
                    current = os.path.realpath(current)
    return links


def private_home(real: str, keep: dict[str, int]) -> bool:
    """An empty tmpfs (0700) over the home directory ``real`` (resolved before anything was
    mounted); the kept paths beneath are bound back.  A home under another private mount
    (``/tmp``) is made first: the agent's shell and tools expect it to be there."""
    os.makedirs(real, mode=0o700, exist_ok=True)
    _mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    _restore(real, keep)
    return True


def relink(links: dict[str, str]) -> None:
    """Make again the symbolic links :func:`links_on_the_way` found (where a private mount hid them)."""
    for link, target in sorted(links.items()):
        if not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(target, link)


def private_ptys() -> None:
    """A devpts of the agent's own over /dev/pts (and its ptmx as /dev/ptmx): it can make
    terminals, and cannot open the person's -- where TIOCSTI would type commands into their shell."""
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    _mount("/dev/pts/ptmx", "/dev/ptmx", None, MS_BIND)


def private_proc() -> None:
    """A /proc of the caller's own PID namespace (the caller is its init): the agent sees its
    own processes only.  Before Landlock, which forbids mounting."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def hide(path: str, keep: dict[str, int]) -> bool:
    """Make ``path`` empty: a read-only tmpfs over a directory, ``/dev/null`` over anything else."""
    real = os.path.realpath(path)
    if os.path.isdir(real):
        _mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755")
        _restore(real, keep)
        _mount(None, real, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        return True
    if os.path.lexists(real):
        _mount("/dev/null", real, None, MS_BIND)
        return True
    return False


def pin(path: str) -> bool:
    """Bind ``path`` over itself: the same inode, writable as before, but a mount point, which
    cannot be renamed or removed (an agent cannot move ``.git`` aside and make a writable one)."""
    real = os.path.realpath(path)
    if not os.path.lexists(real):
        return False
    _mount(real, real, None, MS_BIND | MS_REC)
    return True


def read_only(path: str) -> bool:
    """Bind ``path`` (a file or directory) over itself read-only: the same inode, no writes, no renames."""
    if not pin(path):
        return False
    real = os.path.realpath(path)
    locked = 0
    flags = os.statvfs(real).f_flag
    for bit, ms in _LOCKED.items():
        if flags & bit:
            locked |= ms
    _mount(None, real, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked)
    return True


def open_kept(paths) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """O_PATH descriptors of what must stay visible under a private or hidden directory (the
    work tree, the broker's socket, conclave itself when they live in /tmp), opened before
    anything is mounted over them."""
    return {os.path.realpath(p): os.open(p, os.O_PATH | os.O_CLOEXEC) for p in paths if os.path.lexists(p)}


def _restore(mounted: str, keep: dict[str, int]) -> None:
    # Outermost first, so a kept directory is in place before anything kept inside it.
    for path, fd in sorted(keep.items()):
        if not path.startswith(mounted.rstrip("/") + "/"):
            continue
        if any(path.startswith(other.rstrip("/") + "/") for other in keep if other != path and other.startswith(mounted)):
            continue  # inside another kept directory: it came back with it
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "wb").close()  # a mount point for a file or socket
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
