"""The in-broker vector index on both backends: exact below 2,048 vectors, sign bits above, tiers followed from the log.

The vectors here are random unit vectors (what is tested is the index, not a
model); retrieval figures come from the real model (test_memory_meaning_eval.py).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from broker.identity import Principal, Role
from memory import authoring, curation, vectors
from memory.policy import Tier
from tests.memory.memory_support import POLICY, principal

MODEL = "test/random-384"
OPERATOR = Principal(agent="operator", session="t-op", role=Role.OPERATOR, domain="operator")


def fill(job: Callable[..., Any], count: int, seed: int = 5) -> tuple[list[int], np.ndarray]:
    rng = np.random.default_rng(seed)
    made = rng.normal(size=(count, 384)).astype(np.float32)
    made /= np.linalg.norm(made, axis=1, keepdims=True)
    author = principal("alice")

    def write(conn: Any) -> list[int]:
        ids = [authoring.remember(conn, POLICY, author, kind="discovery", scope="repo", text=f"claim number {i} about part {i % 97} of set {seed}", evidence=None)["id"] for i in range(count)]
        vectors.store_batch(conn, MODEL, {i: vectors.encode(v) for i, v in zip(ids, made)}, actor="broker")
        return ids

    return job(write), made


def near(vector: np.ndarray, seed: int) -> np.ndarray:
    noisy = vector + np.random.default_rng(seed).normal(0, 0.02, vector.shape).astype(np.float32)
    return noisy / np.linalg.norm(noisy)


def test_the_nearest_vector_is_found_by_sign_bits_and_tiers_follow_the_log(job: Callable[..., Any]) -> None:
    ids, made = fill(job, vectors.EXACT_UP_TO + 300)
    index = vectors.VectorIndex(MODEL)
    for k in (0, 777, len(ids) - 1):
        found = job(lambda conn, k=k: index.search(conn, near(made[k], k), limit=3, trusted_only=False, floor=0.5))
        assert found[0][0] == ids[k] and found[0][1] > 0.9, (k, found)
    assert index.statistics()["bits"] is True and index.size == len(ids)
    # Nothing is trusted yet: the trusted-only search finds nothing, however near.
    target = ids[777]
    assert job(lambda conn: index.search(conn, near(made[777], 1), limit=3, trusted_only=True, floor=0.5)) == []
    # The operator promotes it (a memory.promote and a memory.tier event): the next search sees it trusted.
    job(curation.promote, POLICY, OPERATOR, target, reason="checked by hand")
    assert [i for i, _ in job(lambda conn: index.search(conn, near(made[777], 2), limit=3, trusted_only=True, floor=0.5))] == [target]
    # Retired: out of every search, by meaning as by words.
    job(curation.retire_by_operator, POLICY, OPERATOR, target, reason="wrong")
    assert job(lambda conn: index.search(conn, near(made[777], 3), limit=3, trusted_only=True, floor=0.5)) == []
    assert target not in [i for i, _ in job(lambda conn: index.search(conn, near(made[777], 4), limit=3, trusted_only=False, floor=0.5))]
    # A claim embedded later is found too (the index reads what was written since it last looked).
    more, extra = fill(job, 3, seed=9)
    assert job(lambda conn: index.search(conn, near(extra[1], 5), limit=1, trusted_only=False, floor=0.5))[0][0] == more[1]
    assert job(lambda conn: conn.execute("SELECT tier FROM claims WHERE id = ?", (target,)).fetchone()[0]) == Tier.RETIRED.value


def test_when_few_rows_are_allowed_only_they_are_compared_and_the_nearest_are_the_same(job: Callable[..., Any], monkeypatch: Any) -> None:
    """``context`` searches trusted claims, often a small part of the store: only those rows' sign bits are
    compared then.  The rows it passes on are exactly those of the comparison over every row."""
    _, made = fill(job, vectors.EXACT_UP_TO + 300)
    index = vectors.VectorIndex(MODEL)
    job(index.catch_up)
    bits = index._signs(near(made[5], 6)[None, :])[0]
    rng = np.random.default_rng(3)
    for share in (0.0, 0.01, 0.05, 0.2, 0.6):
        mask = rng.random(index.size) < share
        mask[5] = share > 0
        found = {}
        for path, every in (("allowed only", 1), ("every row", 10**9)):
            monkeypatch.setattr(vectors, "SPARSE_SHARE", every)
            found[path] = index._nearest_bits(bits, mask, 64).tolist()
        assert found["allowed only"] == found["every row"], share
        if share:
            assert 5 in found["every row"] and set(found["every row"]) <= set(np.flatnonzero(mask).tolist())
            assert len(found["every row"]) >= min(64, int(mask.sum()))


def test_a_batch_is_stored_once_with_its_event(job: Callable[..., Any]) -> None:
    ids, made = fill(job, 4)
    again = job(lambda conn: vectors.store_batch(conn, MODEL, {ids[0]: vectors.encode(made[0])}, actor="broker"))
    assert again == 0  # idempotent: a replayed batch writes nothing twice
    decoded = vectors.decode(vectors.encode(made[2]))
    assert float(decoded @ made[2]) > 0.999  # int8 with a scale keeps the cosine
