"""A real broker on a scratch repository, driven step by step.

The test suite, the scenario runner and the benchmarks all need the same
thing: start ``conclave run`` as a real process on a throwaway git
repository, with a team of :mod:`agents.puppet` agents, and then act as each
agent (through its puppet) or as the operator (from this process, which
holds the operator key and is outside every agent's tree).  Everything lives under a directory the caller
made; nothing is resolved from the running process.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from broker.client import BlockingClient
from broker.entry import conclave_argv, python_argv
from broker.paths import StatePaths, default_state_dir
from agents.puppet import control_address
from broker.errors import ConclaveError, ErrorCode

GIT_IDENTITY = ["-c", "user.name=conclave-test", "-c", "user.email=test@example.invalid"]


def make_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository with one commit, under ``root``."""
    repo = root / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "-C", str(repo), "init", "-q", "-b", "main"], check=True)
    for name, text in (files or {"README.md": "scratch\n"}).items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *GIT_IDENTITY, "commit", "-qm", "init"], check=True)
    return repo


def puppet_command(control_dir: Path, python: str | None = None) -> list[str]:
    return python_argv("agents.puppet", "--control-dir", str(control_dir), python=python)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


class Puppet:
    """A handle on one puppet agent's control socket."""

    def __init__(self, address: str) -> None:
        self.path = address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(address)
        self._file = self._sock.makefile("rwb")
        hello = self._send({"whoami": True})
        self.identity: dict[str, Any] = hello["result"]
        # The puppet's pid as this process sees it (the kernel translates it out of the agent's PID
        # namespace); the puppet's own os.getpid() would be its number inside.
        self.pid: int = struct.unpack("3i", self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]

    def _send(self, command: dict[str, Any]) -> dict[str, Any]:
        self._file.write(json.dumps(command).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise ConnectionError(f"puppet at {self.path!r} went away")
        return json.loads(line)

    @property
    def key(self) -> str:
        return self.identity.get("key") or f"{self.identity['agent']}:{self.identity['session']}"

    def call(self, op: str, fresh: bool = False, **args: Any) -> Any:
        """The op's result, or raise the broker's refusal as ConclaveError."""
        reply = self._send({"call": op, "args": args, "fresh": fresh})
        if reply["ok"]:
            return reply["result"]
        raise ConclaveError(ErrorCode(reply["error"]["code"]), reply["error"]["message"])

    def try_call(self, op: str, **args: Any) -> dict[str, Any]:
        """The raw reply: ``{"ok": ..., "result"|"error": ...}``."""
        return self._send({"call": op, "args": args})

    def send_nowait(self, command: dict[str, Any]) -> None:
        """Send a command and leave its reply unread (a call in flight: a blocking wait, or one cut short by a kill)."""
        self._file.write(json.dumps(command).encode() + b"\n")
        self._file.flush()

    def reply_ready(self) -> bool:
        """Has the reply to the command in flight arrived?  (One command at a time: nothing is buffered unread.)"""
        ready, _, _ = select.select([self._sock], [], [], 0)
        return bool(ready)

    def receive(self, timeout: float) -> dict[str, Any]:
        """The reply to the command sent with :meth:`send_nowait`.

        Raises:
            TimeoutError: no reply within ``timeout`` seconds.
            ConnectionError: the puppet went away.
        """
        self._sock.settimeout(timeout)
        try:
            line = self._file.readline()
        except OSError as exc:
            raise TimeoutError(f"no reply from {self.key} within {timeout} s") from exc
        finally:
            try:
                self._sock.settimeout(None)
            except OSError:
                pass
        if not line:
            raise ConnectionError(f"puppet at {self.path!r} went away")
        return json.loads(line)

    def raw(self, text: str) -> dict[str, Any]:
        return self._send({"raw": text})["reply"]

    def sh(self, *argv: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
        reply = self._send({"sh": list(argv), "stdin": stdin, "timeout": timeout})
        return subprocess.CompletedProcess(list(argv), reply["returncode"], reply["stdout"], reply["stderr"])

    def conclave(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the ``conclave`` CLI as this agent (a child of the puppet)."""
        return self.sh(*conclave_argv(*args))

    def exit(self, code: int = 0) -> None:
        try:
            self._send({"exit": code})
        except ConnectionError:
            pass
        self.close()

    def close(self) -> None:
        self._file.close()
        self._sock.close()


#: What starts every Run's broker unless the Run names its own: ``None`` is ``subprocess.Popen``.  The test
#: suite sets a zygote's ``popen`` here (tests/conftest.py: brokers forked from a warm interpreter).
LAUNCH: Callable[..., Any] | None = None
#: What runs every Run's operator command (:meth:`Run.cli`): ``None`` is ``subprocess.run``.  The test suite sets
#: the same zygote's ``run`` here: each command is a fork of the warm interpreter running ``broker.cli.main``.
COMMAND: Callable[..., subprocess.CompletedProcess[str]] | None = None


def operator_env(**extra: str) -> dict[str, str]:
    """This process's environment without conclave's own variables (the person's shell), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}, **extra}


def operator_command(argv: list[str], *, env: dict[str, str], input: str | None = None, timeout: float,
                     cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` (a ``conclave`` command line) to its end in ``cwd`` (default: this process's), through :data:`COMMAND`
    when it is set, else ``subprocess.run``."""
    if COMMAND is not None:
        return COMMAND(argv, env=env, input=input, timeout=timeout, cwd=cwd)
    return subprocess.run(argv, capture_output=True, text=True, env=env, input=input, timeout=timeout, cwd=cwd)


class Run:
    """A ``conclave run`` process on a scratch repository, with puppet agents.

    ``agents`` are team entries (dicts); an entry without ``command`` or
    ``preset`` becomes a puppet.  ``reuse=True`` keeps the repository and
    state directory of an earlier run under the same ``root``.  Use as a
    context manager; leaving it stops the broker.
    """

    def __init__(
        self,
        root: Path,
        agents: Sequence[dict[str, Any]],
        *,
        files: dict[str, str] | None = None,
        extra_toml: str = "",
        grace: float = 2.0,
        reuse: bool = False,
        repo: Path | None = None,
        default_state: bool = False,
        state: Path | None = None,
        python: str | None = None,
        accept_team: bool = True,
        wrap: Sequence[str] = (),
        launch: Callable[..., Any] | None = None,
    ) -> None:
        self.root = root
        #: What starts the broker: ``subprocess.Popen``, or something with its interface (the scenario runner's zygote).
        self.launch = launch or LAUNCH or subprocess.Popen
        #: A command the broker is started under (``unshare ... sh -c '...; exec "$@"'``): a test's own namespace.
        self.wrap = list(wrap)
        # ``repo``: an existing checkout (a clone, for a second broker on another "host").
        self.repo = repo if repo is not None else root / "repo" if reuse else make_repo(root, files)
        # ``python``: the interpreter the broker and the puppet agents run conclave with.
        self.python = python
        # ``accept_team``: run with --accept-team (this harness rewrites the team file, with a new
        # puppet control directory, for every run; a test of the team file's trust says False).
        self.accept_team = accept_team
        # ``default_state``: no --state-dir, so the broker resolves it ($XDG_STATE_HOME/conclave/...).
        self.default_state = default_state
        self.state = default_state_dir(self.repo) if default_state else state or root / "state"
        # Unix socket paths are short; the control dir lives under /tmp.
        self.control = Path(tempfile.mkdtemp(prefix="cvp-"))
        self.team_file = root / "team.toml"
        self.agent_names = [a["name"] for a in agents]
        lines = []
        for agent in agents:
            entry = dict(agent)
            if "preset" not in entry:  # a preset entry names its own binary
                entry.setdefault("command", puppet_command(self.control, self.python))
            lines.append("[[agent]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in entry.items()]
            lines.append("")
        self.team_file.write_text("\n".join(lines) + extra_toml)
        self.grace = grace
        self.process: subprocess.Popen[str] | None = None
        self.summary: dict[str, Any] | None = None
        self._puppets: dict[str, Puppet] = {}

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, wait_for: Iterable[str] | None = None, timeout: float = 20) -> Run:
        if self.process is not None and self.process.poll() is None:
            # A second broker on the same state would be refused -- and the first one leaked.
            raise RuntimeError("this run's broker is already started; `with Run(...) as run` starts it once")
        env = operator_env()
        state = [] if self.default_state else ["--state-dir", str(self.state)]
        self.process = self.launch(
            [*self.wrap, *conclave_argv("run", "--team", str(self.team_file), "--repo", str(self.repo),
                          *state, "--grace", str(self.grace), "--json", *(["--accept-team"] if self.accept_team else []),
                          python=self.python)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        names = list(self.agent_names if wait_for is None else wait_for)
        deadline = time.monotonic() + timeout
        try:
            for name in names:
                self._wait_for_control(name, deadline)
        except BaseException:
            # A test whose start fails seldom reaches its close: a broker still up would run on after it.
            if self.process is not None and self.process.poll() is None:
                with contextlib.suppress(Exception):
                    self.stop()
            raise
        return self

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            out, err = self.process.communicate()
            raise RuntimeError(f"the broker exited with {self.process.returncode}: {err.strip() or out.strip()}")

    def _wait_for_control(self, name: str, deadline: float) -> str:
        address = control_address(self.control, name)
        while True:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(address)
                    return address
                except ConnectionRefusedError:
                    pass
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"agent {name} did not come up (its puppet is not listening)")
            time.sleep(0.02)

    def puppet(self, name: str, *, timeout: float = 20, fresh: bool = False) -> Puppet:
        """The handle for agent ``name`` (a team agent, or a child ``parent/child``)."""
        if fresh or name not in self._puppets:
            if name in self._puppets:
                self._puppets.pop(name).close()
            path = self._wait_for_control(name, time.monotonic() + timeout)
            self._puppets[name] = Puppet(path)
        return self._puppets[name]

    def forget(self, name: str) -> None:
        puppet = self._puppets.pop(name, None)
        if puppet is not None:
            puppet.close()

    def spawn_puppet(self, parent: str, child: str) -> Puppet:
        """Have ``parent`` spawn a puppet child named ``child``; return its handle."""
        self.puppet(parent).call("spawn", name=child, command=puppet_command(self.control))
        return self.puppet(f"{parent}/{child}")

    def socket_path(self) -> Path:
        return Path((self.state / "socket-path").read_text().strip())

    @property
    def paths(self) -> StatePaths:
        return StatePaths(repo=self.repo, state=self.state)

    def operator_key(self) -> str:
        return self.paths.operator_key()

    def operator(self) -> BlockingClient:
        """A connection from this process (the test, outside every agent's tree) with the operator key."""
        return BlockingClient.for_operator(self.socket_path(), operator_key=self.operator_key())

    def op(self, op: str, **args: Any) -> Any:
        with self.operator() as client:
            return client.call(op, args)

    def cli(self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``conclave ARGS --state-dir STATE --repo REPO`` as the operator."""
        argv = conclave_argv(*args, "--repo", str(self.repo), "--state-dir", str(self.state))
        return operator_command(argv, env=operator_env(**(env or {})), input=stdin, timeout=60)

    def wait_until(self, predicate, timeout: float = 10, interval: float = 0.05, what: str = "condition"):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(interval)

    def person_git(self, *args: str) -> subprocess.CompletedProcess[str]:
        """git run by this test process on the repository, as the person at their shell would."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CONCLAVE_", "GIT_"))}
        return subprocess.run(["git", "-C", str(self.repo), *GIT_IDENTITY, *args], capture_output=True, text=True, env=env)

    def wait_followed(self, *agents: str, timeout: float = 30) -> str:
        """Block until each agent's git shows the person's ``HEAD`` (its git directory followed the branch); return it.
        ``timeout`` is a liveness bound: each look runs git in every agent's box, slow on a loaded machine."""
        head = self.person_git("rev-parse", "HEAD").stdout.strip()

        def followed() -> bool:
            return all(self.puppet(a).sh("git", "rev-parse", "HEAD").stdout.strip() == head for a in agents)

        self.wait_until(followed, timeout=timeout, interval=0.1, what=f"{', '.join(agents)} to follow the person's branch to {head[:12]}")
        return head

    def wait_for_json(self, path: Path, timeout: float = 10, what: str | None = None) -> Any:
        """The JSON another process writes to ``path``, once it is whole (a file seen mid-write does not parse yet)."""

        def whole() -> Any:
            try:
                return json.loads(path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                return None

        return self.wait_until(whole, timeout=timeout, what=what or f"{path.name} to be written")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> dict[str, Any] | None:
        for puppet in self._puppets.values():
            puppet.close()
        self._puppets.clear()
        if self.process is None:
            return self.summary
        if self.process.poll() is None:
            self.process.send_signal(sig)
        hung = False
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
            hung = True
        self.stderr = err
        if hung:
            self.process = None
            # A broker that outlives a stop signal by this long is a bug a test must not step over.
            raise AssertionError(f"the broker did not stop within {timeout} s of signal {sig} and was killed; its log: {self.state / 'logs' / 'broker.log'}")
        try:
            self.summary = json.loads(out) if out.strip() else None
        except json.JSONDecodeError:
            self.summary = None
        self.process = None
        return self.summary

    def kill(self) -> None:
        """SIGKILL the broker -- no cleanup, no last anchor write -- and end what it left running.

        Agents outlive a broker killed this way unless their box ties them to it,
        so each live agent's process group (as the broker listed them just
        before) is killed too: the next broker then starts on a quiet state
        directory, as it would after a person cleaned up.
        """
        assert self.process is not None
        try:
            with self.operator() as client:
                pids = [a["pid"] for a in client.call("agents", {"live_only": True}) if a.get("pid")]
        except (ConclaveError, OSError):
            pids = []
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.stop()

    def wait_exit(self, timeout: float = 30) -> dict[str, Any] | None:
        """Wait for the run to end by itself (every agent exited)."""
        assert self.process is not None
        out, err = self.process.communicate(timeout=timeout)
        self.stderr = err
        self.summary = json.loads(out) if out.strip() else None
        self.process = None
        return self.summary

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.control, ignore_errors=True)

    def __enter__(self) -> Run:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def source_venv(base: Path, source: Path, *, python: str | None = None, packages: Path | None = None) -> Path:
    """A throwaway venv under ``base`` whose interpreter imports conclave from ``source``.

    Everything conclave starts runs ``python -I`` (no ``PYTHONPATH``, no current
    directory), so a copy of the tree is only ever run by an interpreter whose
    site directory names it: a ``.pth`` with ``source`` first, then this
    environment's dependencies (``packages``, default this interpreter's).
    ``python`` is the base interpreter (default this one).  Returns the
    venv's ``python``; a ``conclave`` script sits beside it.
    """
    import sysconfig

    venv = base / "venv"
    subprocess.run([python or sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    deps = packages or Path(sysconfig.get_paths()["purelib"])
    (Path(purelib) / "conclave-source.pth").write_text(f"{source}\n{deps}\n")
    conclave = venv / "bin" / "conclave"
    conclave.write_text(f"#!{venv / 'bin' / 'python'} -I\nfrom broker.cli import main\nmain()\n")
    conclave.chmod(0o755)
    return venv / "bin" / "python"

