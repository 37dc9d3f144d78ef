"""Trails: what happened to a claim (every edition), or what an agent did, in the order it happened.

The order is the event log's, not the clock's.  Every change to the memory
writes an event in the same transaction (``store.events``), and the log's
``seq`` is the order those transactions committed in.  So each trail row is
tied to its event and sorted by that event's ``seq``:

* an edition to its ``memory.remember`` / ``memory.revise`` event (subject = the claim);
* a corroboration or a dispute to its ``memory.corroborate`` / ``memory.dispute``
  event (the event's ``row`` is the witness row's id);
* a promotion to the claim's ``memory.promote`` events, one for one in order;
* tier changes, retirements and unretirements *are* events.

Two timestamps written in the same job are often equal to the microsecond,
so sorting by time put "shown via show" -- the reply a corroboration
carries -- before the corroboration itself.

* an exposure row to the ``memory.shown`` event written with it (the same
  principal, time, channel and claim: ``memory.exposures``), and sorted by
  its ``seq`` like the rest.  The exposure a corroboration's or dispute's
  reply wrote (``via`` show, the same principal, claim and ``at`` as the
  witness row: ``memory.authoring`` writes them in one job) is labelled as
  that reply; its event comes after the job's witness event and the tier
  change it caused, so it sorts after them.

An exposure row with no such event -- written before showings were events,
or inserted behind the broker's back (``verify`` names those) -- is placed
by time: the reply of a witness job right after that job's own events; any
other after the last event written at or before its time (a tie goes to the
event), the events keeping their ``seq`` order whatever their times say,
and exposures after the same event keeping the table's id order.
"""

from __future__ import annotations

import bisect
import json
from typing import Any, Final, Iterable, Mapping, Sequence

import apsw
import attrs

from broker.errors import ConclaveError, ErrorCode
from memory import claims, standing
from memory.exposures import SHOWN
from store import events
from store.events import Event

#: How each kind of witness row reads in its reply's label, and its event kind.
WITNESS_EVENTS: Final = {"corroborated": "memory.corroborate", "disputed": "memory.dispute"}
#: Ranks among rows placed after the same event: the event's own row, then its job's reply, then later exposures.
_OWN, _REPLY, _MERGED = 0, 1, 2


@attrs.frozen
class Step:
    """One row of a trail: who did what to which claim, and where it sits in the event log."""

    at: str
    principal: str
    action: str
    claim: int
    tier: str
    text: str = ""
    counted: bool | None = None
    blind: bool | None = None
    note: str | None = None
    witness: str | None = None  # a corroboration's kind: blind, informed, unread, or "rediscovered in claim N"
    seq: int | None = None  # the event this row is (or was written with); None for an exposure row with no memory.shown event
    reply_to: int | None = None  # for the exposure a reply wrote: the seq of the witness event it answered
    order: tuple[int, int, int] = attrs.field(default=(0, _MERGED, 0), eq=False)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in attrs.asdict(self).items() if k != "order"}


def claim_trail(conn: apsw.Connection, claim_id: int) -> list[dict[str, Any]]:
    """Everything that happened to a claim and its other editions, in the order it happened.

    Who wrote each edition, who was shown it (and how: recall, context,
    show, or the reply to their own corroboration or dispute), who
    corroborated or disputed it (counted or not, blind or informed, and
    why), and every tier change, promotion and retirement.
    """
    claim = claims.require(conn, claim_id)
    family = claims.editions(conn, claim.lineage)
    ids = [e.id for e in family]
    marks = ",".join("?" * len(ids))
    tiers = {e.id: e.tier.value for e in family}
    log = sorted((e for subject in ids for e in events.read(conn, subject=str(subject), kind_prefix="memory")), key=lambda e: e.seq)
    tie = _Ties(log)
    steps: list[Step] = []
    for e in family:
        seq = tie.written(e.id)
        note = f"edition {e.edition}" + (f" of claim {e.supersedes}" if e.supersedes else "")
        steps.append(Step(e.created_at, e.author, "revised" if e.supersedes else "authored", e.id, tiers[e.id], e.text, note=note, seq=seq))
    witnessed: dict[tuple[int, str, str], tuple[str, int | None]] = {}  # (claim, principal, at) -> (action, event seq)
    for cid, row, at, principal, blind, counted, why, evidence, witness, restatement in conn.execute(
        f"SELECT claim, id, at, principal, blind, counted, reason_not_counted, evidence, witness, restatement "
        f"FROM corroborations WHERE claim IN ({marks})",
        ids,
    ):
        seq = tie.witness("corroborated", row)
        witnessed[(cid, principal, at)] = ("corroborated", seq)
        action, how = _witnessed(witness, blind, restatement)
        steps.append(Step(at, principal, action, cid, tiers[cid], evidence or "", bool(counted), bool(blind), why, witness=how, seq=seq))
    for cid, at, other, kind, similarity in conn.execute(
        f"SELECT restates, at, claim, kind, similarity FROM claim_links WHERE restates IN ({marks})", ids
    ):
        steps.append(Step(at, "broker", "restated", cid, tiers[cid], note=f"by claim {other}: {kind}, similarity {similarity:.2f}"))
    for cid, row, at, principal, counted, why, reason in conn.execute(
        f"SELECT claim, id, at, principal, counted, reason_not_counted, reason FROM disputes WHERE claim IN ({marks})", ids
    ):
        seq = tie.witness("disputed", row)
        witnessed[(cid, principal, at)] = ("disputed", seq)
        steps.append(Step(at, principal, "disputed", cid, tiers[cid], reason or "", bool(counted), note=why, seq=seq))
    for cid, at, by, reason in conn.execute(f"SELECT claim, at, by, reason FROM promotions WHERE claim IN ({marks}) ORDER BY id", ids):
        steps.append(Step(at, by, "promoted", cid, tiers[cid], reason or "", seq=tie.promoted(cid)))
    for e in log:
        if e.kind in ("memory.tier", "memory.retire", "memory.unretire"):
            detail = e.payload
            change = f"{detail.get('from')} -> {detail.get('to')}" if "to" in detail else None
            cause = detail.get("cause") or detail.get("rule")
            note = "; ".join(str(x) for x in (change, cause) if x) or None
            cid = int(e.subject or 0)
            steps.append(Step(e.at, e.actor, e.kind.removeprefix("memory."), cid, tiers[cid], str(detail.get("reason") or ""), note=note, seq=e.seq))
    exposed = list(conn.execute(f"SELECT id, claim, at, principal, via FROM exposures WHERE claim IN ({marks}) ORDER BY id", ids))
    showings = _showings(conn, {principal for _, _, _, principal, _ in exposed})
    replies: list[Step] = []
    for row, cid, at, principal, via in exposed:
        shown_seq = showings.get((principal, at, via, cid))
        answered = witnessed.get((cid, principal, at)) if via == "show" else None
        if answered is not None and answered[1] is not None:
            action, seq = answered
            note = f"the reply to its {'corroboration' if action == 'corroborated' else 'dispute'}"
            after = (shown_seq, _OWN, row) if shown_seq is not None else (tie.job_end(seq, cid, principal, action), _REPLY, row)
            replies.append(Step(at, principal, "shown", cid, tiers[cid], note=note, seq=shown_seq, reply_to=seq, order=after))
        elif shown_seq is not None:
            steps.append(Step(at, principal, "shown", cid, tiers[cid], note=f"via {via}", seq=shown_seq))
        else:
            steps.append(Step(at, principal, "shown", cid, tiers[cid], note=f"via {via}", order=(0, _MERGED, row)))
    return [s.as_dict() for s in in_order(steps, log, replies)]


def agent_trail(conn: apsw.Connection, of_agent: str) -> list[dict[str, Any]]:
    """Everything an agent (every session, and its spawned children) authored, corroborated, disputed,
    in the order it happened.

    Raises:
        ConclaveError: ``invalid_args`` for AGENT:SESSION; ``not_found`` for an
            agent that never ran here (an empty trail would look like an agent
            that did nothing).
    """
    if not of_agent or ":" in of_agent:
        raise ConclaveError(ErrorCode.INVALID_ARGS, "trail takes an agent name (alice), not AGENT:SESSION")
    like = events.like_prefix(of_agent)
    names = [r[0] for r in conn.execute("SELECT DISTINCT agent FROM principals WHERE agent = ? OR agent LIKE ? ESCAPE '\\'", (of_agent, f"{like}/%"))]
    if not names:
        raise ConclaveError(
            ErrorCode.NOT_FOUND, f"no agent named {of_agent} has run on this state directory; `conclave agents` lists the ones that have"
        )
    # What the agent did is what its principals wrote: their events, by actor (the agent's own and its children's).
    log = sorted({e.seq: e for name in names for e in events.read(conn, kind_prefix="memory", actor_agent=name)}.values(), key=lambda e: e.seq)
    tie = _Ties(log)
    clause = "({0} LIKE ? ESCAPE '\\' OR {0} LIKE ? ESCAPE '\\')"
    params = (f"{like}:%", f"{like}/%")
    steps: list[Step] = []
    for cid, at, principal, edition, supersedes, tier, text in conn.execute(
        f"SELECT id, created_at, author, edition, supersedes, tier, text FROM claims WHERE {clause.format('author')}", params
    ):
        note = f"edition {edition}" + (f" of claim {supersedes}" if supersedes else "")
        steps.append(Step(at, principal, "revised" if supersedes else "authored", cid, tier, text, note=note, seq=tie.written(cid)))
    for cid, row, at, principal, blind, counted, why, tier, text, witness, restatement in conn.execute(
        f"SELECT c.claim, c.id, c.at, c.principal, c.blind, c.counted, c.reason_not_counted, k.tier, k.text, c.witness, c.restatement "
        f"FROM corroborations c JOIN claims k ON k.id = c.claim WHERE {clause.format('c.principal')}",
        params,
    ):
        action, how = _witnessed(witness, blind, restatement)
        steps.append(Step(at, principal, action, cid, tier, text, bool(counted), bool(blind), why, witness=how, seq=tie.witness("corroborated", row)))
    for cid, row, at, principal, counted, why, reason, tier, text in conn.execute(
        f"SELECT d.claim, d.id, d.at, d.principal, d.counted, d.reason_not_counted, d.reason, k.tier, k.text "
        f"FROM disputes d JOIN claims k ON k.id = d.claim WHERE {clause.format('d.principal')}",
        params,
    ):
        steps.append(Step(at, principal, "disputed", cid, tier, text, bool(counted), note=why or reason, seq=tie.witness("disputed", row)))
    return [s.as_dict() for s in in_order(steps, log, ())]


def _showings(conn: apsw.Connection, principals: Iterable[str]) -> dict[tuple[str, str, str, int], int]:
    """``(principal, at, via, claim) -> seq`` of the ``memory.shown`` events of these principals."""
    wanted = sorted(principals)
    out: dict[tuple[str, str, str, int], int] = {}
    for start in range(0, len(wanted), 400):
        chunk = wanted[start : start + 400]
        marks = ",".join("?" * len(chunk))
        for seq, actor, at, payload in conn.execute(
            f"SELECT seq, actor, at, payload FROM events WHERE kind = '{SHOWN}' AND actor IN ({marks}) ORDER BY seq", chunk
        ):
            body = json.loads(payload)
            for claim_id, _ in body.get("claims", ()):
                out.setdefault((actor, at, body.get("via"), int(claim_id)), seq)
    return out


def _witnessed(witness: str | None, blind: bool, restatement: int | None) -> tuple[str, str]:
    """A corroboration row's action and how its witness knew: a rediscovery names the claim that restated it."""
    if restatement:
        return "rediscovered", f"rediscovered in claim {restatement}"
    return "corroborated", standing.witness_kind(witness, blind)


def in_order(steps: Sequence[Step], log: Sequence[Event], placed: Iterable[Step]) -> list[Step]:
    """``steps`` in the event log's order: a row with an event by its ``seq``; a row without one (an
    exposure) after the last event written at or before its time -- the last before the first event
    that is later than it, so a clock that stepped back cannot reorder the events themselves -- ties
    going to the event, then in its own order (an exposure's id); ``placed`` rows keep their ``order``."""
    latest: list[str] = []  # the latest time among the events so far, in seq order: never decreases
    for e in log:
        latest.append(max(latest[-1], e.at) if latest else e.at)
    seqs = [e.seq for e in log]

    def anchor(at: str) -> int:
        first_later = bisect.bisect_right(latest, at)
        return seqs[first_later - 1] if first_later else 0

    ordered = [*placed]
    for step in steps:
        if step.seq is not None:
            ordered.append(attrs.evolve(step, order=(step.seq, _OWN, 0)))
        else:
            ordered.append(attrs.evolve(step, order=(anchor(step.at), _MERGED, step.order[2])))
    return sorted(ordered, key=lambda s: s.order)


class _Ties:
    """Finds the event a trail row was written with (see the module's docstring)."""

    def __init__(self, log: Sequence[Event]) -> None:
        self.log = log
        self._written: dict[int, int] = {}
        self._witness: dict[tuple[str, int], int] = {}
        self._promotions: dict[int, list[int]] = {}
        self._next: dict[int, Event] = {}
        previous: dict[str, Event] = {}
        for e in log:
            subject = e.subject or ""
            if e.kind in ("memory.remember", "memory.revise") and subject.isdigit():
                self._written.setdefault(int(subject), e.seq)
            elif e.kind in WITNESS_EVENTS.values() and isinstance(e.payload.get("row"), int):
                self._witness.setdefault((e.kind, e.payload["row"]), e.seq)
            elif e.kind == "memory.promote" and subject.isdigit():
                self._promotions.setdefault(int(subject), []).append(e.seq)
            if subject in previous:
                self._next[previous[subject].seq] = e  # the next event about the same claim
            previous[subject] = e

    def written(self, claim_id: int) -> int | None:
        return self._written.get(claim_id)

    def witness(self, action: str, row: int) -> int | None:
        return self._witness.get((WITNESS_EVENTS[action], row))

    def promoted(self, claim_id: int) -> int | None:
        """The next unclaimed ``memory.promote`` event of the claim (promotion rows are read in id order)."""
        pending = self._promotions.get(claim_id)
        return pending.pop(0) if pending else None

    def job_end(self, seq: int, claim_id: int, principal: str, action: str) -> int:
        """The last event of the job that wrote witness event ``seq``: the tier change it caused, if any."""
        following: Mapping[str, Any] | None = None
        nxt = self._next.get(seq)
        if nxt is not None and nxt.kind == "memory.tier" and nxt.subject == str(claim_id):
            following = nxt.payload
        verb = WITNESS_EVENTS[action].removeprefix("memory.")
        if following is not None and following.get("cause") == f"{verb} by {principal}":
            return nxt.seq  # type: ignore[union-attr]
        return seq
