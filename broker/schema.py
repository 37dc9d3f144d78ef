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
    """
    -- Principals are looked up by their key (AGENT:SESSION here; HOST/AGENT:SESSION on PostgreSQL).
    ALTER TABLE principals ADD COLUMN key TEXT GENERATED ALWAYS AS (agent || ':' || session) VIRTUAL;
    CREATE INDEX IF NOT EXISTS principals_by_key ON principals(key);
    """,
]

#: The same on PostgreSQL: every principal carries the host of the broker that issued it
#: (filled in from the role's registration), and a broker's role writes only its own host's.
POSTGRESQL: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS principals (
        host        TEXT NOT NULL DEFAULT conclave_host(),
        agent       TEXT NOT NULL,
        session     TEXT NOT NULL,
        role        TEXT NOT NULL CHECK (role IN ('agent', 'operator')),
        domain      TEXT NOT NULL,
        parent      TEXT,
        pid         INTEGER,
        command     TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        ended_at    TEXT,
        exit_code   INTEGER,
        revoked_at  TEXT,
        revoked_reason TEXT,
        key         TEXT GENERATED ALWAYS AS (host || '/' || agent || ':' || session) STORED,
        PRIMARY KEY (host, agent, session)
    );
    CREATE INDEX IF NOT EXISTS principals_by_domain ON principals(domain);
    CREATE UNIQUE INDEX IF NOT EXISTS principals_by_key ON principals(key);
    ALTER TABLE principals ENABLE ROW LEVEL SECURITY;
    CREATE POLICY principals_read ON principals FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY principals_issue ON principals FOR INSERT TO conclave_broker WITH CHECK (host = conclave_host());
    CREATE POLICY principals_end ON principals FOR UPDATE TO conclave_broker
        USING (host = conclave_host()) WITH CHECK (host = conclave_host());
    GRANT SELECT, INSERT ON principals TO conclave_broker;
    GRANT UPDATE (ended_at, exit_code, revoked_at, revoked_reason) ON principals TO conclave_broker;

    -- Each host's operator key (its SHA-256): a broker sees and binds only its own host's.
    CREATE TABLE IF NOT EXISTS store_keys (
        host    TEXT NOT NULL DEFAULT conclave_host(),
        name    TEXT NOT NULL,
        digest  TEXT NOT NULL,
        at      TEXT NOT NULL,
        PRIMARY KEY (host, name)
    );
    ALTER TABLE store_keys ENABLE ROW LEVEL SECURITY;
    CREATE POLICY store_keys_own ON store_keys FOR ALL TO conclave_broker
        USING (host = conclave_host()) WITH CHECK (host = conclave_host());
    GRANT SELECT, INSERT ON store_keys TO conclave_broker;
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS, postgresql=POSTGRESQL)
