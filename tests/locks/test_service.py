"""The lock table as other packages see it in-process (the status board reads
``holdings()`` and ``statistics()``), and the operator's commands when no
broker runs."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from agents.harness import Run, make_repo
from broker.identity import Principal, Role
from locks import LockStatistics, LockTable
from locks import schema as locks_schema
from locks.journal import Journal
from store.backend import SqliteBackend
from store.owner import ChainFiles, StoreOwner


async def test_holdings_and_statistics_report_what_is_held(tmp_path: Path, nursery) -> None:
    repo = make_repo(tmp_path)
    store = StoreOwner(SqliteBackend(tmp_path / "state.db"), [locks_schema.SCHEMA], chain=ChainFiles(tmp_path / "chain-key", tmp_path / "chain-anchor"))
    await nursery.start(store.run)
    table = LockTable(repo, Journal(store))
    await nursery.start(table.run)
    alice = Principal("alice", "a1", Role.AGENT, "alice")
    bob = Principal("bob", "b1", Role.AGENT, "bob")
    n = table.normalizer
    table.acquire_nowait(table.request(alice, [n.resource("README.md"), n.resource("git")]))
    table.acquire_nowait(table.request(bob, [n.resource("docs/")], ))
    held = table.holdings()
    assert sorted(held) == ["alice:a1", "bob:b1"]
    assert [(h["resource"], h["mode"]) for h in held["alice:a1"]] == [("README.md", "exclusive"), ("git", "exclusive")]
    assert set(held["bob:b1"][0]) == {"resource", "mode", "since", "token"}
    stats = table.statistics()
    assert isinstance(stats, LockStatistics) and attrs.has(type(stats))
    assert (stats.holdings, stats.holders, stats.granted, stats.waiting) == (3, 2, 2, 0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.holdings = 0  # type: ignore[misc]
    table.end_principal("alice:a1")
    assert list(table.holdings()) == ["bob:b1"] and table.statistics().released == 1
    await table.journal.flush()
    nursery.cancel_scope.cancel()


def test_operator_commands_work_with_no_broker(tmp_path: Path) -> None:
    run = Run(tmp_path, [{"name": "alice"}])
    with run:
        run.puppet("alice").call("lock.acquire", resources=["README.md"])
    # The broker has stopped: the operator's commands open the store themselves.
    log = run.cli("lock", "log", "--json")
    assert log.returncode == 0, log.stderr
    assert [e["kind"] for e in json.loads(log.stdout) if e["kind"] in ("lock.grant", "lock.release")] == ["lock.grant", "lock.release"]
    listed = run.cli("lock", "list", "--json")
    assert json.loads(listed.stdout)["holdings"] == []
    forced = run.cli("lock", "release", "README.md", "--force", "--reason", "tidy")
    assert forced.returncode == 1 and forced.stderr.strip() == "conclave: nobody holds README.md [not_found]"
    allowed = run.cli("lock", "check-commit", "README.md", "--json")
    assert allowed.returncode == 0 and json.loads(allowed.stdout)["operator"] is True
