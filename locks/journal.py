"""Writing the lock table's history behind it, in order, in batches.

The lock table decides in memory and must answer in microseconds; waiting
for a store transaction on every grant would make a lock cost several times
a no-op round trip.  So each decision appends its event to this journal
(synchronously, stamped with the time it happened) and one task writes the
queue to the event log in batches, in the order the decisions were made.
Lock state itself is not stored -- it dies with the broker -- so nothing can
disagree with the log; a crash can lose at most what was queued and not yet
written: the events of the last ``GATHER`` seconds plus the batch in flight
(docs/LOCKS.md gives the window measured under load).
:meth:`Journal.flush` waits until everything queued so far is written
(``lock log`` calls it first, and so does the end of every agent).

A batch that fails is never dropped: its entries are written again one by
one, so one bad event cannot take other agents' history with it, and any
entry that still cannot be written is reported loudly -- in the broker's
log, as a ``broker.error`` event (``conclave memory verify`` lists those) and
in ``broker.stats`` (``lost_events``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Final, Sequence, final

import apsw
import trio

from store import dialect, events
from store.backend import StoreUnavailable, pauses
from store.owner import StoreOwner

log = logging.getLogger("conclave.locks")
#: Most events written in one store job.
MAX_BATCH: Final = 1024
#: How long the writer lets events gather before a batch (unless someone flushes):
#: one store transaction per batch instead of one per lock decision.
GATHER: Final = 0.02
#: How long a flush may wait before giving up (it runs in shielded cleanup).
FLUSH_TIMEOUT: Final = 10.0

Job = Callable[[apsw.Connection], None]
Entry = tuple[str, str, str | None, dict[str, Any] | None, str] | Job


@final
class Journal:
    """A write-behind queue of events (and small bookkeeping jobs) for the store owner."""

    def __init__(self, store: StoreOwner) -> None:
        self._store = store
        self._pending: list[Entry] = []
        self._arrived = trio.Event()
        self._queued = 0
        self._written = 0
        self._progress = trio.Event()
        self._hurry = trio.Event()

    def add(self, kind: str, *, actor: str, subject: str | None = None, payload: dict[str, Any] | None = None, at: str | None = None) -> None:
        """Queue one event; ``at`` defaults to now (pass the decision's own timestamp)."""
        self._queued += 1
        self._pending.append((kind, actor, subject, payload, at or events.now()))  # an events.Pending when written
        self._arrived.set()

    def also(self, job: Job) -> None:
        """Run ``job(conn)`` in the next batch, in order with the events."""
        self._push(job)

    def _push(self, entry: Entry) -> None:
        self._queued += 1
        self._pending.append(entry)
        self._arrived.set()

    @property
    def backlog(self) -> int:
        return self._queued - self._written

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._arrived.wait()
            with trio.move_on_after(GATHER):
                await self._hurry.wait()
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            if not self._pending:
                self._arrived = trio.Event()
            await self._write(batch)
            self._written += len(batch)
            self._progress.set()
            self._progress = trio.Event()
            if self._written >= self._queued:
                self._hurry = trio.Event()

    async def _write(self, batch: list[Entry]) -> None:
        """Write ``batch`` in one store job; if that fails, entry by entry; report what still fails.

        While the store's server is out of reach (``StoreUnavailable``: a
        restart, a broken connection) the batch waits and is tried again --
        kept, not lost.  (A session that ended at the very commit may have
        written it already: then its events appear twice.)
        """
        waits = pauses()
        while True:
            try:
                await self._store.call(lambda conn: _write(conn, batch))
                return
            except StoreUnavailable as exc:
                log.warning("%d lock event(s) wait for the store's server: %s", len(batch), exc)
                await trio.sleep(next(waits))
            except Exception as exc:
                log.warning("a batch of %d lock event(s) failed (%s: %s); writing them one at a time", len(batch), type(exc).__name__, exc)
                break
        try:
            failed = await self._store.call(lambda conn: _write_each(conn, batch))
        except Exception as exc:  # the store refused the whole job: every entry is lost
            failed = [(entry, exc) for entry in batch]
        if failed:
            await report_lost(self._store, [(describe(entry), error) for entry, error in failed])

    async def flush(self) -> None:
        """Return once everything queued before this call is in the store."""
        target = self._queued
        self._hurry.set()
        with trio.move_on_after(FLUSH_TIMEOUT):
            while self._written < target:
                await self._progress.wait()


def _write(conn: apsw.Connection, batch: list[Entry]) -> None:
    """Write a batch in order: each run of events in one statement, jobs between them."""
    run: list[events.Pending] = []
    for entry in batch:
        if type(entry) is tuple:
            run.append(events.Pending(*entry))
            continue
        if run:
            events.append_many(conn, run)
            run = []
        entry(conn)
    if run:
        events.append_many(conn, run)


def _write_each(conn: apsw.Connection, batch: Sequence[Entry]) -> list[tuple[Entry, Exception]]:
    """Write each entry in its own savepoint; return the ones that failed, with why."""
    failed = []
    for entry in batch:
        conn.execute("SAVEPOINT entry")
        try:
            _write(conn, [entry])
            dialect.flush(conn)  # a server connection's held-back INSERTs: their errors are this entry's
        except Exception as exc:
            conn.execute("ROLLBACK TO entry")
            failed.append((entry, exc))
        conn.execute("RELEASE entry")
    return failed


def describe(entry: Entry) -> dict[str, Any]:
    """What a lost entry was, in text that can always be written (unencodable characters escaped)."""
    if type(entry) is not tuple:
        return {"kind": "job", "job": _printable(getattr(entry, "__qualname__", repr(entry)))}
    kind, actor, subject, payload, at = entry
    return {
        "kind": _printable(kind),
        "actor": _printable(actor),
        "subject": None if subject is None else _printable(subject),
        "at": _printable(at),
        "payload": _printable(repr(payload))[:500],
    }


def _printable(text: str) -> str:
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


async def report_lost(store: StoreOwner, lost: list[tuple[dict[str, Any], Exception]]) -> None:
    """Say loudly that acknowledged events could not be written: the log, broker.stats, and a broker.error event each."""
    summary = "; ".join(f"{d['kind']} by {d.get('actor')} on {d.get('subject')} at {d.get('at')} ({type(e).__name__}: {_printable(str(e))})" for d, e in lost)
    store.report_lost(len(lost), summary)

    def record(conn: apsw.Connection) -> None:
        for what, error in lost:
            events.append(conn, "broker.error", actor=events.BROKER_ACTOR, subject="event_lost",
                          payload={"error": "event_lost", "event": what, "reason": f"{type(error).__name__}: {_printable(str(error))}"})

    try:
        await store.call(record)
    except Exception:
        log.exception("could not even record that %d event(s) were lost", len(lost))
