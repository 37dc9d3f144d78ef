"""The broker's own tables: every principal ever issued, kept as history, and the key the store answers to."""

from __future__ import annotations

from store.schema import Schema

COMPONENT = "broker"
MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS principals (
        agent       TEXT NOT NULL,
        session     TEXT NOT NULL,
        role        TEXT NOT NULL CHECK (role IN ('agent', 'operator')),
        domain      TEXT NOT NULL,
        parent      TEXT,               -- agent:session of the spawner, NULL when the broker spawned it
        pid         INTEGER,
        command     TEXT NOT NULL,      -- JSON list
        started_at  TEXT NOT NULL,
        ended_at    TEXT,
        exit_code   INTEGER,
        revoked_at  TEXT,
        revoked_reason TEXT,
        PRIMARY KEY (agent, session)
    );
    CREATE INDEX IF NOT EXISTS principals_by_domain ON principals(domain);
    """,
    """
    -- Which operator key this store answers to (its SHA-256, never the key): a state
    -- directory that merely links to this database, with a key of its own, is refused.
    CREATE TABLE IF NOT EXISTS store_keys (
        name    TEXT PRIMARY KEY,
        digest  TEXT NOT NULL,
        at      TEXT NOT NULL
    );
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS)
