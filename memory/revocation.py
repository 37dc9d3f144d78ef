"""Revoking a principal, and the cascade through every claim it vouched for or disputed.

The operator revokes ``AGENT:SESSION`` (``HOST/AGENT:SESSION`` in a store
several brokers share; a broker revokes only its own host's) when that session is known bad (its
model was injected, its output cannot be trusted).  The principal is marked
revoked in ``principals``; from then on its corroborations and disputes do
not count.  Every claim it touched is recomputed in the same transaction:
a promotion that needed it falls back below quorum and is demoted, a claim
it disputed may come back -- each change with a ``memory.tier`` event whose
cause names the revocation.  Claims it *authored* keep their standing: they
only ever rose on other domains' word (``memory trail`` lists them for
review).

Only that one principal is revoked: its restarts are new principals, and
children it spawned are their own principals (revoke each, or see
``memory trail --agent``).  Ending a live principal's process is the
broker's part (``memory.ops``), after this job commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from broker.errors import ConclaveError, ErrorCode
from broker.identity import OPERATOR_NAME, parse_principal_key
from memory import claims, facts, standing
from store import events
from memory.policy import TrustPolicy

if TYPE_CHECKING:
    from broker.identity import Principal


def parse_target(target: str) -> tuple[str, str]:
    """``AGENT:SESSION``; refuses the operator and malformed keys.

    Raises:
        ConclaveError: ``invalid_args`` or ``forbidden``.
    """
    try:
        agent, session = parse_principal_key(target)
    except ValueError as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"revoke: {exc}") from None
    if agent == OPERATOR_NAME or agent.endswith("/" + OPERATOR_NAME):
        raise ConclaveError(ErrorCode.FORBIDDEN, "the operator cannot be revoked; only agent principals can")
    return agent, session


def revoke(conn: apsw.Connection, policy: TrustPolicy, operator: Principal, target: str, *, reason: str | None) -> dict[str, Any]:
    """Mark ``target`` revoked and recompute every claim it witnessed.

    Raises:
        ConclaveError: ``not_found`` (never issued here), ``conflict``
            (already revoked), ``forbidden`` (the operator).
    """
    agent, session = parse_target(target)
    key = f"{agent}:{session}"
    row = conn.execute("SELECT revoked_at FROM principals WHERE key = ?", (key,)).fetchone()
    # What it witnessed, whether it was issued and revoked: from the keyed events, not the rows
    # (a witness row deleted behind the broker's back must not spare a claim the cascade).
    told = events.checked(
        conn,
        "(actor = ? AND kind IN ('memory.corroborate', 'memory.dispute')) OR (subject = ? AND kind IN ('agent.spawn', 'memory.revoke'))",
        (key, key),
    )
    spawned = any(e.kind == "agent.spawn" for e in told)
    if row is None and not spawned:
        raise ConclaveError(ErrorCode.NOT_FOUND, f"no principal {key} was ever issued here; `conclave agents` lists them")
    if (row is None) != (not spawned):
        raise facts.RowTampered(f"principal {key} {'has a row but no agent.spawn event' if row is not None else 'has an agent.spawn event but no row'}: "
                                "the principals table was changed behind the broker's back (run `conclave memory verify`)")
    revoked = next((e for e in told if e.kind == "memory.revoke"), None)
    if revoked is not None or row[0] is not None:
        raise ConclaveError(ErrorCode.CONFLICT, f"{key} was already revoked at {revoked.at if revoked is not None else row[0]}")
    at = events.now()
    conn.execute("UPDATE principals SET revoked_at = ?, revoked_reason = ? WHERE key = ?", (at, reason, key))
    # On a shared PostgreSQL store row-level security lets a broker update only its own host's principals: an
    # update of another host's row changes nothing and says nothing.  Read it back before anything is logged
    # or answered, so that revoke is refused rather than reported done while the session still counts.
    if conn.execute("SELECT revoked_at FROM principals WHERE key = ?", (key,)).fetchone()[0] is None:
        raise ConclaveError(
            ErrorCode.FORBIDDEN,
            f"{key} is another host's principal; a broker revokes only its own host's. Run `conclave memory revoke {key}` on the host "
            f"named before the slash",
        )
    touched = sorted({int(e.subject) for e in told if e.kind != "agent.spawn" and e.kind != "memory.revoke" and e.subject})
    events.append(conn, "memory.revoke", actor=operator.key, subject=key, payload={"reason": reason, "claims": touched}, at=at)
    changes = []
    for claim in claims.load_many(conn, touched).values():
        # Superseded and retired editions keep their tier, but their witness verdicts are updated too.
        after, _ = standing.restand(conn, policy, claim, actor=operator.key, cause=f"revoked {key}")
        if after.tier is not claim.tier:
            changes.append({"id": claim.id, "from": claim.tier.value, "to": after.tier.value})
    return {"principal": key, "revoked_at": at, "reason": reason, "claims_recomputed": touched, "changes": changes}
