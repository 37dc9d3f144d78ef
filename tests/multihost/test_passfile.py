"""The broker's database password lives where no box reads it: ``<state>/pgpass``.

docs/DEPLOYMENT.md used to recommend ``~/.pgpass``, and a box that read home
logged in as the broker's role.  Home is an allow-list now (tests/containment),
and the broker reads its password from its own state directory, which every
box is kept out of.  A server of its own here, with password authentication
for everyone but its owner.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import Run
from tests.memory.walk_support import caught
from tests.pgtools import Cluster

PASSWORD = "broker-password-7f3a"


@pytest.fixture(scope="module")
def password_cluster() -> Iterator[Cluster]:
    cluster = Cluster(hba="local all postgres trust\nlocal all all scram-sha-256\n")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_the_broker_logs_in_with_the_password_in_its_state_dir(password_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from store import postgres

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.pgpass to fall back on
    (tmp_path / "home").mkdir()
    database = password_cluster.database()
    postgres.add_broker(password_cluster.url(database), "laptop", role="broker_laptop", password=PASSWORD)
    url = password_cluster.url(database, user="broker_laptop")
    run = Run(tmp_path / "laptop", [{"name": "alice"}], extra_toml=f'\n[store]\nurl = "{url}"\n')
    try:
        # Control: with the password nowhere, the broker cannot log in, and says why.
        with pytest.raises(RuntimeError, match="password"):
            run.start()
        run.state.mkdir(parents=True, exist_ok=True)
        run.paths.pg_passfile.write_text(f"*:*:*:broker_laptop:{PASSWORD}\n")
        run.paths.pg_passfile.chmod(0o600)
        run.start()
        assert run.op("whoami")["role"] == "operator"
        # The password is beside the operator key, where no box reads.
        probe = "import sys\ntry:\n    open(sys.argv[1]).read(); print('read')\nexcept OSError as exc:\n    print(type(exc).__name__)"
        out = run.puppet("alice").sh(sys.executable, "-I", "-c", probe, str(run.paths.pg_passfile))
        assert out.stdout.strip() in ("PermissionError", "FileNotFoundError"), out.stdout + out.stderr
    finally:
        run.close()


def test_verify_walks_with_the_brokers_password_without_showing_it(password_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk of ``memory verify`` runs in a process of its own (memory.walk_child) that logs in as the broker.
    The attack: a same-uid process reads that process's command line or environment (/proc/PID/cmdline and
    environ, as `ps e` shows them) and takes the password.  The broker here was given it the way libpq allows,
    PGPASSWORD in its environment -- its own environ holds it (the control: that is where the attacker would look
    if it were passed on that way).  The walker gets the URL and libpq's variables on stdin: it logs in (verify
    passes), and neither its command line nor its environment carries the password or the URL."""
    from store import postgres

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    database = password_cluster.database()
    postgres.add_broker(password_cluster.url(database), "desk", role="broker_desk", password=PASSWORD)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    url = password_cluster.url(database, user="broker_desk")
    # Started by exec, not forked from the suite's warm interpreter: /proc/PID/environ of a fork shows the
    # environment its parent was started with, and the control below reads the broker's.
    run = Run(tmp_path / "desk", [{"name": "alice"}], extra_toml=f'\n[store]\nurl = "{url}"\nverify_every = 0\n', launch=subprocess.Popen)
    try:
        run.start()
        assert run.process is not None
        broker = run.process.pid
        with open(f"/proc/{broker}/environ", "rb") as f:
            assert PASSWORD.encode() in f.read()  # control
        with caught(broker, lambda: run.op("memory.verify")) as (walker, pending):
            for shown in ("cmdline", "environ"):
                with open(f"/proc/{walker}/{shown}", "rb") as f:
                    text = f.read()
                assert PASSWORD.encode() not in text and b"postgresql://" not in text, shown
        report = pending.result(timeout=120)
        assert report["ok"], report["problems"]
        assert report["walk"]["pid"] == walker
    finally:
        run.close()
