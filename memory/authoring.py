"""What an agent may write: a new claim, a new edition, a corroboration, a dispute.

Each function is one store-owner job.  The acting principal is always the
connection's (the router passes it in); nothing here accepts a name for the
author or a witness.  Text has already passed the prefilter (``memory.ops``
runs it before the job, so rejected text never reaches the writer thread).

A reply that carries a claim's text *shows* it.  ``corroborate`` and
``dispute`` answer with the claim after the change, so each logs an exposure
(via ``show``) for the caller in the same job -- after judging the witness,
so a corroboration's own verdict is not changed by its reply.  Otherwise a
witness could read a claim through a dispute's reply, or through its own
first corroboration, and then vouch for it -- or for its next edition -- as
"blind".  ``remember`` and ``revise`` echo only the caller's own words to its
own trust domain, which is never blind for its own claims (the author's
domain never counts); they log nothing (see docs/MEMORY.md, "Blind witnesses").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import apsw
import attrs

from broker.errors import ConclaveError, ErrorCode
from memory import claims, exposures, standing
from store import events
from memory.claims import ClaimRow
from memory.policy import TrustPolicy, Verdict

if TYPE_CHECKING:
    from broker.identity import Principal


def remember(
    conn: apsw.Connection, policy: TrustPolicy, author: Principal, *, kind: str, scope: str, text: str, evidence: str | None, private: bool = False
) -> dict[str, Any]:
    """A new claim, unverified.  Never merged into an existing one, even a word-for-word twin:
    the reply names live twins so the agent can corroborate one by id instead.

    ``private``: kept for the author's agent name alone (its private pool,
    across sessions and restarts) until it is shared (``memory.privacy.share``).
    """
    claim = claims.insert(conn, author, kind=kind, scope=scope, text=text, evidence=evidence, private_to=author.agent if private else None)
    out = standing.describe_new(policy, claim)
    twins: list[dict[str, Any]] = []
    out["twins"] = twins  # filled once the query is back (on a server, with the batch's next statement)
    claims.twins_later(conn, claim.text_key, besides=claim.id, then=lambda found: twins.extend({"id": t.id, "tier": t.tier.value} for t in found))
    return out


def revise(conn: apsw.Connection, policy: TrustPolicy, author: Principal, claim_id: int, *, text: str, evidence: str | None) -> dict[str, Any]:
    """The next edition of a claim: unverified, no witnesses; the old edition is kept, superseded.

    Only the author's trust domain may revise (an agent correcting what it,
    an earlier session of it, or its family said).  Anyone else disputes
    and remembers a corrected claim -- otherwise one agent could knock every
    trusted claim out of ``context`` by "revising" it.

    Raises:
        ConclaveError: ``not_found``, ``conflict`` (superseded or retired),
            ``forbidden`` (another trust domain's claim).
    """
    claims.require_visible(conn, claim_id, author)
    old = claims.require_live(conn, claim_id, "revise")
    if old.author_domain != author.domain:
        raise ConclaveError(
            ErrorCode.FORBIDDEN,
            f"claim {claim_id} belongs to trust domain {old.author_domain}; only its author's domain may revise it. "
            "Dispute it (conclave memory dispute) and remember a corrected claim instead",
        )
    new = claims.insert(conn, author, kind=old.kind, scope=old.scope, text=text, evidence=evidence, revises=old, private_to=old.private_to)
    out = standing.describe_new(policy, new)
    out["revised"] = {"id": old.id, "tier": old.tier.value}
    return out


@attrs.frozen
class EvidenceMatch:
    """How well a witness's own evidence says what the claim says (measured before the job, off the event loop).

    ``method`` is ``meaning`` (cosine of the two texts' vectors) or ``words``
    (with ``embedder = "none"``: the share of the claim's words the evidence
    repeats); ``matched`` is that figure against its calibrated threshold.
    """

    similarity: float | None
    matched: bool
    method: str


NO_EVIDENCE: Final = EvidenceMatch(None, False, "none")


def corroborate(
    conn: apsw.Connection, policy: TrustPolicy, witness: Principal, claim_id: int, *, evidence: str | None, match: EvidenceMatch = NO_EVIDENCE
) -> dict[str, Any]:
    """Vouch for a claim, by id.  Always recorded; the reply says whether it counted and why not.

    What kind of witness this is:

    * **informed** -- its trust domain wrote the claim or was shown it (any
      edition, any channel): agreement after reading, counted as ever;
    * **blind** -- never shown it, and its own evidence says what the claim
      says (``match``): an independent finding, the strongest witness;
    * **unread** -- never shown it, and no evidence (or evidence that does
      not match): it vouches by id for text it never saw.  Recorded, never
      counted.
    """
    claim = _witnessable(conn, witness, claim_id, "corroborate")
    at = events.now()
    # The author's domain wrote the claim: it has seen it, whatever the exposure log says.
    shown = witness.domain == claim.author_domain or exposures.seen_by_domain(conn, witness.domain, claim.lineage)
    kind = "informed" if shown else ("blind" if match.matched else "unread")
    blind = kind == "blind"
    conn.execute(
        "INSERT INTO corroborations(claim, principal, domain, at, evidence, blind, counted, witness, similarity) VALUES (?,?,?,?,?,?,0,?,?)",
        (claim.id, witness.key, witness.domain, at, evidence, int(blind), kind, match.similarity),
    )
    row = conn.last_insert_rowid()
    extra = {"blind": blind, "witness": kind, "similarity": match.similarity, "evidence_match": match.method}
    verdict = record_witness(conn, policy, witness, claim, "memory.corroborate", row, at, extra, evidence)
    out = _after(conn, policy, claim.id, verdict, blind=blind, witness=kind, similarity=match.similarity)
    exposures.record(conn, witness, [claim], "show", at)  # the reply carries the text: from now on, informed
    return out


def dispute(conn: apsw.Connection, policy: TrustPolicy, witness: Principal, claim_id: int, *, reason: str) -> dict[str, Any]:
    """Refute a claim, by id.  An independent dispute makes it ``disputed``."""
    claim = _witnessable(conn, witness, claim_id, "dispute")
    at = events.now()
    conn.execute(
        "INSERT INTO disputes(claim, principal, domain, at, reason, counted) VALUES (?,?,?,?,?,0)",
        (claim.id, witness.key, witness.domain, at, reason),
    )
    row = conn.last_insert_rowid()
    verdict = record_witness(conn, policy, witness, claim, "memory.dispute", row, at, {"reason_sha256": claims.digest(reason)}, None)
    out = _after(conn, policy, claim.id, verdict)
    exposures.record(conn, witness, [claim], "show", at)  # the reply carries the text
    return out


def _witnessable(conn: apsw.Connection, witness: Principal, claim_id: int, verb: str) -> ClaimRow:
    """A live claim the witness may see and that takes witnesses: a private claim takes none.

    Raises:
        ConclaveError: ``not_found`` (no such claim, or another agent's
            private one), ``conflict`` (not live, or private: share it first).
    """
    claims.require_visible(conn, claim_id, witness)
    claim = claims.require_live(conn, claim_id, verb)
    if claim.private_to is not None:
        raise ConclaveError(
            ErrorCode.CONFLICT,
            f"cannot {verb} claim {claim_id}: it is private to {claim.private_to} and takes no witnesses; "
            f"share it first (conclave memory share {claim_id}), then it starts as an unverified shared claim",
        )
    return claim


def record_witness(
    conn: apsw.Connection,
    policy: TrustPolicy,
    witness: Principal,
    claim: ClaimRow,
    kind: str,
    row: int,
    at: str,
    extra: dict[str, Any],
    evidence: str | None,
) -> Verdict:
    """Judge the claim with the new row, log the event with this row's verdict, write the standing."""
    judged = standing.evaluate(conn, policy, claim)
    pool = judged.corroborations if kind == "memory.corroborate" else judged.disputes
    verdict = next(v for v in pool if v.row == row)
    payload = {
        "row": row,
        "domain": witness.domain,
        "counted": verdict.counted,
        "reason_not_counted": verdict.reason.value if verdict.reason else None,
        **extra,
    }
    if evidence is not None:
        payload["evidence_sha256"] = claims.digest(evidence)
    events.append(conn, kind, actor=witness.key, subject=str(claim.id), payload=payload, at=at)
    standing.apply(conn, claim, judged, actor=witness.key, cause=f"{kind.split('.')[1]} by {witness.key}")
    claims.touch(conn, [claim.id], at)
    return verdict


def _after(conn: apsw.Connection, policy: TrustPolicy, claim_id: int, verdict: Verdict, **extra: Any) -> dict[str, Any]:
    """The claim after the change, and what became of this witness."""
    out = standing.describe(conn, policy, claims.require(conn, claim_id))
    out["counted"] = verdict.counted
    out["reason_not_counted"] = verdict.reason.value if verdict.reason else None
    out.update(extra)
    return out
