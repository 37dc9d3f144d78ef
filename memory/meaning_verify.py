"""``verify`` for what meaning added: vectors, witness kinds, restatement links, each against its event.

* every ``claim_vectors`` row against the ``memory.embed`` event that wrote
  it (the SHA-256 of its bytes): a vector swapped behind the broker's back
  -- to pull a claim into searches, or keep it out -- is named;
* every corroboration's ``witness`` kind, ``blind`` flag and ``restatement``
  against its ``memory.corroborate`` event (the kind is what the policy
  reads: ``unread`` never counts);
* every ``claim_links`` row against the ``memory.retire`` event that retired
  its claim as a restatement.

Each row's event carries everything the row holds, so a projection of the
log (``verify``'s rebuild) can make these tables again.
"""

from __future__ import annotations

import json
from typing import Any

import apsw

from memory import vectors
from memory.verify import Problem


def check(conn: apsw.Connection) -> list[Problem]:
    problems: list[Problem] = []
    embedded: dict[tuple[str, int], tuple[int, str]] = {}
    witnesses: dict[int, tuple[int, dict[str, Any]]] = {}
    retired: dict[int, tuple[int, dict[str, Any]]] = {}
    for seq, kind, subject, payload in conn.execute(
        "SELECT seq, kind, subject, payload FROM events WHERE kind IN ('memory.embed', 'memory.corroborate', 'memory.retire') ORDER BY seq"
    ):
        body = json.loads(payload)
        if kind == "memory.embed":
            for claim, sha in (body.get("vectors") or {}).items():
                embedded[(body.get("model", ""), int(claim))] = (seq, sha)
        elif kind == "memory.corroborate" and "row" in body:
            witnesses[body["row"]] = (seq, body)
        elif kind == "memory.retire" and body.get("rule") == "restatement" and subject:
            retired[int(subject)] = (seq, body)

    for claim, model, blob in conn.execute("SELECT claim, model, vector FROM claim_vectors ORDER BY seq"):
        found = embedded.get((model, claim))
        if found is None:
            problems.append(Problem(f"claim {claim}'s vector ({model}) has no memory.embed event: it was written behind the broker's back", claim=claim))
        elif found[1] != vectors.digest(blob):
            problems.append(Problem(f"claim {claim}'s vector ({model}) no longer matches event {found[0]} (memory.embed) that recorded it", event=found[0], claim=claim))

    for row, claim, witness, blind, restatement in conn.execute("SELECT id, claim, witness, blind, restatement FROM corroborations ORDER BY id"):
        found = witnesses.get(row)
        if found is None:
            continue  # memory.verify names a witness row with no event
        seq, body = found
        recorded = (body.get("witness"), bool(body.get("blind")), body.get("restatement"))
        if "witness" in body and recorded != (witness, bool(blind), restatement):
            problems.append(
                Problem(
                    f"corroborations row {row} on claim {claim} says {witness or 'no kind'}"
                    f"{' (blind)' if blind else ''}, but event {seq} recorded {body.get('witness')}{' (blind)' if body.get('blind') else ''}",
                    event=seq, claim=claim,
                )
            )

    for claim, restates, kind, similarity in conn.execute("SELECT claim, restates, kind, similarity FROM claim_links ORDER BY id"):
        found = retired.get(claim)
        if found is None:
            problems.append(Problem(f"claim {claim}'s link to claim {restates} has no memory.retire event: it was written behind the broker's back", claim=claim))
        elif (found[1].get("restates"), found[1].get("link")) != (restates, kind):
            problems.append(Problem(f"claim {claim}'s link ({kind} of claim {restates}) does not match event {found[0]} (memory.retire)", event=found[0], claim=claim))
    return problems
