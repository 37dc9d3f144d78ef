"""The append-only, keyed, hash-chained event log every component writes to.

Each change -- a claim remembered, a lock granted, an agent spawned -- appends
one event in the *same transaction* as the change, so the log and the state
can never disagree.  Each event's hash is an HMAC-SHA256, under a key kept
outside the database (:class:`~store.chainkey.ChainKey`), of its own fields
and the previous event's hash.  Triggers refuse UPDATE and DELETE through
SQLite; someone who edits the file behind the broker's back (threat T3) can
drop the triggers, but without the key cannot write a link that verifies:
:func:`verify_chain` names the first event that no longer matches.  What a
chain cannot show -- its last events cut off -- the anchor shows
(``store.anchor``).

Schemes.  Databases written before the chain was keyed hold events hashed
with plain SHA-256.  They are never rewritten: the first time a keyed writer
opens such a log it appends one ``store.chain_keyed`` event (:data:`KEYED`),
itself keyed, whose link pins every unkeyed event before it.  From that event
on, every event must carry the keyed hash; an unkeyed hash after it is a
forgery.  A fresh database starts with that event.

A connection appends only once a key is bound to it (:func:`key_chain`);
the store owner binds its writer's, and seals it (:func:`refuse_appends`)
when the log changed behind its back.
"""

from __future__ import annotations

import hashlib
import json
import time
import weakref
from datetime import datetime, timezone
from typing import Any, Callable, Final, NamedTuple, Sequence, final

import apsw
import attrs

from store import dialect, jsoncodec
from store.chainkey import ChainKey
from store.schema import Schema

COMPONENT = "events"
GENESIS: Final = "0" * 64
#: The actor recorded for the broker's own bookkeeping (spawns, exits, expiries).
BROKER_ACTOR: Final = "broker"
#: The event from which on the chain is keyed (its payload names the scheme and the key's id).
KEYED: Final = "store.chain_keyed"
SCHEME: Final = "hmac-sha256"


class ChainRefused(RuntimeError):
    """This connection may not append: no key is bound to it, or the log changed behind its owner's back."""


class EventForged(ChainRefused):
    """An event a decision was about to rest on fails its hash: the log was changed behind the broker's back."""


class Head(NamedTuple):
    """The last event of the log: its seq and hash (``(0, GENESIS)`` for an empty log)."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"


EMPTY: Final = Head(0, GENESIS)


@attrs.define
class _Binding:
    key: ChainKey | None
    refusal: str | None = None
    #: The ``store.chain_keyed`` event: events before it carry plain SHA-256 hashes (an older conclave wrote them).
    keyed_from: int = 1


#: What each writer connection may append with.  Weak: a closed connection leaves no trace here.
_BOUND: Final[weakref.WeakKeyDictionary[apsw.Connection, _Binding]] = weakref.WeakKeyDictionary()

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
    # 2: what a decision reads of the log is a few subjects' events of a few kinds.  With only the
    # one-column indexes, SQLite's planner took `kind IN (...)` and walked every memory.remember
    # event of the store (37 ms at 100k claims, on every `context`); this one serves both columns.
    """
    CREATE INDEX IF NOT EXISTS events_by_subject_kind ON events(subject, kind);
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


def sha256(text: str) -> str:
    """What an event records of a text it must not carry (a claim's text, a mail body): enough to detect an edit, nothing to read."""
    return hashlib.sha256(text.encode()).hexdigest()


#: The digest's input is a flat JSON list of scalars: no keys to sort, so a
#: prebuilt encoder gives the same bytes as canonical() in less time.
_FLAT: Final = jsoncodec.compact(ensure_ascii=False)


def _message(seq: int, at: str, kind: str, actor: str, subject: str | None, payload: str, prev: str) -> bytes:
    return _FLAT([seq, at, kind, actor, subject, payload, prev]).encode()


def unkeyed_digest(seq: int, at: str, kind: str, actor: str, subject: str | None, payload: str, prev: str) -> str:
    """The hash events had before the chain was keyed (plain SHA-256); only verification uses it."""
    return hashlib.sha256(_message(seq, at, kind, actor, subject, payload, prev)).hexdigest()


def keyed_digest(key: ChainKey, seq: int, at: str, kind: str, actor: str, subject: str | None, payload: str, prev: str) -> str:
    return key.mac(_message(seq, at, kind, actor, subject, payload, prev))


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
    (row,) = _chain(conn, [Pending(kind, qualify(conn, actor), subject, payload, stamp)])
    dialect.execute_later(conn, "INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?)", row)
    _appended(conn, row)
    return Event(row[0], stamp, kind, row[3], subject, payload or {}, row[-1])


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
    if dialect.host_of(conn) is not None:
        pending = [p._replace(actor=qualify(conn, p.actor)) for p in pending]
    rows = _chain(conn, pending)
    if not rows:
        return None
    if dialect.is_postgresql(conn):
        conn.executemany("INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?)", rows)
        _appended(conn, rows[-1])
    else:
        conn.execute(_INSERT_MANY, (json.dumps(rows),))
    return rows[-1][0]


def qualify(conn: apsw.Connection, actor: str) -> str:
    """The broker's own actor names its host in a store several brokers share (``HOST/broker``)."""
    if actor == BROKER_ACTOR:
        host = dialect.host_of(conn)
        if host is not None:
            return f"{host}/{BROKER_ACTOR}"
    return actor


def _chain(conn: apsw.Connection, pending: Sequence[Pending]) -> list[tuple[Any, ...]]:
    """The rows for ``pending``, each linked to the one before, after the log's last event.

    Raises:
        ChainRefused: no key is bound to ``conn``, or its owner sealed it.
    """
    for p in pending:
        if not p.actor:
            raise ValueError("an event needs the acting principal; there is no default actor")
    if not pending:
        return []
    key = _key_for(conn)
    seq, prev = head(conn)
    rows = []
    for p in pending:
        seq += 1
        body = canonical(p.payload or {})
        digest = key.mac(_message(seq, p.at, p.kind, p.actor, p.subject, body, prev))
        rows.append((seq, p.at, p.kind, p.actor, p.subject, body, prev, digest))
        prev = digest
    return rows


def _key_for(conn: apsw.Connection) -> ChainKey:
    binding = _BOUND.get(conn)
    if binding is None:
        raise ChainRefused("this connection has no chain key: only the store owner's writer appends events (see store.events.key_chain)")
    if binding.refusal is not None:
        raise ChainRefused(binding.refusal)
    if binding.key is None:
        raise ChainRefused("the event log is keyed but its key is missing")
    return binding.key


def head(conn: apsw.Connection) -> Head:
    """The log's last event (``EMPTY`` when it has none).

    A PostgreSQL writer inside its transaction remembers the head its own
    appends left (``PgConnection.cached_head``), saving a round trip per append.
    """
    cached = getattr(conn, "cached_head", None)
    if cached is not None:
        known = cached()
        if known is not None:
            return known
    row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    return Head(row[0], row[1]) if row else EMPTY


def _appended(conn: apsw.Connection, last: tuple[Any, ...]) -> None:
    remember = getattr(conn, "remember_head", None)
    if remember is not None:
        remember(Head(last[0], last[-1]))


def hash_at(conn: apsw.Connection, seq: int) -> str | None:
    """The hash of event ``seq`` (None when the log holds no such event)."""
    row = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()
    return row[0] if row else None


class KeySwitch(NamedTuple):
    """The ``store.chain_keyed`` event from which on the chain is keyed."""

    seq: int
    key_id: str | None
    #: Who keyed it: ``broker``, or ``HOST/broker`` on a store several brokers share.
    actor: str


def key_switch(conn: apsw.Connection) -> KeySwitch | None:
    """The last ``store.chain_keyed`` event; None when the log was never keyed."""
    row = conn.execute(f"SELECT seq, payload, actor FROM events WHERE kind = '{KEYED}' ORDER BY seq DESC LIMIT 1").fetchone()
    if row is None:
        return None
    return KeySwitch(row[0], _key_id_of(row[1]), row[2])


def _first_switch(conn: apsw.Connection) -> int:
    row = conn.execute(f"SELECT min(seq) FROM events WHERE kind = '{KEYED}'").fetchone()
    return row[0] if row and row[0] is not None else 1


def _key_id_of(payload: str) -> str | None:
    """The key a ``store.chain_keyed`` event names (None: its payload does not say)."""
    try:
        return json.loads(payload).get("key_id")
    except (ValueError, AttributeError):
        return None


def key_chain(conn: apsw.Connection, key: ChainKey) -> Event | None:
    """Bind ``key`` to ``conn`` for appending; key the log if it never was.

    A log with no ``store.chain_keyed`` event (a fresh database, or one an
    older conclave wrote with plain SHA-256) gets one now, keyed, in its own
    transaction; it is returned.  A log keyed under another key is not
    touched: the connection is sealed with the reason, so nothing is
    appended under a key verification would not accept.  The log is read
    again under the write lock before it is keyed: two brokers starting at
    once on one shared store key it once.
    """
    binding = _BOUND[conn] = _Binding(key)
    with conn:
        switch = key_switch(conn)
        if switch is None:
            unkeyed = head(conn).seq
            keyed = append(conn, KEYED, actor=BROKER_ACTOR, payload={"scheme": SCHEME, "key_id": key.id, "unkeyed_before": unkeyed})
            binding.keyed_from = keyed.seq
            return keyed
    binding.keyed_from = _first_switch(conn)
    if switch.key_id != key.id:
        if "/" in switch.actor:
            how = (f"every broker sharing the store appends with the one key: copy {switch.actor.split('/')[0]}'s chain-key file "
                   "over this state directory's (docs/DEPLOYMENT.md)")
        else:
            how = "it was replaced, or this database belongs to another state directory; restore the key file that goes with it"
        bind_sealed(conn, key, f"the event log is keyed with key {switch.key_id} (event {switch.seq}, by {switch.actor}), "
                    f"but the chain key file holds key {key.id}: {how}")
    return None


def carry_binding(old: apsw.Connection, new: apsw.Connection) -> None:
    """A writer connected again: ``new`` appends as ``old`` did (the same key, the same refusal, if any)."""
    binding = _BOUND.get(old)
    if binding is not None:
        _BOUND[new] = binding


def bind_sealed(conn: apsw.Connection, key: ChainKey | None, reason: str) -> None:
    """Bind ``conn`` so that every append is refused with ``reason`` (reads and other writes go on)."""
    _BOUND[conn] = _Binding(key, reason, _first_switch(conn))


def bind_checker(conn: apsw.Connection, key: ChainKey, keyed_from: int) -> None:
    """Let a reader check events with :func:`checked` (it never appends: no writer binding is made)."""
    _BOUND[conn] = _Binding(key, "a read connection never appends", keyed_from)


def keyed_from(conn: apsw.Connection) -> int | None:
    """The switch-over event of the log ``conn`` checks events of (None: no key is bound)."""
    binding = _BOUND.get(conn)
    return binding.keyed_from if binding is not None and binding.key is not None else None


_FULL_ROWS: Final = "SELECT seq, at, kind, actor, subject, payload, prev_hash, hash FROM events"


def checked(conn: apsw.Connection, where: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Event]:
    """The events matching ``where``, oldest first, each one's hash checked under the chain key.

    What a decision reads of the log (a claim's witnesses, a message's
    sender) comes through here: an event edited or forged without the key
    raises :class:`EventForged` instead of being believed.  Events older than
    the log's keying carry plain SHA-256 and are checked with it.

    Raises:
        EventForged: an event fails its hash.
        ChainRefused: no key is bound to ``conn``.
    """
    binding = _BOUND.get(conn)
    if binding is None or binding.key is None:
        raise ChainRefused(refusal(conn) or "this connection has no chain key to check events with")
    key, keyed = binding.key, binding.keyed_from
    out = []
    for seq, at, kind, actor, subject, payload, prev, digest in conn.execute(f"{_FULL_ROWS} WHERE {where} ORDER BY seq", params):
        message = _message(seq, at, kind, actor, subject, payload, prev)
        good = key.mac(message) == digest if seq >= keyed else hashlib.sha256(message).hexdigest() == digest
        if not good:
            raise EventForged(f"event {seq} ({kind} by {actor}) fails its hash: the event log was changed behind the broker's back "
                              "(run `conclave memory verify`)")
        out.append(Event(seq, at, kind, actor, subject, json.loads(payload), digest))
    return out


def refuse_appends(conn: apsw.Connection, reason: str) -> None:
    """Seal ``conn``: from now on every append raises :class:`ChainRefused` with ``reason``."""
    binding = _BOUND.get(conn)
    if binding is None:
        _BOUND[conn] = _Binding(None, reason)
    elif binding.refusal is None:
        binding.refusal = reason


def refusal(conn: apsw.Connection) -> str | None:
    """Why ``conn`` may not append (None when it may)."""
    binding = _BOUND.get(conn)
    if binding is None:
        return "no chain key is bound to this connection"
    return binding.refusal or (None if binding.key is not None else "the chain key is missing")


@final
@attrs.frozen
class ChainReport:
    """What :func:`verify_chain` found.

    ``first_bad`` is the first event that does not verify (None when every
    event does); ``head`` is the last event walked; ``keyed_from`` the
    ``store.chain_keyed`` event from which on the chain is keyed (events
    before it were hashed with plain SHA-256 by an older conclave), and
    ``key_id`` the key that event names.
    """

    events: int
    first_bad: int | None
    reason: str | None
    head: Head = EMPTY
    keyed_from: int | None = None
    key_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def verify_chain(
    conn: apsw.Connection,
    key: ChainKey | None,
    *,
    feed: Callable[[Event], None] | None = None,
    wanted: frozenset[str] = frozenset(),
) -> ChainReport:
    """Walk the whole chain; name the first event whose hash or link is wrong.

    Events before the first ``store.chain_keyed`` event are checked with plain
    SHA-256, every event from it on with ``key``.  With no key at hand only
    the unkeyed prefix can be checked, and the report says so.

    ``feed`` is handed every event of a kind in ``wanted`` whose own hash
    holds, in order (the tables' projections, ``store.projection``): past a
    broken link the walk goes on, still feeding each event whose MAC holds,
    so a forged row is named as such and not as the echo of a break.
    """
    prev = GENESIS
    expected_seq = 1
    count = 0
    keyed_from: int | None = None
    key_id: str | None = None
    last = EMPTY
    broken: ChainReport | None = None

    def bad(seq: int, reason: str) -> ChainReport:
        return ChainReport(count, seq, reason, last, keyed_from, key_id)

    for seq, at, kind, actor, subject, payload, prev_hash, digest in conn.execute(
        "SELECT seq, at, kind, actor, subject, payload, prev_hash, hash FROM events ORDER BY seq"
    ):
        count += 1
        message = _message(seq, at, kind, actor, subject, payload, prev_hash)
        if broken is not None:
            # Past the first break: only events that carry a good MAC of their own still count.
            if feed is not None and kind in wanted and key is not None and keyed_from is not None and key.mac(message) == digest:
                feed(Event(seq, at, kind, actor, subject, json.loads(payload), digest))
            continue
        if seq != expected_seq:
            broken = bad(expected_seq, f"event {expected_seq} is missing (next is {seq})")
        elif prev_hash != prev:
            broken = bad(seq, f"event {seq} does not link to event {seq - 1}")
        else:
            if kind == KEYED:
                named = _key_id_of(payload)
                if key is None:
                    return bad(seq, f"the chain is keyed from event {seq} on (key {named}) and there is no chain key to check it with")
                if named != key.id:
                    return bad(seq, f"events from {seq} on were keyed with key {named}, but the chain key file holds key {key.id}: "
                                    "the key file was replaced, or the database comes from another state directory")
                if key_id is None:
                    keyed_from, key_id = seq, named
            if keyed_from is not None:
                if key is not None and key.mac(message) != digest:
                    if hashlib.sha256(message).hexdigest() == digest:
                        broken = bad(seq, f"event {seq} ({kind}) is hashed with plain SHA-256, not the chain key: it was written by someone without the key")
                    else:
                        broken = bad(seq, f"event {seq} ({kind}) fails its keyed hash: it was forged or altered without the chain key")
            elif hashlib.sha256(message).hexdigest() != digest:
                broken = bad(seq, f"event {seq} ({kind}) was altered after it was written")
        if broken is not None:
            if feed is None:
                return broken
            if kind in wanted and key is not None and keyed_from is not None and key.mac(message) == digest:
                feed(Event(seq, at, kind, actor, subject, json.loads(payload), digest))  # only its link is wrong
            continue
        if feed is not None and kind in wanted:
            feed(Event(seq, at, kind, actor, subject, json.loads(payload), digest))
        prev = digest
        last = Head(seq, digest)
        expected_seq += 1
    if broken is not None:
        return broken
    if count and keyed_from is None:
        return ChainReport(count, None, "the event log is not keyed: it has no store.chain_keyed event (a broker keys it the first time it opens it)", last, None, None)
    return ChainReport(count, None, None, last, keyed_from, key_id)


def verify_after(conn: apsw.Connection, key: ChainKey, since: Head) -> ChainReport:
    """Check what was appended after ``since``: the event a broker last saw, on a store several brokers share.

    ``since`` must still be in the log with the same hash (a log cut or
    rewritten under it fails here); every event after it must follow on
    (seq by seq, each linked to the one before) and carry a MAC under ``key``.
    Returns the report of the events after ``since``: ``head`` is the last
    one that verified (``since`` itself when nothing was appended), and
    ``first_bad`` the first that did not.  One indexed range read: the cost
    of a batch is the events other brokers appended since this one's last.
    """
    prev = since.hash
    last = since
    count = 0
    seen = since.seq == 0

    def bad(seq: int, reason: str) -> ChainReport:
        return ChainReport(count, seq, reason, last)

    def cut() -> ChainReport:
        tail = head(conn)
        if tail.seq < since.seq:
            return bad(tail.seq + 1, f"the event log ends at event {tail.seq}, but this broker saw it run to event {since.seq}: "
                                     f"{since.seq - tail.seq} event(s) were cut")
        return bad(since.seq, f"event {since.seq}, the last this broker saw, is gone from the log: it was deleted")

    rows = conn.execute(
        "SELECT seq, at, kind, actor, subject, payload, prev_hash, hash FROM events WHERE seq >= ? ORDER BY seq", (since.seq,)
    )
    for seq, at, kind, actor, subject, payload, prev_hash, digest in rows:
        if seq == since.seq:
            if digest != since.hash:
                return bad(seq, f"event {seq} is not the event this broker saw there (its hash is {digest[:16]}..., it saw {since.hash[:16]}...): "
                                "the log was rewritten")
            seen = True
            continue
        if not seen:
            return cut()
        count += 1
        if seq != last.seq + 1:
            return bad(last.seq + 1, f"event {last.seq + 1} is missing (next is {seq})")
        if prev_hash != prev:
            return bad(seq, f"event {seq} does not link to event {seq - 1}")
        if kind == KEYED:
            named = _key_id_of(payload)
            if named != key.id:
                return bad(seq, f"event {seq} re-keys the chain with key {named}, not the chain key {key.id}")
        if key.mac(_message(seq, at, kind, actor, subject, payload, prev_hash)) != digest:
            return bad(seq, f"event {seq} ({kind} by {actor}) fails its keyed hash: it was appended without the chain key")
        prev = digest
        last = Head(seq, digest)
    if not seen:
        return cut()
    remember = getattr(conn, "remember_head", None)
    if remember is not None:
        remember(last)  # a writer holding the write lock: this is the head now
    return ChainReport(count, None, None, last)


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
