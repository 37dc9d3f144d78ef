"""The broker's database password lives where no box reads it: ``<state>/pgpass``.

docs/DEPLOYMENT.md used to recommend ``~/.pgpass``, and a box that read home
logged in as the broker's role.  Home is an allow-list now (tests/containment),
and the broker reads its password from its own state directory, which every
box is kept out of.  A server of its own here, with password authentication
for everyone but its owner.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import Run
from tests.pgtools import Cluster

PASSWORD = "broker-password-7f3a"


@pytest.fixture
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
