"""``memory eval``: score the production ``recall`` and ``context`` paths against an exam file.

An exam (a *fixture*) is versioned JSON: ``{"version": 1, "queries": [{"q":
..., "expect": [claim ids], "cat": ...}, ...]}``.  Each query is run
through the same ranking ``recall`` uses (:func:`memory.retrieval.rank`,
every live tier) and the same selection ``context`` pushes
(:func:`memory.retrieval.context` with ``shown_as=None``: trusted only,
links followed, within a budget), on a read connection: nothing is
written, no exposure is logged, so an eval neither makes a later witness
"informed" nor counts as use.

A query's recall@K is the share of its expected claims found in the first K
(5 and 15); a category's figure is the mean over its queries.  Every
expected claim outside the first K of a path is a *miss*, classified as
exactly one of (checked in this order):

* ``stale_label``: the label no longer names a live claim -- retired,
  superseded (the current edition is named), or no such id in this store;
* ``scope_exclusion``: the path filters it out before ranking: ``context``
  pushes only trusted claims, and a private claim is found only by its
  own agent's searches;
* ``ranking_loss``: found, but below K (its rank is given; ``None`` when it
  matches its own index row but falls past the deepest rank looked at);
* ``vocabulary_mismatch``: the query matches nothing in the claim's own
  index row (and meaning, when on, did not bring it in either).

The report carries the fixture's SHA-256 (computed by the caller from the
file's bytes) and a fingerprint of the corpus, so two runs are comparable
only when both agree.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Final, Sequence

import apsw
import attrs

from memory import claims, retrieval
from memory.policy import Tier
from store import dialect

if TYPE_CHECKING:
    from broker.identity import Principal

KS: Final = (5, 15)
#: How deep a miss is looked for to give its rank (the deepest ``recall`` may go).
DEEPEST: Final = retrieval.MAX_LIMIT
FIXTURE_VERSION: Final = 1
MAX_QUERIES: Final = 2000
PATHS: Final = ("recall", "context")
MISS_CLASSES: Final = ("vocabulary_mismatch", "ranking_loss", "scope_exclusion", "stale_label")


@attrs.frozen
class ExamQuery:
    q: str
    expect: list[int]
    cat: str


def check_fixture(doc: Any) -> list[ExamQuery]:
    """The fixture's queries, or ValueError with a sentence naming what is wrong and where."""
    if not isinstance(doc, dict):
        raise ValueError("the fixture must be a JSON object with a \"queries\" list")
    extra = sorted(set(doc) - {"version", "queries", "description", "corpus"})
    if extra:
        raise ValueError(f"the fixture has unknown key(s) {', '.join(extra)}; allowed: version, queries, description, corpus")
    version = doc.get("version", FIXTURE_VERSION)
    if version != FIXTURE_VERSION:
        raise ValueError(f"the fixture is version {version!r}; this conclave reads version {FIXTURE_VERSION}")
    queries = doc.get("queries")
    if not isinstance(queries, list) or not queries:
        raise ValueError("the fixture needs a non-empty \"queries\" list")
    if len(queries) > MAX_QUERIES:
        raise ValueError(f"the fixture has {len(queries)} queries; at most {MAX_QUERIES} (split it into several files)")
    out = []
    for n, item in enumerate(queries, 1):
        where = f"query {n}"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object with q, expect and cat")
        unknown = sorted(set(item) - {"q", "expect", "cat", "note"})
        if unknown:
            raise ValueError(f"{where} has unknown key(s) {', '.join(unknown)}; allowed: q, expect, cat, note")
        q, expect, cat = item.get("q"), item.get("expect"), item.get("cat")
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"{where}: \"q\" must be a non-empty string")
        if len(q) > claims.MAX_TEXT:
            raise ValueError(f"{where}: \"q\" is {len(q)} characters; at most {claims.MAX_TEXT}")
        if not isinstance(expect, list) or not expect or not all(type(i) is int and i > 0 for i in expect):
            raise ValueError(f"{where}: \"expect\" must be a non-empty list of claim ids (positive integers)")
        if not isinstance(cat, str) or not cat.strip():
            raise ValueError(f"{where}: \"cat\" must be a non-empty string (the query's category)")
        out.append(ExamQuery(q, list(dict.fromkeys(expect)), cat))
    return out


def fingerprint(conn: apsw.Connection) -> dict[str, Any]:
    """A SHA-256 over every claim's id, tier, kind, scope and text digest, in id order.

    Any new claim, edition, tier change or retirement changes it; reads do not.
    """
    digest = hashlib.sha256()
    count = live = 0
    for cid, tier, kind, scope, text in conn.execute("SELECT id, tier, kind, scope, text FROM claims ORDER BY id"):
        digest.update(f"{cid}\t{tier}\t{kind}\t{scope}\t{claims.digest(text)}\n".encode())
        count += 1
        live += tier in ("unverified", "trusted", "disputed")
    return {"sha256": digest.hexdigest(), "claims": count, "live": live}


def _matches_own_row(conn: apsw.Connection, query: str, claim_id: int) -> bool:
    words = retrieval.terms(query)
    if not words:
        return False
    if dialect.is_postgresql(conn):
        sql = "SELECT 1 FROM claims, to_tsquery('english', ?) q WHERE id = ? AND search @@ q"
        return conn.execute(sql, (retrieval.pg_query(words), claim_id)).fetchone() is not None
    sql = "SELECT 1 FROM claims_fts WHERE claims_fts MATCH ? AND rowid = ?"
    return conn.execute(sql, (retrieval.match_expression(words), claim_id)).fetchone() is not None


def _classify(
    conn: apsw.Connection, query: str, claim_id: int, path: str, deep: list[int], probe: retrieval.Probe | None
) -> dict[str, Any]:
    row = claims.load(conn, claim_id)
    if row is None:
        return {"class": "stale_label", "why": f"there is no claim {claim_id} in this store"}
    if row.tier is Tier.RETIRED:
        return {"class": "stale_label", "why": f"claim {claim_id} is retired: {row.retired_reason}"}
    if row.tier is Tier.SUPERSEDED:
        current = claims.current_edition(conn, row.lineage)
        return {"class": "stale_label", "why": f"claim {claim_id} is superseded by claim {current}", "current": current}
    if row.private_to is not None:
        return {"class": "scope_exclusion", "why": f"claim {claim_id} is in {row.private_to}'s private pool: only that agent's searches find it"}
    if path == "context" and row.tier is not Tier.TRUSTED:
        return {"class": "scope_exclusion", "why": f"context pushes only trusted claims; claim {claim_id} is {row.tier.value}"}
    if claim_id in deep:
        return {"class": "ranking_loss", "rank": deep.index(claim_id) + 1}
    if _matches_own_row(conn, query, claim_id):
        return {"class": "ranking_loss", "rank": None, "why": f"matches its index row but ranks below {len(deep)}"}
    how = "its words (nor by meaning)" if probe is not None else "its words"
    return {"class": "vocabulary_mismatch", "why": f"the query shares none of claim {claim_id}'s indexed words; not found by {how}"}


def run(
    conn: apsw.Connection, viewer: Principal, queries: Sequence[ExamQuery], probes: Sequence[retrieval.Probe | None], *, budget: int
) -> dict[str, Any]:
    """Score every query on both paths as ``viewer`` sees them (the operator: no private pool), recording nothing.

    ``context`` is called with ``shown_as=None``: the production selection,
    links followed into the budget the hits left, and no exposure logged.
    """
    per_query = []
    for exam, probe in zip(queries, probes):
        deepest = retrieval.rank(conn, exam.q, limit=DEEPEST, trusted_only=False, probe=probe)
        ranked = {
            "recall": [h.id for h in retrieval.rank(conn, exam.q, limit=max(KS), trusted_only=False, probe=probe)],
            "context": [
                c["id"]
                for c in retrieval.context(conn, viewer, exam.q, budget=budget, include_unverified=False, probe=probe, shown_as=None)["claims"]
            ],
        }
        deep = {"recall": [h.id for h in deepest], "context": [h.id for h in deepest if h.tier is Tier.TRUSTED]}
        scored: dict[str, Any] = {"q": exam.q, "cat": exam.cat, "expect": exam.expect}
        for path in PATHS:
            found = ranked[path]
            result: dict[str, Any] = {}
            for k in KS:
                top = found[:k]
                result[f"recall@{k}"] = sum(e in top for e in exam.expect) / len(exam.expect)
            result["misses"] = [
                {"claim": e, "missed_at": missed, **_classify(conn, exam.q, e, path, deep[path], probe)}
                for e in exam.expect
                for missed in ([k for k in KS if e not in found[:k]],)
                if missed
            ]
            scored[path] = result
        per_query.append(scored)
    return {"queries": per_query, "summary": summarise(per_query)}


def summarise(per_query: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean recall@K per path and category (and ``all``), and the misses counted by class."""
    out: dict[str, Any] = {}
    for path in PATHS:
        cats: dict[str, list[dict[str, Any]]] = {}
        for scored in per_query:
            cats.setdefault(scored["cat"], []).append(scored[path])
            cats.setdefault("all", []).append(scored[path])
        by_cat = {
            cat: {"queries": len(rows), **{f"recall@{k}": round(sum(r[f"recall@{k}"] for r in rows) / len(rows), 4) for k in KS}}
            for cat, rows in sorted(cats.items(), key=lambda kv: (kv[0] == "all", kv[0]))
        }
        misses = {name: 0 for name in MISS_CLASSES}
        for scored in per_query:
            for miss in scored[path]["misses"]:
                misses[miss["class"]] += 1
        out[path] = {"by_category": by_cat, "misses": misses}
    return out
