"""Landlock through ctypes: what an agent's process may read, write and signal.

Landlock is the kernel's unprivileged sandbox (Linux 5.13+): a process
restricts itself, for good, with a set of rules, and everything it starts
inherits them.  conclave's launcher (``launcher.py``) applies one ruleset to
each agent just before exec'ing it.

What this module knows (each verified on Linux 6.18, ABI 7; see
docs/THREAT_MODEL.md):

* Rights are an allow-list, and a rule on a directory covers everything
  beneath it, across mounts.  A directory cannot be carved back out of a
  granted one; :func:`punch_holes` emulates that for *read* rules by
  granting the siblings along the way instead (``$HOME`` readable, the
  private state and ``~/.ssh`` not), and :func:`carve_writes` for *write*
  rules (the work tree writable, its ``.git`` not).
* Rules name inodes when they are added, so mounts (a private ``/tmp``) must
  be in place before the ruleset is built; and a Landlocked process can no
  longer mount.
* ``connect`` on a *named* Unix socket is not governed before ABI 9:
  reaching the broker's socket needs no rule, and neither does reaching a
  deputy's (a terminal multiplexer's) -- namespaces hide those.  ABI 9's
  RESOLVE_UNIX is used where the kernel has it.
* Each ``landlock_restrict_self`` makes a new domain: two agents are
  isolated from each other even from one ruleset.  Across domains the
  kernel refuses ptrace-class access (``/proc/<pid>/environ``, ``mem``,
  PTRACE_ATTACH) and, with ABI 6 scopes, signals and abstract sockets.

Standard library only, and cheap to import: the launcher runs it with
``python -I -S`` on every agent spawn.
"""

from __future__ import annotations

import ctypes
import os
import stat

# The Landlock syscalls came after the syscall tables were unified: 444-446
# on x86_64, aarch64 and the other asm-generic arches.  Anything unchecked is
# refused rather than guessed.
_SYSCALLS = {"x86_64": (444, 445, 446), "amd64": (444, 445, 446), "aarch64": (444, 445, 446), "arm64": (444, 445, 446)}
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = _SYSCALLS.get(os.uname().machine.lower(), (-1, -1, -1))

PR_SET_NO_NEW_PRIVS = 38
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
FS_RESOLVE_UNIX = 1 << 16  # ABI 9 (Linux 7.1): connect(2) to a named socket

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6
RESTRICT_SELF_LOG_SAME_EXEC_OFF = 1 << 0  # ABI 7: no audit records for the launcher's own exec

_FS_V1 = (1 << 13) - 1
_FS_BY_ABI = {1: _FS_V1, 2: _FS_V1 | FS_REFER, 3: _FS_V1 | FS_REFER | FS_TRUNCATE, 4: _FS_V1 | FS_REFER | FS_TRUNCATE}
_FS_BY_ABI.update({n: _FS_BY_ABI[4] | FS_IOCTL_DEV for n in (5, 6, 7, 8)})
_FS_BY_ABI[9] = _FS_BY_ABI[8] | FS_RESOLVE_UNIX
#: Rights allowed on a rule for a non-directory (others are EINVAL there).
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV | FS_RESOLVE_UNIX

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
#: Everything an agent needs in its tree; never a device node (MAKE_CHAR, MAKE_BLOCK).
WRITE = (
    FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK
    | FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE
)  # fmt: skip
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class _RulesetAttr(ctypes.Structure):
    # The kernel takes min(size, its own) and requires an unknown tail to be
    # zero, so the 24-byte form is safe on older ABIs with unknown fields at 0.
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """Landlock is unavailable, or the kernel refused a rule."""


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return ret


def abi_version() -> int:
    """The Landlock ABI the running kernel offers; 0 when it has none (compiled out, disabled at boot)."""
    if SYS_CREATE_RULESET < 0:
        return 0
    ret = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(ret) if ret > 0 else 0


def handled_fs(abi: int) -> int:
    return _FS_BY_ABI[min(abi, max(_FS_BY_ABI))] if abi > 0 else 0


class Policy:
    """What one agent may touch.  Paths are absolute; missing ones are skipped.

    ``read``: readable and executable; ``write``: also writable (create,
    remove, rename, truncate); ``devices``: device nodes usable with ioctls;
    ``deny``: paths that must stay unreadable although a ``read`` root holds
    them (a ``write`` root holding one is the caller's error:
    :func:`unenforceable`); ``connect``: named sockets reachable on ABI 9+;
    ``read_only``: paths a ``write`` root holds that must stay read-only
    (:func:`carve_writes`: the person's ``.git`` in a Landlock-only box).
    """

    def __init__(self, read=(), write=(), devices=(), deny=(), connect=(), read_only=()):  # type: ignore[no-untyped-def]
        self.read = list(read)
        self.write = list(write)
        self.devices = list(devices)
        self.deny = list(deny)
        self.connect = list(connect)
        self.read_only = list(read_only)


def _inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def resolved(path: str) -> str:
    """``os.path.realpath(path)``, resolved by the kernel in one open when the path exists (realpath
    lstats each component: every state directory the person's broker registered is denied at every spawn)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)  # absent, or a dangling link: realpath says where it would lead
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = ""
    finally:
        os.close(fd)
    return real if real.startswith("/") and not real.endswith(" (deleted)") else os.path.realpath(path)


def _carve(roots, holes, *, skip_links: bool):  # type: ignore[no-untyped-def]
    """Walk ``roots`` around ``holes``: ``(whole, on_the_way, in_holes)``.

    A root (or entry) holding no hole is ``whole``; one holding a hole is
    ``on_the_way`` and its entries are visited the same way; a hole, or a
    path inside one, is ``in_holes`` as ``(path, named)`` (``named``: the
    caller named it as a root).  With ``skip_links`` a symbolic link among
    the entries is left out altogether (its target is governed by its own
    rule); without, it is judged by where it leads.
    """
    real_holes = [resolved(h) for h in holes if os.path.lexists(h)]
    whole: list[str] = []
    on_the_way: list[str] = []
    in_holes: list[tuple[str, bool]] = []

    def visit(path: str, named: bool) -> None:
        if skip_links and not named and os.path.islink(path):
            return
        real = os.path.realpath(path)
        if any(_inside(real, h) for h in real_holes):
            in_holes.append((real, named))
        elif not any(_inside(h, real) and h != real for h in real_holes):
            whole.append(real)
        else:
            on_the_way.append(real)
            try:
                names = sorted(os.listdir(real))
            except OSError:
                return
            for name in names:
                visit(os.path.join(real, name), False)

    for root in roots:
        if os.path.lexists(root):
            visit(root, True)
    return whole, on_the_way, in_holes


def punch_holes(roots, deny):  # type: ignore[no-untyped-def]
    """Read rules for ``roots`` that leave out every ``deny`` path beneath them.

    Returns ``(read_rules, listing_only)``: a root that contains a denied
    path is replaced by rules on each of its entries (recursively along the
    way), and the directories on the way get READ_DIR only -- ``ls ~`` still
    works, but a file created there later is not readable.  A symlink among
    the entries that leads into a denied path is dropped; a root the caller
    names *inside* a denied path is kept (an explicit exception: an agent's
    own directory inside the state directory).
    """
    whole, listing, in_holes = _carve(roots, deny, skip_links=False)
    return whole + [path for path, named in in_holes if named], listing


def carve_writes(roots, holes):  # type: ignore[no-untyped-def]
    """Write rules for ``roots`` that leave every ``holes`` path beneath them read-only.

    Returns ``(write_rules, read_rules)``.  Landlock cannot take a right back
    beneath a granted directory, so a root that holds a hole is granted
    *read* only and each of its entries is granted write -- except the hole
    (read) and an entry on the way to one (visited the same way).  What that
    costs, said where the boxes are described: in a directory on the way
    nothing new can be made and no entry renamed or removed (the hole
    cannot be moved aside for a writable one), though every file in it can
    be written.  A symbolic link among the entries gets no rule (its
    target is governed by its own).  A hole that does not exist is the
    caller's to refuse.
    """
    whole, on_the_way, in_holes = _carve(roots, holes, skip_links=True)
    return whole, on_the_way + [path for path, _named in in_holes]


def unenforceable(policy: Policy) -> list[str]:
    """Denied paths inside a write root: Landlock cannot take them back."""
    writes = [resolved(w) for w in policy.write]
    found = []
    for denied in policy.deny:
        if writes and os.path.lexists(denied):
            real = resolved(denied)  # once per denied path, not once per write root
            if any(_inside(real, w) for w in writes):
                found.append(denied)
    return found


def _add_rule(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a missing optional path is not an error
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FS_FILE_RIGHTS
        if access:
            attr = _PathBeneathAttr(access, fd)
            _check(
                _libc.syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)),
                f"landlock_add_rule({path})",
            )
    finally:
        os.close(fd)


def apply(policy: Policy) -> int:
    """Restrict this (single-threaded) process, and all it will start, to ``policy``; return the ABI used.

    Raises:
        LandlockError: unavailable, a denied path inside a write root, or a rule refused.
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockError(95, "Landlock is not available on this kernel")
    if unenforceable(policy):
        raise LandlockError(22, f"cannot deny {unenforceable(policy)}: they are inside a writable root")
    fs = handled_fs(abi)
    scoped = (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0
    attr = _RulesetAttr(fs, 0, scoped)
    ruleset = _check(_libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        reads, listing = punch_holes(policy.read, policy.deny)
        for path in reads:
            _add_rule(ruleset, path, READ & fs)
        for path in listing:
            _add_rule(ruleset, path, FS_READ_DIR)
        writes, carved = carve_writes(policy.write, policy.read_only) if policy.read_only else (policy.write, [])
        for path in carved:
            _add_rule(ruleset, path, READ & fs)
        for path in writes:
            _add_rule(ruleset, path, (READ | WRITE | FS_RESOLVE_UNIX) & fs)
        for path in policy.devices:
            _add_rule(ruleset, path, DEVICE & fs)
        if fs & FS_RESOLVE_UNIX:
            for path in policy.connect:
                _add_rule(ruleset, path, FS_RESOLVE_UNIX)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            _check(-1, "prctl(PR_SET_NO_NEW_PRIVS)")
        flags = RESTRICT_SELF_LOG_SAME_EXEC_OFF if abi >= 7 else 0
        _check(_libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(flags)), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi
