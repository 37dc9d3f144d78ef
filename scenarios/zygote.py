"""Brokers forked from a warm interpreter: the scenario runner's ``conclave run`` without the imports.

A broker spends about three quarters of a second of CPU importing itself
(trio, the attrs classes, every feature's ops) before it reads its team file,
and the scenario catalogue starts a fresh broker for each of its scenarios.
The zygote is one process per batch of scenarios, started as a broker is
(``python -I -m scenarios.zygote``: the same interpreter, isolated mode, the
same ``sys.path``), that imports what a broker imports and then waits.  Each
broker is a fork of it that runs ``conclave run`` the way
``python -I -m broker.cli run ...`` would: ``broker.cli.main`` with the same
arguments, environment, working directory and standard streams (every other
descriptor closed), then the at-exit handlers.  Only the import work is
shared; each scenario still gets its own broker process, state directory,
socket and agents.

The zygote is reached only through a socket pair its starter holds (no name
an agent could connect to).  A request carries the command line, the
environment, the working directory and four descriptors (stdin, stdout,
stderr, and a socket for the answer); the zygote forks a monitor, the monitor
forks the broker, reports its pid, waits for it, and reports its exit code.
:class:`Zygote` is the starter's side; :meth:`Zygote.popen` returns a
:class:`Forked`, which the harness's ``Run`` drives as it would a
``subprocess.Popen``.  Any other ``conclave`` command on this interpreter is
forked the same way (:meth:`Zygote.run`: the test suite's operator commands,
``agents.harness.Run.cli``); anything else is started by ``subprocess.Popen``
as before.

What is not the same as an exec'd broker: the kernel's record of the exec,
``/proc/PID/cmdline`` and ``/proc/PID/environ``, shows the zygote's (the
broker's ``os.environ`` and what its children inherit are the request's).
A test about the broker's own command line or environment block starts it
with ``subprocess.Popen`` (tests/multihost/test_passfile.py does).

Nothing here outlives its starter.  Each broker's report socket is its lifeline: the starter never
writes to it, so the monitor seeing it readable means end of file -- the starter closed it or died,
however it died (SIGKILL included: the kernel closes a dead process's descriptors).  The monitor
then stops its broker as a person would (SIGTERM: the broker ends its agents and writes its
summary), kills it after :data:`STOP_GRACE` if it is still there, and, being a child subreaper
(orphans of the broker's tree are re-parented to it, not to init), kills and reaps whatever of
that tree is left.  The zygote ends once its control socket closes and its monitors are done.
(``PR_SET_PDEATHSIG`` would not do: it follows the thread that forked, not the process -- see
memory/walk_child.py.)  A starter that means to stop its brokers cleanly itself, before it goes,
calls :meth:`Zygote.stop_all` (``conclave scenario run`` on SIGTERM or Ctrl-C).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

from broker.entry import conclave_argv, python_argv

#: How long the zygote may take to import the broker, and a fork to report its pid (generous: a loaded machine).
READY_TIMEOUT = 120.0
MAX_FDS = 4
#: Seconds a monitor gives a broker whose starter is gone to stop by itself (SIGTERM) before it kills it:
#: the broker's own ``--grace`` (SIGTERM to SIGKILL for its agents) plus its summary.
STOP_GRACE = 15.0


class ZygoteStopping(RuntimeError):
    """:meth:`Zygote.stop_all` was called: this zygote forks nothing more."""


class Forked:
    """A broker forked by the zygote, with the part of ``subprocess.Popen``'s interface the harness uses."""

    def __init__(self, args: list[str], pid: int, report: socket.socket, stdout: int, stderr: int, *, text: bool) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._report = report
        self._text = text
        self._fds = {"stdout": stdout, "stderr": stderr}
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._pending = b""

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._report.settimeout(timeout)
        try:
            while b"\n" not in self._pending:
                data = self._report.recv(64)
                if not data:
                    raise RuntimeError(f"the zygote's monitor of broker {self.pid} went away without its exit code")
                self._pending += data
        except (TimeoutError, BlockingIOError):
            return None
        self.returncode = int(self._pending.split(b"\n", 1)[0])
        self._report.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their end, then wait for the exit; what ``Popen.communicate`` returns."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            if deadline is None:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            return remaining

        with selectors.DefaultSelector() as selector:
            for name, fd in self._fds.items():
                if fd >= 0:
                    selector.register(fd, selectors.EVENT_READ, name)
            while selector.get_map():
                for key, _ in selector.select(left()):
                    data = os.read(key.fd, 65536)
                    if data:
                        self._chunks[key.data].append(data)
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
                        self._fds[key.data] = -1
        self.wait(left())
        out, err = (b"".join(self._chunks[name]) for name in ("stdout", "stderr"))
        return (out.decode(), err.decode()) if self._text else (out, err)


class Zygote:
    """The starter's side: one warm interpreter, forking brokers on request (see the module's docstring)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        # A file, not a pipe nobody reads while it runs: what the zygote says (only if it fails) never blocks it.
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            python_argv("scenarios.zygote", str(theirs.fileno()), python=self.python),
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stderr=self._stderr, env=env,
        )
        theirs.close()
        self._control = mine
        self._lock = threading.Lock()
        # Every broker forked and not yet known to have ended (weak: a handle dropped is a broker abandoned).
        self._forked: weakref.WeakSet[Forked] = weakref.WeakSet()
        self._stop_signal: int | None = None
        mine.settimeout(READY_TIMEOUT)
        try:
            ready = mine.recv(16)
        except TimeoutError:
            ready = b""
        if ready != b"ready":
            self.process.kill()
            self.process.wait()
            self._stderr.seek(0)
            err = self._stderr.read().decode(errors="replace").strip()[-2000:]
            self._stderr.close()
            raise RuntimeError(f"the scenario runner's broker zygote did not start: {err}")
        mine.settimeout(None)

    def serves(self, argv: Sequence[str]) -> bool:
        """Is ``argv`` a ``conclave`` command on this zygote's interpreter (what it can fork)?"""
        prefix = conclave_argv(python=self.python)
        return list(argv[: len(prefix)]) == prefix and len(argv) > len(prefix)

    def popen(self, argv: Sequence[str], *, stdout: int, stderr: int, text: bool = False, env: dict[str, str] | None = None,
              input: bytes | None = None, cwd: str | os.PathLike[str] | None = None) -> Forked | subprocess.Popen[Any]:
        """``subprocess.Popen(argv, stdout=PIPE, stderr=PIPE, text=text, env=env, cwd=cwd)``, forked when :meth:`serves` says so.

        ``input``: what the command reads on its standard input (else it reads the null device).
        """
        argv = list(argv)
        if not self.serves(argv) or stdout != subprocess.PIPE or stderr != subprocess.PIPE:
            if input is not None:
                raise ValueError("input is for a forked command only: use subprocess.run for anything else")
            return subprocess.Popen(argv, stdout=stdout, stderr=stderr, text=text, env=env, cwd=cwd)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        report, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        if input is None:
            feed, source = None, os.open(os.devnull, os.O_RDONLY)
        else:
            source, feed = os.pipe()
        request = {"argv": argv[len(conclave_argv(python=self.python)):], "cwd": os.path.abspath(cwd or os.getcwd()),
                   "env": dict(os.environ if env is None else env)}
        try:
            with self._lock:
                if self._stop_signal is not None:
                    for fd in (out_r, err_r, *([] if feed is None else [feed])):
                        os.close(fd)
                    report.close()
                    raise ZygoteStopping("the scenario runner is stopping: it starts no more brokers")
                socket.send_fds(self._control, [json.dumps(request).encode()], [source, out_w, err_w, theirs.fileno()])
        finally:
            for fd in (source, out_w, err_w):
                os.close(fd)
            theirs.close()
        if feed is not None:
            threading.Thread(target=_feed, args=(feed, input or b""), daemon=True).start()
        report.settimeout(READY_TIMEOUT)
        line = b""
        while not line.endswith(b"\n"):
            data = report.recv(1)
            if not data:
                raise RuntimeError(f"the broker zygote did not fork the broker (zygote exit status {self.process.poll()})")
            line += data
        forked = Forked(argv, int(line), report, out_r, err_r, text=text)
        with self._lock:
            self._forked.add(forked)
            stop = self._stop_signal
        if stop is not None:  # stop_all ran while this one was being forked
            forked.send_signal(stop)
        return forked

    def stop_all(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` to every broker forked and still running, and fork no more (:class:`ZygoteStopping`).

        Each broker stops as on a person's ``kill``: it ends its agents and writes its summary, which
        its handle's ``communicate`` still reads.  Returns how many were signalled."""
        with self._lock:
            self._stop_signal = sig
            live = [f for f in self._forked if f.returncode is None]
        for forked in live:
            forked.send_signal(sig)
        return len(live)

    def run(self, argv: Sequence[str], *, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float | None = None, cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv, capture_output=True, text=True, env=env, input=input, timeout=timeout, cwd=cwd)``,
        forked when :meth:`serves` says so (an operator's ``conclave`` command without its interpreter's start)."""
        if not self.serves(argv):
            return subprocess.run(list(argv), capture_output=True, text=True, env=env, input=input, timeout=timeout, cwd=cwd)
        process = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             input=None if input is None else input.encode(), cwd=cwd)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()  # as subprocess.run does
            process.wait()
            raise
        return subprocess.CompletedProcess(list(argv), process.wait(), out, err)

    def close(self) -> None:
        self._control.close()  # the zygote's read ends: it exits
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr.close()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the zygote's side ------------------------------------------------------------


def _warm() -> None:
    """Import what ``conclave run`` imports before it reads its team file."""
    import broker.cli  # noqa: F401
    import broker.main  # noqa: F401
    from broker import composition

    composition.schemas()
    composition.team_rules()
    # What this machine's kernel offers the sandbox (cached per process): two launcher runs a broker would
    # otherwise make at every start.  Its forks share the zygote's uid and cgroup, which is all it depends on.
    from broker.sandbox import machine

    machine.probe()
    # What a broker loads at its first claim, not at its start: numpy (the embedder's vectors, about 0.18 s
    # of CPU) and detect-secrets' known-format patterns (the prefilter's, 0.18 s: it imports requests).
    # Both depend on nothing of the request's (the patterns are a pure function of the installed package).
    import numpy  # noqa: F401

    from memory import prefilter

    prefilter._format_detectors()
    # The first claim's judging: every word list and pattern the prefilter compiles on first use (the eight
    # languages' rules alone are about 0.15 s of CPU), and the shipped exemplars' and probe's tables.
    prefilter.check_claim("The ledger tests run with `make test` on the arm64 runners.", "general")
    prefilter.check_note("Seen in the CI logs of the arm64 runners.")
    from memory import exemplar_vectors, probe_weights  # noqa: F401


def _feed(fd: int, data: bytes) -> None:
    """Write a forked command's standard input, then close it (a thread: the command may not read it all)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        pass  # it ended without reading everything, as a command may
    finally:
        os.close(fd)


def _serve(control: socket.socket) -> None:
    control.sendall(b"ready")
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, MAX_FDS)
        _reap(os.WNOHANG)
        if not message:
            _reap(0)  # the starter closed its end: wait for the last monitors, then exit
            return
        if len(fds) != MAX_FDS:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            control.close()
            _monitor(json.loads(message), fds)
        for fd in fds:
            os.close(fd)


def _reap(options: int) -> None:
    """Wait for the monitors that ended (all of them, with ``options`` 0): waited for, not left to the kernel,
    so each broker's CPU time is counted up the tree to whoever started the zygote (``time make test``)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, options)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _monitor(request: dict[str, Any], fds: list[int]) -> None:
    """Fork the broker, report its pid, wait for it, report its exit code; never returns.

    If the report socket ends first (the starter is gone), end the broker and its whole tree instead."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the process group is the broker's to handle
        from broker.identity import make_child_subreaper

        # What the broker's death orphans comes here, not to init: a starter gone takes it along.
        make_child_subreaper()
        report = socket.socket(fileno=fds[3])
        pid = os.fork()
        if pid == 0:
            report.close()
            _broker(request, fds[:3])
        for fd in fds[:3]:
            os.close(fd)
        broker = os.pidfd_open(pid)
        report.sendall(f"{pid}\n".encode())
        if _ended_first(broker, report):
            _, status = os.waitpid(pid, 0)
            report.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        else:
            _end_orphaned(pid, broker)
    finally:
        os._exit(0)


def _ended_first(broker: int, report: socket.socket) -> bool:
    """Wait until the broker (its pidfd) ends -- True -- or the report socket does: False, the starter is gone."""
    with selectors.DefaultSelector() as selector:
        selector.register(broker, selectors.EVENT_READ, True)
        selector.register(report, selectors.EVENT_READ, False)
        while True:
            ready = [key.data for key, _ in selector.select()]
            if True in ready:
                return True
            if ready:
                return False


def _end_orphaned(pid: int, broker: int) -> None:
    """Stop a broker whose starter is gone: SIGTERM (it ends its agents), SIGKILL after :data:`STOP_GRACE`,
    then kill and reap everything of its tree that was re-parented here (this process is a subreaper)."""
    from broker.sandbox.keeper import end_descendants

    os.kill(pid, signal.SIGTERM)
    with selectors.DefaultSelector() as selector:
        selector.register(broker, selectors.EVENT_READ)
        if not selector.select(STOP_GRACE):
            os.kill(pid, signal.SIGKILL)
    end_descendants()


def _broker(request: dict[str, Any], streams: list[int]) -> None:
    """Become ``python -I -m broker.cli ARGV``: the streams, the directory, the environment, then ``main``."""
    code = 1
    try:
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # what Popen's close_fds leaves a fresh broker
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import broker.cli

        sys.argv = [str(Path(broker.cli.__file__)), *request["argv"]]
        code = _exit_code(broker.cli.main)
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 -- reported on the broker's stderr, as an uncaught exception would be
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _exit_code(main: Any) -> int:
    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # A ^C at the terminal reaches the whole process group: each broker stops on it, and the starter decides
    # what else ends; the zygote goes when its control socket closes, after its monitors.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _warm()
    _serve(socket.socket(fileno=int(sys.argv[1])))
