"""Where a run keeps its state: ``<repo>/.conclave/`` unless told otherwise.

Resolution order for the state directory: ``--state-dir``, then
``CONCLAVE_STATE_DIR``, then ``<repo>/.conclave``.  The repository is
``--repo``, else the git top level of the current directory, else the current
directory.

Trap: a Unix socket path must fit in about 107 bytes.  When the state
directory is too deep, the socket is bound in a short private directory under
``$XDG_RUNTIME_DIR`` or ``/tmp`` (mode 0700) and its path is written to
``<state>/socket-path`` so every client still finds it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Final, Iterator, final

import attrs

SOCKET_NAME: Final = "broker.sock"
SOCKET_POINTER: Final = "socket-path"
MAX_SOCKET_PATH: Final = 100
ENV_STATE_DIR: Final = "CONCLAVE_STATE_DIR"
ENV_SOCKET: Final = "CONCLAVE_SOCKET"
ENV_TICKET: Final = "CONCLAVE_TICKET"
ENV_REPO: Final = "CONCLAVE_REPO"


@final
@attrs.frozen
class StatePaths:
    repo: Path
    state: Path

    @property
    def database(self) -> Path:
        return self.state / "conclave.db"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pidfile(self) -> Path:
        return self.state / "broker.pid"

    @property
    def socket_pointer(self) -> Path:
        return self.state / SOCKET_POINTER

    @property
    def preferred_socket(self) -> Path:
        return self.state / SOCKET_NAME

    def socket(self) -> Path:
        """The socket a client should connect to (following the pointer file)."""
        try:
            recorded = self.socket_pointer.read_text().strip()
        except FileNotFoundError:
            return self.preferred_socket
        return Path(recorded) if recorded else self.preferred_socket

    def ensure(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.logs.mkdir(exist_ok=True, mode=0o700)
        _exclude_from_git(self.repo, self.state)


class BrokerAlreadyRunning(RuntimeError):
    """Another broker (or an operator command with no broker) holds the state directory."""


@contextmanager
def state_lock(paths: StatePaths, *, record_pid: bool) -> Iterator[None]:
    """Hold ``broker.pid`` locked: one broker -- or one operator command opening the
    store itself -- per state directory.  ``record_pid`` writes our pid (the broker)."""
    paths.ensure()
    fd = os.open(paths.pidfile, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode().strip() or "?"
            raise BrokerAlreadyRunning(
                f"a broker (pid {other}) is already running for {paths.state}; stop it first or use another --state-dir"
            ) from None
        if record_pid:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def agent_ancestor(pid: int) -> int | None:
    """The nearest ancestor of ``pid`` (itself included) that a broker started as an agent.

    Read from each process's *initial* environment in ``/proc``, which a shell
    that unsets ``CONCLAVE_TICKET`` cannot rewrite.
    """
    from broker.identity import ancestry

    for ancestor in ancestry(pid):
        try:
            environ = Path(f"/proc/{ancestor}/environ").read_bytes()
        except OSError:
            continue
        if environ.startswith(ENV_TICKET.encode() + b"=") or b"\0" + ENV_TICKET.encode() + b"=" in environ:
            return ancestor
    return None


def resolve(repo: str | os.PathLike[str] | None = None, state_dir: str | os.PathLike[str] | None = None) -> StatePaths:
    """Decide the repository and state directory for a command.

    Raises:
        ValueError: when ``--repo`` names a directory that does not exist.
    """
    if repo is not None:
        repo_path = Path(repo).resolve()
        if not repo_path.is_dir():
            raise ValueError(f"--repo {repo}: no such directory")
    elif os.environ.get(ENV_REPO):
        repo_path = Path(os.environ[ENV_REPO]).resolve()
    else:
        repo_path = git_toplevel(Path.cwd()) or Path.cwd().resolve()
    chosen = state_dir if state_dir is not None else os.environ.get(ENV_STATE_DIR)
    state = Path(chosen).resolve() if chosen else repo_path / ".conclave"
    return StatePaths(repo=repo_path, state=state)


def git_toplevel(start: Path) -> Path | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def choose_socket_path(paths: StatePaths) -> Path:
    """The path to bind: in the state dir when it fits, else a short private dir."""
    if len(os.fsencode(paths.preferred_socket)) <= MAX_SOCKET_PATH:
        return paths.preferred_socket
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    private = Path(tempfile.mkdtemp(prefix="conclave-", dir=base))
    private.chmod(0o700)
    return private / SOCKET_NAME


def _exclude_from_git(repo: Path, state: Path) -> None:
    # The state dir must never show up in the user's `git status`.
    try:
        rel = state.relative_to(repo)
    except ValueError:
        return
    exclude = repo / ".git" / "info" / "exclude"
    if not exclude.parent.is_dir():
        return
    line = f"/{rel.as_posix()}/"
    existing = exclude.read_text() if exclude.exists() else ""
    if line not in existing.splitlines():
        with exclude.open("a") as f:
            f.write(("" if existing.endswith("\n") or not existing else "\n") + line + "\n")
