"""What a decision rests on: a claim's facts from its keyed events, never from its rows alone.

The rows are a projection of the log (``memory.projection``) and anyone who
can write the file can change a row.  The attack this closes: one keyless
``UPDATE corroborations SET domain = ..., blind = 1``, then a legitimate
corroboration makes the broker re-judge the claim -- from the rows, it
would find a quorum and write a properly keyed ``memory.tier`` TRUSTED
event, pushed to every agent.  So every decision about a claim (judging its
witnesses, whether it is live, who may revise it, which tier an agent is
shown) reads the claim's own events, each one's hash checked under the
chain key as it is read (``store.events.checked``), and judges those.  One
indexed query per decision: the claim's events by subject and every
revocation (there are few); an older store's claims also need their
author's spawn or their successor's revision, read only for those.

Where a claim's row disagrees with its events in a column a decision reads
(its tier, author's domain, lineage, retirement, successor), the decision is
refused with a sentence naming the row and column: the broker never builds
on a row it cannot vouch for.  ``conclave memory verify`` names the rest.

What this does not see at use: an event deleted from the middle of the log
(the chain walk of ``verify`` and the broker's background check name it)
and an exposure row deleted to make a witness look blind (``verify``
recomputes blindness from the exposure events).
"""

from __future__ import annotations

import logging
from typing import Final, Iterable, Mapping

import apsw

from broker.errors import ConclaveError, ErrorCode
from memory import claims
from memory.claims import ClaimRow
from memory.policy import Tier
from memory.projection import CLAIM_KINDS, TIER_KINDS, ClaimFacts, MemoryLog
from store import events
from store.projection import UNKNOWN

log = logging.getLogger("conclave.memory")
#: Claims whose events one query reads (SQLite's default limit is far above this).
CHUNK: Final = 400
_KINDS: Final = ", ".join(f"'{k}'" for k in sorted(CLAIM_KINDS))
_TIER_KINDS: Final = ", ".join(f"'{k}'" for k in sorted(TIER_KINDS))


class RowTampered(ConclaveError):
    """A row a decision reads disagrees with the keyed events that wrote it."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, message)


def read(conn: apsw.Connection, claim_ids: Iterable[int], rows: Mapping[int, ClaimRow] | None = None) -> tuple[dict[int, ClaimFacts], set[str]]:
    """The facts of these claims from their events (each one's hash checked), and every revoked principal.

    One query: the claims' own events and every revocation (there are few).
    Events an older conclave wrote say less, and are completed from where it
    did say it: the author's trust domain from its spawn, and -- for a claim
    whose row (``rows``) names a successor -- the successor's revision.

    Raises:
        store.events.EventForged: an event read fails its hash.
    """
    wanted = list(dict.fromkeys(claim_ids))
    log_ = MemoryLog()
    revocations = " OR kind = 'memory.revoke'"
    for start in range(0, len(wanted), CHUNK) or [0]:
        chunk = [str(i) for i in wanted[start : start + CHUNK]]
        marks = ",".join("?" * len(chunk)) or "NULL"
        for event in events.checked(conn, f"(subject IN ({marks}) AND kind IN ({_KINDS})){revocations}", chunk):
            log_.feed(event)
        revocations = ""
    found = {i: log_.claims[i] for i in wanted if i in log_.claims}
    older = {f.author for f in found.values() if f.author_domain is UNKNOWN}
    successors = [str(r.superseded_by) for i, r in (rows or {}).items() if r.superseded_by is not None and i in found and found[i].superseded_by is None]
    if older or successors:
        spawned = list(older)
        where = " OR ".join(part for part in (
            f"(kind = 'agent.spawn' AND subject IN ({','.join('?' * len(spawned))}))" if spawned else "",
            f"(kind = 'memory.revise' AND subject IN ({','.join('?' * len(successors))}))" if successors else "",
        ) if part)
        for event in events.checked(conn, where, [*spawned, *successors]):
            log_.feed(event)
        for f in found.values():
            if f.author_domain is UNKNOWN:
                f.author_domain = log_.domains.get(f.author, UNKNOWN)
    return found, log_.revoked


def checked(conn: apsw.Connection, claim_id: int) -> tuple[ClaimRow, ClaimFacts, set[str]]:
    """The claim's row, its facts, the revoked principals -- once the row agrees with the facts a decision reads.

    Raises:
        ConclaveError: ``not_found`` (no such claim), ``unavailable`` (the
            row has no event, or disagrees with its events).
    """
    row = claims.require(conn, claim_id)
    found, revoked = read(conn, [claim_id], {claim_id: row})
    facts = found.get(claim_id)
    if facts is None:
        raise RowTampered(f"claim {claim_id} has no memory.remember or memory.revise event: its row was inserted behind the broker's back "
                          "(run `conclave memory verify`)")
    agree(row, facts)
    return row, facts, revoked


def agree(row: ClaimRow, facts: ClaimFacts) -> None:
    """Raise :class:`RowTampered` naming the first column a decision reads where ``row`` is not what the events say."""
    pairs = (
        ("tier", row.tier.value, facts.tier.value),
        ("lineage", row.lineage, facts.lineage),
        ("author", row.author, facts.author),
        ("author_domain", row.author_domain, facts.author_domain),
        ("superseded_by", row.superseded_by, facts.superseded_by),
        ("retired_at", row.retired_at, facts.retired_at),
        ("private_to", row.private_to, facts.private_to),
    )
    for column, stored, told in pairs:
        if told is UNKNOWN or stored == told:
            continue
        log.error("claim %s: column %s is %r in its row but %r by its events", row.id, column, stored, told)
        raise RowTampered(
            f"claim {row.id}'s {column} is {stored!r} in its row but {told!r} by its keyed events (event {facts.tier_seq if column == 'tier' else facts.seq}): "
            "the row was changed behind the broker's back, and nothing is decided on it (run `conclave memory verify`)"
        )


def require_live(conn: apsw.Connection, claim_id: int, verb: str) -> tuple[ClaimRow, ClaimFacts, set[str]]:
    """:func:`checked`, refusing a claim the events say is superseded or retired (``claims.require_live``'s words)."""
    row, facts, revoked = checked(conn, claim_id)
    if not facts.live:
        claims.require_live(conn, claim_id, verb)  # raises with the words a person expects (the row agrees: checked)
        raise ConclaveError(ErrorCode.CONFLICT, f"cannot {verb} claim {claim_id}: its events make it {facts.tier.value}")
    return row, facts, revoked


def event_tiers(conn: apsw.Connection, claim_ids: Iterable[int]) -> dict[int, Tier]:
    """The tier the last tier-setting event of each claim gave it (a claim with none is absent).

    What an agent is shown badged ``[TRUSTED]`` is held against this:
    ``UPDATE claims SET tier = 'trusted'`` (and the search index to match)
    does not put a claim into anyone's context.
    """
    wanted = [str(i) for i in dict.fromkeys(claim_ids)]
    out: dict[int, Tier] = {}
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        marks = ",".join("?" * len(chunk))
        latest = f"seq IN (SELECT max(seq) FROM events WHERE subject IN ({marks}) AND kind IN ({_TIER_KINDS}) GROUP BY subject)"
        for e in events.checked(conn, latest, chunk):
            out[int(e.subject or 0)] = Tier.RETIRED if e.kind == "memory.retire" else Tier(e.payload["to"]) if e.kind == "memory.tier" else Tier.UNVERIFIED
    return out


def shown_as_stored(conn: apsw.Connection, tiers: dict[int, Tier]) -> set[int]:
    """Of ``claim id -> tier about to be shown``, the ids whose tier the events confirm; the others are logged."""
    told = event_tiers(conn, tiers)
    good = {i for i, tier in tiers.items() if told.get(i) is tier}
    for i in set(tiers) - good:
        said = told.get(i)
        log.error("claim %s is %s in its row but %s by its events: not shown", i, tiers[i].value, said.value if said else "nothing")
    return good


def vouched(conn: apsw.Connection, rows: Mapping[int, ClaimRow]) -> dict[int, ClaimRow]:
    """Of these claim rows, those whose columns a decision reads agree with their keyed events; the others are logged and left out.

    For work nobody is waiting on (the background embedder's batches): a
    row changed behind the broker's back is skipped, not built on, and
    ``verify`` names it.
    """
    if not rows:
        return {}
    found, _ = read(conn, rows, rows)
    out = {}
    for i, row in rows.items():
        told = found.get(i)
        try:
            if told is None:
                raise RowTampered(f"claim {i} has no memory.remember or memory.revise event")
            agree(row, told)
        except RowTampered as exc:
            log.error("claim %s skipped: %s", i, exc)
            continue
        out[i] = row
    return out
