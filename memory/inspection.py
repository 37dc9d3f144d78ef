"""Reading the memory back: a claim's biography, the log, lists, figures (trails: ``memory.trails``).

``show`` is the one an agent may also use (it is then logged as an
exposure, like ``recall``); the rest are the operator's.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

import apsw

from broker.errors import ConclaveError, ErrorCode
from memory import claims, exposures, standing, usage
from memory import links as relations
from store import events
from memory.policy import Tier, TrustPolicy

MAX_LIST: Final = 1000


def show(conn: apsw.Connection, policy: TrustPolicy, claim_id: int) -> dict[str, Any]:
    """The claim and its biography: every edition, witness, promotion, retirement, and each event."""
    claim = claims.require(conn, claim_id)
    editions = claims.editions(conn, claim.lineage)
    subjects = [str(e.id) for e in editions]
    history = []
    for subject in subjects:
        history += events.read(conn, subject=subject)
    history.sort(key=lambda e: e.seq)
    return {
        **standing.describe(conn, policy, claim),
        "editions": [
            {"id": e.id, "edition": e.edition, "tier": e.tier.value, "author": e.author, "created_at": e.created_at, "superseded_by": e.superseded_by}
            for e in editions
        ],
        "exposures": conn.execute("SELECT count(*) FROM exposures WHERE lineage = ?", (claim.lineage,)).fetchone()[0],
        "links": links(conn, claim.id),
        "relations": relations.of_claim(conn, claim),
        "usage": usage.of_claims(conn, [claim.id])[claim.id],
        "history": [{"seq": e.seq, "at": e.at, "kind": e.kind, "actor": e.actor, "claim": int(e.subject), "detail": e.payload} for e in history],
    }


def links(conn: apsw.Connection, claim_id: int) -> list[dict[str, Any]]:
    """The restatement links of a claim, both ways: what it restates, and which later claims restated it."""
    return [
        {"claim": c, "restates": r, "kind": k, "similarity": s, "at": at}
        for c, r, k, s, at in conn.execute(
            "SELECT claim, restates, kind, similarity, at FROM claim_links WHERE claim = ? OR restates = ? ORDER BY id", (claim_id, claim_id)
        )
    ]


def _agent_clause(column: str) -> str:
    # The agent itself (any session) and everything it spawned (NAME/child...).
    return f"({column} LIKE ? ESCAPE '\\' OR {column} LIKE ? ESCAPE '\\')"


def _agent_params(name: str) -> tuple[str, str]:
    safe = events.like_prefix(name)
    return (f"{safe}:%", f"{safe}/%")


#: Event families other packages write; `memory log --kind lock` shows who held what when.
EVENT_FAMILIES = frozenset({"memory", "lock", "msg", "status", "agent", "broker", "auth", "wire", "mail"})


def _kind_prefix(kind: str | None) -> str | None:
    """``None`` reads every event; ``lock`` or ``lock.grant`` as given; ``corroborate`` means ``memory.corroborate``."""
    if not kind:
        return None
    if "." in kind or kind in EVENT_FAMILIES:
        return kind
    return f"memory.{kind}"


def log(
    conn: apsw.Connection,
    *,
    kind: str | None,
    of_agent: str | None,
    claim: int | None,
    since: str | None,
    until: str | None,
    limit: int | None,
) -> list[dict[str, Any]]:
    """Events, oldest first, filtered by kind (a family like ``lock``, a kind like ``lock.grant``, or a memory verb like ``corroborate``), agent, claim, time."""
    # A claim id is only a claim's subject in memory events (message ids are numbers too).
    prefix = _kind_prefix(kind) or ("memory" if claim is not None else None)
    found = events.read(conn, kind_prefix=prefix, actor_agent=of_agent, subject=str(claim) if claim is not None else None, since=since, until=until, limit=limit)
    return [{"seq": e.seq, "at": e.at, "kind": e.kind, "actor": e.actor, "subject": e.subject, "detail": e.payload} for e in found]


def listing(
    conn: apsw.Connection,
    *,
    tier: str | None,
    kind: str | None,
    scope: str | None,
    of_agent: str | None,
    include_retired: bool,
    limit: int,
    before: int | None = None,
) -> list[dict[str, Any]]:
    """Claims, newest first; ``before`` pages on (only ids below it)."""
    where, params = [], []
    if before is not None:
        where.append("id < ?")
        params.append(before)
    if tier:
        where.append("tier = ?")
        params.append(Tier(tier).value)
    elif not include_retired:
        where.append("tier IN ('unverified', 'trusted', 'disputed')")
    if kind:
        where.append("kind = ?")
        params.append(kind)
    if scope:
        where.append("scope = ?")
        params.append(scope)
    if of_agent:
        where.append(_agent_clause("author"))
        params += list(_agent_params(of_agent))
    sql = "SELECT id FROM claims" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC LIMIT ?"
    ids = [r[0] for r in conn.execute(sql, (*params, min(limit, MAX_LIST)))]
    rows = claims.load_many(conn, ids)
    witnesses = standing.tallies(conn, ids)
    used = usage.of_claims(conn, ids)
    # `counted_corroborations` predates the tally and stays for scripts that read it.
    return [{**claims.brief(rows[i]), "witnesses": witnesses[i], "counted_corroborations": witnesses[i]["counted"], "usage": used[i]} for i in ids]


#: Claims in one page of ``memory.export``, and about how many bytes of JSON.
EXPORT_PAGE: Final = 500
EXPORT_BYTES: Final = 256 * 1024


def export_page(conn: apsw.Connection, policy: TrustPolicy, *, after: int, limit: int) -> dict[str, Any]:
    """Claims with ids above ``after``, oldest first, each with its whole biography
    (editions, witnesses with evidence, disputes, promotions, every event); ``next``
    is the ``after`` of the following page (None at the end)."""
    ids = [r[0] for r in conn.execute("SELECT id FROM claims WHERE id > ? ORDER BY id LIMIT ?", (after, limit + 1))]
    page: list[dict[str, Any]] = []
    size = 0
    for i in ids[:limit]:
        if size >= EXPORT_BYTES:
            break  # a reply stays well under the wire's line limit
        bio = show(conn, policy, i)
        size += len(json.dumps(bio, default=str))
        page.append(bio)
    more = len(page) < len(ids)
    return {"claims": page, "next": page[-1]["id"] if more and page else None}


def stats(conn: apsw.Connection, policy: TrustPolicy, database: str | None) -> dict[str, Any]:
    by_tier = dict(conn.execute("SELECT tier, count(*) FROM claims GROUP BY tier"))
    by_kind = dict(conn.execute("SELECT kind, count(*) FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed') GROUP BY kind"))
    counted, total = conn.execute("SELECT coalesce(sum(counted), 0), count(*) FROM corroborations").fetchone()
    blind = conn.execute("SELECT coalesce(sum(blind), 0) FROM corroborations").fetchone()[0]
    unread = conn.execute("SELECT count(*) FROM corroborations WHERE witness = 'unread'").fetchone()[0]
    rediscoveries = conn.execute("SELECT count(*) FROM claim_links WHERE kind = 'rediscovery'").fetchone()[0]
    restatements = conn.execute("SELECT count(*) FROM claim_links WHERE kind = 'restatement'").fetchone()[0]
    disputes = conn.execute("SELECT count(*) FROM disputes").fetchone()[0]
    last_groom = conn.execute("SELECT at, summary FROM groom_runs ORDER BY id DESC LIMIT 1").fetchone()
    size = 0
    if database:
        size = sum(os.path.getsize(p) for p in (database, database + "-wal") if os.path.exists(p))
    return {
        "claims": sum(by_tier.values()),
        "by_tier": {t.value: by_tier.get(t.value, 0) for t in Tier},
        "live_by_kind": {k: by_kind.get(k, 0) for k in claims.KINDS},
        "corroborations": {"total": total, "counted": counted, "blind": blind, "unread": unread},
        "links": {"rediscoveries": rediscoveries, "restatements": restatements},
        "relations": relations.count(conn),
        "private": conn.execute("SELECT count(*) FROM claims WHERE private_to IS NOT NULL AND tier IN ('unverified', 'trusted', 'disputed')").fetchone()[0],
        "disputes": disputes,
        "exposures": exposures.count(conn),
        "events": conn.execute("SELECT count(*) FROM events WHERE kind LIKE 'memory.%'").fetchone()[0],
        "last_groom": last_groom[0] if last_groom else None,
        "policy": policy.as_dict(),
        "database_bytes": size,
    }


# -- the trust graph's selection (memory graph) ---------------------------------------------

#: The most claims one graph draws (newest first); the rest are counted as omitted.
MAX_GRAPH: Final = 200


def graph_claims(conn: apsw.Connection, policy: TrustPolicy, *, claim: int | None, of_agent: str | None) -> tuple[str, list[dict[str, Any]], int]:
    """Which claims a trust graph draws, described as ``memory show`` renders them.

    One claim by id; or everything an agent (its sessions and children)
    authored, corroborated or disputed; or, with neither, every claim that
    has a witness.  Returns ``(subject, claims, omitted)``.

    Raises:
        ConclaveError: ``invalid_args`` for both selectors at once or an
            AGENT:SESSION; ``not_found`` for an unknown claim or an agent
            that never ran here.
    """
    if claim is not None and of_agent is not None:
        raise ConclaveError(ErrorCode.INVALID_ARGS, "memory.graph: give a claim id or an agent, not both")
    if claim is not None:
        return f"claim {claim}", standing.describe_many(conn, policy, [claims.require(conn, claim)]), 0
    if of_agent is not None:
        if not of_agent or ":" in of_agent:
            raise ConclaveError(ErrorCode.INVALID_ARGS, "memory.graph: --agent takes an agent name (alice), not AGENT:SESSION")
        params = _agent_params(of_agent)
        known = conn.execute(
            "SELECT 1 FROM principals WHERE agent = ? OR agent LIKE ? ESCAPE '\\' LIMIT 1", (of_agent, params[1])
        ).fetchone()
        if known is None:
            raise ConclaveError(ErrorCode.NOT_FOUND, f"memory.graph: no agent named {of_agent!r} has run here (conclave agents lists them)")
        sql = (
            f"SELECT id FROM claims WHERE {_agent_clause('author')} "
            f"UNION SELECT claim FROM corroborations WHERE {_agent_clause('principal')} "
            f"UNION SELECT claim FROM disputes WHERE {_agent_clause('principal')} ORDER BY 1 DESC"
        )
        ids = [r[0] for r in conn.execute(sql, params * 3)]
        subject = f"agent {of_agent}"
    else:
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed') "
            "AND (id IN (SELECT claim FROM corroborations) OR id IN (SELECT claim FROM disputes)) ORDER BY id DESC"
        )]
        subject = "every live claim with a witness"
    chosen = ids[:MAX_GRAPH]
    rows = claims.load_many(conn, chosen)
    return subject, standing.describe_many(conn, policy, [rows[i] for i in sorted(chosen)]), len(ids) - len(chosen)
