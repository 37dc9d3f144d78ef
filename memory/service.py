"""The memory inside one broker: the settings in force, groom runs, the automatic trigger.

One :class:`MemoryService` lives in ``core.extensions["memory"]``, made by
``memory.ops.start`` when the core opens -- in a running broker and in the
in-process core an operator command opens when no broker runs.  Writes go
through the store owner; long reads (groom's plan) use a read connection of
their own in a worker thread, so they never hold the writer while they
think; verify's record walk, the longest and largest, runs in a short-lived
child process (``memory.walk``), so its memory is never the broker's.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Final, TypeVar, final

import apsw
import attrs
import trio

from memory import groom, semantic, verify, walk
from memory.retrieval import Probe
from store import events, integrity
from store.backend import StoreUnavailable
from store.events import ChainRefused
from store.events import BROKER_ACTOR
from store.integrity import ExpectedHead
from memory.policy import TrustPolicy
from memory.settings import MemorySettings

if TYPE_CHECKING:
    from broker.core import BrokerCore

log = logging.getLogger("conclave.memory")
T = TypeVar("T")
#: Retirements and review pairs listed in a groom reply (the counts cover them all;
#: ``memory log --kind retire`` has every one).  Keeps a 100k-claim plan under the wire's line limit.
REPORTED_STEPS: Final = 500
#: The automatic trigger looks at its counters at most this often (seconds).
MAX_CHECK_INTERVAL: Final = 30.0
#: The background verify's first run after the broker starts (seconds; sooner when ``verify_every`` is shorter):
#: the team's agents start first, and a broker that lives less than this (a one-off command's, a test's) never
#: spends a walk's start (about 0.2 s of CPU in a child) on it.  Its least pause, in runs' lengths:
FIRST_WATCH: Final = 30.0
BACKGROUND_DUTY: Final = 50
#: The event recording what the background verify found (once per new set of findings).
TAMPERING_FOUND: Final = "store.tampering_found"


@final
@attrs.frozen
class WatchStatistics:
    """The background verify so far (``memory.stats``: ``background_verify``)."""

    runs: int = 0
    last_at: str | None = None
    last_seconds: float | None = None
    problems: int = 0
    first_problem: str | None = None
    #: Runs whose walk did not finish (each also the run's one problem while it is the last).
    failed: int = 0
    #: The last run's walk: the child process that did it, and its peak resident memory (MB; None if it failed).
    walker_pid: int | None = None
    walker_peak_rss_mb: float | None = None


@final
class MemoryService:
    """Settings, grooming and verification for one store.

    The automatic groom runs only when *both* ``groom_after_claims`` new
    claims and ``groom_after_seconds`` since the last run have accumulated:
    a busy minute does not trigger a sweep, and neither does a quiet month
    with three new claims.  Counters are kept here (``remember`` bumps them)
    so the check costs nothing per write.
    """

    def __init__(self, core: BrokerCore, settings: MemorySettings) -> None:
        self.core = core
        self.settings = settings
        self._grooming = trio.Lock()
        self._new_claims = 0
        self._since: datetime | None = None
        self.groom_runs = 0
        self.watched = WatchStatistics()
        from memory.meaning import Meaning

        self.meaning = Meaning(core, settings.embedder)

    @property
    def policy(self) -> TrustPolicy:
        return self.settings.trust

    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` on a fresh read-only connection in a worker thread (WAL: it sees committed data)."""
        return await self.core.store.read(fn)

    # -- groom -------------------------------------------------------------------

    async def groom(self, *, actor: str, dry_run: bool) -> dict[str, Any]:
        """Plan on a read connection; apply in chunks through the store owner, re-checking each step."""
        async with self._grooming:
            plan = await self.read(lambda conn: groom.plan(conn, self.settings.groom))
            if dry_run:
                return {"dry_run": True, **plan.as_dict(listed=REPORTED_STEPS)}
            run = f"groom@{plan.at}"
            retired = skipped = 0
            for chunk in groom.chunks(plan.retire):
                done, left = await self.core.store.call(lambda conn, c=chunk: groom.apply_chunk(conn, c, actor=actor, run=run))
                retired += done
                skipped += left
            summary = await self.core.store.call(
                lambda conn: groom.finish(conn, plan, actor=actor, run=run, retired=retired, skipped=skipped)
            )
            self.groom_runs += 1
            await self._reset_counters()
            listed = plan.as_dict(listed=REPORTED_STEPS)
            return {"dry_run": False, **summary, **{k: listed[k] for k in ("retire", "review", "unused", "omitted")}}

    async def probe(self, query: str) -> Probe | None:
        """The meaning side of a search for ``query`` (None: by words only -- meaning off, or the embedder down)."""
        index = self.meaning.index
        if index is None:
            return None
        vector = await self.meaning.query_vector(query)
        return None if vector is None else Probe(index, vector, semantic.RELEVANT_AT)

    def note_new_claim(self) -> None:
        self.meaning.note_new_claim()
        self._new_claims += 1
        if self._since is None:
            self._since = datetime.now(timezone.utc)

    async def _reset_counters(self) -> None:
        state = await self.read(groom.state)
        self._new_claims = state.new_claims
        since = state.last_at or state.first_new_at
        self._since = datetime.fromisoformat(since) if since else None

    async def auto_groom(self) -> None:
        """The background trigger (only in a running broker)."""
        policy = self.settings.groom
        interval = min(max(policy.after_seconds / 4, 0.2), MAX_CHECK_INTERVAL)
        await self._reset_counters()
        while True:
            await trio.sleep(interval)
            if self._new_claims < policy.after_claims or self._since is None:
                continue
            if (datetime.now(timezone.utc) - self._since).total_seconds() < policy.after_seconds:
                continue
            try:
                state = await self.read(groom.state)
                if state.due(policy, datetime.now(timezone.utc)):
                    await self.groom(actor=BROKER_ACTOR, dry_run=False)
                else:
                    await self._reset_counters()
            except (StoreUnavailable, ChainRefused) as exc:
                log.warning("the automatic groom waits for the store: %s", exc)  # a full disk must not end the broker

    # -- verify ------------------------------------------------------------------

    async def watch(self, every: float) -> None:
        """Verify the whole store in the background, every ``every`` seconds (a running broker only).

        What the decisions cannot see as they read -- an event deleted from
        the middle of the log, a row deleted, an exposure row changed -- is
        named within one interval: the keyed chain walked and every projected
        table rebuilt and compared, by a short-lived process of the broker's
        own (``memory.walk``: the rebuild never grows the broker), bounded by
        a timeout that grows with the log.  Each new set of findings is logged
        and recorded once as a keyed ``store.tampering_found`` event; a broken
        chain also stops the store appending (as a cut or an append behind its
        back does).  A walk that did not finish (killed, crashed, timed out,
        garbage) is a failed run: logged, counted, shown as the run's problem,
        never a pass -- and not a finding about the store.  A walk that took T
        seconds waits at least ``BACKGROUND_DUTY`` x T before the next, so a
        large store costs a bounded share of one core.
        """
        store = self.core.store
        reported: tuple[str, ...] = ()
        await trio.sleep(min(every, FIRST_WATCH))
        while True:
            began = trio.current_time()
            committed = store.head
            try:
                walked = await walk.records(store, list(self.core.projectors), committed=committed, timeout=walk.timeout_for(committed))
            except (StoreUnavailable, ChainRefused) as exc:
                log.warning("the background verify waits for the store: %s", exc)
                await trio.sleep(every)
                continue
            except walk.WalkFailed as exc:
                took = trio.current_time() - began
                log.error("the background verify failed: %s", exc)
                w = self.watched
                self.watched = WatchStatistics(w.runs + 1, events.now(), round(took, 3), 1, f"the background verify failed: {exc}", w.failed + 1, exc.pid, None)
                await trio.sleep(max(every, took * BACKGROUND_DUTY))
                continue
            took = trio.current_time() - began
            sentences = tuple(p.problem for p in walked.problems)
            self.watched = WatchStatistics(
                self.watched.runs + 1, events.now(), round(took, 3), len(sentences), sentences[0] if sentences else None,
                self.watched.failed, walked.pid, round(walked.peak_rss_kb / 1024, 1),
            )
            if sentences and sentences != reported:
                reported = sentences
                log.error("the background verify found %d problem(s); the first: %s", len(sentences), sentences[0])
                broken = next((f for f in walked.chain.findings if f.event is not None), None)
                payload = {"problems": len(sentences), "first": list(sentences[:5])}
                try:
                    await store.call(lambda conn: events.append(conn, TAMPERING_FOUND, actor=BROKER_ACTOR, payload=payload))
                except (StoreUnavailable, ChainRefused) as exc:
                    log.error("could not record what the background verify found: %s", exc)
                if broken is not None:
                    store.refuse(f"the background verify found the event log broken: {broken.problem}; appends are refused until the broker is restarted")
            # The duty counts the walk, not the child's start (its imports: a fixed fraction of a second).
            await trio.sleep(max(every, walked.seconds * BACKGROUND_DUTY))

    async def verify(self, expect: ExpectedHead | None = None, *, hung_up: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
        """The operator's verify: the key, the anchor and the search indexes here; the record walk in a child
        process (``memory.walk``), with no timeout -- it ends when the operator's client hangs up (``hung_up``)."""
        store = self.core.store
        key, key_problems = await trio.to_thread.run_sync(integrity.load_key, store.chain.key)

        def under_the_writer(conn: apsw.Connection) -> tuple[list[verify.Problem], Any, str | None, list[integrity.Finding], Any]:
            # A job runs inside a batch, and every batch starts by checking, under the write lock,
            # that the database still ends at the head the owner committed; and the anchor's newest
            # record names that head until this batch commits.  So all three are read together here.
            committed = store.head
            # A store refused at open (its head was never taken): hold the anchor against what the database ends with.
            anchor_problems, reading = integrity.check_anchor(store.chain.anchor, key, committed or events.head(conn))
            return verify.check_indexes(conn), committed, store.refusing, anchor_problems, reading

        index_problems, committed, refusing, anchor_problems, reading = await store.call(under_the_writer)
        problems = [verify.Problem(f.problem) for f in key_problems] + index_problems
        if refusing is not None:
            problems.append(verify.Problem(f"the broker refuses to append events: {refusing}"))
        problems += [verify.Problem(f.problem) for f in anchor_problems]
        try:
            walked = await walk.records(store, list(self.core.projectors), committed=committed, expect=expect, timeout=None, hung_up=hung_up)
            chain, record_problems, not_rebuilt, walk_facts = walked.chain, walked.problems, walked.not_rebuilt, walked.facts()
        except walk.WalkFailed as exc:
            log.error("verify failed: %s", exc)
            chain = integrity.ChainFindings(0, committed or events.EMPTY, (), {})
            record_problems = [verify.Problem(f"{exc}: the chain and the tables were not checked; run `conclave memory verify` again")]
            not_rebuilt = ["every table: not rebuilt, since the record walk did not finish"]
            walk_facts = {"pid": exc.pid, "seconds": None, "peak_rss_mb": None, "failed": str(exc)}
        anchored = reading.record.head if reading.record is not None else None
        facts = {
            "key_file": str(store.chain.key),
            "anchor_file": str(store.chain.anchor),
            "anchor": None if anchored is None else {"seq": anchored.seq, "hash": anchored.hash},
            "committed": None if committed is None else {"seq": committed.seq, "hash": committed.hash},
        }
        return {**verify.report(chain, record_problems + problems, facts, not_rebuilt), "walk": walk_facts}
