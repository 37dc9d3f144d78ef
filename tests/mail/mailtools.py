"""Helpers for the mail tests: one real broker per module where tests do not
interfere, and read-only looks into the real state database.

Imported as ``mailtools`` (pytest puts this directory on ``sys.path``)."""

from __future__ import annotations

import uuid
from typing import Any, Iterator, Sequence

import pytest

from agents.harness import Run


def start_module_run(tmp_path_factory: pytest.TempPathFactory, agents: Sequence[dict[str, Any]], **kwargs: Any) -> Iterator[Run]:
    run = Run(tmp_path_factory.mktemp("mailrun"), agents, **kwargs)
    try:
        yield run.start()
    finally:
        run.close()


def query(run: Run, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows from the run's state database, read-only (WAL lets us read beside the broker)."""
    from store.database import connect

    conn = connect(run.state / "conclave.db", readonly=True)
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def written(run: Run) -> tuple[int, ...]:
    """Messages, deliveries, acknowledgements, events: equal before and after means nothing was written."""
    ((counts),) = query(
        run,
        "SELECT (SELECT COUNT(*) FROM mail_messages), (SELECT COUNT(*) FROM mail_deliveries), "
        "(SELECT COUNT(*) FROM mail_deliveries WHERE acked_at IS NOT NULL), (SELECT COUNT(*) FROM events)",
    )
    return tuple(counts)


def word() -> str:
    """A word no other test uses, so tests sharing a broker can find their own mail."""
    return "w" + uuid.uuid4().hex[:12]


def board_row(run: Run, agent: str) -> dict[str, Any]:
    """The operator's board row for a live agent."""
    return next(r for r in run.op("status.board")["agents"] if r["agent"] == agent)
