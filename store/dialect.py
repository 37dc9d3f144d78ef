"""Which SQL a connection speaks, for the few places where the two differ.

Almost every statement in conclave is plain SQL both SQLite and PostgreSQL
run unchanged: the PostgreSQL connection (:class:`store.postgres.PgConnection`)
takes SQLite's ``?`` and ``:name`` parameters and the subset of apsw's
connection API the jobs use.  What cannot be written once -- full-text
search (FTS5 ``MATCH``/``bm25`` against ``tsvector``/``ts_rank``), an upsert
taking the larger value, a planner hint, a notification other brokers
hear -- asks :func:`of` and branches, in the module that owns the query.
"""

from __future__ import annotations

from typing import Any, Final

SQLITE: Final = "sqlite"
POSTGRESQL: Final = "postgresql"


def of(conn: Any) -> str:
    """``"postgresql"`` for a PostgreSQL connection, ``"sqlite"`` for an apsw one."""
    return getattr(conn, "dialect", SQLITE)


def is_postgresql(conn: Any) -> bool:
    return getattr(conn, "dialect", SQLITE) == POSTGRESQL


def host_of(conn: Any) -> str | None:
    """The broker host a PostgreSQL connection writes for (None on SQLite: one machine, no hosts)."""
    return getattr(conn, "host", None)


def notify(conn: Any, channel: str, payload: str) -> None:
    """Tell every broker on the same server, when the caller's transaction commits (nothing on SQLite)."""
    if is_postgresql(conn):
        conn.execute("SELECT pg_notify(?, ?)", (channel, payload))
