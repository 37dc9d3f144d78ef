"""One store job per embedded batch: the vectors, the semantic verdicts, the restatements.

For each claim of the batch that is still live:

1. its vector is stored (``memory.vectors.store_batch``, one ``memory.embed``
   event for the batch);
2. if the semantic prefilter refused it, it is **retired** by the broker
   (reason naming the class and the nearest exemplar) with a
   ``memory.rejected`` event (op, rule, field -- nothing of the text);
3. otherwise, if it says what an earlier live claim of **another trust
   domain** says (cosine >= ``semantic.RESTATES_AT``), the two are linked
   (``claim_links``) and the new claim is retired as a restatement -- one
   claim, not two:

   * **rediscovery**: the new claim's domain was never shown the earlier
     one (any edition, any channel).  It is recorded as a *blind*
     corroboration of the earlier claim by the new claim's author, with the
     new text as its evidence -- the strongest evidence there is, and it
     counts once per domain like any witness;
   * **restatement**: the domain had been shown it.  Linked, not counted:
     an informed near-duplicate is agreement, and agreement is
     ``corroborate``'s to record.  So is every restatement by the operator
     (an ingested file, a new vault note): the operator is nobody's witness.

Everything here is recorded in the keyed event log in this same
transaction: the link and the corroboration in the ``memory.corroborate``
and ``memory.retire`` events' payloads (``restates``, ``link``,
``similarity``), so each row can be rebuilt from its event
(``memory.projection``).

What these decisions read is checked against the keyed events as it is used
(``memory.facts``): whether each claim is live and its author's domain (a
row that disagrees with its events is skipped and logged), the witnesses
the rediscovered claim is judged on, and the earlier claim's stored vector
-- its bytes must hash to what its ``memory.embed`` event recorded, and the
similarity that makes a link is recomputed from those bytes, so a vector
row edited behind the broker's back cannot make a claim a "rediscovery"
(a blind witness) of another.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

import apsw
import attrs

from broker.identity import OPERATOR_NAME
from memory import authoring, claims, curation, exposures, facts, semantic, vectors
from memory.claims import ClaimRow
from memory.policy import TrustPolicy, Witness
from store import events
from store.events import BROKER_ACTOR

if TYPE_CHECKING:
    from memory.semantic import Refusal

log = logging.getLogger("conclave.memory")
#: Earlier claims looked at for a restatement.
_NEIGHBOURS: Final = 8


@final
@attrs.frozen
class Outcome:
    embedded: int = 0
    refused: int = 0
    linked: int = 0


@final
@attrs.frozen
class Author:
    """The principal a restatement's witness row speaks for: the new claim's author (its own finding)."""

    key: str
    domain: str


def absorb(
    conn: apsw.Connection,
    policy: TrustPolicy,
    index: vectors.VectorIndex,
    model: str,
    blobs: dict[int, bytes],
    verdicts: dict[int, Refusal | None],
) -> Outcome:
    rows = facts.vouched(conn, claims.load_many(conn, blobs))
    live = {i: blobs[i] for i in blobs if i in rows and rows[i].live}
    embedded = vectors.store_batch(conn, model, live, actor=BROKER_ACTOR)
    refused = linked = 0
    for claim_id in sorted(live):
        claim = facts.vouched(conn, claims.load_many(conn, [claim_id])).get(claim_id)
        if claim is None or not claim.live:
            continue  # an earlier claim of this batch restated it away
        verdict = verdicts.get(claim_id)
        if verdict is not None:
            refuse(conn, claim, verdict)
            refused += 1
            continue
        if link(conn, policy, index, claim, vectors.decode(live[claim_id])):
            linked += 1
    return Outcome(embedded, refused, linked)


def refuse(conn: apsw.Connection, claim: ClaimRow, verdict: Refusal) -> None:
    """Retire a claim the semantic prefilter refused; the event names the class and exemplar, never the text."""
    op = "memory.revise" if claim.supersedes else "memory.remember"
    events.append(
        conn, "memory.rejected", actor=BROKER_ACTOR, subject=op,
        payload={"rule": verdict.rule, "field": "text", "layer": "meaning", "claim": claim.id, "exemplar": verdict.exemplar, "similarity": verdict.similarity}
        | ({} if verdict.probe is None else {"probe": verdict.probe}),
    )  # fmt: skip
    curation.retire(
        conn, claim, actor=events.qualify(conn, BROKER_ACTOR), reason=f"refused by the prefilter: {verdict.detail()}",
        detail={"rule": "prefilter", "class": verdict.rule, "exemplar": verdict.exemplar, "similarity": verdict.similarity}
        | ({} if verdict.probe is None else {"probe": verdict.probe}),
    )  # fmt: skip


def link(conn: apsw.Connection, policy: TrustPolicy, index: vectors.VectorIndex, claim: ClaimRow, vector: object) -> bool:
    """Link ``claim`` to the earlier claim of another domain it restates, if any (see the module's docstring)."""
    found = index.search(conn, vector, limit=_NEIGHBOURS, trusted_only=False, floor=semantic.RESTATES_AT)  # type: ignore[arg-type]
    earlier = facts.vouched(conn, claims.load_many(conn, [i for i, _ in found if i < claim.id]))
    for other_id, _ in found:
        other = earlier.get(other_id)
        if other is None or not other.live or other.author_domain == claim.author_domain:
            continue
        if claim.private_to is not None or other.private_to is not None:
            continue  # a private claim never vouches, is never vouched for, and is never named to another agent
        similarity = _checked_similarity(conn, index.model, other.id, vector)
        if similarity is None or similarity < semantic.RESTATES_AT:
            continue
        # The operator's own claims (ingested files, new vault notes) are never anyone's witness:
        # a restatement of theirs is linked, not counted, like an informed one.
        operators = claim.author_domain == OPERATOR_NAME
        informed = operators or exposures.seen_by_domain(conn, claim.author_domain, other.lineage)
        kind = "restatement" if informed else "rediscovery"
        at = events.now()
        similarity = round(similarity, 4)
        conn.execute(
            "INSERT INTO claim_links(claim, restates, kind, similarity, at) VALUES (?,?,?,?,?)", (claim.id, other.id, kind, similarity, at)
        )
        link_row = conn.last_insert_rowid()
        if kind == "rediscovery":
            _rediscovered(conn, policy, claim, other, similarity, at)
        curation.retire(
            conn, claim, actor=events.qualify(conn, BROKER_ACTOR), at=at,
            reason=f"restates claim {other.id} ({_why(kind, operators)})",
            detail={"rule": "restatement", "restates": other.id, "link": kind, "similarity": similarity, "row": link_row},
        )  # fmt: skip
        return True
    return False


def _checked_similarity(conn: apsw.Connection, model: str, claim_id: int, vector: object) -> float | None:
    """The cosine of ``vector`` to the claim's stored vector, once its bytes are what its keyed ``memory.embed`` event recorded.

    None (and an error logged) when the row has no such event: the in-broker
    index was loaded from a row changed behind the broker's back.
    """
    import numpy as np

    row = conn.execute("SELECT vector, at FROM claim_vectors WHERE claim = ? AND model = ?", (claim_id, model)).fetchone()
    if row is not None:
        blob, at = bytes(row[0]), row[1]
        for e in events.checked(conn, "kind = 'memory.embed' AND at = ?", (at,)):
            if e.payload.get("model") == model and (e.payload.get("vectors") or {}).get(str(claim_id)) == vectors.digest(blob):
                return round(float(vectors.decode(blob) @ np.asarray(vector, dtype=np.float32)), 4)  # the index's own score
    log.error("claim %s: its stored vector (%s) is not the one its memory.embed event recorded: no restatement judged on it", claim_id, model)
    return None


def _why(kind: str, operators: bool) -> str:
    if kind == "rediscovery":
        return "an independent rediscovery, recorded as its blind corroboration"
    if operators:
        return "the operator's own claim (ingested or from the vault) is never a witness: linked, not counted"
    return "its author had been shown it: linked, not counted"


def _rediscovered(conn: apsw.Connection, policy: TrustPolicy, claim: ClaimRow, other: ClaimRow, similarity: float, at: str) -> None:
    witness = Author(claim.author, claim.author_domain)
    _, told, revoked = facts.checked(conn, other.id)
    conn.execute(
        "INSERT INTO corroborations(claim, principal, domain, at, evidence, blind, counted, witness, similarity, restatement) "
        "VALUES (?,?,?,?,?,1,0,'blind',?,?)",
        (other.id, witness.key, witness.domain, at, claim.text, similarity, claim.id),
    )
    row = conn.last_insert_rowid()
    new = Witness(row=row, principal=witness.key, domain=witness.domain, at=at, blind=True, revoked=witness.key in revoked)
    judged = told.standing(policy, revoked, extra=new)
    extra = {"blind": True, "witness": "blind", "similarity": similarity, "evidence_match": "rediscovery", "restatement": claim.id}
    authoring.record_witness(conn, witness, other, judged, "memory.corroborate", row, at, extra, claim.text)  # type: ignore[arg-type]

