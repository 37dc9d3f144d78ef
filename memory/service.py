"""The memory inside one broker: the settings in force, groom runs, the automatic trigger.

One :class:`MemoryService` lives in ``core.extensions["memory"]``, made by
``memory.ops.start`` when the core opens -- in a running broker and in the
in-process core an operator command opens when no broker runs.  Writes go
through the store owner; long reads (groom's plan, verify's walk) use a
read connection of their own in a worker thread, so they never hold the
writer while they think.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Final, TypeVar, final

import apsw
import trio

from memory import groom, meaning_verify, semantic, verify
from memory.retrieval import Probe
from store import integrity
from store.events import BROKER_ACTOR
from store.integrity import ExpectedHead
from memory.policy import TrustPolicy
from memory.settings import MemorySettings

if TYPE_CHECKING:
    from broker.core import BrokerCore

T = TypeVar("T")
#: Retirements and review pairs listed in a groom reply (the counts cover them all;
#: ``memory log --kind retire`` has every one).  Keeps a 100k-claim plan under the wire's line limit.
REPORTED_STEPS: Final = 500
#: The automatic trigger looks at its counters at most this often (seconds).
MAX_CHECK_INTERVAL: Final = 30.0


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
            state = await self.read(groom.state)
            if state.due(policy, datetime.now(timezone.utc)):
                await self.groom(actor=BROKER_ACTOR, dry_run=False)
            else:
                await self._reset_counters()

    # -- verify ------------------------------------------------------------------

    async def verify(self, expect: ExpectedHead | None = None) -> dict[str, Any]:
        store = self.core.store
        key, key_problems = await trio.to_thread.run_sync(integrity.load_key, store.chain.key)

        def under_the_writer(conn: apsw.Connection) -> tuple[list[verify.Problem], Any, str | None, list[integrity.Finding], Any]:
            # A job runs inside a batch, and every batch starts by checking, under the write lock,
            # that the database still ends at the head the owner committed; and the anchor's newest
            # record names that head until this batch commits.  So all three are read together here.
            committed = store.head
            anchor_problems, reading = integrity.check_anchor(store.chain.anchor, key, committed)
            return verify.check_indexes(conn), committed, store.refusing, anchor_problems, reading

        index_problems, committed, refusing, anchor_problems, reading = await store.call(under_the_writer)
        problems = [verify.Problem(f.problem) for f in key_problems] + index_problems
        if refusing is not None:
            problems.append(verify.Problem(f"the broker refuses to append events: {refusing}"))
        problems += [verify.Problem(f.problem) for f in anchor_problems]
        def records(conn: apsw.Connection) -> tuple[Any, list[verify.Problem]]:
            chain, found = verify.check_records(conn, self.policy, key=key, committed=committed, expect=expect)
            return chain, found + meaning_verify.check(conn)

        chain, record_problems = await self.read(records)
        anchored = reading.record.head if reading.record is not None else None
        facts = {
            "key_file": str(store.chain.key),
            "anchor_file": str(store.chain.anchor),
            "anchor": None if anchored is None else {"seq": anchored.seq, "hash": anchored.hash},
            "committed": None if committed is None else {"seq": committed.seq, "hash": committed.hash},
        }
        return verify.report(chain, record_problems + problems, facts)
