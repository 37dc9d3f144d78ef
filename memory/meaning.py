"""Meaning in a running broker: the embedder's threads, background embedding, the vector index.

One :class:`Meaning` lives in the memory service.  It never runs the model
on the event loop:

* **queries** (``recall``, ``context``) and a witness's **evidence** are
  embedded on one worker thread at normal priority, a request at a time; a
  small cache keeps the vectors of recent queries (an agent's hook asks the
  same thing again and again);
* **claims** are embedded in the background on another worker thread, at a
  lower CPU priority (``nice`` 10, so requests win the cores), in batches
  of :data:`BATCH`, oldest first.  ``remember`` only wakes the loop: the
  claim is stored at once and found by its words until its vector is
  written.  Each batch is then absorbed in one store job
  (``memory.absorb``): the vectors with a ``memory.embed`` event, the
  semantic prefilter's verdicts, and rediscoveries.

Memory is bounded: a batch holds :data:`BATCH` texts, the query cache
:data:`QUERY_CACHE` vectors, and the index a few hundred bytes a claim
(``memory.vectors``).  On a store several brokers share, each broker embeds
its own host's claims (it alone may write their rows) and reads everyone's.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Final, TypeVar, final

import trio

from memory import absorb, embedder, probe, semantic, vectors
from memory.authoring import NO_EVIDENCE, EvidenceMatch
from memory.embedder import EmbedderConfig, EmbedderUnavailable

if TYPE_CHECKING:
    import numpy as np

    from broker.core import BrokerCore
    from memory.policy import TrustPolicy

log = logging.getLogger("conclave.memory.meaning")
T = TypeVar("T")

BATCH: Final = 32
#: Texts a worker thread embeds between looks at whether the broker is stopping.  One: the batch thread runs
#: at a lower priority, and on a saturated machine four long texts took it more than 30 s.
CHUNK: Final = 1
QUERY_CACHE: Final = 1024
#: How often an idle loop looks for claims it was not woken for (another broker's restart, a failed batch).
IDLE_LOOK: Final = 30.0
BACKGROUND_NICE: Final = 10


def model_name(config: EmbedderConfig) -> str | None:
    """The vectors' space ``config`` makes, known without loading anything."""
    if config.kind == "none":
        return None
    return f"http:{config.model}" if config.kind == "http" else embedder.LOCAL_MODEL


def _lower_priority() -> None:
    # Linux: a thread's nice value is its own (setpriority on its thread id).
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except OSError:
        pass


class _Retry(Exception):
    """The embedder could not answer this batch (its error is in ``Meaning.error``): back off and look again."""


class _Closed(Exception):
    """The broker is stopping: a batch in the worker thread ends at its next chunk."""


@final
class Meaning:
    """The embedder, its two worker threads, the vector index and the background loop of one broker."""

    def __init__(self, core: BrokerCore, config: EmbedderConfig) -> None:
        self.core = core
        self.config = config
        self.model = model_name(config)
        self.index = vectors.VectorIndex(self.model) if self.model else None
        self.error: str | None = None
        self.embedded = 0
        self.batches = 0
        self.refused = 0
        self.linked = 0
        self._query_pool = ThreadPoolExecutor(1, thread_name_prefix="conclave-embed-query")
        self._batch_pool = ThreadPoolExecutor(1, thread_name_prefix="conclave-embed-batch", initializer=_lower_priority)
        self._models: dict[str, embedder.Embedder] = {}
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._wake = trio.Event()
        self._idle = trio.Event()
        self._exemplars: semantic.Exemplars | None = None
        self._closing = threading.Event()

    @property
    def enabled(self) -> bool:
        return self.model is not None

    def describe(self) -> dict[str, Any]:
        return {
            "embedder": self.config.describe(),
            "model": self.model,
            "error": self.error,
            "embedded": self.embedded,
            "batches": self.batches,
            "refused_by_meaning": self.refused,
            "linked": self.linked,
            "index": self.index.statistics() if self.index is not None else None,
        }

    # -- the worker threads ---------------------------------------------------------------

    def _model(self, which: str) -> embedder.Embedder:
        # Called on that pool's thread only: each thread has its own model handle.
        found = self._models.get(which)
        if found is None:
            made = embedder.make(self.config)
            assert made is not None
            found = self._models[which] = made
        return found

    async def _run(self, pool: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
        future = pool.submit(fn)
        return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)

    def _in_chunks(self, which: str, texts: list[str], role: str) -> np.ndarray:
        """``texts`` embedded a few at a time on that pool's thread, stopping between chunks once the broker
        stops: the interpreter's exit waits for the thread, and a batch of long texts on a loaded machine
        takes many seconds (a stop must not)."""
        import numpy as np

        model = self._model(which)
        chunks = []
        for start in range(0, len(texts), CHUNK):
            if self._closing.is_set():
                raise _Closed
            chunks.append(model.embed(texts[start : start + CHUNK], role))
        return np.concatenate(chunks) if len(chunks) != 1 else chunks[0]

    async def _embed(self, which: str, texts: list[str], role: str) -> np.ndarray | None:
        pool = self._query_pool if which == "query" else self._batch_pool
        try:
            out = await self._run(pool, lambda: self._in_chunks(which, texts, role))
        except EmbedderUnavailable as exc:
            if self.error != str(exc):
                log.warning("memory: %s", exc)
            self.error = str(exc)
            return None
        self.error = None
        return out

    # -- on request -------------------------------------------------------------------------

    async def query_vector(self, text: str) -> np.ndarray | None:
        """The query's vector (None when meaning is off or the embedder cannot answer: search by words)."""
        if not self.enabled:
            return None
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        out = await self._embed("query", [text], "query")
        if out is None:
            return None
        self._cache[text] = out[0]
        while len(self._cache) > QUERY_CACHE:
            self._cache.popitem(last=False)
        return out[0]

    async def evidence_match(self, claim_text: str, evidence: str | None) -> EvidenceMatch:
        """Does a witness's own statement say what the claim says?  By meaning, or by words without an embedder."""
        if evidence is None:
            return NO_EVIDENCE
        if not self.enabled:
            return _evidence(semantic.word_overlap(claim_text, evidence), "words")
        out = await self._embed("query", [claim_text, evidence], "passage")
        if out is None:
            return _evidence(semantic.word_overlap(claim_text, evidence), "words")
        return _evidence(float(out[0] @ out[1]), "meaning")

    def note_new_claim(self) -> None:
        self._wake.set()
        if self._idle.is_set():
            self._idle = trio.Event()

    async def settle(self, timeout: float) -> bool:
        """Wait until every claim written so far is embedded and absorbed (False: not within ``timeout``)."""
        if not self.enabled:
            return True
        with trio.move_on_after(timeout):
            await self._idle.wait()
            return True
        return False

    # -- in the background ------------------------------------------------------------------

    async def exemplars(self) -> semantic.Exemplars | None:
        """The prefilter's labelled exemplars as vectors of this model (shipped for the local model; else embedded once)."""
        if self._exemplars is None and self.model is not None:
            shipped = semantic.shipped_vectors(self.model)
            if shipped is None:
                made = await self._embed("batch", [e.text for e in semantic.EXEMPLARS], "passage")
                if made is None:
                    return None
                shipped = made
            self._exemplars = semantic.Exemplars(semantic.EXEMPLARS, shipped, probe.shipped(self.model))
        return self._exemplars

    async def run(self, policy: Callable[[], TrustPolicy]) -> None:
        """Embed every live claim this broker owns that has no vector yet, in batches, for ever."""
        if self.model is None:
            return
        model = self.model
        host = self.core.host
        prefix = f"{host}/" if host is not None else None
        index = self.index
        assert index is not None
        try:
            await self.core.store.call(index.catch_up)  # load the vectors now, not in the first search
        except Exception as exc:  # the first search catches up instead
            log.warning("memory: the vector index will load at the first search: %s", exc)
        try:
            await self._look_for_ever(policy, model, prefix)
        finally:
            self.close()  # cancelled: the broker stops

    async def _look_for_ever(self, policy: Callable[[], TrustPolicy], model: str, prefix: str | None) -> None:
        high, backoff = 0, 1.0
        while True:
            try:
                high = await self._one_look(policy, model, prefix, high)
                backoff = 1.0
            except _Retry:
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as exc:  # the store unreachable (a server restarting), a failed batch: never the broker's end
                if self.error != str(exc):
                    log.warning("memory: the background embedder will try again: %s", exc)
                self.error = f"the background embedder will try again: {exc}"
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _one_look(self, policy: Callable[[], TrustPolicy], model: str, prefix: str | None, high: int) -> int:
        """Embed and absorb one batch; returns the new high-water mark (raises :class:`_Retry` to back off)."""
        store = self.core.store
        self._wake = trio.Event()  # a claim remembered from here on wakes the next look
        batch = await store.read(lambda conn: vectors.unembedded(conn, model, after=high, limit=BATCH, author_prefix=prefix))
        if not batch:
            if self._wake.is_set():
                return high
            self._idle.set()
            with trio.move_on_after(IDLE_LOOK) as idle:
                await self._wake.wait()
            return 0 if idle.cancelled_caught else high  # an idle look goes over everything once more
        found = await self._embed("batch", [text for _, text in batch], "passage")
        exemplars = await self.exemplars() if found is not None else None
        if found is None or exemplars is None:
            raise _Retry
        blobs = {claim_id: vectors.encode(v) for (claim_id, _), v in zip(batch, found)}
        verdicts = {claim_id: exemplars.judge(v) for (claim_id, _), v in zip(batch, found)}
        assert self.index is not None
        index = self.index
        outcome = await store.call(lambda conn: absorb.absorb(conn, policy(), index, model, blobs, verdicts))
        self.error = None
        self.embedded += outcome.embedded
        self.refused += outcome.refused
        self.linked += outcome.linked
        self.batches += 1
        return max(claim_id for claim_id, _ in batch)

    def close(self) -> None:
        self._closing.set()
        self._query_pool.shutdown(wait=False, cancel_futures=True)
        self._batch_pool.shutdown(wait=False, cancel_futures=True)


def _evidence(similarity: float, method: str) -> EvidenceMatch:
    """The figure as recorded (4 places) and the rule ``verify`` applies again to it (``semantic.evidence_matches``)."""
    return EvidenceMatch(round(similarity, 4), semantic.evidence_matches(similarity, method), method)
