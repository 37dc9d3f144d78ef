"""The append-only, hash-chained event log every component writes to.

Each change -- a claim remembered, a lock granted, an agent spawned -- appends
one event in the *same transaction* as the change, so the log and the state
can never disagree.  Each event's hash covers its own fields and the previous
event's hash.  Triggers refuse UPDATE and DELETE through SQLite; someone who
edits the file behind the broker's back (threat T3) can drop the triggers, but
cannot rewrite history without breaking the chain, and :func:`verify` names
the first event that no longer matches.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from typing import Any, Final, NamedTuple, Sequence, final

import apsw
import attrs

from store import jsoncodec
from store.schema import Schema

COMPONENT = "events"
GENESIS: Final = "0" * 64
#: The actor recorded for the broker's own bookkeeping (spawns, exits, expiries).
BROKER_ACTOR: Final = "broker"

MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS events (
        seq        INTEGER PRIMARY KEY,
        at         TEXT NOT NULL,
        kind       TEXT NOT NULL,            -- dotted: memory.remember, lock.grant, agent.spawn, ...
        actor      TEXT NOT NULL,            -- agent:session, operator:..., or 'broker'
        subject    TEXT,                     -- claim id, resource, message id, principal ...
        payload    TEXT NOT NULL,            -- canonical JSON
        prev_hash  TEXT NOT NULL,
        hash       TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS events_by_kind ON events(kind);
    CREATE INDEX IF NOT EXISTS events_by_actor ON events(actor);
    CREATE INDEX IF NOT EXISTS events_by_subject ON events(subject);
    CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS)


def now() -> str:
    """The one timestamp format in the database: UTC ISO-8601 with microseconds.

    The same text as ``datetime.now(timezone.utc).isoformat(timespec="microseconds")``;
    the date and time of day are formatted once a second (every lock decision
    stamps its event, so this is on the broker's hottest path).
    """
    global _second
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    if seconds != _second[0]:
        _second = (seconds, datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{nanos // 1000:06d}+00:00"


_second: tuple[int, str] = (-1, "")

#: Built once (json.dumps with options builds a new encoder on every call).
_CANONICAL: Final = jsoncodec.compact(sort_keys=True, ensure_ascii=False)


def canonical(value: Any) -> str:
    return _CANONICAL(value)


#: The digest's input is a flat JSON list of scalars: no keys to sort, so a
#: prebuilt encoder gives the same bytes as canonical() in less time.
_FLAT: Final = jsoncodec.compact(ensure_ascii=False)


def _digest(seq: int, at: str, kind: str, actor: str, subject: str | None, payload: str, prev: str) -> str:
    body = _FLAT([seq, at, kind, actor, subject, payload, prev])
    return hashlib.sha256(body.encode()).hexdigest()


@final
@attrs.frozen
class Event:
    seq: int
    at: str
    kind: str
    actor: str
    subject: str | None
    payload: dict[str, Any]
    hash: str


class Pending(NamedTuple):
    """An event decided earlier and written later (see :func:`append_many`).

    A named tuple, not an attrs class: the lock table makes one per decision.
    """

    kind: str
    actor: str
    subject: str | None
    payload: dict[str, Any] | None
    at: str


def append(
    conn: apsw.Connection,
    kind: str,
    *,
    actor: str,
    subject: str | None = None,
    payload: dict[str, Any] | None = None,
    at: str | None = None,
) -> Event:
    """Append one event inside the caller's transaction.

    ``actor`` is required: the principal key of whoever caused the change, or
    :data:`BROKER_ACTOR`.  There is no default.
    """
    stamp = at or now()
    (row,) = _chain(conn, [Pending(kind, actor, subject, payload, stamp)])
    conn.execute("INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?)", row)
    return Event(row[0], stamp, kind, actor, subject, payload or {}, row[-1])


_INSERT_MANY: Final = (
    "INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) "
    "SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7 FROM json_each(?)"
)


def append_many(conn: apsw.Connection, pending: Sequence[Pending]) -> int | None:
    """Append several events, in order, inside the caller's transaction.

    The same chain as that many :func:`append` calls, written by one SQL
    statement: the writer thread lets go of the GIL once per batch instead of
    once per event, so a busy broker loop is not kept waiting for it.
    Returns the last seq written (None for an empty batch).
    """
    rows = _chain(conn, pending)
    if not rows:
        return None
    conn.execute(_INSERT_MANY, (json.dumps(rows),))
    return rows[-1][0]


def _chain(conn: apsw.Connection, pending: Sequence[Pending]) -> list[tuple[Any, ...]]:
    """The rows for ``pending``, each linked to the one before, after the log's last event."""
    for p in pending:
        if not p.actor:
            raise ValueError("an event needs the acting principal; there is no default actor")
    if not pending:
        return []
    row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    seq, prev = (row[0], row[1]) if row else (0, GENESIS)
    rows = []
    for p in pending:
        seq += 1
        body = canonical(p.payload or {})
        digest = _digest(seq, p.at, p.kind, p.actor, p.subject, body, prev)
        rows.append((seq, p.at, p.kind, p.actor, p.subject, body, prev, digest))
        prev = digest
    return rows


@final
@attrs.frozen
class ChainReport:
    """What :func:`verify_chain` found.  ``first_bad`` is None when intact."""

    events: int
    first_bad: int | None
    reason: str | None

    @property
    def ok(self) -> bool:
        return self.first_bad is None


def verify_chain(conn: apsw.Connection) -> ChainReport:
    """Walk the whole chain; name the first event whose hash or link is wrong."""
    prev = GENESIS
    expected_seq = 1
    count = 0
    for seq, at, kind, actor, subject, payload, prev_hash, digest in conn.execute(
        "SELECT seq, at, kind, actor, subject, payload, prev_hash, hash FROM events ORDER BY seq"
    ):
        count += 1
        if seq != expected_seq:
            return ChainReport(count, expected_seq, f"event {expected_seq} is missing (next is {seq})")
        if prev_hash != prev:
            return ChainReport(count, seq, f"event {seq} does not link to event {seq - 1}")
        if _digest(seq, at, kind, actor, subject, payload, prev_hash) != digest:
            return ChainReport(count, seq, f"event {seq} ({kind}) was altered after it was written")
        prev = digest
        expected_seq += 1
    return ChainReport(count, None, None)


def read(
    conn: apsw.Connection,
    *,
    kind_prefix: str | None = None,
    actor_agent: str | None = None,
    subject: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int | None = None,
    after_seq: int = 0,
) -> list[Event]:
    """Events matching every given filter, oldest first."""
    where, params = ["seq > ?"], [after_seq]
    if kind_prefix:
        where.append("(kind = ? OR kind LIKE ? ESCAPE '\\')")
        params += [kind_prefix, like_prefix(kind_prefix) + ".%"]
    if actor_agent:
        where.append("(actor = ? OR actor LIKE ? ESCAPE '\\')")
        params += [actor_agent, like_prefix(actor_agent) + ":%"]
    if subject:
        where.append("subject = ?")
        params.append(subject)
    if since:
        where.append("at >= ?")
        params.append(since)
    if until:
        where.append("at <= ?")
        params.append(until)
    sql = f"SELECT seq, at, kind, actor, subject, payload, hash FROM events WHERE {' AND '.join(where)} ORDER BY seq"
    if limit is not None:
        # The newest `limit` events, still returned oldest first.
        sql = f"SELECT * FROM ({sql[:-len(' ORDER BY seq')]} ORDER BY seq DESC LIMIT ?) ORDER BY seq"
        params.append(limit)
    return [
        Event(seq, at, kind, actor, subject, json.loads(payload), digest)
        for seq, at, kind, actor, subject, payload, digest in conn.execute(sql, params)
    ]


def like_prefix(text: str) -> str:
    """``text`` escaped for a LIKE pattern with ESCAPE '\\' (so ``_`` and ``%`` are literal)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
