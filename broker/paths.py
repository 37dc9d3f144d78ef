"""Where a run keeps its state: outside the work tree, where agents cannot reach it.

Resolution order for the state directory: ``--state-dir``, then
``CONCLAVE_STATE_DIR``, then ``$XDG_STATE_HOME/conclave/<repo-name>-<hash>``
(``~/.local/state/...`` when ``XDG_STATE_HOME`` is unset).  The repository
is ``--repo``, else the git top level of the current directory, else the
current directory.

Why not ``<repo>/.conclave``: an agent must be able to write its work tree,
and a sandbox that grants a directory grants everything beneath it
(Landlock), so a state directory inside the tree could never be hidden from
the agents.  The state directory holds what they must not read: the
database, the operator key, every agent's identity file, the logs.
``conclave run`` refuses a state directory inside the work tree unless
every agent runs unsandboxed (docs/THREAT_MODEL.md).

Trap: a Unix socket path must fit in about 107 bytes.  When the state
directory is too deep, the socket is bound in a short private directory under
``$XDG_RUNTIME_DIR`` or ``/tmp`` (mode 0700) and its path is written to
``<state>/socket-path`` so every client still finds it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Final, Iterator, NamedTuple, final

SOCKET_NAME: Final = "broker.sock"
SOCKET_POINTER: Final = "socket-path"
MAX_SOCKET_PATH: Final = 100
ENV_STATE_DIR: Final = "CONCLAVE_STATE_DIR"
ENV_SOCKET: Final = "CONCLAVE_SOCKET"
ENV_TICKET: Final = "CONCLAVE_TICKET"
ENV_REPO: Final = "CONCLAVE_REPO"
#: A PostgreSQL URL that overrides the team file's ``[store] url``.
ENV_STORE_URL: Final = "CONCLAVE_STORE_URL"
OPERATOR_KEY_NAME: Final = "operator.key"
#: In the state root: every state directory a broker of this user has run on, one per line.
STATE_REGISTRY_NAME: Final = "state-dirs"
#: Bytes of randomness in the operator key (DESIGN.md asks for at least 128 bits).
OPERATOR_KEY_BYTES: Final = 32
#: What ``conclave team accept`` keeps in the state directory (``broker.team_trust``): the one file it may hold before a run.
TEAM_RECORD_NAME: Final = "accepted-teams.json"


class StateError(RuntimeError):
    """The state directory cannot be used as asked; the message says how to fix it."""


@final
class StatePaths(NamedTuple):
    """Where one repository's conclave state lives.  A named tuple, not an attrs class: every
    ``conclave`` command resolves one, and an agent's ``conclave whoami`` need not import attrs."""

    repo: Path
    state: Path

    @property
    def database(self) -> Path:
        return self.state / "conclave.db"

    @property
    def chain_key(self) -> Path:
        """The secret that keys the event chain (0600; never inside the database)."""
        return self.state / "chain-key"

    @property
    def chain_anchor(self) -> Path:
        """The event log's last (seq, hash), written at every commit that moves it (``store.anchor``)."""
        return self.state / "chain-anchor"

    @property
    def chain_high_water(self) -> Path:
        """The highest head this state directory has seen, MAC'd, never lowered: names an older copy put back (``store.owner``)."""
        return self.state / "chain-high-water"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pidfile(self) -> Path:
        return self.state / "broker.pid"

    @property
    def store_url_file(self) -> Path:
        """The PostgreSQL store this state directory's broker used (0600), so operator commands find it."""
        return self.state / "store-url"

    def store_url(self) -> str | None:
        """``CONCLAVE_STORE_URL``, else the URL the last broker here recorded; None for the SQLite file."""
        chosen = os.environ.get(ENV_STORE_URL)
        if chosen:
            return chosen
        try:
            return self.store_url_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def record_store_url(self, url: str) -> None:
        fd = os.open(self.store_url_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(url + "\n")

    @property
    def pg_passfile(self) -> Path:
        """The broker's PostgreSQL password, in libpq's passfile format (0600; docs/DEPLOYMENT.md):
        used when it exists, since the state directory is in no box's grants."""
        return self.state / "pgpass"

    @property
    def operator_key_file(self) -> Path:
        return self.state / OPERATOR_KEY_NAME

    @property
    def agents(self) -> Path:
        """Per-agent directories (identity files, generated configs): ``agents/<name>/<session>``."""
        return self.state / "agents"

    def agent_dir(self, agent: str, session: str) -> Path:
        """One spawn's private directory (identity file, generated configs): only that agent may use it."""
        return self.agents / agent.replace("/", "__") / session

    def inside_work_tree(self) -> bool:
        """Is the state directory the repository or beneath it (where agents may write)?"""
        return self.state.resolve().is_relative_to(self.repo.resolve())

    def operator_key(self) -> str:
        """The operator key this state directory's broker accepts.

        Raises:
            StateError: it does not exist or this process may not read it --
                an agent in a sandbox cannot, and that is the point.
        """
        try:
            key = self.operator_key_file.read_text().strip()
        except FileNotFoundError:
            raise StateError(
                f"no operator key at {self.operator_key_file}: no broker has run for {self.state} yet, or this process "
                "cannot see it (an agent in a sandbox cannot); operator commands are for the person who started the broker"
            ) from None
        except PermissionError:
            raise StateError(
                f"this process may not read the operator key ({self.operator_key_file}); operator commands are for "
                "the person who started the broker, not for agents"
            ) from None
        if not key:
            # Read in the instant someone rewrites it (truncated, not yet written), or emptied: never a proof.
            raise StateError(f"the operator key at {self.operator_key_file} is empty; the broker wrote it whole when it started: "
                             "put it back as it was (write it whole, not in place), or restart the broker")
        return key

    def never_run(self) -> bool:
        """Does the state directory hold only what ``conclave team accept`` writes -- a team accepted
        before any broker ran here?

        Such a directory has no operator key because no broker has made one, not because one was
        taken: the first broker writes the key beside its logs and database, so a directory that
        lacks its key but holds anything else (a key deleted or replaced behind a broker's back) is
        not this, and is refused as before.  Neither is a directory this process may not list (an
        agent's box) or an empty one.
        """
        try:
            names = os.listdir(self.state)
        except OSError:
            return False
        temp = f".{TEAM_RECORD_NAME}."
        return TEAM_RECORD_NAME in names and all(name == TEAM_RECORD_NAME or name.startswith(temp) for name in names)

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
        """Create the state directory (0700), its logs and the operator key if missing."""
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.logs.mkdir(exist_ok=True, mode=0o700)
        _create_operator_key(self.operator_key_file)
        _exclude_from_git(self.repo, self.state)


def _create_operator_key(path: Path) -> None:
    """Write a fresh key once, 0600, never overwriting (O_EXCL): two first runs agree on one key."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(OPERATOR_KEY_BYTES) + "\n")
        f.flush()
        os.fsync(f.fileno())


class BrokerAlreadyRunning(RuntimeError):
    """Another broker (or an operator command with no broker) holds the state directory."""


@contextmanager
def state_lock(paths: StatePaths, *, record_pid: bool) -> Iterator[None]:
    """Hold the database itself: one broker -- or one operator command opening the
    store -- per database, however many directories name it.

    The lock is an ``flock`` on the database file, so it follows the file, not
    the path: a fresh ``--state-dir`` whose ``conclave.db`` is a hard or
    symbolic link to a live database finds it held.  (``flock`` and SQLite's
    own POSIX locks are independent on Linux; the descriptor stays open until
    every SQLite connection is closed, so SQLite's locks are never dropped by
    closing it.)  ``record_pid`` writes our pid to ``broker.pid`` (the broker).

    Raises:
        BrokerAlreadyRunning: the database is held.
    """
    paths.ensure()
    fd = os.open(paths.database, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(paths.database)
            raise BrokerAlreadyRunning(
                f"the database {paths.database.resolve()} is in use by a broker or an operator command"
                f"{f' (pid {holder})' if holder else ''}; stop it first or use another --state-dir"
            ) from None
        if record_pid:
            pidfile = os.open(paths.pidfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(pidfile, f"{os.getpid()}\n".encode())
            finally:
                os.close(pidfile)
        yield
    finally:
        os.close(fd)


def lock_holder(path: Path) -> int | None:
    """The pid holding an ``flock`` on the file ``path`` names (from ``/proc/locks``), if any."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    for pid, device, inode in _flocks():
        if inode == st.st_ino and device == (os.major(st.st_dev), os.minor(st.st_dev)):
            return pid
    return None


def _flocks() -> list[tuple[int, tuple[int, int], int]]:
    """Every exclusive ``flock`` on the machine: (pid, (major, minor), inode)."""
    out = []
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF" ("->" marks a waiter).
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[2] == "->" or fields[3] != "WRITE":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            out.append((int(fields[4]), (int(major, 16), int(minor, 16)), int(inode)))
        except ValueError:
            continue
    return out


def broker_ancestor(pid: int) -> int | None:
    """The nearest ancestor of ``pid`` (itself included) that holds a conclave database: a broker.

    Decided from process lineage and the kernel's lock table, never from
    environment variables: a process that dropped its ticket, exec'd itself
    clean or double-forked still descends from the broker (a child
    subreaper), and it cannot make the broker stop holding its database.

    Raises:
        StateError: the lineage cannot be read all the way (refuse, never guess).
    """
    from broker.identity import lineage

    chain = lineage(pid)
    if chain is None:
        raise StateError(f"the ancestry of pid {pid} cannot be read; refusing to decide who it is")
    return broker_among(chain)


def broker_among(pids: list[int]) -> int | None:
    """The first of ``pids`` that holds a conclave database (a broker, or an operator command
    with no broker), from the kernel's lock table."""
    holders = {p for p, _, _ in _flocks()}
    return next((pid for pid in pids if pid in holders and _holds_a_database(pid)), None)


def _holds_a_database(pid: int) -> bool:
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError as exc:
        # A process of our own uid whose descriptors we may not see: we are in a
        # sandbox looking out.  Count it (refuse); another uid's process is not ours.
        try:
            ours = os.stat(f"/proc/{pid}").st_uid == os.getuid()
        except OSError:
            ours = False
        return exc.errno == errno.EACCES and ours
    for name in names:
        try:
            if os.readlink(fd_dir / name).endswith("/conclave.db"):
                return True
        except OSError:
            continue
    return False


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
        found = git_toplevel(Path.cwd())
        if found is not None:
            outer = enclosing_conclave_tree(found)
            if outer is not None:
                raise ValueError(
                    f"{found} is a git repository inside {outer}, a work tree conclave has run agents in (a boxed agent "
                    f"can make one there, with a team file of its own): pass --repo {outer}, or --repo {found} if it is "
                    "the one you mean"
                )
        repo_path = found or Path.cwd().resolve()
    chosen = state_dir if state_dir is not None else os.environ.get(ENV_STATE_DIR)
    state = Path(chosen).resolve() if chosen else default_state_dir(repo_path)
    return StatePaths(repo=repo_path, state=state)


def default_state_dir(repo: Path) -> Path:
    """``$XDG_STATE_HOME/conclave/<name>-<hash of the repository's real path>``.

    Raises:
        ValueError: neither ``XDG_STATE_HOME`` nor ``HOME`` says where that is.
    """
    base = os.environ.get("XDG_STATE_HOME")
    if not base:
        home = os.environ.get("HOME")
        if not home or not os.path.isabs(home):
            raise ValueError("no state directory: set XDG_STATE_HOME or HOME, or pass --state-dir")
        base = os.path.join(home, ".local", "state")
    real = repo.resolve()
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:12]
    return Path(base) / "conclave" / f"{real.name or 'root'}-{digest}"


def state_roots() -> list[Path]:
    """Where this user's default state directories live: ``$XDG_STATE_HOME/conclave`` and
    ``~/.local/state/conclave`` (both, when they differ; a box is kept out of each)."""
    found: list[Path] = []
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        found.append(Path(xdg) / "conclave")
    home = os.environ.get("HOME")
    if home and os.path.isabs(home) and home != "/":
        found.append(Path(home) / ".local" / "state" / "conclave")
    return list(dict.fromkeys(found))


def register_state_dir(state: Path) -> None:
    """Add ``state`` to the registry in the state root, so every box any broker of this user
    builds from now on is kept out of it (``--state-dir`` and ``CONCLAVE_STATE_DIR`` may put a
    state directory anywhere).  The registry lives in the state root, which no box reads or writes;
    entries are never removed (a stale one denies a path that is gone: harmless)."""
    roots = state_roots()
    if not roots:
        return
    # Made now, so every box built from now on is kept out of what is made there later.  (Only the
    # root this broker uses: the other is denied when it exists, and made by whoever uses it.)
    roots[0].mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(roots[0] / STATE_REGISTRY_NAME, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r") as f:
            known = set(f.read().splitlines())
        real = os.path.realpath(state)
        if real not in known:
            os.write(fd, os.fsencode(real) + b"\n")
    finally:
        os.close(fd)


def known_state_dirs() -> list[str]:
    """The state roots and every state directory registered in them (``register_state_dir``)."""
    found = [str(root) for root in state_roots()]
    for root in state_roots():
        try:
            found += [line for line in (root / STATE_REGISTRY_NAME).read_text().splitlines() if line.startswith("/")]
        except OSError:
            continue
    return list(dict.fromkeys(found))


def enclosing_conclave_tree(found: Path) -> Path | None:
    """The nearest directory above ``found`` that is a git work tree conclave has run on (its default
    state directory exists), or None.  Agents write that tree: a repository found inside it from the
    current directory may be one an agent made (``git init sub``), and is never taken unnamed."""
    real = found.resolve()
    for above in real.parents:
        if os.path.lexists(above / ".git"):
            try:
                if default_state_dir(above).is_dir():
                    return above
            except (ValueError, OSError):
                return None
    return None


def git_toplevel(start: Path) -> Path | None:
    """The work tree the person's command is run in, found as git finds it from ``start`` (the one
    place conclave lets git search): never a bare repository (one planted in a work tree would be
    found from inside it), with no ``GIT_*`` variable pointing elsewhere, running nothing."""
    keep = ("GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in keep}
    try:
        out = subprocess.run(
            ["git", "-c", "safe.bareRepository=explicit", "-c", "core.fsmonitor=false", "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
    except FileNotFoundError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def choose_socket_path(paths: StatePaths) -> Path:
    """The path to bind: in the state dir when it fits, else a short private dir."""
    if len(os.fsencode(paths.preferred_socket)) <= MAX_SOCKET_PATH:
        return paths.preferred_socket
    # The first of these where the path fits: a deep $TMPDIR (a test's, a sandbox's) must not leave the
    # broker without a socket when /tmp would do.
    room = MAX_SOCKET_PATH - len(f"/conclave-{'x' * 8}/{SOCKET_NAME}")
    bases = [base for base in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp") if base]
    fits = [base for base in bases if os.path.isdir(base) and len(os.fsencode(base)) <= room]
    if not fits:
        raise OSError(errno.ENAMETOOLONG, f"the broker's socket does not fit in {paths.preferred_socket} (a Unix socket path has at most "
                      f"{MAX_SOCKET_PATH} bytes here), nor under {', '.join(bases)}; use a shorter --state-dir or TMPDIR")
    private = Path(tempfile.mkdtemp(prefix="conclave-", dir=fits[0]))
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
