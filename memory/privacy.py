"""Private pools: a claim an agent keeps for itself, and sharing it later.

``remember --private`` stores a claim with ``private_to`` = the author's
agent name.  It is that agent's note: visible to it across sessions and
restarts (the name is stable; a restart is a new session of it), pushed
into its own ``context`` badged ``[PRIVATE]``, and to everyone else it does
not exist -- ``recall``, ``context``, ``show``, links and twins never name
it, and asking for it by id is ``not_found`` in the same words as a claim
that was never written.  The operator sees it (``list``, ``show``,
``export``), as the person curating the memory.

A private claim never counts toward anyone's trust: it takes no witnesses
(corroborate and dispute are refused, even by its own agent), cannot be
promoted, and never vouches as an independent rediscovery of another
claim.  ``memory share ID``, by its agent (any session) or the operator,
makes every edition of it shared: it starts as an unverified claim with no
witnesses, its original author kept, and a ``memory.share`` event records
who shared it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from broker.errors import ConclaveError, ErrorCode
from memory import claims, standing
from store import events
from memory.policy import TrustPolicy

if TYPE_CHECKING:
    from broker.identity import Principal

EVENT = "memory.share"


def share(conn: apsw.Connection, policy: TrustPolicy, by: Principal, claim_id: int) -> dict[str, Any]:
    """Make a private claim (every edition of it) shared: unverified, no witnesses, its author kept.

    Raises:
        ConclaveError: ``not_found`` (no such claim, or another agent's
            private claim), ``conflict`` (already shared, or not live).
    """
    claims.require_visible(conn, claim_id, by)
    claim = claims.require_live(conn, claim_id, "share")
    if claim.private_to is None:
        raise ConclaveError(ErrorCode.CONFLICT, f"claim {claim_id} is already shared")
    at = events.now()
    conn.execute("UPDATE claims SET private_to = NULL WHERE lineage = ?", (claim.lineage,))
    events.append(conn, EVENT, actor=by.key, subject=str(claim.id), payload={"lineage": claim.lineage, "private_to": claim.private_to}, at=at)
    return standing.describe(conn, policy, claims.require(conn, claim.id))

