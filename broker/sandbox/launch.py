"""The launcher's code (``launcher.py`` is its entry point; the process roles are described there).

``launcher.py`` stays a few lines long because a script run as ``__main__`` is
compiled on every run, while an imported module is compiled once and cached:
this is the difference of several milliseconds on every agent spawn
(docs/BENCHMARKS.md).  The roles, in the order they run:

* ``main`` -- L, the process the broker registered: parses the options, sets
  up the namespaces and mounts, forks C or A, keeps it (``keeper.py``), ends
  what is left, reports to the broker and ends with A's status;
* ``init`` -- C, pid 1 of the agent's PID namespace (``--pidns``);
* ``agent`` -- A: its process group, its limits, Landlock, then ``exec``.

Standard library only, and few imports (every spawn pays for them).
"""


from __future__ import annotations

import _signal as signal  # not `signal`: it imports enum, a cost on every spawn
import os
import sys

import keeper

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
REFUSED = 126
LISTS = (
    "ro", "rw", "dev", "deny", "connect", "hide", "pin", "read_only", "keep", "cgroup", "watch", "report", "max_processes", "nofile",
    "ro_hole", "private_home",
)  # fmt: skip
FLAGS = ("ns", "pidns", "landlock", "drop_caps")


def fail(message: str) -> None:
    sys.stderr.write(f"conclave-sandbox: {message}; not starting the agent\n")
    sys.stderr.flush()
    os._exit(REFUSED)


def parse(argv: list[str]) -> tuple[dict[str, list[str]], set[str], list[str]]:
    lists: dict[str, list[str]] = {k: [] for k in LISTS}
    flags: set[str] = set()
    i = 1
    while i < len(argv) and argv[i] != "--":
        key = argv[i][2:].replace("-", "_")
        if key in lists and i + 1 < len(argv):
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


def _number(values: list[str], what: str) -> int | None:
    if not values:
        return None
    try:
        return int(values[-1])
    except ValueError:
        fail(f"{what} needs a whole number, not {values[-1]!r}")
        raise  # unreachable: fail() exits


def _prctl(option: int, value: int) -> bool:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0


class Report:
    """What the launcher tells the broker (``--report``): one JSON object per line, never blocking it."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def send(self, line: str) -> None:
        """One JSON object (already written out: ``json`` costs an import on every spawn)."""
        if self.fd is None:
            return
        try:
            os.write(self.fd, line.encode() + b"\n")
        except OSError:
            pass  # the broker is gone: no one to tell


def main(argv: list[str]) -> None:
    lists, flags, command = parse(argv)
    lifeline, out = _number(lists["watch"], "--watch"), _number(lists["report"], "--report")
    share = _number(lists["max_processes"], "--max-processes")
    for fd in (lifeline, out):
        if fd is not None:
            try:
                os.set_inheritable(fd, False)  # L's alone: the agent never holds them
            except OSError as exc:
                fail(f"descriptor {fd} from the broker: {exc}")
    report = Report(out)
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        fail("cannot become a child subreaper")
    pidns = "pidns" in flags and "ns" in flags
    if "ns" in flags:
        enter_namespaces(lists, pid=pidns)
    elif share is not None:
        fail("--max-processes needs --ns: outside a user namespace RLIMIT_NPROC counts every process of the uid")
    if pidns:
        status, leftovers = run_with_init(lists, flags, command, lifeline=lifeline, report=report, share=share)
    else:
        me, kept = os.getpid(), keeper.Keeper()
        if kept.fork() == 0:
            agent(lists, flags, command, keeper_pid=me, share=share, join=lists["cgroup"])
        status = kept.wait(lifeline=lifeline)
        leftovers = keeper.end_descendants(group=kept.child)
    leftovers += sum(kill_cgroup(d) for d in lists["cgroup"])
    report.send('{"leftovers": %d}' % leftovers)
    keeper.become(status)


def enter_namespaces(lists: dict[str, list[str]], *, pid: bool) -> None:
    """L's part of the box: the namespaces and every mount but /proc (C's)."""
    import namespaces

    try:
        cwd = os.getcwd()
        namespaces.enter(pid=pid)
        # Opened in the new namespace (a bind source must be a mount of it), before anything covers them.
        kept = namespaces.open_kept(lists["keep"])
        uid = os.getuid()
        homes = [os.path.realpath(p) for p in lists["private_home"]]  # before anything covers its way
        links = namespaces.links_on_the_way(["/tmp", "/dev/shm", f"/run/user/{uid}", *homes], [*lists["keep"], *lists["private_home"]])
        for path, mode in (("/tmp", "1777"), ("/dev/shm", "1777"), (f"/run/user/{uid}", "0700")):
            namespaces.private_tmpfs(path, mode, kept)
        for path in homes:
            namespaces.private_home(path, kept)
        namespaces.relink(links)
        namespaces.private_ptys()
        for path in lists["hide"]:
            namespaces.hide(path, kept)
        for path in lists["pin"]:
            namespaces.pin(path)
        for path in lists["read_only"]:
            namespaces.read_only(path)
        # Look the working directory up again: the one inherited may sit under a mount
        # made since (a work tree in /tmp, bound back over the private tmpfs), where a
        # relative path would miss the read-only views.
        os.chdir(cwd)
    except OSError as exc:
        fail(f"namespaces: {exc}")


def run_with_init(
    lists: dict[str, list[str]], flags: set[str], command: list[str], *, lifeline: int | None, report: Report, share: int | None
) -> tuple[int, int]:
    """L's side of a PID namespace: fork C, pass signals to it, relay what it reports; once it has
    exited (and the kernel has emptied the namespace), A's wait status and C's count of leftovers.

    C speaks in lines of words: ``share TASKS LIMIT`` and, last, ``status WAIT_STATUS LEFTOVERS``."""
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    found: dict[str, int] = {}
    child = 0

    def send(sig: int) -> None:
        keeper._kill(child, sig)

    kept = keeper.Keeper(forward=send, end_now=lambda: keeper._kill(child, signal.SIGKILL))
    child = kept.fork()
    if child == 0:
        os.close(status_r)
        for fd in (lifeline, report.fd):
            if fd is not None:
                os.close(fd)
        init(lists, flags, command, status_w=status_w, share=share)
    os.close(status_w)

    def heard(line: bytes) -> None:
        words = line.split()
        try:
            if words[0] == b"share" and len(words) == 3:
                report.send('{"share": {"tasks": %d, "limit": %d}}' % (int(words[1]), int(words[2])))
            elif words[0] == b"status" and len(words) == 3:
                found.update(status=int(words[1]), leftovers=int(words[2]))
        except (IndexError, ValueError):
            pass

    status = kept.wait(lifeline=lifeline, messages=status_r, on_message=heard)
    # C reports A's status just before it exits; killed first (SIGUSR1, the lifeline), it says nothing.
    return found.get("status", status), found.get("leftovers", 0)


def init(lists: dict[str, list[str]], flags: set[str], command: list[str], *, status_w: int, share: int | None) -> None:
    """C: pid 1 of the agent's PID namespace.  Never returns."""
    import select

    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # L killed: the namespace goes with us
    probe = select.poll()
    probe.register(status_w, select.POLLOUT)
    if any(events & select.POLLERR for _, events in probe.poll(0)):
        os._exit(REFUSED)  # L died before the line above: no one would keep this namespace
    import namespaces

    try:
        namespaces.private_proc()
    except OSError as exc:
        fail(f"namespaces: {exc}")
    setup_limits(lists["cgroup"], share)
    kept = keeper.Keeper()
    if kept.fork() == 0:
        os.close(status_w)
        agent(lists, flags, command, keeper_pid=None, share=None, join=[])
    watch = ShareWatch(share, status_w) if share else None
    status = kept.wait(every=1.0 if watch else None, on_tick=watch)
    left = [pid for pid, fields in keeper.processes() if pid != 1 and fields[0] != b"Z"]
    try:
        os.write(status_w, b"status %d %d\n" % (status, len(left)))
    except OSError:
        pass
    os._exit(0)  # and the kernel kills what is left in the namespace


class ShareWatch:
    """(In C.)  Tell L, once per episode, when the namespace's tasks come near the agent's share."""

    def __init__(self, limit: int, out: int) -> None:
        self.limit, self.out, self.reported = limit, out, False

    def __call__(self) -> None:
        # L: in the agent's user namespace (so counted), not in its PID namespace (so unseen); then
        # every task here (C's /proc is its own namespace's), threads included: RLIMIT_NPROC counts them.
        tasks = 1 + sum(int(fields[17]) for _, fields in keeper.processes() if len(fields) > 17)
        if tasks >= self.limit - max(1, self.limit // 20) and not self.reported:
            self.reported = True
            try:
                os.write(self.out, b"share %d %d\n" % (tasks, self.limit))
            except OSError:
                pass
        elif tasks < self.limit // 2:
            self.reported = False


def setup_limits(cgroups: list[str], share: int | None) -> None:
    """Join the agent's cgroup and take its share of processes, before it forks anything."""
    try:
        for directory in cgroups:
            join_cgroup(directory)
    except OSError as exc:
        fail(f"cannot join cgroup {cgroups}: {exc}")
    if share is not None:
        import resource

        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (share, share))
        except (OSError, ValueError) as exc:
            fail(f"cannot set RLIMIT_NPROC to {share}: {exc}")


def agent(lists: dict[str, list[str]], flags: set[str], command: list[str], *, keeper_pid: int | None, share: int | None, join: list[str]) -> None:
    """A: lead a process group of its own, take its limits, box itself, become COMMAND.  Never returns."""
    try:
        os.setpgid(0, 0)
    except OSError as exc:
        fail(f"cannot start a process group: {exc}")
    if keeper_pid is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # L killed (only by SIGKILL): the agent goes with it
        if os.getppid() != keeper_pid:
            os._exit(REFUSED)
    setup_limits(join, share)
    if lists["nofile"]:
        import resource

        try:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(int(lists["nofile"][-1]), hard), hard))
        except (OSError, ValueError) as exc:
            fail(f"cannot set RLIMIT_NOFILE: {exc}")
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
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"conclave-sandbox: cannot run {command[0]!r}: {exc.strerror or exc}\n")
        sys.stderr.flush()
        os._exit(127 if isinstance(exc, FileNotFoundError) else REFUSED)


def kill_cgroup(directory: str) -> int:
    """Kill every process in the agent's cgroup (L is not in it) and wait until it is empty; how many."""
    import time

    try:
        with open(os.path.join(directory, "cgroup.procs")) as f:
            members = len(f.read().split())
        if not members:
            return 0
        with open(os.path.join(directory, "cgroup.kill"), "w") as f:
            f.write("1")
    except OSError:
        return 0
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(directory, "cgroup.events")) as f:
                if "populated 0" in f.read():
                    break
        except OSError:
            break
        time.sleep(0.001)
    return members
