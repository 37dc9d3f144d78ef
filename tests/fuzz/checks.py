"""Holding what the broker answered against what the model says: one function per kind of answer.

Each raises :class:`Violation` naming the invariant (the issue's numbering,
docs/FUZZING.md) and what differed.  ``reply`` is not an invariant of the
issue's list but the first line of every check: an operation refused that
the rules allow, or allowed that they refuse.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.model import Claim, Expect, Memory

INVARIANTS = {
    "reply": "every reply is what the rules allow (an error code, or the fields of the result)",
    "1-trust": "a claim is trusted exactly when the trust policy says so",
    "2-context": "context never pushes a claim that is not trusted; a revision is a new unverified edition",
    "3-identity": "nothing counted comes from the author's domain; every author, witness and sender is the caller",
    "4-verify": "memory verify is clean",
    "5-durability": "after a broker kill, every acknowledged write is there and nothing unacknowledged is half-applied",
    "6-locks": "no two holders of overlapping exclusive locks; holders are live; fencing tokens only grow",
    "7-mail": "an agent reads only its own mail; a message's sender is the connection's principal",
    "exposures": "a witness is blind exactly when its domain was never shown the claim",
}


class Violation(AssertionError):
    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant
        self.message = message


def short(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."


def judge(what: str, expect: Expect, reply: dict[str, Any], invariant: str = "reply") -> Any:
    """The result, if ``reply`` is what ``expect`` allows; else a Violation."""
    if expect.ok:
        if not reply.get("ok"):
            raise Violation(invariant, f"{what}: expected success ({expect.why or 'allowed'}); got error {short(reply.get('error'))}")
        result = reply.get("result")
        for key, value in expect.fields.items():
            got = result.get(key) if isinstance(result, dict) else None
            if got != value:
                raise Violation(invariant, f"{what}: expected {key} = {short(value)}; got {short(got)} in {short(result)}")
        return result
    if reply.get("ok"):
        raise Violation(invariant, f"{what}: expected error {'/'.join(sorted(expect.errors))} ({expect.why}); got success {short(reply.get('result'))}")
    code = (reply.get("error") or {}).get("code")
    if code not in expect.errors:
        raise Violation(invariant, f"{what}: expected error {'/'.join(sorted(expect.errors))} ({expect.why}); got {code}: {short(reply.get('error'))}")
    return None


def claim(memory: Memory, model: Claim, got: dict[str, Any], *, where: str) -> None:
    """Every field a claim's JSON carries that the rules decide, against the model."""
    standing = memory.standing(model)
    at = f"{where}: claim {model.id}"
    if got.get("tier") != standing.tier:
        invariant = "2-context" if model.edition > 1 and not model.corroborations and standing.tier == "unverified" else "1-trust"
        raise Violation(invariant, f"{at} is {got.get('tier')}; the rules say {standing.tier} ({_why(memory, model)})")
    for key, want in (("author", model.author), ("author_domain", model.author_domain), ("lineage", model.lineage),
                      ("edition", model.edition), ("superseded_by", model.superseded_by), ("kind", model.kind), ("scope", model.scope)):
        if got.get(key) != want:
            raise Violation("3-identity" if key.startswith("author") else "reply", f"{at}: {key} is {short(got.get(key))}, expected {short(want)}")
    if got.get("text") is not None and got["text"] != model.text:
        raise Violation("reply", f"{at}: text changed in place: {short(got['text'])}")
    _witnesses(memory, model, got.get("corroborations", []), model.corroborations, standing.corroborations, at, "corroboration")
    _witnesses(memory, model, got.get("disputes", []), model.disputes, standing.disputes, at, "dispute")
    if len(got.get("promotions", [])) != len(model.promotions):
        raise Violation("1-trust", f"{at}: {len(got.get('promotions', []))} promotions recorded, {len(model.promotions)} made")


def _witnesses(memory: Memory, model: Claim, rows: list[dict[str, Any]], mine: list[Any], verdicts: dict[int, Any], at: str, what: str) -> None:
    if len(rows) != len(mine):
        raise Violation("5-durability" if len(rows) < len(mine) else "3-identity",
                        f"{at}: {len(rows)} {what}s recorded, {len(mine)} acknowledged: {short([r.get('principal') for r in rows])}")
    for row, w in zip(rows, mine):
        verdict = verdicts[w.row]
        if row.get("principal") != w.principal or row.get("domain") != w.domain:
            raise Violation("3-identity", f"{at}: {what} by {row.get('principal')} (domain {row.get('domain')}); the caller was {w.principal} ({w.domain})")
        if what == "corroboration" and bool(row.get("blind")) != w.blind:
            raise Violation("exposures", f"{at}: {w.principal}'s {what} is {'blind' if row.get('blind') else 'informed'}; "
                                         f"its domain {w.domain} was {'shown' if not w.blind else 'never shown'} the claim")
        if what == "corroboration" and memory.witness_kinds and row.get("witness") not in (None, w.kind):
            raise Violation("exposures", f"{at}: {w.principal}'s {what} is {row.get('witness')}; the rules say {w.kind}")
        if bool(row.get("counted")) != verdict.counted or row.get("reason_not_counted") != verdict.reason:
            invariant = "3-identity" if verdict.reason == "author_domain" else "1-trust"
            raise Violation(invariant, f"{at}: {w.principal}'s {what} counted={row.get('counted')} ({row.get('reason_not_counted')}); "
                                       f"the rules say counted={verdict.counted} ({verdict.reason})")


def _why(memory: Memory, model: Claim) -> str:
    s = memory.standing(model)
    return (f"policy quorum {memory.policy.quorum}{' + blind' if memory.policy.require_blind else ''}, counted domains {list(s.counted_domains)}, "
            f"blind {s.has_blind}, promotions {len(model.promotions)}, retired {model.retired}, superseded_by {model.superseded_by}, "
            f"author domain {model.author_domain}")
