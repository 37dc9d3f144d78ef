"""Opening the state database and bringing its schema up to date.

One SQLite file (WAL) holds everything a run must remember: principals,
claims, locks' history, mail and the event log.  Each component keeps its
schema as readable SQL in its own package and hands it over as a
:class:`~store.schema.Schema`; the event log's own schema always comes first.
``schema_versions`` records how far each component has got and ``PRAGMA
user_version`` mirrors the total, so ``sqlite3 conclave.db 'pragma
user_version'`` tells at a glance.  Migrations are idempotent: running them
twice changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Sequence

import apsw

from store import events
from store.schema import Schema

BUSY_TIMEOUT_MS: Final = 10_000


def connect(path: Path | str, *, readonly: bool = False) -> apsw.Connection:
    """Open the state database with the settings every connection needs."""
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    if not readonly:
        conn.pragma("journal_mode", "wal")
        conn.pragma("synchronous", "normal")
    conn.pragma("foreign_keys", True)
    return conn


def migrate(conn: apsw.Connection, schemas: Sequence[Schema]) -> int:
    """Apply every pending migration: the event log's, then each of ``schemas`` in order.

    Returns the total number of migrations the database now has.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    total = 0
    for schema in (events.SCHEMA, *schemas):
        total += _migrate_component(conn, schema.component, schema.migrations)
    conn.pragma("user_version", total)
    return total


def _migrate_component(conn: apsw.Connection, component: str, migrations: Sequence[str]) -> int:
    row = conn.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
    done = row[0] if row else 0
    for number, sql in enumerate(migrations[done:], start=done + 1):
        with conn:
            conn.execute(sql)
            conn.execute(
                "INSERT INTO schema_versions(component, version) VALUES (?, ?) "
                "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                (component, number),
            )
    return len(migrations)


def open_store(path: Path | str, schemas: Sequence[Schema]) -> apsw.Connection:
    """The writer connection, with every schema brought up to date."""
    conn = connect(path)
    migrate(conn, schemas)
    return conn
