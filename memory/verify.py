"""``conclave memory verify``: does the database still tell the truth?

Someone with write access to the file (threat T3) can change any row.  The
event log is hash-chained under a key kept outside the database, its head is
anchored outside it, and every change to memory wrote an event in the same
transaction, so :func:`check_records` can hold the rows against the events
that vouch for them:

* the chain, its key and its head (``store.integrity``): an edited, inserted
  or dropped event, or one written without the key, breaks the chain at that
  event; a log cut short or appended to disagrees with the anchor and with the
  head the broker committed last; ``--expect-head`` holds it against a head a
  person kept elsewhere; events the broker recorded as lost, and starts that
  found the database disagreeing with its anchor, are listed;
* every claim's text against the hash its ``memory.remember`` /
  ``memory.revise`` event recorded;
* every corroboration, dispute and promotion row against its event (a row
  slipped in behind the broker's back has none);
* every claim's tier against what the trust policy concludes from its rows
  (``UPDATE claims SET tier = 'trusted'`` is caught here);
* revocations and retirements against their events.

:func:`check_indexes` runs FTS5's own ``integrity-check`` on both search
indexes against the claims they should hold; it needs the writer (SQLite
takes the write lock for it), the rest runs on a read connection.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, final

import apsw
import attrs

from memory import claims, standing
from memory.policy import Tier, TrustPolicy
from store import dialect, integrity
from store.chainkey import ChainKey
from store.events import Head


@final
@attrs.frozen
class Problem:
    problem: str
    event: int | None = None
    claim: int | None = None


def check_records(
    conn: apsw.Connection,
    policy: TrustPolicy,
    *,
    key: ChainKey | None,
    committed: Head | None = None,
    expect: integrity.ExpectedHead | None = None,
) -> tuple[integrity.ChainFindings, list[Problem]]:
    """The chain (against ``committed``, the head the store owner committed last, and ``expect``) and the rows against it."""
    chain = integrity.check_chain(conn, key, committed=committed, expect=expect)
    problems = [Problem(f.problem, event=f.event) for f in chain.findings]
    created: dict[str, tuple[int, dict[str, Any], str]] = {}
    rows = conn.execute(
        "SELECT seq, kind, subject, payload, actor FROM events WHERE kind IN "
        "('memory.remember', 'memory.revise', 'memory.corroborate', 'memory.dispute', 'memory.promote', 'memory.retire', 'memory.revoke') "
        "ORDER BY seq"
    )
    witness_events: dict[tuple[str, int], tuple[int, str]] = {}
    promote_events: dict[str, int] = defaultdict(int)
    retire_events: dict[str, int] = {}
    revoke_events: set[str] = set()
    for seq, kind, subject, payload, actor in rows:
        body = json.loads(payload)
        if kind in ("memory.remember", "memory.revise"):
            created[subject] = (seq, body, kind)
        elif kind in ("memory.corroborate", "memory.dispute") and "row" in body:
            witness_events[(kind, body["row"])] = (seq, actor)
        elif kind == "memory.promote":
            promote_events[subject] += 1
        elif kind == "memory.retire":
            retire_events[subject] = seq
        elif kind == "memory.revoke":
            revoke_events.add(subject)

    for row in conn.execute("SELECT id, text FROM claims ORDER BY id"):
        claim_id, text = row
        origin = created.get(str(claim_id))
        if origin is None:
            problems.append(Problem(f"claim {claim_id} has no memory.remember or memory.revise event: it was inserted behind the broker's back", claim=claim_id))
        elif origin[1].get("text_sha256") != claims.digest(text):
            problems.append(Problem(f"claim {claim_id}'s text no longer matches event {origin[0]} ({origin[2]}) that recorded it", event=origin[0], claim=claim_id))

    for table, kind in (("corroborations", "memory.corroborate"), ("disputes", "memory.dispute")):
        for row_id, claim_id, principal in conn.execute(f"SELECT id, claim, principal FROM {table} ORDER BY id"):
            found = witness_events.get((kind, row_id))
            if found is None:
                problems.append(Problem(f"{table} row {row_id} on claim {claim_id} has no {kind} event: it was inserted behind the broker's back", claim=claim_id))
            elif found[1] != principal:
                problems.append(Problem(f"{table} row {row_id} names {principal}, but event {found[0]} was written by {found[1]}", event=found[0], claim=claim_id))

    for claim_id, count in conn.execute("SELECT claim, count(*) FROM promotions GROUP BY claim"):
        if promote_events.get(str(claim_id), 0) < count:
            problems.append(Problem(f"claim {claim_id} has a promotion with no memory.promote event", claim=claim_id))

    for (principal,) in conn.execute("SELECT key FROM principals WHERE revoked_at IS NOT NULL"):
        if principal not in revoke_events:
            problems.append(Problem(f"principal {principal} is marked revoked with no memory.revoke event"))

    witnessed = {
        r[0] for r in conn.execute("SELECT claim FROM corroborations UNION SELECT claim FROM disputes UNION SELECT claim FROM promotions")
    }
    for claim_id, tier, retired_at, superseded_by in conn.execute("SELECT id, tier, retired_at, superseded_by FROM claims ORDER BY id"):
        if retired_at is not None and str(claim_id) not in retire_events:
            problems.append(Problem(f"claim {claim_id} is retired with no memory.retire event", claim=claim_id))
        if claim_id in witnessed:
            claim = claims.load(conn, claim_id)
            assert claim is not None
            expected = standing.evaluate(conn, policy, claim).tier
        else:
            expected = Tier.RETIRED if retired_at else Tier.SUPERSEDED if superseded_by else Tier.UNVERIFIED
        if expected.value != tier:
            problems.append(Problem(f"claim {claim_id} is stored as {tier}, but its witnesses and events make it {expected.value}", claim=claim_id))
    return chain, problems


def check_indexes(conn: apsw.Connection) -> list[Problem]:
    """FTS5's integrity-check of both indexes against the claims they should hold (needs the writer)."""
    if dialect.is_postgresql(conn):
        return []  # a generated tsvector column: no one can write it apart from its text
    problems = []
    for index, holds in (("claims_fts", "live claims"), ("trusted_fts", "trusted claims")):
        try:
            conn.execute(f"INSERT INTO {index}({index}, rank) VALUES ('integrity-check', 1)")
        except apsw.Error as exc:
            problems.append(Problem(f"the search index {index} does not match the {holds} it should hold (FTS5 integrity-check: {exc}); a row was edited behind the broker's back"))
    return problems


def report(chain: integrity.ChainFindings, problems: list[Problem], facts: dict[str, Any]) -> dict[str, Any]:
    with_events = [p.event for p in problems if p.event is not None]
    return {
        "ok": not problems,
        "events": chain.walked,
        "head": {"seq": chain.head.seq, "hash": chain.head.hash},
        "first_bad_event": min(with_events) if with_events else None,
        "problems": [attrs.asdict(p) for p in problems],
        "chain": {**chain.facts, **facts},
    }
