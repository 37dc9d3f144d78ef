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

from typing import Any, Callable, Final

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


# -- round trips: what a server connection may hold back (store.postgres.PgConnection) ---------


def execute_later(conn: Any, sql: str, params: Any = None) -> None:
    """A statement whose result no one reads: on a server it goes with the next statement, in one
    round trip (flushed at the end of every store job); on SQLite it runs now."""
    later = getattr(conn, "execute_later", None)
    if later is None:
        conn.execute(sql, params)
    else:
        later(sql, params)


def read_later(conn: Any, sql: str, params: Any, consume: Callable[[Any], None]) -> None:
    """A read whose rows only ``consume`` takes: on a server it goes with the next statement, in one
    round trip (by the end of the job, or of its batch); on SQLite it runs, and is consumed, now."""
    later = getattr(conn, "read_later", None)
    if later is None:
        consume(conn.execute(sql, params))
    else:
        later(sql, params, consume)


def flush(conn: Any) -> None:
    """Send what a server connection holds back, so that its errors are raised here (nothing on SQLite)."""
    send = getattr(conn, "flush", None)
    if send is not None:
        send()


def broken(conn: Any) -> bool:
    """Is the connection's session with its server over (a restart, a broken connection)?  Asked between
    transactions.  Never on SQLite: a file does not hang up."""
    check = getattr(conn, "broken", None)
    return bool(check is not None and check())


def aborted(conn: Any) -> bool:
    """Can the connection's transaction not go on as it was (the server refused a statement in it, a send
    failed with other statements in it, or the connection is gone)?  Never on SQLite, whose errors are
    raised by the statement that failed."""
    check = getattr(conn, "aborted", None)
    return bool(check is not None and check())


def next_id(conn: Any, table: str, query: str) -> int:
    """``query`` (the table's max id + 1); a server writer counts it once per transaction."""
    counted = getattr(conn, "next_id", None)
    if counted is not None:
        return int(counted(table, query))
    return int(conn.execute(query).fetchone()[0])
