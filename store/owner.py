"""The store owner: the one task that holds the writer connection.

Every change to the state database is a *job* -- a plain function taking the
apsw connection -- sent to this task over a channel.  The owner runs jobs on
one worker thread, so SQLite never blocks the event loop and there is only
ever one writer.  Jobs that arrive together are committed together (group
commit): each runs inside its own SAVEPOINT, so one failing job rolls back
only itself, and the batch pays for one fsync instead of many.  This is what
lets eight agents remember thousands of claims a second.  On a database
server, where every wait for the server is paid while holding the store's
write lock, a batch of *replayable* jobs runs whole: their writes go with
the COMMIT, and if the server refuses anything the batch runs again job by
job (see :meth:`StoreOwner.call`).

Use :meth:`StoreOwner.call` from any task to change state and
:meth:`StoreOwner.read` to read on a connection of its own; never touch the
writer connection directly.

The owner also guards the event log's head (threat T3).  It keys the chain
(``store.chainkey``), remembers the last ``(seq, hash)`` it committed, and at
the start of every batch -- holding SQLite's write lock -- checks that the
database still ends there: if something appended or cut behind its back it
refuses every append from then on (:class:`~store.events.ChainRefused`) and
says so loudly.  Every batch that moved the head writes it to the anchor
file before committing (``store.anchor``; made durable by a sync on another
thread, at most every ``ANCHOR_SYNC_INTERVAL``), and shutdown writes and
syncs it once more.
At start, a database that disagrees with its anchor gets a
``store.anchor_mismatch`` event saying how (so ``conclave memory verify``
keeps naming it), and the run goes on from there.

On a store several brokers share (PostgreSQL, ``Backend.shared``) the head
moves between this owner's batches: other brokers append, under the same
write lock and the same key.  There the check is different.  The event this
owner saw last must still be in the log, unchanged, and every event after it
must link on and carry a MAC under the key (``events.verify_after``); the
owner then takes the head they lead to as its own and anchors it.  It refuses
only when something does not verify or the log shrank.  At start it verifies
what was appended since the head its anchor holds (the whole chain, the first
time, or when that head is gone).
"""

from __future__ import annotations

import errno
import logging
import math
import os
from pathlib import Path
from typing import Any, Callable, Final, Sequence, TypeVar, final

import apsw
import attrs
import outcome
import trio

from store import anchor, dialect, events
from store.backend import Backend, StoreUnavailable, pauses
from store.chainkey import ChainKey, ChainKeyError
from store.schema import Schema

log = logging.getLogger("conclave.store")
#: At most one fdatasync of the anchor per this many seconds.  A sync costs a disk flush
#: (0.4-0.8 ms here), and syncing after every batch halved serial commit throughput
#: (bench/store_commit.py); the pwrite before each commit already survives a killed broker.
ANCHOR_SYNC_INTERVAL: Final = 0.05
#: The event a starting owner writes when the database disagrees with its anchor.
ANCHOR_MISMATCH: Final = "store.anchor_mismatch"
#: What a broker on a shared store says when the log does not verify (docs/DEPLOYMENT.md: "When verify fails").
SHARED_REFUSAL: Final = "this broker appends nothing more (run `conclave memory verify`; docs/DEPLOYMENT.md says how to recover)"
#: The event a store gets when its state directory starts keeping a high-water record (so a deleted record is noticed).
HIGH_WATER: Final = "store.high_water"
#: The event an operator's ``conclave store accept-restore`` writes: an older copy was put back on purpose.
RESTORE_ACCEPTED: Final = "store.restore_accepted"
ACCEPT_HOW: Final = ("if you put that copy back on purpose, stop the broker and run `conclave store accept-restore` "
                     "(it records the decision in the log; docs/THREAT_MODEL.md, T3)")

T = TypeVar("T")
#: How long the broker's own bookkeeping waits for an unavailable store before it counts the write lost (seconds).
PATIENCE: Final = 300.0
#: Most jobs grouped into one transaction.
MAX_BATCH: Final = 256
#: Scheduling passes a busy owner yields (each one polls the sockets) before it
#: commits, so requests already on their way join the batch.  Microseconds, not a timer.
LINGER_PASSES: Final = 4


@final
@attrs.frozen
class ChainFiles:
    """Where the chain's secrets live, outside the database (``StatePaths.chain_key`` / ``chain_anchor`` /
    ``chain_high_water``)."""

    key: Path
    anchor: Path
    #: The highest head this state directory has seen (default: ``chain-high-water`` beside the anchor).
    high_water: Path | None = None

    @property
    def water(self) -> Path:
        return self.high_water if self.high_water is not None else self.anchor.with_name("chain-high-water")


@final
@attrs.frozen
class StoreStatistics:
    jobs: int
    batches: int
    largest_batch: int
    queued: int
    #: The last event committed, ``"SEQ:HASH"`` (None before the store opened).
    head: str | None
    #: Why no event may be appended (the log changed behind the owner's back, the key is missing); None when all is well.
    refusing: str | None
    #: Events a writer could not write even one by one (reported by :meth:`StoreOwner.report_lost`).
    lost_events: int
    #: Anchor records written (one per batch that moved the head) and fdatasyncs that made them durable.
    anchor_writes: int
    anchor_syncs: int
    #: Events other brokers appended to a shared store that this owner verified (always 0 on SQLite).
    verified_others: int = 0
    #: Batches run whole (every job replayable, on a server: one round trip for all their writes) and
    #: those of them that failed somewhere and ran again job by job.
    whole_batches: int = 0
    replayed_batches: int = 0
    #: Round trips to the database server on the writer connection (0 on SQLite, which has none).
    round_trips: int = 0
    #: Times the writer connected again after its session with the server ended.
    reconnects: int = 0


@attrs.define
class _Job:
    fn: Callable[[apsw.Connection], Any]
    replayable: bool = False
    done: trio.Event = attrs.Factory(trio.Event)
    result: outcome.Outcome | None = None


@final
class StoreOwner:
    """Owns the writer connection; runs submitted jobs in batched transactions.

    Start it in the broker's nursery with ``await nursery.start(owner.run)``;
    it opens the database through ``backend`` and applies every component's
    ``schemas`` before reporting started.
    """

    def __init__(self, backend: Backend, schemas: Sequence[Schema], *, chain: ChainFiles, accept_restore: bool = False) -> None:
        self.backend = backend
        self.chain = chain
        #: Accept a database older than the high-water record (the operator's ``conclave store accept-restore``).
        self._accept_restore = accept_restore
        #: Device and inode of each file the owner opened (database, WAL, SHM, key, anchor, high-water).
        self._watched: dict[Path, tuple[int, int]] = {}
        #: Why the store's files are not the ones it opened (then every request is refused until a restart).
        self._swapped: str | None = None
        self._high: anchor.AnchorFile | None = None
        self._new_water = False
        #: Restores accepted at this open (``conclave store accept-restore`` reports it).
        self.accepted: str | None = None
        self._schemas = tuple(schemas)
        self._send, self._receive = trio.open_memory_channel[_Job](math.inf)
        self._limiter = trio.CapacityLimiter(1)
        self._conn: apsw.Connection | None = None
        self._jobs = 0
        self._batches = 0
        self._largest = 0
        self._last_batch = 0
        self._head: events.Head | None = None
        self._anchor: anchor.AnchorFile | None = None
        self._refusing: str | None = None
        self._hurried = math.inf  # no stop yet: persist waits its own patience
        self._lost = 0
        self._anchor_dirty = trio.Event()
        self._anchor_unsynced = False
        self._anchor_writes = 0
        self._anchor_syncs = 0
        #: Other brokers append to the same log (PostgreSQL): verify what they wrote, do not refuse it.
        self._shared = bool(getattr(backend, "shared", False))
        self._key: ChainKey | None = None
        self._keyed_from = 1
        self._verified_others = 0
        self._whole = 0
        self._replayed = 0
        self._reconnects = 0
        self._old_trips = 0  # round trips on writer connections since replaced

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._conn = await trio.to_thread.run_sync(self.backend.open_writer, self._schemas, limiter=self._limiter)
        try:
            await trio.to_thread.run_sync(self._open_chain, self._conn, limiter=self._limiter)
            await trio.to_thread.run_sync(self._watch_files, limiter=self._limiter)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, limiter=self._limiter)
            raise
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_anchor_synced)
                task_status.started()
                async with self._receive:
                    async for job in self._receive:
                        # Under load (the last batch had company), linger a moment so the
                        # jobs of requests already on their way join this batch: one commit
                        # instead of several.  An idle store never waits.
                        for _ in range(LINGER_PASSES if self._last_batch > 1 else 1):
                            await trio.lowlevel.checkpoint()
                        batch = [job]
                        while len(batch) < MAX_BATCH:
                            try:
                                batch.append(self._receive.receive_nowait())
                            except trio.WouldBlock:
                                break
                        # Shielded: a batch that started must finish and report,
                        # or its callers would wait forever on a half-run job.
                        with trio.CancelScope(shield=True):
                            await trio.to_thread.run_sync(self._run_batch, batch, limiter=self._limiter)
                        if self._anchor_unsynced:
                            self._anchor_dirty.set()
                        for finished in batch:
                            finished.done.set()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, limiter=self._limiter)

    async def _keep_anchor_synced(self) -> None:
        """``fdatasync`` the anchor after batches that wrote it, on a thread of its own, at most every ``ANCHOR_SYNC_INTERVAL``.

        The writer goes on meanwhile; one sync covers every record written
        before it.  What a power failure can cost is the last interval of
        anchor records (the database itself, committed with
        ``synchronous=NORMAL``, can lose more: its last commits since a
        checkpoint).
        """
        while True:
            await self._anchor_dirty.wait()
            self._anchor_dirty = trio.Event()
            self._anchor_unsynced = False
            anchor_file, water, head = self._anchor, self._high, self._head
            # The high-water record follows, durably, never lower: what names an older copy put back later.
            raise_water = water is not None and head is not None and self._refusing is None and (water.head is None or head.seq > water.head.seq)
            try:
                # One trip to a worker thread for both (each is a wake-up of a thread and of the loop).
                synced = await trio.to_thread.run_sync(_sync_records, anchor_file, water if raise_water else None, head)
                self._anchor_syncs += synced
            except OSError as exc:
                # A full disk (or a failing one) must not end the broker: the next batch's write says so to its callers.
                log.error("could not make the anchor or the high-water record durable: %s", exc)
                self._anchor_unsynced = True
            await trio.sleep(ANCHOR_SYNC_INTERVAL)

    def _close(self) -> None:
        """Anchor the head one last time (unless the log was found tampered with) and close."""
        conn, self._conn = self._conn, None
        try:
            for record in (self._anchor, self._high):
                if record is None:
                    continue
                try:
                    if self._refusing is None and self._head is not None and (record is self._anchor or record.head is None or self._head.seq >= record.head.seq):
                        record.write(self._head, self._head)
                except OSError as exc:
                    log.error("could not write %s at shutdown: %s", record.path, exc)
                record.close()
            self._anchor = self._high = None
        finally:
            if conn is not None:
                conn.close()

    async def call(self, fn: Callable[[apsw.Connection], T], *, replayable: bool = False) -> T:
        """Run ``fn(conn)`` in a transaction on the owner's thread; return its result.

        Raises whatever ``fn`` raised; its changes are then rolled back.

        ``replayable``: ``fn`` reads and writes only through ``conn`` (no other
        state, no effects outside the database), so it may run twice.  On a
        server, a batch of nothing but replayable jobs runs whole: every write
        held back and sent with the next read or the COMMIT, a job's savepoint
        made only if the job talks to the server -- a few round trips for the
        batch instead of one per job.  A job that raises on its own still rolls
        back alone; if the server refuses a statement, or a send fails, it may
        have been any job's, so the batch is rolled back and run again job by
        job, and each failure is its own job's (``StoreStatistics.replayed_batches``).
        """
        job = _Job(fn, replayable)
        await self._send.send(job)
        await job.done.wait()
        assert job.result is not None
        return job.result.unwrap()

    def hurry(self, patience: float) -> None:
        """From now on :meth:`persist` waits at most ``patience`` seconds more (the broker is stopping: a full
        disk or an unreachable server must not hold a SIGTERM for minutes)."""
        self._hurried = min(self._hurried, trio.current_time() + patience)

    async def persist(self, fn: Callable[[apsw.Connection], Any], *, what: str, patience: float = PATIENCE) -> bool:
        """Run ``fn`` as a job that must not be dropped: wait out a store that is unavailable for a while.

        For the broker's own bookkeeping (an agent spawned or ended, the run
        stopped), which no request waits for: a full disk, a server restart or
        a store refusing changes must not end the broker.  Tries again with
        growing pauses for up to ``patience`` seconds; if it never gets
        through, the loss is counted and said loudly (``lost_events``), and
        False is returned.
        """
        waits = pauses()
        deadline = trio.current_time() + patience
        while True:
            try:
                await self.call(fn)
                return True
            except (StoreUnavailable, events.ChainRefused) as exc:
                left = min(deadline, self._hurried) - trio.current_time()  # a stop begun while this waited shortens it
                # Files swapped behind the broker are refused until it restarts: waiting would only hold up its stop.
                if left <= 0 or isinstance(exc, events.ChainRefused) or self._swapped is not None:
                    self.report_lost(1, f"{what}: {exc}")
                    return False
                log.warning("%s waits for the store: %s", what, exc)
                await trio.sleep(min(next(waits), left))

    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` on a fresh read-only connection in a worker thread (WAL: it sees committed data)."""

        def run() -> T:
            self.check_files()
            conn = self.backend.open_reader()
            try:
                if self._key is not None:
                    events.bind_checker(conn, self._key, self._keyed_from)
                with conn:
                    return fn(conn)
            finally:
                conn.close()

        try:
            return await trio.to_thread.run_sync(run)
        except Exception as exc:
            if self._unreachable(exc):
                raise StoreUnavailable(f"the store's server cannot be reached: {exc}") from None
            full = self._disk_full(exc)
            if full is not None:
                raise full from None
            raise

    def check_files(self) -> None:
        """Raise :class:`StoreUnavailable` when the store's files are not the ones it opened (as :meth:`read` does).

        For a reader in another process (``verify``'s walk), which opens the
        database by its path: checked before it starts and after it ends.
        """
        swapped = self._files_changed()
        if swapped is not None:
            raise StoreUnavailable(swapped)

    def close(self) -> None:
        self._send.close()

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            jobs=self._jobs,
            batches=self._batches,
            largest_batch=self._largest,
            queued=self._send.statistics().current_buffer_used,
            head=None if self._head is None else str(self._head),
            refusing=self._refusing,
            lost_events=self._lost,
            anchor_writes=self._anchor_writes,
            anchor_syncs=self._anchor_syncs,
            verified_others=self._verified_others,
            whole_batches=self._whole,
            replayed_batches=self._replayed,
            round_trips=self._old_trips + getattr(self._conn, "round_trips", 0),
            reconnects=self._reconnects,
        )

    @property
    def head(self) -> events.Head | None:
        """The last event this owner committed (what it expects the database to end with)."""
        return self._head

    @property
    def refusing(self) -> str | None:
        """Why appends are refused; None while they are not."""
        return self._refusing

    def report_lost(self, count: int, what: str) -> None:
        """A writer could not write ``count`` event(s) it had acknowledged: count them and say so loudly.

        The writer also tries to record a ``broker.error`` event naming them
        (``conclave memory verify`` lists those); this is for ``broker.stats``
        and the log when even that fails.
        """
        self._lost += count
        log.error("LOST %d event(s) the broker had acknowledged: %s", count, what)

    # -- the chain's head -------------------------------------------------------

    def _open_chain(self, conn: apsw.Connection) -> None:
        """Key the chain, hold the database against its anchor, and start anchoring (worker thread).

        The key is looked for, made and bound under the store's write lock: two
        brokers starting at once on one shared store key its log once.
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            opened = self._key_chain(conn)
        except BaseException:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        if opened is None:
            return
        key, since = opened
        self._key = key
        self._keyed_from = events.keyed_from(conn) or 1
        if self._shared:
            head = self._catch_up(conn, key, since)
            if head is None:
                return
            self._head = head
        else:
            self._head = events.head(conn)
        self._anchor = anchor.AnchorFile(self.chain.anchor, key)
        self._anchor.write(self._head, self._head)
        # Written now whatever it held: the check above passed (the log still holds what it recorded) or
        # the operator accepted the older copy in front of it.
        self._high = anchor.AnchorFile(self.chain.water, key, tag=anchor.HIGH_WATER)
        self._high.write(self._head, self._head)

    def _key_chain(self, conn: apsw.Connection) -> tuple[ChainKey, events.Head | None] | None:
        """Inside the write lock: load (or make) the key, bind it, hold the log against the anchor.

        Returns the key and, on a shared store, the anchored head still in the
        log (None: verify the whole chain); None when appends are refused.
        """
        files = self.chain
        switch = events.key_switch(conn)
        found = events.head(conn)
        try:
            key = ChainKey.load(files.key)
        except ChainKeyError as exc:
            self._refuse(conn, f"{exc}; nothing can be appended until it is restored")
            return None
        made = key is None
        if key is None:
            if switch is not None or files.anchor.exists():
                self._refuse(conn, self._missing_key(switch))
                return None
            key = ChainKey.create(files.key)
        reading = anchor.read(files.anchor, key)
        since = None
        if reading.missing and (self._shared or (switch is None and (made or found == events.EMPTY))):
            # A fresh store, one an older conclave wrote (the key is made now), or a shared store
            # this broker joins: nothing was ever anchored here.
            mismatch = None
        elif reading.missing and switch is None:
            # The key was here, yet the log never says it was keyed and the anchor is gone: the
            # keyed history was replaced (re-keying it now would bless the replacement).
            mismatch = (f"the chain key {files.key} exists but the event log has no record of being keyed and the anchor "
                        f"{files.anchor} is gone: the log was rewritten without the key")
        elif self._shared:
            since, mismatch = anchor.locate(reading, lambda seq: events.hash_at(conn, seq), found)
        else:
            mismatch = anchor.compare(reading, found)
        events.key_chain(conn, key)
        refused = events.refusal(conn)
        if refused is not None:
            self._refuse(conn, refused)
            return None
        water = anchor.read(files.water, key, tag=anchor.HIGH_WATER)
        rolled = None if made else self._rolled_back(conn, water, found)
        if rolled is not None:
            if not self._accept_restore:
                also = f"; and against its anchor: {mismatch}" if mismatch is not None else ""
                self._refuse(conn, f"{rolled}{also}; {ACCEPT_HOW}")
                return None
            recorded = water.record.head if water.record is not None else None
            with conn:
                events.append(conn, RESTORE_ACCEPTED, actor=events.BROKER_ACTOR, payload={
                    "problem": rolled, "accepted_by": "the operator (conclave store accept-restore)",
                    "recorded": None if recorded is None else [recorded.seq, recorded.hash], "found": [found.seq, found.hash],
                })
            self.accepted = rolled
            log.warning("an older copy of the store was accepted by the operator: %s", rolled)
        if water.missing or rolled is not None:
            with conn:
                events.append(conn, HIGH_WATER, actor=events.BROKER_ACTOR, payload={"file": str(files.water), "from": [found.seq, found.hash]})
        if mismatch is not None:
            log.error("the state database disagrees with its anchor: %s", mismatch)
            anchored = reading.record.head if reading.record is not None else None
            with conn:
                events.append(conn, ANCHOR_MISMATCH, actor=events.BROKER_ACTOR, payload={
                    "problem": mismatch,
                    "anchored": None if anchored is None else [anchored.seq, anchored.hash],
                    "found": [found.seq, found.hash],
                })
        return key, since

    def _rolled_back(self, conn: apsw.Connection, water: anchor.AnchorReading, found: events.Head) -> str | None:
        """Inside the write lock, at start: is the log still one this state directory has seen (the high-water record)?

        The record names the highest head this state directory saw: the log
        must still hold that event with that hash.  An older copy of the
        database put back -- with its anchor, even its WAL -- ends before it,
        or holds another event there.  Kept apart from the anchor (another
        MAC tag, another file) so restoring "database and anchor" together is
        still named.  None when all is well.
        """
        path = self.chain.water
        record = water.record
        if record is None:
            if not water.missing:
                return f"the high-water record {path} cannot be used: {water.problem}"
            kept = conn.execute("SELECT seq FROM events WHERE kind = ? AND actor = ? ORDER BY seq LIMIT 1",
                                (HIGH_WATER, events.qualify(conn, events.BROKER_ACTOR))).fetchone()
            if kept is None:
                return None  # a state directory that never kept one (a fresh store, or an older conclave's)
            return (f"the high-water record {path} is gone, though this state directory has kept one since event {kept[0]}: it was "
                    "deleted, or this database was moved here from another state directory")
        seen = record.head
        if seen.seq == 0 or events.hash_at(conn, seen.seq) == seen.hash:
            return None
        if found.seq < seen.seq:
            return (f"the event log ends at event {found.seq}, but this state directory has seen it reach event {seen.seq} "
                    f"(its high-water record {path}): an older copy of the database was put back, with or without its anchor "
                    f"(or its last {seen.seq - found.seq} event(s) were lost to a power failure)")
        return (f"event {seen.seq} is not the event this state directory saw there (its high-water record {path}): "
                "the database was replaced by another copy")

    def _missing_key(self, switch: events.KeySwitch | None) -> str:
        files = self.chain
        keyed = f"key {switch.key_id}, by {switch.actor}" if switch is not None else "key ?"
        if self._shared and switch is not None and "/" in switch.actor:
            return (f"the event log is keyed ({keyed}) but this broker has no chain key at {files.key}: every broker sharing the store "
                    f"appends with the one key; copy {switch.actor.split('/')[0]}'s chain-key file there (mode 0600; docs/DEPLOYMENT.md)")
        return (f"the event log is keyed ({keyed}) but the chain key {files.key} is missing: "
                "restore it from your copy; nothing can be appended without it")

    def _catch_up(self, conn: apsw.Connection, key: ChainKey, since: events.Head | None) -> events.Head | None:
        """On a shared store, at start: verify what other brokers appended since this one's anchored head.

        From ``since``, the anchored head, when it is still in the log; else (a
        broker joining, or a head that is gone: the mismatch is recorded) the
        whole chain.  Outside the write lock: the others go on appending
        meanwhile, and the first batch verifies the rest.  None when something
        does not verify (appends are refused).
        """
        report = events.verify_chain(conn, key) if since is None else events.verify_after(conn, key, since)
        if not report.ok:
            self._refuse(conn, f"{report.reason}; {SHARED_REFUSAL}")
            return None
        if since is not None:
            self._verified_others += report.events
        return report.head

    def refuse(self, reason: str) -> None:
        """From now on refuse every append, saying ``reason`` (something outside the batches found the log broken)."""
        if self._refusing is None:
            self._refusing = reason
            log.error("the event log refuses appends: %s", reason)
        if self._conn is not None:
            events.refuse_appends(self._conn, reason)

    def _refuse(self, conn: apsw.Connection, reason: str) -> None:
        if self._refusing is None:
            self._refusing = reason
            log.error("the event log refuses appends: %s", reason)
        events.refuse_appends(conn, reason)

    def _check_head(self, conn: apsw.Connection) -> None:
        """Inside the batch's write lock: does the database still end where this owner left it?

        On a shared store: is the event it saw last still there, and does
        everything after it verify?  The head then moves to the last of them.
        """
        if self._head is None or self._refusing is not None:
            return
        if self._shared:
            return self._check_shared_head(conn)
        found = events.head(conn)
        if found != self._head:
            what = "cut" if found.seq < self._head.seq else "appended to" if found.seq > self._head.seq else "rewritten"
            reason = (f"the event log was {what} behind the broker's back: the broker's last event is {self._head.seq} "
                      f"({self._head.hash[:16]}...), the database's is {found.seq} ({found.hash[:16]}...); "
                      "appends are refused until the broker is restarted (run `conclave memory verify`)")
            self._refuse(conn, reason)

    def _check_shared_head(self, conn: apsw.Connection) -> None:
        assert self._head is not None and self._key is not None
        report = events.verify_after(conn, self._key, self._head)
        if not report.ok:
            self._refuse(conn, f"{report.reason}; {SHARED_REFUSAL}")
            return
        if report.head != self._head:
            # Others appended: their events are committed whatever this batch does.
            self._verified_others += report.events
            if self._anchor is not None:
                self._anchor.write(self._head, report.head, sync=False)
                self._anchor_unsynced = True
                self._anchor_writes += 1
            self._head = report.head

    def _run_batch(self, batch: list[_Job]) -> None:
        self._jobs += len(batch)
        self._batches += 1
        self._largest = max(self._largest, len(batch))
        self._last_batch = len(batch)
        conn = self._writer(batch)
        if conn is None:
            return
        swapped = self._files_changed()
        if swapped is not None:
            self._refuse(conn, swapped)
            for job in batch:  # an outcome each: one is unwrapped once, by its own caller
                job.result = outcome.Error(StoreUnavailable(swapped))
            return
        if self._shared and all(job.replayable for job in batch):
            self._whole += 1
            if self._run_jobs(conn, batch, whole=True):
                return
            self._replayed += 1
        self._run_jobs(conn, batch, whole=False)
        for job in batch:
            # A full disk is the store's state, not the request's fault: every caller hears it in the same words.
            if isinstance(job.result, outcome.Error):
                full = self._disk_full(job.result.error)
                if full is not None:
                    job.result = outcome.Error(full)
        if dialect.broken(conn):
            # The session ended under the batch (a server restart): say so, not the driver's words
            # (a job refused for its own reasons before that keeps its refusal).
            for job in batch:
                if isinstance(job.result, outcome.Error) and self._unreachable(job.result.error):
                    job.result = outcome.Error(StoreUnavailable(
                        f"the session with the store's server ended during this request ({job.result.error}); if it ended "
                        "at the commit the change may have been made: look before doing it again"))

    def _unreachable(self, exc: BaseException) -> bool:
        check = getattr(self.backend, "unreachable", None)
        return bool(check is not None and check(exc))

    def _disk_full(self, exc: BaseException) -> StoreUnavailable | None:
        """``exc`` as the store's words for a full disk (naming the file), or None when it is something else.

        Nothing of the batch was committed; what was acknowledged before stays.
        The broker goes on, and the first batch after space returns succeeds.
        """
        if isinstance(exc, StoreUnavailable):
            return exc if str(exc).startswith("disk full") else None
        where: str | None = None
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f"{exc.filename or self.chain.anchor}"
        else:
            describe = getattr(self.backend, "disk_full", None)
            where = describe(exc) if describe is not None else None
        if where is None:
            return None
        log.error("disk full: %s", where)
        return StoreUnavailable(f"disk full: no room left to write {where}; nothing of this request was written (everything acknowledged "
                                "before is intact). Free some space: the broker carries on by itself once there is room")

    # -- the store's files --------------------------------------------------------------

    def _files(self) -> list[Path]:
        """Every file the owner has open: the database and its WAL and SHM (SQLite), the key, the anchor, the high-water record."""
        out = []
        database = getattr(self.backend, "path", None)
        if database is not None:
            out += [Path(database), Path(f"{database}-wal"), Path(f"{database}-shm")]
        return out + [self.chain.key, self.chain.anchor, self.chain.water]

    def _watch_files(self) -> None:
        """Note the device and inode of each file just opened (worker thread)."""
        watched = {}
        for path in self._files():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            watched[path] = (st.st_dev, st.st_ino)
        self._watched = watched

    def _files_changed(self) -> str | None:
        """Why the files are not the ones opened -- one renamed over, unlinked, replaced -- or None.

        The attack: with the broker running, a snapshot of the database and its
        anchor is renamed over them and the WAL and SHM names are unlinked.  The
        writer would go on with the descriptors it holds while every new reader
        opened the snapshot -- an acknowledged retirement gone, and nothing the
        chain or the anchor could show.  Checked before every batch and every
        read (a few ``stat`` calls); once it fails, every request is refused.
        """
        if self._swapped is not None:
            return self._swapped
        for path, (device, inode) in self._watched.items():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                now = "it is gone"
            else:
                if (st.st_dev, st.st_ino) == (device, inode):
                    continue
                now = f"device:inode {device}:{inode} when opened, {st.st_dev}:{st.st_ino} now"
            reason = (f"{path} is not the file this broker opened ({now}): it was replaced or removed behind the broker's back; "
                      "every request on the store is refused until the broker is restarted (which checks what it finds; "
                      "`conclave memory verify` names it)")
            if self._swapped is None:
                self._swapped = reason
                self._refusing = self._refusing or reason
                log.error("%s", reason)
            return reason
        return None

    def _writer(self, batch: list[_Job]) -> Any:
        """The writer connection, connected again if its session with the server ended; None (and every job
        of ``batch`` failed) while the server cannot be reached."""
        conn = self._conn
        assert conn is not None
        if not dialect.broken(conn):
            return conn
        log.warning("the writer's session with the store's server ended; connecting again")
        try:
            conn.close()
        except Exception:  # noqa: BLE001 -- a dead session may fail even to close; it is gone either way
            pass
        try:
            fresh = self.backend.open_writer(self._schemas)
        except Exception as exc:  # noqa: BLE001 -- told to every job of the batch
            for job in batch:  # an outcome each: one is unwrapped once, by its own caller
                job.result = outcome.Error(StoreUnavailable(f"the store's server cannot be reached: {exc}"))
            return None
        events.carry_binding(conn, fresh)
        self._old_trips += getattr(conn, "round_trips", 0)
        self._conn = fresh
        self._reconnects += 1
        return fresh

    def _run_jobs(self, conn: Any, batch: list[_Job], *, whole: bool) -> bool:
        """The batch in one transaction, each job inside a savepoint; False if a whole batch must run again.

        Job by job, each job's statements reach the database before it counts
        as done, so whatever fails is that job's and rolls back alone.  Whole
        (see :meth:`call`), what a job holds back may go with a later job's
        statement or the COMMIT: a job that raises while the database has
        refused nothing still rolls back alone, but once the database refuses
        a statement, or the commit, it may have been any job's -- then the
        transaction is rolled back, nothing is reported, and this returns False.
        """
        run = (lambda fn, conn: fn(conn)) if whole else _run_job
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._check_head(conn)
            conn.execute("SAVEPOINT job")
            for n, job in enumerate(batch, start=1):
                job.result = outcome.capture(run, job.fn, conn)
                if isinstance(job.result, outcome.Error):
                    if whole and dialect.aborted(conn):
                        raise _Replay
                    conn.execute("ROLLBACK TO job")
                # One statement between two jobs: a round trip fewer on a server.
                conn.execute("RELEASE job; SAVEPOINT job" if n < len(batch) else "RELEASE job")
            moved = self._anchor_new_head(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            if whole:
                return False
            failure = exc if isinstance(exc, Exception) else RuntimeError(str(exc))
            for job in batch:  # an outcome each: one is unwrapped once, by its own caller
                job.result = outcome.Error(failure)
            return True
        if moved is not None:
            self._head = moved
        return True

    def _anchor_new_head(self, conn: Any) -> events.Head | None:
        """Before the commit: write the head the batch leads to into the anchor; the new head, or None if it did not move.

        A crash in between leaves the database at either head; the record is
        synced right after, on another thread (:meth:`_keep_anchor_synced`).
        """
        if self._anchor is None or self._refusing is not None:
            return None
        new = events.head(conn)
        if new == self._head:
            return None
        assert self._head is not None
        self._anchor.write(self._head, new, sync=False)
        self._anchor_unsynced = True
        self._anchor_writes += 1
        return new


def _sync_records(anchor_file: anchor.AnchorFile | None, water: anchor.AnchorFile | None, head: events.Head | None) -> int:
    """On a worker thread: make the anchor durable, then write the high-water record ``head`` (durably); 1 if the anchor was synced."""
    if anchor_file is not None:
        anchor_file.sync()
    if water is not None and head is not None:
        water.write(head, head)
    return int(anchor_file is not None)


class _Replay(Exception):
    """A whole batch met a refusal it cannot pin on one job: run it again job by job."""


def _run_job(fn: Callable[[Any], Any], conn: Any) -> Any:
    """One job on the writer.  A server connection sends what it held back before the job counts as
    done (``PgConnection.execute_later``), so an error there is this job's and rolls back only this job."""
    result = fn(conn)
    dialect.flush(conn)
    return result
