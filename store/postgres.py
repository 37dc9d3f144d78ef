"""The PostgreSQL backend: many brokers, on many hosts, one database.

Selected by ``[store] url = "postgresql://..."`` in the team file or
``CONCLAVE_STORE_URL``; SQLite stays the embedded default.  Three decisions
shape this module:

* **One connection API.**  :class:`PgConnection` wraps a psycopg 3
  connection and offers the subset of apsw's connection the store jobs use
  (``execute`` with ``?`` or ``:name`` parameters, ``executemany``, ``with
  conn:`` transactions and savepoints, ``getautocommit``, ``close``), so a
  feature's job runs unchanged on either backend.  Parameters are rewritten
  to PostgreSQL's ``$n`` once per statement text (cached) and sent with a
  ``RawCursor``: no client-side quoting, prepared statements for hot ones.
* **One writer at a time, across every broker.**  A writer transaction
  begins with ``pg_advisory_xact_lock`` on one key: PostgreSQL's version of
  SQLite's ``BEGIN IMMEDIATE``.  Every job therefore still sees the state as
  it was after the previous commit, whichever broker made it; read-modify-
  write code (the next claim id, a claim's standing, the event chain's head)
  stays correct without per-table locking, and the event log's appends from
  several brokers serialise without loss.  Brokers batch many jobs into one
  transaction, so the lock is taken once per batch, not per job.
* **Each broker its own role.**  The database owner (``conclave store init``)
  creates the tables, row-level security policies and the ``conclave_broker``
  group; each broker logs in with a role of its own, registered under the
  host name the operator gives it (``conclave store add-broker HOST``).  The
  policies let a role write rows only in the name of its own host's
  principals (``conclave_owns(principal)``); see docs/DEPLOYMENT.md.

Readers get a connection from a small pool (opening a PostgreSQL connection
costs milliseconds, unlike opening a SQLite file) inside a REPEATABLE READ,
READ ONLY transaction, so a read job sees one snapshot, as on SQLite's WAL.
"""

from __future__ import annotations

import logging
import queue
import re
import select
from typing import Any, Callable, Final, Iterable, Iterator, Mapping, Sequence, final
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.sql
from psycopg import pq

from store.backend import pauses
from store.schema import Schema

POSTGRESQL: Final = "postgresql"
#: The advisory lock every writer transaction holds: one writer at a time across brokers.
WRITE_LOCK: Final = 0x636F6E636C617665  # "conclave"
#: The group role every broker's own role belongs to (created by ``conclave store init``).
BROKER_GROUP: Final = "conclave_broker"
#: Readers kept open for reuse.
POOL_SIZE: Final = 8
log = logging.getLogger("conclave.store")
#: Statement texts whose translation is kept.
_CACHE_SIZE: Final = 4096
HOST_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class StoreError(RuntimeError):
    """The PostgreSQL store cannot be used as configured; the message says how to fix it."""


def session_gone(raw: psycopg.Connection[Any]) -> bool:
    """Is this idle session over -- closed, or the server said goodbye (a restart, ``pg_terminate_backend``)?

    An idle session has nothing to read; when its socket is readable, what
    is there is read (a notice is dropped, a goodbye or the close marks the
    session bad).  One ``select`` when all is well.  Call it only while no
    one else is using the connection.
    """
    if raw.closed:
        return True
    try:
        # A goodbye and the close may need a read each: read while there is something to read (a few times at most).
        for _ in range(4):
            if not select.select([raw.pgconn.socket], [], [], 0)[0]:
                break
            raw.pgconn.consume_input()
            while raw.pgconn.notifies() is not None:
                pass
    except (psycopg.OperationalError, OSError, ValueError):
        return True
    return raw.pgconn.status != pq.ConnStatus.OK


# -- parameters -------------------------------------------------------------------

_translated: dict[str, tuple[str, tuple[str, ...] | None]] = {}


def translate(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """SQLite parameters to PostgreSQL's: ``?`` becomes ``$1, $2, ...``; ``:name`` becomes ``$k``.

    Returns the statement and, for named parameters, the names in ``$k``
    order (None for positional ones).  Quoted strings, quoted identifiers,
    comments, ``::`` casts and ``$$`` bodies are left alone.
    """
    cached = _translated.get(sql)
    if cached is not None:
        return cached
    out: list[str] = []
    names: list[str] = []
    positional = 0
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = i + 1
            while end < n:
                if sql[end] == ch:
                    if end + 1 < n and sql[end + 1] == ch:
                        end += 2
                        continue
                    break
                end += 1
            out.append(sql[i : end + 1])
            i = end + 1
        elif ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end])
            i = end
        elif ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end])
            i = end
        elif ch == "$" and sql.startswith("$$", i):
            end = sql.find("$$", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end])
            i = end
        elif ch == "?":
            positional += 1
            out.append(f"${positional}")
            i += 1
        elif ch == ":" and sql.startswith("::", i):
            out.append("::")
            i += 2
        elif ch == ":" and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_"):
            end = i + 1
            while end < n and (sql[end].isalnum() or sql[end] == "_"):
                end += 1
            name = sql[i + 1 : end]
            if name not in names:
                names.append(name)
            out.append(f"${names.index(name) + 1}")
            i = end
        else:
            out.append(ch)
            i += 1
    if positional and names:
        raise ValueError(f"a statement mixes ? and :name parameters: {sql[:200]}")
    result = ("".join(out), tuple(names) if names else None)
    if len(_translated) >= _CACHE_SIZE:
        _translated.clear()
    _translated[sql] = result
    return result


def _bind(names: tuple[str, ...] | None, params: Any) -> Sequence[Any] | None:
    if params is None:
        return None
    if names is None:
        if isinstance(params, Mapping):
            raise TypeError("named parameters given to a statement with ? placeholders")
        return params
    if not isinstance(params, Mapping):
        raise TypeError("a statement with :name placeholders needs a mapping of parameters")
    return [params[name] for name in names]


# -- the connection -------------------------------------------------------------------


class _Rows:
    """What a statement returned, read like an apsw cursor (a statement with no rows iterates nothing)."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: psycopg.Cursor[Any] | None) -> None:
        self._cursor = cursor

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self._cursor is None or self._cursor.description is None:
            return iter(())
        return iter(self._cursor)

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._cursor is None or self._cursor.description is None:
            return None
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self)


#: A statement held back: its text, its parameters (None: transaction control), and what takes its rows (None: nothing).
_Held = tuple[str, Any, "Callable[[_Rows], None] | None"]
#: What the store owner sends between two jobs of a batch (store.owner).
_NEXT_JOB: Final = "RELEASE job; SAVEPOINT job"
#: The owner's savepoints around each job (store.owner), which this connection keeps itself (see ``_job_mark``).
_JOB_CONTROL: Final = frozenset({"SAVEPOINT job", _NEXT_JOB, "RELEASE job"})
_SAVEPOINT_JOB: Final = ("SAVEPOINT job", None, None)
_RELEASE_JOB: Final = ("RELEASE job", None, None)
#: Transaction control the store owner sends (store.owner): passed through as written.
_UTILITY: Final = frozenset({
    "COMMIT", "ROLLBACK", "SAVEPOINT job", "RELEASE job", "ROLLBACK TO job", _NEXT_JOB,
    "SAVEPOINT entry", "RELEASE entry", "ROLLBACK TO entry",
})


@final
class PgConnection:
    """A psycopg connection that reads like the apsw one the store jobs were written for.

    ``dialect`` is ``"postgresql"`` (:mod:`store.dialect` branches on it);
    ``host`` is the broker host this role writes for.  A writer connection
    takes the store's write lock when a transaction begins (see the module
    docstring); a reader runs each ``with conn:`` block on one snapshot.
    """

    dialect: Final = POSTGRESQL

    def __init__(self, raw: psycopg.Connection[Any], *, host: str | None, writer: bool, release: Any = None) -> None:
        self.raw = raw
        self.host = host
        self.writer = writer
        self._release = release
        self._depth = 0
        self._cursor = raw.cursor()
        self._head: Any = None
        #: Ids counted inside this writer's transaction (:meth:`next_id`); forgotten with the head.
        self._ids: dict[str, int] = {}
        #: Statements held back (the owner's RELEASE/SAVEPOINT between two jobs, an event's INSERT, a read whose
        #: rows a callback takes): ``(text, params, consume)``, sent with the next statement.
        self._deferred: tuple[_Held, ...] = ()
        #: Round trips to the server so far (each one a wait for it): what the benchmarks and tests count.
        self.round_trips = 0
        #: The owner's savepoint for the job running now is made on the server only when the job
        #: talks to it: until then it is *pending*, and ``_job_mark`` is where the job's statements
        #: begin among those held back (a job that fails before sending anything is simply forgotten,
        #: and a job that sends nothing never costs the server a savepoint).  ``_job_saved``: it was sent.
        self._job_mark: int | None = None
        self._job_saved = False
        #: A send failed before the server saw all of it (psycopg refused a parameter, the connection
        #: broke): what was held back with it is gone, whichever job it was (:meth:`aborted`).
        self._send_failed = False
        #: The head and ids as they were at the owner's last ``SAVEPOINT job`` (what ``ROLLBACK TO job`` returns to).
        self._at_job: tuple[Any, dict[str, int]] = (None, {})

    # -- statements ---------------------------------------------------------------

    def execute(self, sql: str, params: Any = None) -> _Rows:
        if sql == "BEGIN IMMEDIATE":
            self._begin()
            return _Rows(None)
        if params is None and sql in _UTILITY:
            if sql in _JOB_CONTROL:
                self._job_control(sql)
                return _Rows(None)
            if sql == "ROLLBACK TO job":
                self._roll_back_job()
                return _Rows(None)
            if sql.startswith(("ROLLBACK", "COMMIT")):
                self._head = None
                self._ids.clear()
            if sql in ("ROLLBACK", "COMMIT"):
                self._job_mark, self._job_saved, self._send_failed = None, False, False
            if sql.startswith("ROLLBACK"):
                # What a rollback undoes need not be sent: keep only the transaction control held back
                # (the savepoint a ROLLBACK TO returns to), and nothing at all for a whole ROLLBACK.
                if sql == "ROLLBACK":
                    begun = not self._begin_held()
                    self._deferred = ()
                    if begun and not self.raw.closed and self.raw.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                        self.round_trips += 1
                        try:
                            self.raw.execute(sql, prepare=False)
                        except psycopg.OperationalError:
                            pass  # the session is gone, and with it the transaction: nothing left to roll back
                    return _Rows(None)
                self._deferred = _control(self._deferred)
            # Transaction control: sent as is, with anything held back, in one round trip.
            self._send((sql, None, None))
            return _Rows(None)
        text, names = translate(sql)
        cursor = self.raw.cursor()
        self._send((text, _bind(names, params), None), cursor)
        return _Rows(cursor)

    def _job_control(self, sql: str) -> None:
        """The owner's ``SAVEPOINT job``, ``RELEASE job`` and both at once between two jobs.

        A savepoint the server has (the job sent something) is released with
        the next statement; a new one starts pending at the end of what is held
        back, and the head and ids as they are now are kept for a rollback to it.
        """
        if sql != "SAVEPOINT job" and self._job_saved:
            self._deferred += (_RELEASE_JOB,)
        self._job_saved = False
        if sql == "RELEASE job":
            self._job_mark = None
            return
        self._job_mark = len(self._deferred)
        self._at_job = (self._head, dict(self._ids))

    def _roll_back_job(self) -> None:
        """Undo the job since the owner's ``SAVEPOINT job``, without a round trip of its own.

        A pending savepoint: the job sent nothing, so forget what it held back
        (what earlier jobs of a whole batch hold back stays).  A savepoint the
        server has: everything held back is this job's; keep only transaction
        control, and hold the ``ROLLBACK TO`` for the next statement (it also
        ends a transaction the server refused a statement in).  Either way the
        head and ids count on from where the job began.
        """
        assert self._job_mark is not None, "ROLLBACK TO job outside a job"
        self._head, ids = self._at_job
        self._ids = dict(ids)
        if self._job_saved:
            self._deferred = (*_control(self._deferred), ("ROLLBACK TO job", None, None))
        else:
            self._deferred = self._deferred[: self._job_mark]

    def _begin_held(self) -> bool:
        return bool(self._deferred) and self._deferred[0][0].startswith("BEGIN")

    def execute_later(self, sql: str, params: Any = None) -> None:
        """Hold a statement whose result no one reads (an event's INSERT) and send it with the next one.

        In order, in one round trip with whatever comes next; the store owner
        flushes at the end of every job (store.owner), so an error in it is
        still raised inside that job and rolls back only that job.
        """
        if self.getautocommit():
            self.execute(sql, params)  # no transaction to send it with: now
            return
        text, names = translate(sql)
        self._deferred += ((text, _bind(names, params), None),)

    def read_later(self, sql: str, params: Any, consume: Callable[[_Rows], None]) -> None:
        """Hold a read whose rows only ``consume`` takes, and send it with the next statement.

        Like :meth:`execute_later`: in order, in one round trip with whatever
        comes next; ``consume`` is called with the rows once they are back (by
        the end of the job at the latest, or of the batch when the store owner
        runs a batch whole: ``StoreOwner.call(..., replayable=True)``).  A
        read rolled back before it was sent is never sent, nor consumed.
        """
        if self.getautocommit():
            consume(self.execute(sql, params))
            return
        text, names = translate(sql)
        self._deferred += ((text, _bind(names, params), consume),)

    def flush(self) -> None:
        """Send what is held back (at the end of a job)."""
        if self._deferred:
            self._send()

    def _reach(self) -> None:
        """Before talking to the server other than through :meth:`_send`: what is held back goes first,
        and so does a pending job savepoint."""
        if self._deferred or (self._job_mark is not None and not self._job_saved):
            self._send()

    def _send(self, last: _Held | None = None, cursor: psycopg.Cursor[Any] | None = None) -> None:
        """What is held back, then ``last`` (on ``cursor``, whose rows the caller reads): one round trip.

        A pending job savepoint goes where the job's statements begin.
        """
        held, self._deferred = self._deferred, ()
        if self._job_mark is not None and not self._job_saved:
            held = (*held[: self._job_mark], _SAVEPOINT_JOB, *held[self._job_mark :])
            self._job_saved = True
        try:
            self._send_now(held, last, cursor)
        except BaseException:
            if held:
                self._send_failed = True
            raise

    def _send_now(self, held: tuple[_Held, ...], last: _Held | None, cursor: psycopg.Cursor[Any] | None) -> None:
        if not held:
            if last is not None:
                self.round_trips += 1
                text, params, _ = last
                if cursor is None:
                    self.raw.execute(text, prepare=False)
                else:
                    cursor.execute(text, params)
            return
        self.round_trips += 1
        statements = [*held, *([last] if last is not None else [])]
        if all(params is None for _, params, _ in statements) and cursor is None:
            self.raw.execute("; ".join(text for text, _, _ in statements), prepare=False)  # a simple query, many statements
            return
        # A pipeline: every statement sent at once, the results read at its end (an error is raised here).
        reads: list[tuple[psycopg.Cursor[Any], Callable[[_Rows], None]]] = []
        try:
            with self.raw.pipeline():
                for n, (text, params, consume) in enumerate(statements):
                    if n == len(statements) - 1 and cursor is not None:
                        cursor.execute(text, params)
                    elif consume is not None:
                        reader = self.raw.cursor()
                        reader.execute(text, params)
                        reads.append((reader, consume))
                    else:
                        self.raw.execute(text, params, prepare=None if params is not None else False)
        except psycopg.Error:
            _forget_prepared(self.raw)
            raise
        committed = last is not None and last[0] == "COMMIT"
        for reader, consume in reads:
            if not committed:
                consume(_Rows(reader))
                continue
            try:
                consume(_Rows(reader))
            except Exception:  # noqa: BLE001 -- the commit is done: an error now must not undo the answer
                log.exception("a held read's rows could not be taken after the commit")

    # -- the event log's head, while this writer holds the write lock ------------------------

    def cached_head(self) -> Any:
        """The event log's last event as this writer's transaction left it (None: read it from the table).

        Only a writer inside its transaction keeps one: it holds the write
        lock, so no one else appends, and every append is its own.  Forgotten
        at every BEGIN, COMMIT and rollback (a rolled-back append is gone).
        """
        return self._head

    def remember_head(self, head: Any) -> None:
        if self.writer and not self.getautocommit():
            self._head = head

    def next_id(self, table: str, query: str) -> int:
        """The next id for ``table``: ``query`` (max + 1) once per transaction, then counted here.

        Only a writer inside its transaction counts: it holds the write lock,
        so every row added meanwhile is its own (each one through here).  A
        wrong count could only make an INSERT fail on its key, never overwrite.
        """
        if not self.writer or self.getautocommit():
            return int(self.execute(query).fetchone()[0])  # type: ignore[index]
        if table not in self._ids:
            self._ids[table] = int(self.execute(query).fetchone()[0])  # type: ignore[index]
        else:
            self._ids[table] += 1
        return self._ids[table]

    def executemany(self, sql: str, rows: Iterable[Any]) -> None:
        text, names = translate(sql)
        batch = [_bind(names, r) for r in rows]
        if batch:
            self._reach()
            self.round_trips += 1
            try:
                self._cursor.executemany(text, batch)
            except psycopg.Error:
                _forget_prepared(self.raw)  # executemany runs as a pipeline too
                raise

    def last_insert_rowid(self) -> int:
        """The id the last INSERT into an identity column took (``lastval()``: this session's own)."""
        row = self.execute("SELECT lastval()").fetchone()  # with whatever is held back: one round trip
        assert row is not None
        return int(row[0])

    def broken(self) -> bool:
        """Is this connection's session over (see :func:`session_gone`)?  Asked between transactions."""
        return session_gone(self.raw)

    def aborted(self) -> bool:
        """This transaction cannot go on as it was: the server refused a statement in it (it is aborted
        until rolled back to a savepoint), a send failed with other statements in it, or the connection is gone."""
        if self._send_failed:
            return True
        if self._begin_held():
            return False  # nothing sent yet
        return self.raw.pgconn.transaction_status != pq.TransactionStatus.INTRANS

    def getautocommit(self) -> bool:
        """True outside a transaction (apsw's name for it; a BEGIN held back counts as begun)."""
        if self._begin_held():
            return False
        return self.raw.pgconn.transaction_status == pq.TransactionStatus.IDLE

    # -- transactions ------------------------------------------------------------------

    def _begin(self) -> None:
        self._head = None
        self._ids.clear()
        self._at_job = (None, {})
        self._job_mark, self._job_saved, self._send_failed = None, False, False
        self._deferred = ()  # a new transaction: whatever was held back belonged to the one that ended
        if self.writer:
            # Begin, then take the store's write lock: held back and sent with the first statement.
            # READ COMMITTED whatever the database's default: each statement after the lock sees
            # what the last holder committed (a snapshot taken while waiting would not).
            self._deferred = (("BEGIN ISOLATION LEVEL READ COMMITTED", None, None), (f"SELECT pg_advisory_xact_lock({WRITE_LOCK})", None, None))
        else:
            self.round_trips += 1
            self.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def __enter__(self) -> PgConnection:
        if self.getautocommit():
            self._begin()
            self._depth = 0
        else:
            self._depth += 1
            self._send((f"SAVEPOINT conclave_{self._depth}", None, None))
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is not None:
            # What the rollback undoes need not be sent (nor may its error replace the one raised).
            self._deferred = _control(self._deferred)
        try:
            if kind is None and self._depth == 0 and self._deferred:
                # What is held back goes with the COMMIT: one round trip.
                self._send(("COMMIT", None, None))
                self._end_block(failed=False)
                return
            self.flush()
        except BaseException:
            self._end_block(failed=True)
            raise
        self._end_block(failed=kind is not None)

    def _end_block(self, *, failed: bool) -> None:
        """Commit or roll back the outermost block; release or roll back to a nested one's savepoint."""
        if failed:
            self._head = None
            self._ids.clear()
        if self._depth == 0:
            self._head = None
            self._ids.clear()
            self._deferred = ()
            if self.raw.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                self.round_trips += 1
                self.raw.execute("ROLLBACK" if failed else "COMMIT")
            return
        name = f"conclave_{self._depth}"
        self._depth -= 1
        if failed:
            self.round_trips += 1
            self.raw.execute(f"ROLLBACK TO SAVEPOINT {name}")
        self.round_trips += 1
        self.raw.execute(f"RELEASE SAVEPOINT {name}")

    def close(self) -> None:
        if self._release is not None:
            self._release(self)
        else:
            self.raw.close()

    def discard(self) -> None:
        self.raw.close()


def _forget_prepared(raw: psycopg.Connection[Any]) -> None:
    """After a pipeline the server refused a statement in: forget every statement psycopg counts as prepared.

    psycopg records a statement it prepares inside a pipeline as prepared when it sends the Parse, but
    the server skips every message after the one it refused, that Parse too: the name, executed later
    (a good job of the replay), was refused as a prepared statement that does not exist.  psycopg has no
    public call for this; ``clear`` also sends DEALLOCATE ALL with the next statement, and statements are
    prepared again as they recur (tests/multihost/test_pg_owner.py holds both).
    """
    raw._prepared.clear()


def _control(held: tuple[_Held, ...]) -> tuple[_Held, ...]:
    """Only the transaction control of what is held back (what a rollback leaves to send)."""
    return tuple(h for h in held if h[1] is None and h[2] is None)


# -- the backend -------------------------------------------------------------------------


def require_utf8(raw: psycopg.Connection[Any], url: str) -> None:
    """Refuse a database whose encoding is not UTF8: agents write any Unicode text, and text the
    server cannot store would be refused only once a batch is on its way.

    Raises:
        StoreError: naming the encoding found and how to make a UTF8 database.
    """
    row = raw.execute("SHOW server_encoding").fetchone()
    encoding = str(row[0]) if row else "?"
    if encoding.upper() not in ("UTF8", "UTF-8"):
        raise StoreError(
            f"the PostgreSQL store {redact(url)} uses encoding {encoding}; conclave needs UTF8 (agents write any Unicode text). "
            "Create the database with CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0"
        )


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def connect(url: str) -> psycopg.Connection[Any]:
    """A raw autocommit connection (conclave issues BEGIN and COMMIT itself)."""
    try:
        return psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor, client_encoding="UTF8")
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot connect to the PostgreSQL store {redact(url)}: {str(exc).strip()}") from None


@final
class PostgresBackend:
    """A PostgreSQL database shared by every broker of a team (see the module docstring)."""

    dialect: Final = POSTGRESQL
    shared: Final = True

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = url
        self.migrate_on_open = migrate
        self.host: str | None = None
        self._pool: queue.SimpleQueue[PgConnection] = queue.SimpleQueue()
        self._pooled = 0

    def describe(self) -> str:
        return redact(self.url)

    def identify(self) -> str:
        """The host name this role is registered under (``conclave store add-broker``).

        Raises:
            StoreError: the database has no conclave schema yet, or this role
                is not registered as any host's broker.
        """
        raw = connect(self.url)
        try:
            try:
                row = raw.execute("SELECT conclave_host(), session_user").fetchone()
            except psycopg.errors.UndefinedFunction:
                raise StoreError(
                    f"{redact(self.url)} has no conclave schema; the database owner runs `conclave store init --url URL` first"
                ) from None
        finally:
            raw.close()
        assert row is not None
        host, role = row
        if host is None:
            raise StoreError(
                f"the role {role} is not registered as a broker in {redact(self.url)}; the database owner runs "
                f"`conclave store add-broker HOST --role {role}` (each broker logs in with a role of its own)"
            )
        self.host = host
        return host

    def open_writer(self, schemas: Sequence[Schema]) -> PgConnection:
        raw = connect(self.url)
        conn = PgConnection(raw, host=self.host, writer=True)
        try:
            require_utf8(raw, self.url)
            if self.migrate_on_open:
                migrate(conn, schemas)
            else:
                require_current(conn, schemas)
        except BaseException:
            raw.close()
            raise
        return conn

    def unreachable(self, exc: BaseException) -> bool:
        """Does ``exc`` say the server could not be reached, or the session with it ended (not a refusal of the request)?

        A cancelled statement, a deadlock or a lock timeout is the server's
        answer to the request, not its absence: only a connection error (no
        SQLSTATE, class 08) or the server shutting down (57P01-57P03) counts.
        """
        if isinstance(exc, (StoreError, psycopg.InterfaceError)):
            return True
        if not isinstance(exc, psycopg.OperationalError):
            return False
        state = exc.sqlstate
        return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")

    def disk_full(self, exc: BaseException) -> str | None:
        """The server's disk is full (SQLSTATE 53100): the request was refused, the session goes on."""
        if isinstance(exc, psycopg.errors.DiskFull):
            return f"the store's database on {redact(self.url)} (the server says: {(exc.diag.message_primary or str(exc)).strip()})"
        return None

    def open_reader(self) -> PgConnection:
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return PgConnection(connect(self.url), host=self.host, writer=False, release=self._give_back)
            if not session_gone(conn.raw):
                return conn
            conn.discard()  # its session ended while it waited here (a server restart): drop it, try the next

    def _give_back(self, conn: PgConnection) -> None:
        if conn.raw.closed or conn.raw.pgconn.transaction_status != pq.TransactionStatus.IDLE or self._pool.qsize() >= POOL_SIZE:
            conn.discard()
        else:
            self._pool.put(conn)

    def close(self) -> None:
        while True:
            try:
                self._pool.get_nowait().discard()
            except queue.Empty:
                return


# -- migrations --------------------------------------------------------------------------------

COMPONENT = "store"
#: The store's own PostgreSQL tables, before any feature's: the brokers and who they are.
MIGRATIONS: Final = (
    f"""
    DO $$ BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{BROKER_GROUP}') THEN
            CREATE ROLE {BROKER_GROUP} NOLOGIN;
        END IF;
    END $$;
    -- Which role speaks for which host.  Only the owner writes it (conclave store add-broker).
    CREATE TABLE IF NOT EXISTS conclave_brokers (
        host      TEXT PRIMARY KEY CHECK (host ~ '^[a-z0-9][a-z0-9-]{{0,62}}$'),
        role      TEXT NOT NULL UNIQUE,
        added_at  TEXT NOT NULL
    );
    GRANT SELECT ON conclave_brokers TO {BROKER_GROUP};
    -- The host the logged-in role is registered for; NULL for any other role.
    CREATE OR REPLACE FUNCTION conclave_host() RETURNS text
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
        AS $$ SELECT host FROM public.conclave_brokers WHERE role = session_user $$;
    -- Whether a principal key (HOST/AGENT:SESSION, or HOST/broker) is this role's host's.
    CREATE OR REPLACE FUNCTION conclave_owns(principal text) RETURNS boolean
        LANGUAGE sql STABLE SET search_path = pg_catalog, public
        AS $$ SELECT coalesce(starts_with(principal, conclave_host() || '/'), false) $$;
    CREATE OR REPLACE FUNCTION conclave_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION '%', TG_ARGV[0]; END $$;
    -- An UPDATE by a broker's role may set the named principal columns only to its own
    -- host's principals (or leave them as they were).  The owner is not checked.
    CREATE OR REPLACE FUNCTION conclave_owned_changes() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            col text;
            now_value text;
        BEGIN
            IF conclave_host() IS NULL THEN RETURN NEW; END IF;
            FOREACH col IN ARRAY TG_ARGV LOOP
                now_value := to_jsonb(NEW) ->> col;
                IF now_value IS DISTINCT FROM (to_jsonb(OLD) ->> col) AND now_value IS NOT NULL AND NOT conclave_owns(now_value) THEN
                    RAISE EXCEPTION 'role % may not set %.% to %: a principal of another host', session_user, TG_TABLE_NAME, col, now_value
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
            END LOOP;
            RETURN NEW;
        END $$;
    GRANT USAGE ON SCHEMA public TO {BROKER_GROUP};
    GRANT SELECT ON schema_versions TO {BROKER_GROUP};
    """,
)
SCHEMA: Final = Schema(COMPONENT, (), postgresql=MIGRATIONS)

#: The event log on PostgreSQL (``store.events`` holds SQLite's).  Append-only
#: twice over: no broker role has UPDATE or DELETE on it, and triggers refuse
#: them (and TRUNCATE) even for the owner.  A broker appends only events whose
#: actor is one of its own host's principals (``HOST/...``, ``HOST/broker``).
EVENTS_POSTGRESQL: Final = (
    f"""
    CREATE TABLE IF NOT EXISTS events (
        seq        BIGINT PRIMARY KEY,
        at         TEXT NOT NULL,
        kind       TEXT NOT NULL,
        actor      TEXT NOT NULL,
        subject    TEXT,
        payload    TEXT NOT NULL,
        prev_hash  TEXT NOT NULL,
        hash       TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS events_by_kind ON events(kind);
    CREATE INDEX IF NOT EXISTS events_by_actor ON events(actor);
    CREATE INDEX IF NOT EXISTS events_by_subject ON events(subject);
    CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION conclave_refuse_change('the event log is append-only');
    CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION conclave_refuse_change('the event log is append-only');
    ALTER TABLE events ENABLE ROW LEVEL SECURITY;
    CREATE POLICY events_read ON events FOR SELECT TO {BROKER_GROUP} USING (true);
    CREATE POLICY events_append ON events FOR INSERT TO {BROKER_GROUP} WITH CHECK (conclave_owns(actor));
    GRANT SELECT, INSERT ON events TO {BROKER_GROUP};
    """,
    # 2: a few subjects' events of a few kinds, as store/events.py's second migration says.
    """
    CREATE INDEX IF NOT EXISTS events_by_subject_kind ON events(subject, kind);
    """,
)


def _components(schemas: Sequence[Schema]) -> list[Schema]:
    from store import events

    out = [SCHEMA, Schema(events.COMPONENT, (), postgresql=EVENTS_POSTGRESQL), *schemas]
    missing = [s.component for s in out if not s.postgresql]
    if missing:
        raise StoreError(f"no PostgreSQL schema for {', '.join(missing)}; these components run on SQLite only")
    return out


def _versions(conn: PgConnection) -> dict[str, int]:
    exists = conn.execute("SELECT to_regclass('public.schema_versions') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return {}
    return dict(conn.execute("SELECT component, version FROM schema_versions"))


def migrate(conn: PgConnection, schemas: Sequence[Schema]) -> int:
    """Apply every pending PostgreSQL migration (the store's, the event log's, then ``schemas``').

    Runs in one transaction under the write lock, so two brokers starting at once migrate once
    and a failed migration leaves nothing half applied.

    Raises:
        StoreError: a migration is pending and this role may not apply it.
    """
    components = _components(schemas)
    done = _versions(conn)
    if all(done.get(s.component, 0) >= len(s.postgresql) for s in components):
        return sum(len(s.postgresql) for s in components)  # nothing to do (and a broker's role may do no DDL)
    try:
        with conn:
            conn.flush()  # the transaction and the write lock, now: the DDL below goes through raw
            conn.raw.execute("CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
            done = _versions(conn)  # again, under the lock: a broker that migrated meanwhile is seen
            for schema in components:
                have = done.get(schema.component, 0)
                for number, sql in enumerate(schema.postgresql[have:], start=have + 1):
                    try:
                        conn.raw.execute(sql)
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise StoreError(
                            f"migration {number} of {schema.component} is pending and role {conn.raw.info.user} may not apply it "
                            f"({str(exc).strip()}); the database owner runs `conclave store init --url URL`"
                        ) from None
                    conn.execute(
                        "INSERT INTO schema_versions(component, version) VALUES (?, ?) "
                        "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                        (schema.component, number),
                    )
    except psycopg.errors.InsufficientPrivilege:
        require_current(conn, schemas)
        raise
    return sum(len(s.postgresql) for s in components)


def require_current(conn: PgConnection, schemas: Sequence[Schema]) -> None:
    """Refuse a database whose schema is behind this conclave's.

    Raises:
        StoreError: naming what is behind and who brings it up to date.
    """
    try:
        done = _versions(conn)
    except psycopg.errors.InsufficientPrivilege:
        done = {}
    behind = [f"{s.component} ({done.get(s.component, 0)} of {len(s.postgresql)})" for s in _components(schemas) if done.get(s.component, 0) < len(s.postgresql)]
    if behind:
        raise StoreError(f"the PostgreSQL schema is behind this conclave: {', '.join(behind)}; the database owner runs `conclave store init --url URL`")


# -- the owner's tools -------------------------------------------------------------------------


def init(url: str, schemas: Sequence[Schema]) -> int:
    """Create or bring up to date conclave's tables, policies and group role (as the database owner).

    Returns the number of migrations the database now has.
    """
    raw = connect(url)
    try:
        require_utf8(raw, url)
        return migrate(PgConnection(raw, host=None, writer=True), schemas)
    finally:
        raw.close()


def add_broker(url: str, host: str, *, role: str, password: str | None = None) -> dict[str, Any]:
    """Register ``role`` as the broker of ``host`` (creating the role if missing), as the database owner.

    Raises:
        StoreError: a bad host name, or the host or role is taken already.
    """
    if not HOST_NAME.match(host):
        raise StoreError(f"host name {host!r}: use 1-63 lower-case letters, digits and dashes, starting with a letter or digit")
    if not re.match(r"^[a-z_][a-z0-9_]{0,62}$", role):
        raise StoreError(f"role name {role!r}: use lower-case letters, digits and underscores")
    raw = connect(url)
    try:
        with raw.transaction():
            taken = raw.execute("SELECT host, role FROM conclave_brokers WHERE host = $1 OR role = $2", (host, role)).fetchall()
            if taken:
                raise StoreError(f"already registered: {', '.join(f'{h} (role {r})' for h, r in taken)}; a host has one role and a role one host")
            exists = raw.execute("SELECT 1 FROM pg_roles WHERE rolname = $1", (role,)).fetchone()
            ident = psycopg.sql.Identifier(role)
            if not exists:
                raw.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(ident))
            if password is not None:
                raw.execute(psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(ident, psycopg.sql.Literal(password)))
            raw.execute(psycopg.sql.SQL("GRANT {} TO {}").format(psycopg.sql.Identifier(BROKER_GROUP), ident))
            from store import events

            raw.execute("INSERT INTO conclave_brokers(host, role, added_at) VALUES ($1, $2, $3)", (host, role, events.now()))
    finally:
        raw.close()
    return {"host": host, "role": role, "created_role": not exists}


def brokers(url: str) -> list[dict[str, Any]]:
    """Every registered broker: host, role, when it was added."""
    raw = connect(url)
    try:
        return [{"host": h, "role": r, "added_at": a} for h, r, a in raw.execute("SELECT host, role, added_at FROM conclave_brokers ORDER BY host")]
    finally:
        raw.close()


# -- notifications between brokers -----------------------------------------------------------------

#: How often the listening thread looks up from the socket to see whether it should stop.
LISTEN_POLL: Final = 0.25


async def listen(url: str, channel: str, deliver: Any, *, task_status: Any = None, missed: Any = None) -> None:
    """Call ``deliver(payload)`` on the trio loop for every NOTIFY on ``channel``, until cancelled.

    psycopg's asynchronous API is asyncio's and the broker is trio: the
    connection lives on a thread of its own, blocked in ``notifies()``; each
    notification hops back to the event loop with ``trio.from_thread``.  A
    notification is sent when the transaction that raised it commits, so a
    waiter woken here finds the row committed.  Started with
    ``nursery.start``: reports started once ``LISTEN`` is in place (a first
    connection that fails raises).

    When the session ends later (a server restart, a broken connection) it
    connects again, with the pauses of :func:`pauses`, and then calls
    ``missed()`` on the trio loop: whatever was sent meanwhile went unheard,
    so waiters should look again.
    """
    import threading

    import trio

    stop = threading.Event()
    token = trio.lowlevel.current_trio_token()
    ready = trio.Event()

    def hop(fn: Any, *args: Any) -> bool:
        """Run ``fn(*args)`` on the trio loop; False once the loop is gone."""
        try:
            trio.from_thread.run_sync(fn, *args, trio_token=token)
        except trio.RunFinishedError:
            return False
        return True

    def session(raw: psycopg.Connection[Any], again: bool) -> bool:
        raw.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        if not hop(ready.set) or (again and missed is not None and not hop(missed)):
            return False
        while not stop.is_set():
            for notice in raw.notifies(timeout=LISTEN_POLL):
                if not hop(deliver, notice.payload):
                    return False
        return False

    def loop() -> None:
        again = False
        waits = pauses()
        while not stop.is_set():
            try:
                raw = connect(url)
            except StoreError as exc:
                if not again:
                    raise
                log.warning("cannot listen on %s again yet: %s", channel, exc)
                stop.wait(next(waits))
                continue
            try:
                if not session(raw, again):
                    return
            except psycopg.OperationalError as exc:
                if not again and not ready.is_set():
                    raise
                log.warning("the session listening on %s ended (%s); connecting again", channel, str(exc).strip())
                again, waits = True, pauses()
            finally:
                raw.close()

    async with trio.open_nursery() as nursery:

        async def run_thread() -> None:
            try:
                await trio.to_thread.run_sync(loop, abandon_on_cancel=True)
            finally:
                stop.set()

        nursery.start_soon(run_thread)
        await ready.wait()
        if task_status is not None:
            task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            stop.set()
            nursery.cancel_scope.cancel()
