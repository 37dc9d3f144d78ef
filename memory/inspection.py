"""Reading the memory back: a claim's biography, an agent's trail, the log, lists, figures.

``show`` is the one an agent may also use (it is then logged as an
exposure, like ``recall``); the rest are the operator's.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

import apsw

from broker.errors import ConclaveError, ErrorCode
from memory import claims, exposures, standing
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


def trail(conn: apsw.Connection, of_agent: str) -> list[dict[str, Any]]:
    """Everything an agent (every session, and its spawned children) authored, corroborated, disputed -- in time order.

    Raises:
        ConclaveError: ``not_found`` for an agent that never ran here (an
            empty trail would look like an agent that did nothing).
    """
    if not of_agent or ":" in of_agent:
        raise ConclaveError(ErrorCode.INVALID_ARGS, "trail takes an agent name (alice), not AGENT:SESSION")
    params = _agent_params(of_agent)
    if conn.execute("SELECT 1 FROM principals WHERE agent = ? OR agent LIKE ? ESCAPE '\\' LIMIT 1", (of_agent, params[1])).fetchone() is None:
        raise ConclaveError(
            ErrorCode.NOT_FOUND, f"no agent named {of_agent} has run on this state directory; `conclave agents` lists the ones that have"
        )
    rows: list[dict[str, Any]] = []
    for cid, at, principal, edition, supersedes, tier, text in conn.execute(
        f"SELECT id, created_at, author, edition, supersedes, tier, text FROM claims WHERE {_agent_clause('author')}", params
    ):
        rows.append(
            {"at": at, "principal": principal, "action": "revised" if supersedes else "authored", "claim": cid, "tier": tier, "text": text, "counted": None, "blind": None, "note": f"edition {edition}" + (f" of claim {supersedes}" if supersedes else "")}
        )
    for cid, at, principal, blind, counted, why, tier, text, witness, restatement in conn.execute(
        f"SELECT c.claim, c.at, c.principal, c.blind, c.counted, c.reason_not_counted, k.tier, k.text, c.witness, c.restatement "
        f"FROM corroborations c JOIN claims k ON k.id = c.claim WHERE {_agent_clause('c.principal')}",
        params,
    ):
        how = f"rediscovered in claim {restatement}" if restatement else standing.witness_kind(witness, blind)
        rows.append({"at": at, "principal": principal, "action": "rediscovered" if restatement else "corroborated", "claim": cid, "tier": tier, "text": text, "counted": bool(counted), "blind": bool(blind), "note": why, "witness": how})
    for cid, at, principal, counted, why, reason, tier, text in conn.execute(
        f"SELECT d.claim, d.at, d.principal, d.counted, d.reason_not_counted, d.reason, k.tier, k.text "
        f"FROM disputes d JOIN claims k ON k.id = d.claim WHERE {_agent_clause('d.principal')}",
        params,
    ):
        rows.append({"at": at, "principal": principal, "action": "disputed", "claim": cid, "tier": tier, "text": text, "counted": bool(counted), "blind": None, "note": why or reason})
    rows.sort(key=lambda r: (r["at"], r["claim"]))
    return rows


def claim_trail(conn: apsw.Connection, claim_id: int) -> list[dict[str, Any]]:
    """Everything that happened to a claim and its other editions, in time order.

    Who wrote each edition, who was shown it (and how: recall, context,
    show), who corroborated or disputed it (counted or not, blind or
    informed, and why), and every tier change, promotion and retirement --
    the rows of an agent's trail, seen from the claim.
    """
    claim = claims.require(conn, claim_id)
    family = claims.editions(conn, claim.lineage)
    ids = [e.id for e in family]
    marks = ",".join("?" * len(ids))
    tiers = {e.id: e.tier.value for e in family}
    rows: list[dict[str, Any]] = []

    def row(
        at: str, principal: str, action: str, cid: int, *, counted: bool | None = None, blind: bool | None = None, note: str | None = None, text: str = "",
        witness: str | None = None,
    ) -> None:
        rows.append({"at": at, "principal": principal, "action": action, "claim": cid, "tier": tiers[cid], "text": text, "counted": counted, "blind": blind, "note": note, "witness": witness})

    for e in family:
        row(e.created_at, e.author, "revised" if e.supersedes else "authored", e.id, note=f"edition {e.edition}" + (f" of claim {e.supersedes}" if e.supersedes else ""), text=e.text)
    for cid, at, principal, via in conn.execute(f"SELECT claim, at, principal, via FROM exposures WHERE claim IN ({marks})", ids):
        row(at, principal, "shown", cid, note=f"via {via}")
    for cid, at, principal, blind, counted, why, evidence, witness, restatement in conn.execute(
        f"SELECT claim, at, principal, blind, counted, reason_not_counted, evidence, witness, restatement FROM corroborations WHERE claim IN ({marks})", ids
    ):
        kind = standing.witness_kind(witness, blind)
        how = f"rediscovered in claim {restatement}" if restatement else kind
        row(at, principal, "rediscovered" if restatement else "corroborated", cid, counted=bool(counted), blind=bool(blind), note=why, text=evidence or "", witness=how)
    for cid, at, other, kind, similarity in conn.execute(
        f"SELECT restates, at, claim, kind, similarity FROM claim_links WHERE restates IN ({marks})", ids
    ):
        row(at, "broker", "restated", cid, note=f"by claim {other}: {kind}, similarity {similarity:.2f}")
    for cid, at, principal, counted, why, reason in conn.execute(
        f"SELECT claim, at, principal, counted, reason_not_counted, reason FROM disputes WHERE claim IN ({marks})", ids
    ):
        row(at, principal, "disputed", cid, counted=bool(counted), note=why, text=reason or "")
    for cid, at, by, reason in conn.execute(f"SELECT claim, at, by, reason FROM promotions WHERE claim IN ({marks})", ids):
        row(at, by, "promoted", cid, text=reason or "")
    for subject in ids:
        for e in events.read(conn, subject=str(subject), kind_prefix="memory"):
            if e.kind in ("memory.tier", "memory.retire", "memory.unretire"):
                detail = e.payload
                change = f"{detail.get('from')} -> {detail.get('to')}" if "to" in detail else None
                cause = detail.get("cause") or detail.get("rule")
                note = "; ".join(str(x) for x in (change, cause) if x) or None
                row(e.at, e.actor, e.kind.removeprefix("memory."), subject, note=note, text=str(detail.get("reason") or ""))
    rows.sort(key=lambda r: (r["at"], r["claim"]))
    return rows


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
    out = []
    for i in ids:
        c = rows[i]
        counted = conn.execute("SELECT count(*) FROM corroborations WHERE claim = ? AND counted = 1", (i,)).fetchone()[0]
        out.append({**claims.brief(c), "counted_corroborations": counted})
    return out


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
