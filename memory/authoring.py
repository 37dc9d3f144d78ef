"""What an agent may write: a new claim, a new edition, a corroboration, a dispute.

Each function is one store-owner job.  The acting principal is always the
connection's (the router passes it in); nothing here accepts a name for the
author or a witness.  What a decision reads of the claim -- whether it is
live, its author's domain, its witnesses -- comes from its keyed events
(``memory.facts``), never from its rows alone.  Text has already passed the prefilter (``memory.ops``
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

import unicodedata
from typing import TYPE_CHECKING, Any, Final

import apsw
import attrs

from broker.errors import ConclaveError, ErrorCode
from memory import claims, exposures, facts, standing
from store import dialect, events
from memory.claims import ClaimRow
from memory.policy import Standing, TrustPolicy, Verdict, Witness

if TYPE_CHECKING:
    from broker.identity import Principal


def remember(
    conn: apsw.Connection, policy: TrustPolicy, author: Principal, *, kind: str, scope: str, text: str, evidence: str | None,
    again: ClaimRow | None = None, private: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """A new claim, unverified -- unless the same agent (any session, any run) already holds a
    live claim of the same kind and scope with the same text in the same pool (:func:`own_live_claim`):
    then that claim comes back (``"repeated": true``), a ``memory.repeat`` event records the repetition,
    and nothing is stored twice.  Another agent's twin is never merged: the reply names live
    twins so the agent can corroborate one by id instead.

    ``private``: kept for the author's agent name alone (its private pool,
    across sessions and restarts) until it is shared (``memory.privacy.share``).

    On SQLite the job looks for the agent's own claim itself (a read on the writer, in
    microseconds).  On a server that read would cost every ``remember`` a round trip on the
    writer connection, which holds the write lock for every broker: the op looks first, on a
    reader, and passes what it found as ``again``.

    On SQLite one read of the live claims with the text's words serves both: the agent's own
    claim is looked for among them, and the reply's twins are the shared ones (the job writes
    nothing else to ``claims`` in between, so reading them again after the insert would find
    the same rows and the new one, which a reply never names as its own twin)."""
    key = claims.text_key(text)
    pool = author.agent if private else None
    if dialect.is_postgresql(conn):
        live, own = None, again
    else:
        live = claims.twins(conn, key, besides=None, viewer=pool)
        own = _own_among(live, author, kind=kind, scope=scope, text=text, pool=pool)
    if own is not None:
        payload: dict[str, Any] = {"kind": kind, "scope": scope, "text_sha256": claims.digest(text)}
        if evidence is not None:
            payload["evidence_sha256"] = claims.digest(evidence)
        events.append(conn, "memory.repeat", actor=author.key, subject=str(own.id), payload=payload)
        out = standing.describe(conn, policy, own)
        out["repeated"] = True
        found = claims.twins(conn, own.text_key, besides=own.id) if live is None else [t for t in live if t.private_to is None and t.id != own.id]
        out["twins"] = [{"id": t.id, "tier": t.tier.value} for t in found]
        return out
    claim = claims.insert(conn, author, kind=kind, scope=scope, text=text, evidence=evidence, private_to=pool, key=key)
    out = standing.describe_new(policy, claim)
    if live is not None:
        out["twins"] = [{"id": t.id, "tier": t.tier.value} for t in live if t.private_to is None]
        return out
    twins: list[dict[str, Any]] = []
    out["twins"] = twins  # filled once the query is back (on a server, with the batch's next statement)
    claims.twins_later(conn, claim.text_key, besides=claim.id, then=lambda found: twins.extend({"id": t.id, "tier": t.tier.value} for t in found))
    return out


def same_text(text: str) -> str:
    """What "the same text" means for one agent remembering it again: Unicode-normalized
    (NFKC), case folded, runs of white space as one space, trailing punctuation dropped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(" .!;:,")


def own_live_claim(conn: apsw.Connection, author: Principal, *, kind: str, scope: str, text: str, private: bool = False) -> ClaimRow | None:
    """The author's agent's own live claim with this text, kind and scope, if it has one (the oldest),
    in the same pool: a private note repeats a private note, a shared claim a shared one."""
    pool = author.agent if private else None
    return _own_among(claims.twins(conn, claims.text_key(text), besides=None, viewer=pool), author, kind=kind, scope=scope, text=text, pool=pool)


def _own_among(live: list[ClaimRow], author: Principal, *, kind: str, scope: str, text: str, pool: str | None) -> ClaimRow | None:
    """:func:`own_live_claim` among ``live``, the live claims with the text's words that ``pool`` may see (oldest first)."""
    agent = author.key.rpartition(":")[0]
    wanted: str | None = None
    for twin in live:
        if twin.private_to != pool:
            continue
        if twin.author.rpartition(":")[0] == agent and (twin.kind, twin.scope) == (kind, scope):
            wanted = same_text(text) if wanted is None else wanted
            if same_text(twin.text) == wanted:
                return twin
    return None


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
    old, _, _ = facts.require_live(conn, claim_id, "revise")  # its author's domain as the events say it
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
    #: The SHA-256 of the claim text the evidence was measured against (checked against the claim's event in the job).
    text_sha256: str | None = None


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
    claims.require_visible(conn, claim_id, witness)
    claim, told, revoked = facts.require_live(conn, claim_id, "corroborate")
    _refuse_private(claim, "corroborate")
    if match.text_sha256 is not None and match.text_sha256 != told.text_sha256:
        raise facts.RowTampered(
            f"claim {claim.id}'s text is not the text its keyed event {told.seq} recorded (sha256 {told.text_sha256[:16]}...): "
            "the row was changed behind the broker's back, and no evidence is judged against it (run `conclave memory verify`)"
        )
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
    new = Witness(row=row, principal=witness.key, domain=witness.domain, at=at, blind=blind, revoked=witness.key in revoked, unread=kind == "unread")
    judged = told.standing(policy, revoked, extra=new)
    extra = {"blind": blind, "witness": kind, "similarity": match.similarity, "evidence_match": match.method}
    verdict = record_witness(conn, witness, claim, judged, "memory.corroborate", row, at, extra, evidence)
    out = _after(conn, policy, claim.id, verdict, blind=blind, witness=kind, similarity=match.similarity)
    exposures.record(conn, witness, [claim], "show", at)  # the reply carries the text: from now on, informed
    return out


def dispute(conn: apsw.Connection, policy: TrustPolicy, witness: Principal, claim_id: int, *, reason: str) -> dict[str, Any]:
    """Refute a claim, by id.  An independent dispute makes it ``disputed``."""
    claims.require_visible(conn, claim_id, witness)
    claim, told, revoked = facts.require_live(conn, claim_id, "dispute")
    _refuse_private(claim, "dispute")
    at = events.now()
    conn.execute(
        "INSERT INTO disputes(claim, principal, domain, at, reason, counted) VALUES (?,?,?,?,?,0)",
        (claim.id, witness.key, witness.domain, at, reason),
    )
    row = conn.last_insert_rowid()
    new = Witness(row=row, principal=witness.key, domain=witness.domain, at=at, revoked=witness.key in revoked)
    judged = told.standing(policy, revoked, extra=new, extra_is_dispute=True)
    verdict = record_witness(conn, witness, claim, judged, "memory.dispute", row, at, {"reason_sha256": claims.digest(reason)}, None)
    out = _after(conn, policy, claim.id, verdict)
    exposures.record(conn, witness, [claim], "show", at)  # the reply carries the text
    return out


def _refuse_private(claim: ClaimRow, verb: str) -> None:
    """A private claim takes no witnesses (its row's ``private_to`` was just held against its events).

    Raises:
        ConclaveError: ``conflict``: share it first.
    """
    if claim.private_to is not None:
        raise ConclaveError(
            ErrorCode.CONFLICT,
            f"cannot {verb} claim {claim.id}: it is private to {claim.private_to} and takes no witnesses; "
            f"share it first (conclave memory share {claim.id}), then it starts as an unverified shared claim",
        )


def record_witness(
    conn: apsw.Connection,
    witness: Principal,
    claim: ClaimRow,
    judged: Standing,
    kind: str,
    row: int,
    at: str,
    extra: dict[str, Any],
    evidence: str | None,
) -> Verdict:
    """Log the event with this row's verdict (``judged``: the claim's events and the new witness), write the standing."""
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
