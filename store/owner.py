"""The store owner: the one task that holds the writer connection.

Every change to the state database is a *job* -- a plain function taking the
apsw connection -- sent to this task over a channel.  The owner runs jobs on
one worker thread, so SQLite never blocks the event loop and there is only
ever one writer.  Jobs that arrive together are committed together (group
commit): each runs inside its own SAVEPOINT, so one failing job rolls back
only itself, and the batch pays for one fsync instead of many.  This is what
lets eight agents remember thousands of claims a second.

Use :meth:`StoreOwner.call` from any task to change state and
:meth:`StoreOwner.read` to read on a connection of its own; never touch the
writer connection directly.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Final, Sequence, TypeVar, final

import apsw
import attrs
import outcome
import trio

from store.backend import Backend
from store.schema import Schema

T = TypeVar("T")
#: Most jobs grouped into one transaction.
MAX_BATCH: Final = 256
#: Scheduling passes a busy owner yields (each one polls the sockets) before it
#: commits, so requests already on their way join the batch.  Microseconds, not a timer.
LINGER_PASSES: Final = 4


@final
@attrs.frozen
class StoreStatistics:
    jobs: int
    batches: int
    largest_batch: int
    queued: int


@attrs.define
class _Job:
    fn: Callable[[apsw.Connection], Any]
    done: trio.Event = attrs.Factory(trio.Event)
    result: outcome.Outcome | None = None


@final
class StoreOwner:
    """Owns the writer connection; runs submitted jobs in batched transactions.

    Start it in the broker's nursery with ``await nursery.start(owner.run)``;
    it opens the database through ``backend`` and applies every component's
    ``schemas`` before reporting started.
    """

    def __init__(self, backend: Backend, schemas: Sequence[Schema]) -> None:
        self.backend = backend
        self._schemas = tuple(schemas)
        self._send, self._receive = trio.open_memory_channel[_Job](math.inf)
        self._limiter = trio.CapacityLimiter(1)
        self._conn: apsw.Connection | None = None
        self._jobs = 0
        self._batches = 0
        self._largest = 0
        self._last_batch = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._conn = await trio.to_thread.run_sync(self.backend.open_writer, self._schemas, limiter=self._limiter)
        try:
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
                    for finished in batch:
                        finished.done.set()
        finally:
            with trio.CancelScope(shield=True):
                conn, self._conn = self._conn, None
                if conn is not None:
                    await trio.to_thread.run_sync(conn.close, limiter=self._limiter)

    async def call(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn(conn)`` in a transaction on the owner's thread; return its result.

        Raises whatever ``fn`` raised; its changes are then rolled back.
        """
        job = _Job(fn)
        await self._send.send(job)
        await job.done.wait()
        assert job.result is not None
        return job.result.unwrap()

    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` on a fresh read-only connection in a worker thread (WAL: it sees committed data)."""

        def run() -> T:
            conn = self.backend.open_reader()
            try:
                with conn:
                    return fn(conn)
            finally:
                conn.close()

        return await trio.to_thread.run_sync(run)

    def close(self) -> None:
        self._send.close()

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            jobs=self._jobs,
            batches=self._batches,
            largest_batch=self._largest,
            queued=self._send.statistics().current_buffer_used,
        )

    def _run_batch(self, batch: list[_Job]) -> None:
        conn = self._conn
        assert conn is not None
        self._jobs += len(batch)
        self._batches += 1
        self._largest = max(self._largest, len(batch))
        self._last_batch = len(batch)
        conn.execute("BEGIN IMMEDIATE")
        try:
            for job in batch:
                conn.execute("SAVEPOINT job")
                job.result = outcome.capture(job.fn, conn)
                if isinstance(job.result, outcome.Error):
                    conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            conn.execute("COMMIT")
        except BaseException as exc:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            failure = outcome.Error(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            for job in batch:
                job.result = failure
