"""Claims' vectors: how they are stored, and the in-broker index that searches them.

**Stored** in ``claim_vectors``, one row per claim edition and model, on both
backends (a BLOB on SQLite, ``bytea`` on PostgreSQL): a float32 scale and
the vector quantised to int8 (``dim + 4`` bytes, 388 for e5-small).  A batch
of rows is written with one ``memory.embed`` event in the same transaction,
naming the model and the SHA-256 of every row's bytes, so ``verify`` can tell
a vector swapped behind the broker's back.  The vector itself is derived
(the model and the claim's text make it again), like the search index.

**Searched** by :class:`VectorIndex`, held in the broker's memory and touched
only inside store jobs (the store owner's thread is its one owner):

1. every vector is also kept as **sign bits** around a centre (``dim / 8``
   bytes; 48 for e5-small), and the query's bits are compared with all of
   them by Hamming distance (XOR and popcount, column by column);
2. the nearest few hundred are **re-ranked** by the exact cosine of their
   int8 vectors.

At 1M claims that is 48 MB of bits and 388 MB of int8 vectors (docs/BENCHMARKS.md
has the measured figures).  Each row also carries the claim's tier as two
flags, *live* and *trusted*, so ``context``'s default search looks at
trusted claims only -- a flood of unverified paraphrases cannot push a
trusted claim out of its candidates.  The flags follow the event log:
before each search the index reads the vectors written since it last looked
and the claims named by tier-changing events since then, and re-reads those
claims' tiers.  What a search returns is only ever a candidate: the caller
re-reads every hit's tier from the database before ranking (a stale flag can
cost a slot, never push a claim that is no longer trusted).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Final, Iterable, final

import apsw

from store import dialect, events

if TYPE_CHECKING:
    import numpy as np

#: Events after which a claim's tier may differ: the index re-reads those claims' tiers.
TIER_EVENTS: Final = ("memory.tier", "memory.retire", "memory.unretire", "memory.revise", "memory.promote")
#: Below this many vectors the index compares every one exactly (no sign bits yet).
EXACT_UP_TO: Final = 2048
#: Candidates the sign bits pass to the exact re-rank (at least; more for large limits).
RERANK: Final = 384
#: The sign bits of only the allowed rows are compared when at most one row in this many is allowed.
SPARSE_SHARE: Final = 3
#: Rows read per query when the index first loads.
LOAD_CHUNK: Final = 10_000
_ROWS: Final = "SELECT v.seq, v.claim, v.vector, c.tier FROM claim_vectors v JOIN claims c ON c.id = v.claim WHERE v.model = ? AND v.seq > ? ORDER BY v.seq"
#: Vectors written by other brokers may commit out of sequence order: each look
#: re-reads this many sequence numbers before the last one seen.
SEQ_WINDOW: Final = 256


def encode(vector: np.ndarray) -> bytes:
    """A unit vector as stored: a float32 scale, then int8 components."""
    import numpy as np

    peak = float(np.max(np.abs(vector))) or 1.0
    scale = np.float32(peak / 127.0)
    return scale.tobytes() + np.round(vector / scale).clip(-127, 127).astype(np.int8).tobytes()


def decode(blob: bytes) -> np.ndarray:
    import numpy as np

    raw = bytes(blob)
    scale = np.frombuffer(raw[:4], dtype=np.float32)[0]
    return np.frombuffer(raw[4:], dtype=np.int8).astype(np.float32) * scale


def digest(blob: bytes) -> str:
    return hashlib.sha256(bytes(blob)).hexdigest()


def store_batch(conn: apsw.Connection, model: str, vectors: dict[int, bytes], *, actor: str) -> int:
    """Write the vectors of claims still present (and not yet embedded by ``model``), with one event.

    Returns how many rows were written.  A claim embedded meanwhile (another
    broker, a replayed job) is skipped, so the batch is idempotent.
    """
    if not vectors:
        return 0
    ids = list(vectors)
    marks = ",".join("?" * len(ids))
    have = {r[0] for r in conn.execute(f"SELECT claim FROM claim_vectors WHERE model = ? AND claim IN ({marks})", (model, *ids))}
    fresh = [i for i in ids if i not in have]
    if not fresh:
        return 0
    at = events.now()
    conn.executemany(
        "INSERT INTO claim_vectors(claim, model, vector, at) VALUES (?, ?, ?, ?)", [(i, model, vectors[i], at) for i in fresh]
    )
    events.append(
        conn, "memory.embed", actor=actor, subject=None,
        payload={"model": model, "vectors": {str(i): digest(vectors[i]) for i in fresh}}, at=at,
    )  # fmt: skip
    return len(fresh)


def unembedded(conn: apsw.Connection, model: str, *, after: int, limit: int, author_prefix: str | None) -> list[tuple[int, str]]:
    """Live claims above id ``after`` with no vector from ``model``, oldest first: ``(id, text)``.

    ``author_prefix`` (``HOST/``) keeps a broker on a shared server to its own host's claims.
    """
    where = "c.id > ? AND c.tier IN ('unverified', 'trusted', 'disputed') AND NOT EXISTS (SELECT 1 FROM claim_vectors v WHERE v.claim = c.id AND v.model = ?)"
    params: list[Any] = [after, model]
    if author_prefix is not None:
        where += " AND c.author LIKE ? ESCAPE '\\'"
        params.append(events.like_prefix(author_prefix) + "%")
    return list(conn.execute(f"SELECT c.id, c.text FROM claims c WHERE {where} ORDER BY c.id LIMIT ?", (*params, limit)))


def stored(conn: apsw.Connection, claim_ids: Iterable[int], model: str) -> dict[int, bytes]:
    ids = list(claim_ids)
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return {r[0]: bytes(r[1]) for r in conn.execute(f"SELECT claim, vector FROM claim_vectors WHERE model = ? AND claim IN ({marks})", (model, *ids))}


def count(conn: apsw.Connection, model: str | None) -> int:
    if model is None:
        return 0
    return conn.execute("SELECT count(*) FROM claim_vectors WHERE model = ?", (model,)).fetchone()[0]


@final
class VectorIndex:
    """Every live claim's vector of one model, searched by sign bits then exact cosine.

    Touched only inside store jobs (one owner: the store owner's thread).
    ``search`` catches up with the database first.
    """

    def __init__(self, model: str) -> None:
        # numpy is imported only once there is a vector: an operator command that opens
        # the store without a broker, or a broker with no claims, never pays for it.
        self.model = model
        self.size = 0
        self._cap = 0
        self._dim = 0
        self._words = 0
        self._ids: Any = None
        self._q8: Any = None
        self._scale: Any = None
        self._bits: Any = None  # (words, cap): one column of words per row
        self._live: Any = None
        self._trusted: Any = None
        self._center: np.ndarray | None = None
        self._row: dict[int, int] = {}
        self._seq = 0
        self._event_seq: int | None = None

    # -- keeping up with the database -------------------------------------------------

    def catch_up(self, conn: apsw.Connection) -> None:
        """Read the vectors and tier changes written since the last look."""
        if self._event_seq is None:
            # First look: the whole table, in chunks into arrays sized once (a million rows as
            # Python tuples at once would cost more than the index); tier events from here on.
            self._event_seq = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
            total = conn.execute("SELECT count(*) FROM claim_vectors WHERE model = ?", (self.model,)).fetchone()[0]
            while True:
                rows = list(conn.execute(_ROWS + " LIMIT ?", (self.model, self._seq, LOAD_CHUNK)))
                if not rows:
                    return
                if self._dim == 0:
                    self._dim = len(bytes(rows[0][2])) - 4
                    self._words = (self._dim + 63) // 64
                    self._grow(total)
                self._add(rows)
        since = self._seq - SEQ_WINDOW if dialect.is_postgresql(conn) else self._seq
        rows = list(conn.execute(_ROWS, (self.model, since)))
        self._add([r for r in rows if r[1] not in self._row])
        marks = ",".join("?" * len(TIER_EVENTS))
        changed = list(conn.execute(f"SELECT seq, subject FROM events WHERE seq > ? AND kind IN ({marks})", (self._event_seq, *TIER_EVENTS)))
        if not changed:
            return
        self._event_seq = max(self._event_seq, max(s for s, _ in changed))
        ids = list({int(s) for _, s in changed if s and s.isdigit() and int(s) in self._row})
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for claim_id, tier in conn.execute(f"SELECT id, tier FROM claims WHERE id IN ({','.join('?' * len(chunk))})", chunk):
                self._flag(self._row[claim_id], tier)

    def _flag(self, row: int, tier: str) -> None:
        self._live[row] = tier in ("unverified", "trusted", "disputed")
        self._trusted[row] = tier == "trusted"

    def _add(self, rows: list[tuple[int, int, bytes, str]]) -> None:
        import numpy as np

        if not rows:
            return
        self._seq = max(self._seq, max(r[0] for r in rows))
        blobs = [bytes(r[2]) for r in rows]
        dim = len(blobs[0]) - 4
        if self._dim == 0:
            self._dim, self._words = dim, (dim + 63) // 64
        rows = [r for r, b in zip(rows, blobs) if len(b) - 4 == self._dim]
        blobs = [b for b in blobs if len(b) - 4 == self._dim]
        self._grow(self.size + len(rows))
        start = self.size
        for offset, (row, blob) in enumerate(zip(rows, blobs)):
            at = start + offset
            self._ids[at] = row[1]
            self._scale[at] = np.frombuffer(blob[:4], dtype=np.float32)[0]
            self._q8[at] = np.frombuffer(blob[4:], dtype=np.int8)
            self._flag(at, row[3])
            self._row[row[1]] = at
        self.size = start + len(rows)
        if self._center is None and self.size > EXACT_UP_TO:
            # The centre is fixed once, from the vectors there are then: sign bits of
            # e5's vectors straight would mostly agree (its space is anisotropic).
            self._center = self._vectors(np.arange(self.size)).mean(axis=0)
            self._set_bits(0, self.size)
        elif self._center is not None:
            self._set_bits(start, self.size)

    def _grow(self, need: int) -> None:
        import numpy as np

        if need <= self._cap:
            return
        cap = max(need, int(self._cap * 1.25) + 1024)

        def grown(a: np.ndarray | None, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
            out = np.zeros(shape, dtype=dtype)
            if a is not None and a.size:
                out[tuple(slice(0, n) for n in a.shape)] = a
            return out

        self._ids = grown(self._ids, (cap,), np.int64)
        self._scale = grown(self._scale, (cap,), np.float32)
        self._live = grown(self._live, (cap,), bool)
        self._trusted = grown(self._trusted, (cap,), bool)
        self._q8 = grown(self._q8, (cap, self._dim), np.int8)
        self._bits = grown(self._bits, (self._words, cap), np.uint64)
        self._cap = cap

    def _vectors(self, rows: np.ndarray) -> np.ndarray:
        return self._q8[rows].astype("float32") * self._scale[rows, None]

    def _signs(self, vectors: np.ndarray) -> np.ndarray:
        """Sign bits of ``vectors - centre``, packed into ``words`` uint64 per vector: (n, words)."""
        import numpy as np

        assert self._center is not None
        packed = np.packbits(vectors > self._center, axis=1)
        padded = np.zeros((len(vectors), self._words * 8), dtype=np.uint8)
        padded[:, : packed.shape[1]] = packed
        return padded.view(np.uint64)

    def _set_bits(self, start: int, stop: int) -> None:
        for first in range(start, stop, 8192):
            last = min(stop, first + 8192)
            import numpy as np

            self._bits[:, first:last] = self._signs(self._vectors(np.arange(first, last))).T

    # -- searching ----------------------------------------------------------------------

    def search(self, conn: apsw.Connection, query: np.ndarray, *, limit: int, trusted_only: bool, floor: float) -> list[tuple[int, float]]:
        """Up to ``limit`` ``(claim id, cosine)`` at or above ``floor``, best first (candidates: re-check tiers)."""
        import numpy as np

        self.catch_up(conn)
        if self.size == 0 or len(query) != self._dim:
            return []
        mask = (self._trusted if trusted_only else self._live)[: self.size]
        if self._center is None:
            rows = np.flatnonzero(mask)
        else:
            rows = self._nearest_bits(self._signs(query[None, :])[0], mask, max(RERANK, 4 * limit))
        if len(rows) == 0:
            return []
        scores = self._vectors(rows) @ query.astype(np.float32)
        keep = scores >= floor
        rows, scores = rows[keep], scores[keep]
        order = np.argsort(-scores, kind="stable")[:limit]
        return [(int(self._ids[rows[i]]), float(scores[i])) for i in order]

    def _nearest_bits(self, bits: np.ndarray, mask: np.ndarray, want: int) -> np.ndarray:
        """Rows allowed by ``mask`` whose sign bits are nearest ``bits``: at least ``want`` of them (ties kept).

        Only the allowed rows are compared when they are few (``context`` looks at trusted claims, often a
        small part of the store): every one of them when there are no more than ``want``."""
        import numpy as np

        n = self.size
        allowed = np.flatnonzero(mask)
        if len(allowed) <= want:
            return allowed
        if len(allowed) * SPARSE_SHARE <= n:
            distance = self._distances(bits, allowed, len(allowed))
            return allowed[distance <= self._reach(distance, want)]
        distance = self._distances(bits, slice(0, n), n)
        distance[~mask] = np.iinfo(np.uint16).max
        return np.flatnonzero(distance <= self._reach(distance, want))

    def _distances(self, bits: np.ndarray, rows: slice | np.ndarray, count: int) -> np.ndarray:
        """Hamming distances from ``bits`` to the sign bits of ``rows`` (``count`` of them), word by word."""
        import numpy as np

        work = np.empty(count, dtype=np.uint64)
        ones = np.empty(count, dtype=np.uint8)
        distance = np.zeros(count, dtype=np.uint16)
        for w in range(self._words):
            np.bitwise_xor(self._bits[w, rows], bits[w], out=work)
            np.bitwise_count(work, out=ones)
            np.add(distance, ones, out=distance)
        return distance

    def _reach(self, distance: np.ndarray, want: int) -> int:
        """The least distance within which at least ``want`` of ``distance`` lie (past the largest: all of them)."""
        import numpy as np

        histogram = np.bincount(distance, minlength=self._words * 64 + 1)[: self._words * 64 + 1]
        return int(np.searchsorted(np.cumsum(histogram), want))

    def statistics(self) -> dict[str, Any]:
        bytes_held = sum(a.nbytes for a in (self._ids, self._q8, self._scale, self._bits, self._live, self._trusted) if a is not None)
        return {"model": self.model, "vectors": self.size, "bytes": bytes_held, "bits": self._center is not None}
