"""Recall@5 by meaning on the labelled set (tests/memory/meaning_eval.py), on both backends, with the real local embedder.

The vectors are the real model's: saved (tests/memory/meaning_eval.vectors.npz, so the suite does not embed 150
texts each run), and a sample of every kind and language re-embedded by the model each run and held equal to
them; the claims, the vectors' rows and the search run through the store code each backend uses.  Figures are
recorded in docs/MEMORY.md; the control is the same set searched by words alone.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from broker import composition
from memory import authoring, embedder, retrieval, semantic, vectors
from store import events
from store.chainkey import ChainKey
from tests.memory import meaning_eval
from tests.memory.memory_support import POLICY, assert_model_vectors, principal

#: What is re-embedded each run: claims among the answers and the fillers, the first query of each kind, and
#: one query in each of the six other languages (they come four to a language).
CLAIM_SAMPLE = list(range(0, len(meaning_eval.CLAIMS), 15))
QUERY_SAMPLE = sorted(
    {next(i for i, (_, _, k) in enumerate(meaning_eval.ALL) if k == kind) for kind in ("keyword", "hard", "paraphrase")}
    | {len(meaning_eval.ALL) - len(meaning_eval.OTHER_LANGUAGE) + i for i in range(0, len(meaning_eval.OTHER_LANGUAGE), 4)}
)


@lru_cache(maxsize=1)
def saved() -> tuple[Any, Any]:
    """The saved vectors (claims, queries), checked against the real model on the sample."""
    assert {meaning_eval.ALL[i][2] for i in QUERY_SAMPLE} == {"keyword", "hard", "paraphrase", "other_language"}
    model = embedder.LocalEmbedder()
    claims, queries = meaning_eval.saved_vectors(model.model)
    fresh_claims = model.embed([meaning_eval.CLAIMS[i] for i in CLAIM_SAMPLE], "passage")
    fresh_queries = model.embed([meaning_eval.ALL[i][0] for i in QUERY_SAMPLE], "query")
    assert_model_vectors(fresh_claims, claims[CLAIM_SAMPLE], meaning_eval.REGENERATE)
    assert_model_vectors(fresh_queries, queries[QUERY_SAMPLE], meaning_eval.REGENERATE)
    return claims, queries


def passages() -> Any:
    return saved()[0]


@lru_cache(maxsize=1)
def queries() -> dict[str, Any]:
    return dict(zip([q for q, _, _ in meaning_eval.ALL], saved()[1]))


def measure(conn: Any) -> dict[str, dict[str, float]]:
    events.key_chain(conn, ChainKey.generate())
    author, reader = principal("alice"), principal("reader")
    with conn:
        made = [authoring.remember(conn, POLICY, author, kind="discovery", scope="repo", text=t, evidence=None)["id"] for t in meaning_eval.CLAIMS]
        vectors.store_batch(conn, embedder.LOCAL_MODEL, {i: vectors.encode(v) for i, v in zip(made, passages())}, actor="broker")
    ids = dict(zip(meaning_eval.ANSWERS, made))
    index = vectors.VectorIndex(embedder.LOCAL_MODEL)

    def search(query: str, meaning: bool) -> list[int]:
        probe = retrieval.Probe(index, queries()[query], semantic.RELEVANT_AT) if meaning else None
        with conn:
            return [c["id"] for c in retrieval.recall(conn, POLICY, reader, query, limit=5, probe=probe)]

    return {
        "meaning": meaning_eval.recall_at(ids, lambda q: search(q, True)),
        "words": meaning_eval.recall_at(ids, lambda q: search(q, False)),
    }


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_recall_at_5_by_meaning_meets_the_targets(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if backend == "sqlite":
        from store import database

        conn = database.open_store(tmp_path / "eval.db", composition.schemas())
    else:
        from store.postgres import PostgresBackend

        cluster = request.getfixturevalue("pg_cluster")
        conn = PostgresBackend(cluster.url(cluster.database()), migrate=False).open_writer(composition.schemas())
    try:
        found = measure(conn)
    finally:
        conn.close()
    print(f"{backend} recall@5: {found}")
    assert len(meaning_eval.ALL) >= 80 and sum(1 for *_, k in meaning_eval.ALL if k == "other_language") >= 20
    meaning, words = found["meaning"], found["words"]
    assert meaning["keyword"] == 1.0 and meaning["paraphrase"] >= 0.9, meaning
    assert meaning["other_language"] >= 0.9, meaning
    # Control: words alone miss what meaning finds.
    assert words["paraphrase"] < meaning["paraphrase"] and words["other_language"] < meaning["other_language"], found
