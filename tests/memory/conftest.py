"""Fixtures for the memory tests: a store opened directly in tmp_path for pure
logic (ranking, prefilter, groom plans)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import apsw
import pytest

from broker import composition
from store import database, events
from store.chainkey import ChainKey


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[apsw.Connection]:
    """The writer connection of a fresh store, on each backend (PostgreSQL as its owner: no host, no row policies)."""
    if request.param == "sqlite":
        conn = database.open_store(tmp_path / "memory.db", composition.schemas())
    else:
        from store.postgres import PostgresBackend

        cluster = request.getfixturevalue("pg_cluster")
        conn = PostgresBackend(cluster.url(cluster.database()), migrate=False).open_writer(composition.schemas())
    events.key_chain(conn, ChainKey.generate())  # this connection writes as the store owner would
    yield conn
    conn.close()


@pytest.fixture
def job(store: apsw.Connection) -> Callable[..., Any]:
    """Run ``fn(conn, *args)`` in one transaction, as the store owner would."""

    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with store:
            return fn(store, *args, **kwargs)

    return run
