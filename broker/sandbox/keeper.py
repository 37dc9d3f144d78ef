"""Keeping one child: wait for it, pass the broker's signals on, reap everything, end the rest.

The launcher (``launcher.py``) never becomes the agent.  It stays alive as
the process the broker registered, and the agent runs beneath it:

* without a PID namespace, ``L`` (the launcher) forks ``A`` (the agent);
* with one, ``L`` forks ``C``, pid 1 of the new namespace, which forks ``A``.

Each of ``L`` and ``C`` runs one :class:`Keeper` around its one child.  The
keeper

* passes SIGTERM, SIGINT, SIGHUP and SIGQUIT on (to ``C``, or to ``A``'s
  process group).  ``C`` must: the init of a PID namespace receives only the
  signals it has a handler for, even from the broker;
* ends the child at once on :data:`END_NOW` (SIGUSR1, what the broker sends
  when the grace period is over) or when the broker's *lifeline* reaches end
  of file -- a pipe whose write end only the broker holds, so EOF means the
  broker process is gone, however it died;
* reaps every child it has: as a child subreaper (``L``) or init (``C``)
  everything the agent orphans is re-parented to it.

Signals are read from a wakeup pipe in a :func:`select.poll` loop, so a
signal can never arrive between a check and a wait.  Standard library only,
and cheap to import (``_signal``, not ``signal``, which pulls in ``enum``;
no ``typing``, no ``json``): the launcher runs on every spawn, under
``python -I -S``.
"""

from __future__ import annotations

import _signal as signal
import os
import select
import time

TYPE_CHECKING = False  # (type checkers read it as True; importing typing would cost every spawn)
if TYPE_CHECKING:
    from collections.abc import Callable

#: What the broker sends to stop an agent; passed on to the agent's process group.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
#: To the launcher: end the agent now (its namespace, or its whole tree).
END_NOW = signal.SIGUSR1
HANDLED = (*FORWARDED, END_NOW, signal.SIGCHLD)
#: How long the launcher keeps killing what the agent left before it gives up and says so.
SWEEP_SECONDS = 2.0


def _noop(signum: int, frame: object) -> None:
    """The wakeup pipe carries the signal; the handler exists so the signal is delivered at all."""


class Keeper:
    """One child, kept: see the module docstring.  Create it before forking the child."""

    def __init__(self, *, forward: Callable[[int], None] | None = None, end_now: Callable[[], None] | None = None) -> None:
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in HANDLED:
            signal.signal(sig, _noop)
        self.child = 0
        self.status: int | None = None
        self._forward = forward
        self._end_now = end_now
        self.lifeline_lost = False

    def fork(self) -> int:
        """Fork the kept child.  In the child the keeper is undone (default signal actions, no
        wakeup pipe) before any signal can reach it, and 0 is returned."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for sig in HANDLED:
                signal.signal(sig, signal.SIG_DFL)
            os.close(self.wake_r)
            os.close(self.wake_w)
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            return 0
        self.child = pid
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return pid

    def forward(self, sig: int) -> None:
        """Pass ``sig`` on: to the child's process group (the agent leads its own), else to the child."""
        if self.child <= 0:
            return  # (killpg(0) would be our own group)
        if self._forward is not None:
            self._forward(sig)
            return
        try:
            os.killpg(self.child, sig)
        except ProcessLookupError:
            _kill(self.child, sig)
        except PermissionError:
            pass

    def end_now(self) -> None:
        if self.child <= 0:
            return
        if self._end_now is not None:
            self._end_now()
            return
        for kill in (os.killpg, os.kill):
            try:
                kill(self.child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def wait(
        self,
        *,
        lifeline: int | None = None,
        messages: int | None = None,
        on_message: Callable[[bytes], None] | None = None,
        every: float | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> int:
        """Until the child exits: pass signals on, reap every child, watch the lifeline, read
        ``messages`` (lines, to ``on_message``), call ``on_tick`` every ``every`` seconds.
        Returns the child's wait status."""
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        watched = {fd for fd in (lifeline, messages) if fd is not None}
        for fd in watched:
            poller.register(fd, select.POLLIN)
        pending = b""
        next_tick = time.monotonic() + every if every else None
        while True:
            self.reap()
            if self.status is not None:
                if messages is not None and messages in watched and on_message is not None:
                    for line in drain(messages, pending).splitlines():
                        on_message(line)
                return self.status
            timeout = None if next_tick is None else max(0, int((next_tick - time.monotonic()) * 1000))
            for fd, _ in poller.poll(timeout):
                if fd == self.wake_r:
                    self._signals()
                elif fd == lifeline:
                    if _read(fd) == b"":
                        poller.unregister(fd)
                        watched.discard(fd)
                        self.lifeline_lost = True
                        self.end_now()
                elif fd == messages:
                    chunk = _read(fd)
                    if chunk == b"":
                        poller.unregister(fd)
                        watched.discard(fd)
                    pending += chunk or b""
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if on_message is not None:
                            on_message(line)
            if next_tick is not None and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + (every or 1.0)
                if on_tick is not None:
                    on_tick()

    def reap(self) -> None:
        """Reap every exited child; note the kept child's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.status = status

    def _signals(self) -> None:
        try:
            received = os.read(self.wake_r, 512)
        except BlockingIOError:
            return
        for sig in dict.fromkeys(received):
            if sig in FORWARDED:
                self.forward(sig)
            elif sig == END_NOW:
                self.end_now()


def end_descendants(*, group: int | None = None, seconds: float = SWEEP_SECONDS) -> int:
    """Kill every process left beneath this one, which must be a child subreaper: whatever the
    agent started is this process's child, or the child of one, until it is reaped.

    First the agent's process ``group`` at once (a signal to a group reaches a child forked
    meanwhile too: the kernel restarts a fork that races it), then, for what left the group
    (``setsid``), a pass over this process's children -- a child's pid cannot be reused before
    its parent reaps it, so killing by pid is exact -- reaping and repeating until it has none
    (``ECHILD``); a process that forks and exits in a loop is caught in a pass or the next.
    Returns how many it killed."""
    killed: set[int] = set()
    if group is not None and group > 0:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid in _children():
            _kill(pid, signal.SIGKILL)
            killed.add(pid)
        reaped = False
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return len(killed)
            if pid == 0:
                break
            reaped = True
        if not reaped:
            time.sleep(0.0002)
    return len(killed)


def _children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return [pid for pid, fields in processes() if int(fields[1]) == me]


def processes() -> list[tuple[int, list[bytes]]]:
    """Every process in this ``/proc``: (pid, the fields of its ``stat`` after the command name --
    ``[0]`` the state, ``[1]`` the parent, ``[17]`` the number of threads)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            found.append((int(name), raw[raw.rindex(b")") + 2 :].split()))
    return found


def drain(fd: int, pending: bytes = b"") -> bytes:
    """Everything left to read on ``fd`` (whose writers are gone or going)."""
    os.set_blocking(fd, False)
    chunks = [pending]
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def become(status: int) -> None:
    """End this process with ``status``, a child's wait status: the same exit code, or death by
    the same signal (without a core dump of the launcher), so the broker reads the agent's end."""
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, OSError, ValueError):
        pass
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal whose default is not to terminate


def _read(fd: int) -> bytes | None:
    """What ``fd`` has (b"" at end of file), or None after a spurious wakeup."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
