"""The locks schema.  Lock state lives in memory and dies with the broker; its
history is the event log (``lock.*`` events).  The one thing stored here is
how far fencing tokens have been reserved, so tokens keep growing across
broker restarts."""

from __future__ import annotations

from store.schema import Schema

COMPONENT = "locks"
MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS lock_fencing (
        id        INTEGER PRIMARY KEY CHECK (id = 1),
        reserved  INTEGER NOT NULL     -- every token ever issued is <= this
    );
    """,
]
#: On PostgreSQL the reservation row is shared by every broker: reservations are made
#: under the store's write lock, so each broker's blocks of tokens are disjoint and
#: every later block starts above every earlier one, whichever broker took it.
POSTGRESQL: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS lock_fencing (
        id        INTEGER PRIMARY KEY CHECK (id = 1),
        reserved  BIGINT NOT NULL
    );
    GRANT SELECT, INSERT, UPDATE ON lock_fencing TO conclave_broker;
    -- The tokens of name:// and slot:// grants, shared by every host (locks.shared).
    CREATE SEQUENCE IF NOT EXISTS lock_tokens;
    GRANT USAGE, SELECT ON SEQUENCE lock_tokens TO conclave_broker;
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS, postgresql=POSTGRESQL)
