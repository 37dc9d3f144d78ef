"""The PostgreSQL server's disk fills up: writes are refused by name, the broker carries on, and recovers by itself.

A server of its own, started in a user and mount namespace (as the server's
uid, so this runs as an ordinary user too) where a small tmpfs holds a
tablespace; the test's database lives in it.  The test fills that file
system from inside the namespace (``nsenter``), has an agent remember until
the server answers SQLSTATE 53100, then frees the space.  Before this
change the refusal reached the agent as an ``internal`` error; the words,
the broker still answering, every acknowledged claim kept and the next write
succeeding are what is checked (the first fails on main).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import Run
from tests.memory.memory_support import FACT, remember_until_refused
from tests.pgtools import TEMPLATE, UNPRIVILEGED, Cluster, NoPostgres, _as_server

SIZE = "48m"


class SmallDiskCluster(Cluster):
    """A server whose tablespace ``small`` is a tmpfs of ``SIZE`` in the server's own mount namespace."""

    def __init__(self) -> None:
        super().__init__()
        self.fs = self.root / "fs"
        self.fs.mkdir()
        if os.geteuid() == 0:
            os.chown(self.fs, UNPRIVILEGED, UNPRIVILEGED)
        self._small = itertools.count(1)

    def start(self) -> Cluster:
        for tool in ("unshare", "nsenter"):
            if shutil.which(tool) is None:
                pytest.fail(f"{tool} (util-linux) is needed to give the server a small file system of its own")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        made = subprocess.run(_as_server([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                                          "--locale=C", "-N"]), env=env, capture_output=True, text=True, cwd=self.root)
        if made.returncode != 0:
            raise NoPostgres(f"initdb failed ({self.bin}): {made.stderr.strip()[-2000:]}")
        uid = UNPRIVILEGED if os.geteuid() == 0 else os.geteuid()
        gid = UNPRIVILEGED if os.geteuid() == 0 else os.getegid()
        # The server's uid maps to itself in a namespace of its own, where it may mount; postgres runs unprivileged in it.
        wrap = ["unshare", "-U", "-m", f"--map-user={uid}", f"--map-group={gid}", "--keep-caps", "sh", "-c",
                'mount -t tmpfs -o "size=$1,mode=0700" tmpfs "$0" && mkdir "$0/ts" && shift && exec "$@"', str(self.fs), SIZE]
        argv = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self._options(), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start"]
        up = subprocess.run(_as_server([*wrap, *argv]), env=env, capture_output=True, text=True, cwd=self.root)
        if up.returncode != 0:
            log = (self.root / "server.log").read_text() if (self.root / "server.log").exists() else ""
            raise NoPostgres(f"the PostgreSQL server did not start in its namespace: {up.stderr.strip()} {log[-2000:]}")
        self.started = True
        with self.admin() as conn:
            conn.execute(f"CREATE TABLESPACE small LOCATION '{self.fs / 'ts'}'")
        return self

    def small_database(self) -> str:
        """A fresh database with conclave's schema, in the small tablespace."""
        self.database()  # makes the template
        name = f"small{next(self._small)}"
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} TABLESPACE small")
        return name

    def inside(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as the server's uid in its namespaces (where the small file system is)."""
        pid = (self.data / "postmaster.pid").read_text().split()[0]
        return subprocess.run(_as_server(["nsenter", "-t", pid, "-U", "-m", "--preserve-credentials", *argv]),
                              capture_output=True, text=True, timeout=120)


@pytest.fixture
def small_disk() -> Iterator[SmallDiskCluster]:
    cluster = SmallDiskCluster()
    try:
        yield cluster.start()  # type: ignore[misc]
    finally:
        cluster.stop()


def test_a_full_disk_on_the_server_refuses_writes_by_name_and_the_broker_recovers(small_disk: SmallDiskCluster, tmp_path: Path) -> None:
    name = small_disk.small_database()
    url = small_disk.broker_url(name, "alpha")
    with Run(tmp_path, [{"name": "alice"}], extra_toml=f'\n[store]\nurl = "{url}"\n') as run:
        alice = run.puppet("alice")
        acknowledged = [alice.call("memory.remember", kind="discovery", text=FACT.format(f"ledger{n}"))["id"] for n in range(3)]
        filler = small_disk.fs / "filler"
        filled = small_disk.inside("sh", "-c", f"dd if=/dev/zero of={filler} bs=64k 2>/dev/null; test -s {filler}")
        assert filled.returncode == 0, filled.stderr
        refusal = remember_until_refused(alice, acknowledged)
        assert refusal["code"] == "unavailable" and refusal["message"].startswith("disk full:"), refusal
        assert "the store's database on" in refusal["message"]
        assert alice.call("whoami")["agent"] == "alice"
        assert set(acknowledged) <= {c["id"] for c in run.op("memory.list", limit=1000)}
        assert small_disk.inside("rm", str(filler)).returncode == 0
        after = alice.call("memory.remember", kind="discovery", text=FACT.format("kernel"))
        assert after["tier"] == "unverified"
        assert run.op("memory.verify")["ok"]
