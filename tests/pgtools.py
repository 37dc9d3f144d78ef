"""A real PostgreSQL server for the tests (and the benchmarks), started here, in a temp directory.

The binaries come from the ``pgserver`` wheel (a test dependency: PostgreSQL
16 inside a PyPI package, so a fresh machine with only Python has them), or
else from Debian's ``postgresql`` package.  PostgreSQL refuses to run as
root, and CI runs as root: then the server runs as ``nobody`` (uid 65534,
through ``setpriv``) in a directory it owns -- from a linked copy of the
binaries when the venv is out of its reach (a clone in a 0700 directory).  It listens on a Unix socket in
that directory only (no TCP port), with fsync off: a test server, fast to
start, never a place for data that matters.

One server serves a whole test session; each test gets a database of its
own, copied from a template that already has conclave's schema (a copy is
much cheaper than running the migrations again), and roles named after it.
"""

from __future__ import annotations

import glob
import importlib.util
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Final, Sequence

UNPRIVILEGED: Final = 65534
TEMPLATE: Final = "conclave_template"


class NoPostgres(RuntimeError):
    """No PostgreSQL binaries here; the message says how to get them."""


def binaries() -> Path:
    """The directory with ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises:
        NoPostgres: neither the pgserver wheel nor Debian's package is installed.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        found = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        if (found / "postgres").exists():
            return found
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "postgres").exists():
            return Path(candidate)
    raise NoPostgres(
        "the PostgreSQL tests need a server: `pip install -e '.[test]'` brings the pgserver wheel "
        "(PostgreSQL 16), or install Debian's package (apt-get install postgresql)"
    )


def _as_server(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups", *argv]


def _reachable_by_server(program: Path) -> bool:
    """Can the uid the server runs as execute ``program`` (every directory on its way searchable)?"""
    return subprocess.run(_as_server(["test", "-x", str(program)]), capture_output=True).returncode == 0


def _server_copy(bin_dir: Path, into: Path) -> Path:
    """The pgserver installation ``bin_dir`` belongs to, linked (or copied) under ``into``; its ``bin``.

    As root the server runs as ``nobody``, which cannot reach a venv under a
    0700 directory (a clone under /root): it gets a copy of its own, laid out
    as in site-packages (the binaries find ``pgserver.libs`` by a relative
    RPATH).  Hard links cost nothing on the same file system; across file
    systems it is a copy.
    """
    install = bin_dir.parent
    site = install.parent.parent
    parts = [(install, into / install.parent.name / install.name)]
    libs = site / f"{install.parent.name}.libs"
    if libs.is_dir():
        parts.append((libs, into / libs.name))
    for source, target in parts:
        try:
            shutil.copytree(source, target, symlinks=True, copy_function=os.link)
        except OSError:
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, symlinks=True)
    return parts[0][1] / bin_dir.name


class Cluster:
    """One running server: :meth:`database` makes a fresh database, :meth:`broker_url` a broker's role in it."""

    def __init__(self, hba: str | None = None) -> None:
        #: pg_hba.conf's text, when not the default (trust for everyone).
        self.hba = hba
        self.root = Path(tempfile.mkdtemp(prefix="conclave-pg-"))
        self.root.chmod(0o755)
        self.bin = binaries()
        if os.geteuid() == 0 and not _reachable_by_server(self.bin / "postgres"):
            self.bin = _server_copy(self.bin, self.root)
        self.data = self.root / "data"
        self.socket_dir = self.root / "run"
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            for path in (self.root, self.socket_dir):
                os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
        self._names = itertools.count(1)
        self._template_ready = False
        self.started = False

    def start(self) -> Cluster:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        run = lambda argv: subprocess.run(_as_server(argv), env=env, capture_output=True, text=True, cwd=self.root)  # noqa: E731
        made = run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-N"])
        if made.returncode != 0:
            raise NoPostgres(f"initdb failed ({self.bin}): {made.stderr.strip()[-2000:]}")
        if self.hba is not None:
            (self.data / "pg_hba.conf").write_text(self.hba)
        up = run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self._options(), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start"])
        if up.returncode != 0:
            log = (self.root / "server.log").read_text() if (self.root / "server.log").exists() else ""
            raise NoPostgres(f"the PostgreSQL server did not start: {up.stderr.strip()} {log[-2000:]}")
        self.started = True
        return self

    def _options(self) -> str:
        return f"-k {self.socket_dir} -c listen_addresses='' -F -c max_connections=300 -c shared_buffers=64MB -c max_locks_per_transaction=256"

    def restart(self) -> None:
        """Stop the server (``fast``: every session is ended) and start it again on the same data, as an operator would."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        argv = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self._options(), "-l", str(self.root / "server.log"),
                "-m", "fast", "-w", "-t", "60", "restart"]
        done = subprocess.run(_as_server(argv), env=env, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"the PostgreSQL server did not restart: {done.stderr.strip()}")

    def stop(self) -> None:
        if self.started:
            subprocess.run(_as_server([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]), capture_output=True)
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@/{database}?host={self.socket_dir}"

    def admin(self, database: str = "postgres") -> Any:
        import psycopg

        return psycopg.connect(self.url(database), autocommit=True)

    def _template(self, schemas: Sequence[Any]) -> None:
        if self._template_ready:
            return
        from store import postgres

        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        postgres.init(self.url(TEMPLATE), schemas)
        self._template_ready = True

    def database(self, schemas: Sequence[Any] | None = None) -> str:
        """A fresh database with conclave's schema; returns its name."""
        if schemas is None:
            from broker import composition

            schemas = composition.schemas()
        self._template(schemas)
        name = f"t{next(self._names)}"
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return name

    def broker_url(self, database: str, host: str) -> str:
        """Register a role of its own as ``host``'s broker in ``database``; the URL it logs in with."""
        from store import postgres

        role = f"{database}_{host}".replace("-", "_")
        postgres.add_broker(self.url(database), host, role=role)
        return self.url(database, user=role)


def copy_chain_key(first: Any, other: Any) -> None:
    """Give ``other`` (a harness ``Run``) the chain key ``first``'s broker made, 0600, before ``other`` starts.

    What the operator does once per host (docs/DEPLOYMENT.md): every broker
    of a shared store appends under the one key.
    """
    other.state.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(other.state / "chain-key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write((first.state / "chain-key").read_text())
