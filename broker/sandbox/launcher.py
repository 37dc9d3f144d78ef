"""The sandbox launcher: sets up an agent's box on itself, then becomes the agent.

    python -I -S launcher.py [OPTIONS] -- COMMAND [ARGS...]

The supervisor spawns this instead of the agent's command (with the agent's
environment, directory and output, in a new session); it builds the box and
``exec``\\ s COMMAND, so the agent keeps the pid the broker registered.
Nothing of this runs in the broker's own (threaded) process.  Any step that
fails ends the launch with exit code 126 and a line on stderr (the agent's
log): an agent never runs with less than it was promised.

OPTIONS (repeatable where it makes sense):
  --ns                a user + mount namespace with a private /tmp, /dev/shm
                      and /run/user/<uid>
  --hide PATH         (--ns) make PATH empty: ~/.ssh, a container socket, ...
  --pin PATH          (--ns) bind PATH over itself: a mount point cannot be renamed (.git)
  --read-only PATH    (--ns) bind PATH over itself read-only (.git/hooks)
  --keep SOCKET       (--ns) a socket a private or hidden directory must keep
  --bind SRC DST      (--ns) bind directory SRC over DST (the agent's git directory over .git)
  --bind-ro SRC DST   (--ns) the same, read-only (the person's objects inside it); binds are
                      made in order, after the others, from sources opened before any mount
  --ro-hole PATH      (--landlock) keep PATH read-only although a --rw root holds it
  --landlock          restrict with Landlock (after any mounts):
  --ro PATH  --rw PATH  --dev PATH  --deny PATH  --connect PATH
  --drop-caps         empty the capability sets (an agent of a root broker)
  --subreaper         the agent adopts its own orphans (PR_SET_CHILD_SUBREAPER
                      survives exec): nothing it starts can leave its tree
                      while it lives, and the broker sweeps the rest at its exit
  --cgroup DIR        join cgroup v2 DIR first (the broker kills it at exit)

Standard library only and few imports: this runs on every agent spawn
(docs/BENCHMARKS.md has the cost).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
REFUSED = 126
LISTS = ("ro", "rw", "dev", "deny", "connect", "hide", "pin", "read_only", "keep", "cgroup", "ro_hole")
PAIRS = ("bind", "bind_ro")
FLAGS = ("ns", "landlock", "drop_caps", "subreaper")


def fail(message: str) -> None:
    sys.stderr.write(f"conclave-sandbox: {message}; not starting the agent\n")
    sys.stderr.flush()
    os._exit(REFUSED)


def parse(argv: list[str]) -> tuple[dict[str, list[str]], set[str], list[str]]:
    lists: dict[str, list[str]] = {k: [] for k in LISTS}
    lists["binds"] = []  # type: ignore[assignment]  # (source, target, read-only) in order
    flags: set[str] = set()
    i = 1
    while i < len(argv) and argv[i] != "--":
        key = argv[i][2:].replace("-", "_")
        if key in PAIRS and i + 2 < len(argv):
            lists["binds"].append((argv[i + 1], argv[i + 2], key == "bind_ro"))  # type: ignore[arg-type]
            i += 3
        elif key in lists and i + 1 < len(argv):
            lists[key].append(argv[i + 1])
            i += 2
        elif key in FLAGS:
            flags.add(key)
            i += 1
        else:
            fail(f"unknown option {argv[i]!r}")
    command = argv[i + 1 :]
    if not command:
        fail("no command after --")
    return lists, flags, command


def join_cgroup(directory: str) -> None:
    fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def drop_capabilities() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            fail(f"cannot drop capability {cap} from the bounding set")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        fail("cannot clear the capability sets")


def main(argv: list[str]) -> None:
    lists, flags, command = parse(argv)
    try:
        for directory in lists["cgroup"]:
            join_cgroup(directory)
    except OSError as exc:
        fail(f"cannot join cgroup {lists['cgroup']}: {exc}")
    if "ns" in flags:
        import namespaces

        try:
            cwd = os.getcwd()
            namespaces.enter()
            # Opened in the new namespace (a bind source must be a mount of it), before anything covers them.
            kept = namespaces.open_kept(lists["keep"])
            binds = namespaces.open_binds(lists["binds"])
            uid = os.getuid()
            for path, mode in (("/tmp", "1777"), ("/dev/shm", "1777"), (f"/run/user/{uid}", "0700")):
                namespaces.private_tmpfs(path, mode, kept)
            namespaces.private_ptys()
            for path in lists["hide"]:
                namespaces.hide(path, kept)
            for path in lists["pin"]:
                namespaces.pin(path)
            for path in lists["read_only"]:
                namespaces.read_only(path)
            for source, target, read_only in binds:
                namespaces.bind(source, target, read_only=read_only)
            # Look the working directory up again: the one inherited may sit under a mount
            # made since (a work tree in /tmp, bound back over the private tmpfs), where a
            # relative path would miss the read-only views.
            os.chdir(cwd)
        except OSError as exc:
            fail(f"namespaces: {exc}")
    if "landlock" in flags:
        import landlock

        policy = landlock.Policy(
            read=lists["ro"], write=lists["rw"], devices=lists["dev"], deny=lists["deny"], connect=lists["connect"], read_only=lists["ro_hole"]
        )
        try:
            landlock.apply(policy)
        except OSError as exc:
            fail(f"Landlock: {exc}")
    if "drop_caps" in flags:
        drop_capabilities()
    if "subreaper" in flags:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            fail("cannot become a child subreaper")
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"conclave-sandbox: cannot run {command[0]!r}: {exc.strerror or exc}\n")
        os._exit(127 if isinstance(exc, FileNotFoundError) else REFUSED)


if __name__ == "__main__":
    main(sys.argv)
