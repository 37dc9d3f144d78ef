"""The operator's decisions on one claim: promote, retire, unretire.

A person's word outranks the witness count in one direction only: a
promotion makes a claim trusted (and covers the disputes the operator could
see), a retirement tombstones it.  Nothing is ever deleted: a retired
claim's row, witnesses and events stay, ``memory show`` tells its story and
``unretire`` brings it back with its standing recomputed.  Groom's
retirements go through :func:`retire` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw
import attrs

from broker.errors import ConclaveError, ErrorCode
from memory import claims, standing
from store import events
from memory.claims import ClaimRow
from memory.policy import Tier, TrustPolicy

if TYPE_CHECKING:
    from broker.identity import Principal


def promote(conn: apsw.Connection, policy: TrustPolicy, operator: Principal, claim_id: int, *, reason: str | None) -> dict[str, Any]:
    claim = claims.require_live(conn, claim_id, "promote")
    if claim.private_to is not None:
        raise ConclaveError(
            ErrorCode.CONFLICT,
            f"cannot promote claim {claim_id}: it is private to {claim.private_to}; share it first (conclave memory share {claim_id})",
        )
    at = events.now()
    conn.execute("INSERT INTO promotions(claim, at, by, reason) VALUES (?,?,?,?)", (claim.id, at, operator.key, reason))
    events.append(conn, "memory.promote", actor=operator.key, subject=str(claim.id), payload={"reason": reason, "from": claim.tier.value}, at=at)
    after, _ = standing.restand(conn, policy, claim, actor=operator.key, cause=f"promoted by {operator.key}")
    return standing.describe(conn, policy, after)


def retire(conn: apsw.Connection, claim: ClaimRow, *, actor: str, reason: str, detail: dict[str, Any] | None = None) -> ClaimRow:
    """Tombstone a live claim: it leaves the indexes, its row stays."""
    at = events.now()
    conn.execute("UPDATE claims SET retired_at = ?, retired_by = ?, retired_reason = ? WHERE id = ?", (at, actor, reason, claim.id))
    events.append(
        conn,
        "memory.retire",
        actor=actor,
        subject=str(claim.id),
        payload={"reason": reason, "from": claim.tier.value, **(detail or {})},
        at=at,
    )
    retired = attrs.evolve(claim, retired_at=at, retired_by=actor, retired_reason=reason)
    return claims.set_tier(conn, retired, Tier.RETIRED)


def retire_by_operator(conn: apsw.Connection, policy: TrustPolicy, operator: Principal, claim_id: int, *, reason: str) -> dict[str, Any]:
    claim = claims.require_live(conn, claim_id, "retire")
    return standing.describe(conn, policy, retire(conn, claim, actor=operator.key, reason=reason))


def unretire(conn: apsw.Connection, policy: TrustPolicy, operator: Principal, claim_id: int, *, reason: str) -> dict[str, Any]:
    claim = claims.require(conn, claim_id)
    if claim.tier is not Tier.RETIRED:
        raise ConclaveError(ErrorCode.CONFLICT, f"claim {claim_id} is not retired (it is {claim.tier.value})")
    conn.execute("UPDATE claims SET retired_at = NULL, retired_by = NULL, retired_reason = NULL WHERE id = ?", (claim.id,))
    events.append(conn, "memory.unretire", actor=operator.key, subject=str(claim.id), payload={"reason": reason, "was": claim.retired_reason})
    revived = attrs.evolve(claim, retired_at=None, retired_by=None, retired_reason=None)
    after, _ = standing.restand(conn, policy, revived, actor=operator.key, cause=f"unretired by {operator.key}")
    return standing.describe(conn, policy, after)

