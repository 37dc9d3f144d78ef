"""A claim's standing: judge its keyed events, write the verdict back on its rows.

:func:`evaluate` reads a claim's corroborations, disputes, promotions and
which witnesses were revoked from the claim's keyed events
(``memory.facts``: each event's hash checked as it is read), never from the
rows, and asks :func:`memory.policy.judge`.
:func:`apply` writes the verdict on every witness row, the tier on the claim
(moving it between search indexes) and, when the tier changed, a
``memory.tier`` event naming the cause -- all in the caller's transaction.
Every path that can change a tier (a corroboration, a dispute, a promotion,
a retirement, a revocation, a new policy) goes through these two.
"""

from __future__ import annotations

import logging
from typing import Any

import apsw

from memory import claims, facts
from store import events
from memory.claims import ClaimRow
from memory.policy import Standing, TrustPolicy, shortfall

log = logging.getLogger("conclave.memory")


def evaluate(conn: apsw.Connection, policy: TrustPolicy, claim: ClaimRow) -> Standing:
    """The policy's verdict on ``claim`` from its keyed events (the row must agree with them).

    Raises:
        memory.facts.RowTampered: the claim has no events, or its row disagrees with them.
    """
    found, revoked = facts.read(conn, [claim.id], {claim.id: claim})
    told = found.get(claim.id)
    if told is None:
        raise facts.RowTampered(f"claim {claim.id} has no memory.remember or memory.revise event: its row was inserted behind the "
                                "broker's back (run `conclave memory verify`)")
    facts.agree(claim, told)
    return told.standing(policy, revoked)


def apply(conn: apsw.Connection, claim: ClaimRow, standing: Standing, *, actor: str, cause: str) -> ClaimRow:
    """Write the standing: witness verdicts, the tier, and a ``memory.tier`` event if it moved."""
    for table, verdicts in (("corroborations", standing.corroborations), ("disputes", standing.disputes)):
        conn.executemany(
            f"UPDATE {table} SET counted = ?, reason_not_counted = ? WHERE id = ? AND (counted != ? OR reason_not_counted IS DISTINCT FROM ?)",
            [
                (int(v.counted), v.reason.value if v.reason else None, v.row, int(v.counted), v.reason.value if v.reason else None)
                for v in verdicts
            ],
        )
    if standing.tier is claim.tier:
        return claim
    updated = claims.set_tier(conn, claim, standing.tier)
    events.append(
        conn,
        "memory.tier",
        actor=actor,
        subject=str(claim.id),
        payload={
            "from": claim.tier.value,
            "to": standing.tier.value,
            "cause": cause,
            "counted_domains": list(standing.counted_domains),
        },
    )
    return updated


def restand(conn: apsw.Connection, policy: TrustPolicy, claim: ClaimRow, *, actor: str, cause: str) -> tuple[ClaimRow, Standing]:
    standing = evaluate(conn, policy, claim)
    return apply(conn, claim, standing, actor=actor, cause=cause), standing


def restand_all(conn: apsw.Connection, policy: TrustPolicy, *, actor: str, cause: str) -> list[dict[str, Any]]:
    """Recompute every claim that has witnesses or promotions (after a policy change)."""
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT claim FROM corroborations UNION SELECT claim FROM disputes UNION SELECT claim FROM promotions ORDER BY 1"
        )
    ]
    changes = []
    for start in range(0, len(ids), facts.CHUNK):
        chunk = ids[start : start + facts.CHUNK]
        rows = claims.load_many(conn, chunk)
        found, revoked = facts.read(conn, chunk, rows)
        for claim in rows.values():
            told = found.get(claim.id)
            try:
                if told is None:
                    raise facts.RowTampered(f"claim {claim.id} has no memory.remember or memory.revise event")
                facts.agree(claim, told)
            except facts.RowTampered as exc:
                log.error("not recomputed under the new policy: %s", exc)  # verify names it; nothing is built on it
                continue
            after = apply(conn, claim, told.standing(policy, revoked), actor=actor, cause=cause)
            if after.tier is not claim.tier:
                changes.append({"id": claim.id, "from": claim.tier.value, "to": after.tier.value})
    return changes


def witness_kind(stored: str | None, blind: Any) -> str:
    """``blind``, ``informed`` or ``unread`` (rows written before witnesses said what they saw have only ``blind``)."""
    return stored or ("blind" if blind else "informed")


def describe(conn: apsw.Connection, policy: TrustPolicy, claim: ClaimRow) -> dict[str, Any]:
    """A claim in ``--json``: its fields, every witness with its verdict, and what it lacks."""
    return describe_many(conn, policy, [claim])[0]


def describe_many(conn: apsw.Connection, policy: TrustPolicy, rows: list[ClaimRow]) -> list[dict[str, Any]]:
    """:func:`describe` for several claims, in a few queries.  Reads the stored verdicts
    (:func:`apply` keeps them current), so it never re-judges."""
    return _describe(conn, policy, rows)


def describe_new(policy: TrustPolicy, claim: ClaimRow) -> dict[str, Any]:
    """:func:`describe` for an edition written in this job: it has no witnesses yet (nothing to read)."""
    return _described(policy, claim, [], [], [])


def tally(total: int, counted: int) -> dict[str, int]:
    """A claim's witnesses, as every surface counts them (``memory show``, ``memory list``, the
    dashboard's table and biography): ``total`` corroborations recorded, whether they counted or
    not, and ``counted``, those the trust policy counted (at most one per independent domain)."""
    return {"total": int(total), "counted": int(counted)}


def tallies(conn: apsw.Connection, ids: list[int]) -> dict[int, dict[str, int]]:
    """:func:`tally` for many claims in one query (for lists that do not load every witness)."""
    out = {i: tally(0, 0) for i in ids}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for claim, total, counted in conn.execute(
            f"SELECT claim, count(*), sum(CASE WHEN counted = 1 THEN 1 ELSE 0 END) FROM corroborations WHERE claim IN ({marks}) GROUP BY claim",
            chunk,
        ):
            out[claim] = tally(total, counted or 0)
    return out


def _describe(conn: apsw.Connection, policy: TrustPolicy, rows: list[ClaimRow]) -> list[dict[str, Any]]:
    ids = [c.id for c in rows]
    marks = ",".join("?" * len(ids))
    corroborations: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    disputes: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    promotions: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    for r in conn.execute(
        f"SELECT claim, id, principal, domain, at, blind, evidence, counted, reason_not_counted, witness, similarity, restatement "
        f"FROM corroborations WHERE claim IN ({marks}) ORDER BY id",
        ids,
    ):
        corroborations[r[0]].append(
            {
                "id": r[1], "principal": r[2], "domain": r[3], "at": r[4], "blind": bool(r[5]), "evidence": r[6], "counted": bool(r[7]),
                "reason_not_counted": r[8], "witness": witness_kind(r[9], r[5]), "similarity": r[10], "restatement": r[11],
            }
        )  # fmt: skip
    for r in conn.execute(
        f"SELECT claim, id, principal, domain, at, reason, counted, reason_not_counted FROM disputes WHERE claim IN ({marks}) ORDER BY id", ids
    ):
        disputes[r[0]].append({"id": r[1], "principal": r[2], "domain": r[3], "at": r[4], "reason": r[5], "counted": bool(r[6]), "reason_not_counted": r[7]})
    for r in conn.execute(f"SELECT claim, at, by, reason FROM promotions WHERE claim IN ({marks}) ORDER BY id", ids):
        promotions[r[0]].append({"at": r[1], "by": r[2], "reason": r[3]})
    return [_described(policy, claim, corroborations[claim.id], disputes[claim.id], promotions[claim.id]) for claim in rows]


def _described(
    policy: TrustPolicy, claim: ClaimRow, corroborations: list[dict[str, Any]], disputes: list[dict[str, Any]], promotions: list[dict[str, Any]]
) -> dict[str, Any]:
    counted = [c for c in corroborations if c["counted"]]
    domains = list(dict.fromkeys(c["domain"] for c in counted))
    has_blind = any(c["blind"] for c in counted)
    return {
        **claims.brief(claim),
        "corroborations": corroborations,
        "witnesses": tally(len(corroborations), len(counted)),
        "disputes": disputes,
        "promotions": promotions,
        "standing": {
            "quorum": policy.quorum,
            "require_blind": policy.require_blind,
            "counted_domains": domains,
            "has_blind_witness": has_blind,
            "short_of_trust": shortfall(policy, claim.tier, len(domains), has_blind),
        },
    }
