"""One lifecycle pass: decay, duplicates and caps, tier-aware, retiring and never deleting.

CLIO had five ways for a memory to vanish -- decay, age-out, dedup, caps,
prune -- each deleting rows without a trace, and two of them disagreeing
about the tier.  Here there is one pass, :func:`plan` then :func:`apply`:

**Decay.**  A live claim unused (not shown -- the exposure log says when --
nor vouched for) for longer than
its tier's idle window is retired: unverified 30 days, disputed 14, trusted
365 by default.

**Duplicates.**  Candidates come from the FTS index, not from all pairs:
each claim is searched by its three rarest words and compared (Jaccard over
words) with the few claims that come back.  Exact duplicates (same words)
keep the strongest copy -- higher tier, more counted witnesses, older -- and
retire the rest.  Near-duplicates must agree on every number (a 120 s and a
12 s timeout are different claims) and are merged only within one tier below
trusted; a paraphrase of a *trusted* claim is never folded into it (its
different words may be exactly the poison or the correction), only listed
for review.

**Caps.**  Past ``cap_per_kind`` live claims of a kind, the excess is
retired disputed first, then unverified, least recently used first; a
trusted claim goes only when trusted claims alone exceed the cap, so no
trusted claim is ever retired to make room for an unverified one.

Every retirement is a tombstone with a reason and a ``memory.retire``
event; :func:`apply` re-checks each planned step against the current row
and skips what changed since the plan.  ``--dry-run`` returns the plan.

Automatic runs happen only when **both** enough new claims
(``groom_after_claims``) and enough time since the last run
(``groom_after_seconds``) have accumulated.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Iterator, Mapping, final

import apsw
import attrs

from memory import claims
from store import dialect, events
from memory import retrieval, usage
from memory.claims import KINDS
from memory.policy import PolicyError, Tier

GROOM_KEYS: Final = (
    "groom_after_claims",
    "groom_after_seconds",
    "idle_days_unverified",
    "idle_days_disputed",
    "idle_days_trusted",
    "duplicate_similarity",
    "cap_per_kind",
    "caps",
    "review_unused_days",
)
#: Retirements per store job when applying, so other writers interleave.
APPLY_CHUNK: Final = 500
_RARE_WORDS: Final = 3
_CANDIDATES: Final = 8
_STRENGTH: Final = {Tier.TRUSTED: 2, Tier.UNVERIFIED: 1, Tier.DISPUTED: 0}
#: When a claim was last written, vouched for or shown (ISO strings compare as times).
_LAST_USE_OF: Final = (
    "{larger}(c.created_at, coalesce(c.last_used_at, ''), coalesce((SELECT max(e.at) FROM exposures e WHERE e.claim = c.id), ''))"
)


def _last_use(conn: apsw.Connection) -> str:
    """When a claim was last created, vouched for or shown (SQLite's max(a, b, c) is greatest() on PostgreSQL)."""
    return _LAST_USE_OF.format(larger="greatest" if dialect.is_postgresql(conn) else "max")


def _number(table: Mapping[str, Any], key: str, default: float, where: str, *, whole: bool = False, low: float = 0) -> Any:
    value = table.get(key, default)
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low:
        raise PolicyError(f"{where}: {key} must be a {'whole ' if whole else ''}number >= {low}, not {value!r}")
    return value


@final
@attrs.frozen
class GroomPolicy:
    """When groom runs by itself, and what it retires.  ``[memory]`` in the team file.

    An idle window of 0 days means that tier never decays.
    """

    after_claims: int = 500
    after_seconds: float = 86_400.0
    idle_days_unverified: float = 30.0
    idle_days_disputed: float = 14.0
    idle_days_trusted: float = 365.0
    duplicate_similarity: float = 0.8
    cap_per_kind: int = 10_000
    caps: tuple[tuple[str, int], ...] = ()
    #: Trusted claims at least this old that no agent was ever pushed or found are listed for review (0: never).
    review_unused_days: float = 90.0

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "[memory]") -> GroomPolicy:
        unknown = set(table) - set(GROOM_KEYS)
        if unknown:
            raise PolicyError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(GROOM_KEYS)}")
        similarity = _number(table, "duplicate_similarity", 0.8, where, low=0.5)
        if similarity > 1:
            raise PolicyError(f"{where}: duplicate_similarity must be between 0.5 and 1, not {similarity!r}")
        caps = table.get("caps", {})
        if not isinstance(caps, dict) or any(k not in KINDS for k in caps):
            raise PolicyError(f"{where}: caps must be a table of kind = number, kinds {', '.join(KINDS)}")
        for kind in caps:
            _number(caps, kind, 0, f"{where}: caps", whole=True, low=1)
        return cls(
            after_claims=_number(table, "groom_after_claims", 500, where, whole=True, low=1),
            after_seconds=float(_number(table, "groom_after_seconds", 86_400.0, where)),
            idle_days_unverified=float(_number(table, "idle_days_unverified", 30.0, where)),
            idle_days_disputed=float(_number(table, "idle_days_disputed", 14.0, where)),
            idle_days_trusted=float(_number(table, "idle_days_trusted", 365.0, where)),
            duplicate_similarity=float(similarity),
            cap_per_kind=_number(table, "cap_per_kind", 10_000, where, whole=True, low=1),
            caps=tuple(sorted((k, int(v)) for k, v in caps.items())),
            review_unused_days=float(_number(table, "review_unused_days", 90.0, where)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "groom_after_claims": self.after_claims,
            "groom_after_seconds": self.after_seconds,
            "idle_days_unverified": self.idle_days_unverified,
            "idle_days_disputed": self.idle_days_disputed,
            "idle_days_trusted": self.idle_days_trusted,
            "duplicate_similarity": self.duplicate_similarity,
            "cap_per_kind": self.cap_per_kind,
            "caps": dict(self.caps),
            **({"review_unused_days": self.review_unused_days} if self.review_unused_days != 90.0 else {}),
        }

    def cap(self, kind: str) -> int:
        return dict(self.caps).get(kind, self.cap_per_kind)

    def idle_days(self, tier: Tier) -> float:
        return {Tier.UNVERIFIED: self.idle_days_unverified, Tier.DISPUTED: self.idle_days_disputed, Tier.TRUSTED: self.idle_days_trusted}[tier]


@final
@attrs.frozen
class Retirement:
    claim: int
    kind: str
    tier: str
    rule: str  # decay | duplicate | cap
    reason: str
    keep: int | None = None  # the surviving copy, for duplicates


@final
@attrs.frozen
class GroomPlan:
    at: str
    high_water: int
    live: int
    retire: tuple[Retirement, ...]
    #: Near-duplicates across tiers: listed for a person, never merged.
    review: tuple[dict[str, Any], ...]
    #: Old trusted claims no agent ever used: listed for a person, never retired for it.
    unused: tuple[dict[str, Any], ...] = ()

    def counts(self) -> dict[str, int]:
        by_rule = Counter(r.rule for r in self.retire)
        return {
            "live": self.live, "retire": len(self.retire), **{f"retire_{k}": v for k, v in sorted(by_rule.items())}, "review": len(self.review),
            "unused": len(self.unused),
        }  # fmt: skip

    def as_dict(self, *, listed: int | None = None) -> dict[str, Any]:
        """The plan; with ``listed``, only that many retirements, review pairs and unused claims are spelled out."""
        retire, review, unused = self.retire[:listed], self.review[:listed], self.unused[:listed]
        return {
            "at": self.at,
            "high_water": self.high_water,
            "counts": self.counts(),
            "retire": [attrs.asdict(r) for r in retire],
            "review": list(review),
            "unused": list(unused),
            "omitted": {"retire": len(self.retire) - len(retire), "review": len(self.review) - len(review), "unused": len(self.unused) - len(unused)},
        }


@final
@attrs.frozen
class GroomState:
    """What the automatic trigger needs: the last run and what came after it."""

    last_at: str | None
    high_water: int
    new_claims: int
    first_new_at: str | None

    def due(self, policy: GroomPolicy, now: datetime) -> bool:
        """Both conditions: enough new claims *and* enough time since the last run (or the first new claim)."""
        if self.new_claims < policy.after_claims:
            return False
        since = self.last_at or self.first_new_at
        return since is not None and (now - _parse(since)).total_seconds() >= policy.after_seconds


def state(conn: apsw.Connection) -> GroomState:
    row = conn.execute("SELECT at, high_water FROM groom_runs ORDER BY id DESC LIMIT 1").fetchone()
    last_at, high = (row[0], row[1]) if row else (None, 0)
    new, first = conn.execute("SELECT count(*), min(created_at) FROM claims WHERE id > ?", (high,)).fetchone()
    return GroomState(last_at, high, new, first)


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


# -- planning (read-only) -------------------------------------------------------


def plan(conn: apsw.Connection, policy: GroomPolicy, *, now: datetime | None = None) -> GroomPlan:
    """What a groom would retire now.  Reads only; safe on a read connection."""
    moment = now or datetime.now(timezone.utc)
    previous = state(conn)
    high_water = conn.execute("SELECT coalesce(max(id), 0) FROM claims").fetchone()[0]
    live = conn.execute("SELECT count(*) FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed')").fetchone()[0]
    chosen: dict[int, Retirement] = {}
    for r in _decay(conn, policy, moment):
        chosen.setdefault(r.claim, r)
    duplicates, review = _duplicates(conn, policy, since=previous.high_water)
    for r in duplicates:
        chosen.setdefault(r.claim, r)
    for r in _caps(conn, policy, chosen):
        chosen.setdefault(r.claim, r)
    ordered = tuple(sorted(chosen.values(), key=lambda r: r.claim))
    unused = tuple(u for u in _unused(conn, policy, moment) if u["claim"] not in chosen)
    return GroomPlan(moment.isoformat(timespec="microseconds"), high_water, live, ordered, tuple(review), unused)


def _unused(conn: apsw.Connection, policy: GroomPolicy, now: datetime) -> Iterator[dict[str, Any]]:
    """Trusted claims at least ``review_unused_days`` old that no agent was ever pushed or found (memory.usage)."""
    if policy.review_unused_days <= 0:
        return
    cutoff = (now - timedelta(days=policy.review_unused_days)).isoformat(timespec="microseconds")
    for claim_id, kind, created in conn.execute(
        f"SELECT c.id, c.kind, c.created_at FROM claims c WHERE c.tier = 'trusted' AND c.created_at <= ? AND {usage.never_used_sql()} ORDER BY c.id",
        (cutoff,),
    ):
        days = (now - _parse(created)).days
        yield {"claim": claim_id, "kind": kind, "created_at": created, "reason": f"trusted for review: {days} days old and never used by an agent"}


def _decay(conn: apsw.Connection, policy: GroomPolicy, now: datetime) -> Iterator[Retirement]:
    for tier in (Tier.DISPUTED, Tier.UNVERIFIED, Tier.TRUSTED):
        days = policy.idle_days(tier)
        if days <= 0:
            continue
        cutoff = (now - timedelta(days=days)).isoformat(timespec="microseconds")
        for claim_id, kind in conn.execute(
            f"SELECT c.id, c.kind FROM claims c WHERE c.tier = ? AND {_last_use(conn)} < ? ORDER BY c.id", (tier.value, cutoff)
        ):
            yield Retirement(claim_id, kind, tier.value, "decay", f"groom: {tier.value} claim unused for {days:g} days")


def _live_rows(conn: apsw.Connection, since: int = 0) -> Iterator[tuple[int, str, str, str, str, str, str | None]]:
    yield from conn.execute(
        "SELECT id, kind, scope, tier, text, text_key, private_to FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed') AND id > ? ORDER BY id",
        (since,),
    )


def _duplicates(conn: apsw.Connection, policy: GroomPolicy, *, since: int) -> tuple[list[Retirement], list[dict[str, Any]]]:
    """Exact and near duplicates among live claims; claims newer than ``since`` are the probes."""
    df: Counter[str] = Counter()
    for row in _live_rows(conn):
        df.update(set(claims.words(row[4])))
    counted = dict(conn.execute("SELECT claim, count(*) FROM corroborations WHERE counted = 1 GROUP BY claim"))
    pairs: list[tuple[int, int, float]] = []
    seen: set[tuple[int, int]] = set()
    for claim_id, kind, scope, tier, text, key, private_to in _live_rows(conn, since):
        mine = set(claims.words(text))
        rare = sorted((w for w in mine if df[w] > 1), key=lambda w: (df[w], w))[:_RARE_WORDS]
        if not rare:
            continue
        found = retrieval.match_ids(conn, rare, _CANDIDATES + 1)
        others = claims.load_many(conn, (i for i in found if i != claim_id))
        for other in others.values():
            pair = (min(claim_id, other.id), max(claim_id, other.id))
            if pair in seen or other.kind != kind or other.scope != scope or not other.live or other.private_to != private_to:
                continue  # (a private note is never folded into a shared claim, nor into another agent's note)
            seen.add(pair)
            theirs = set(claims.words(other.text))
            similarity = len(mine & theirs) / len(mine | theirs) if mine | theirs else 0.0
            if other.text_key == key or (similarity >= policy.duplicate_similarity and _numbers(mine) == _numbers(theirs)):
                pairs.append((pair[0], pair[1], 1.0 if other.text_key == key else similarity))
    rows = claims.load_many(conn, (i for p in pairs for i in p[:2]))

    def strength(c: claims.ClaimRow) -> tuple[int, int, int]:
        return (_STRENGTH[c.tier], counted.get(c.id, 0), -c.id)

    retire: dict[int, Retirement] = {}
    review = []
    for a, b, similarity in pairs:
        first, second = rows[a], rows[b]
        keep, lose = (first, second) if strength(first) >= strength(second) else (second, first)
        exact = first.text_key == second.text_key
        if exact:
            reason = f"groom: exact duplicate of {keep.tier.value} claim {keep.id}"
        elif keep.tier is lose.tier and keep.tier is not Tier.TRUSTED:
            reason = f"groom: near-duplicate ({similarity:.2f}) of {keep.tier.value} claim {keep.id}"
        else:
            review.append({"claims": [a, b], "tiers": [first.tier.value, second.tier.value], "similarity": round(similarity, 3)})
            continue
        if lose.id not in retire and keep.id not in retire:
            retire[lose.id] = Retirement(lose.id, lose.kind, lose.tier.value, "duplicate", reason, keep.id)
    return list(retire.values()), review


def _numbers(words: set[str]) -> set[str]:
    # "a 120 s timeout" and "a 12 s timeout" share almost every word and mean different things.
    return {w for w in words if any(ch.isdigit() for ch in w)}


def _caps(conn: apsw.Connection, policy: GroomPolicy, planned: dict[int, Retirement]) -> Iterator[Retirement]:
    live_by_kind = dict(conn.execute("SELECT kind, count(*) FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed') GROUP BY kind"))
    planned_by_kind = Counter(r.kind for r in planned.values())
    for kind, live in sorted(live_by_kind.items()):
        cap = policy.cap(kind)
        excess = live - planned_by_kind[kind] - cap
        if excess <= 0:
            continue
        rows = conn.execute(
            f"SELECT c.id, c.tier FROM claims c WHERE c.kind = ? AND c.tier IN ('unverified', 'trusted', 'disputed') "
            f"ORDER BY CASE c.tier WHEN 'disputed' THEN 0 WHEN 'unverified' THEN 1 ELSE 2 END, {_last_use(conn)}, c.id",
            (kind,),
        )
        for claim_id, tier in rows:
            if excess <= 0:
                break
            if claim_id in planned:
                continue
            excess -= 1
            yield Retirement(claim_id, kind, tier, "cap", f"groom: more than {cap} live {kind} claims; least used {tier} first")


# -- applying (store-owner jobs) ------------------------------------------------


def apply_chunk(conn: apsw.Connection, steps: list[Retirement], *, actor: str, run: str) -> tuple[int, int]:
    """Carry out planned retirements that still hold; return (retired, skipped)."""
    from memory.curation import retire

    rows = claims.load_many(conn, (s.claim for s in steps))
    done = skipped = 0
    for step in steps:
        claim = rows.get(step.claim)
        if claim is None or claim.tier.value != step.tier:
            skipped += 1  # the claim moved since the plan: leave it for the next run
            continue
        retire(conn, claim, actor=actor, reason=step.reason, detail={"rule": step.rule, "keep": step.keep, "groom": run})
        done += 1
    return done, skipped


def finish(conn: apsw.Connection, plan_: GroomPlan, *, actor: str, run: str, retired: int, skipped: int) -> dict[str, Any]:
    summary = {**plan_.counts(), "retired": retired, "skipped": skipped, "run": run}
    conn.execute("INSERT INTO groom_runs(at, actor, high_water, summary) VALUES (?,?,?,?)", (events.now(), actor, plan_.high_water, json.dumps(summary)))
    events.append(conn, "memory.groom", actor=actor, payload=summary)
    return summary


def chunks(steps: tuple[Retirement, ...]) -> Iterator[list[Retirement]]:
    for start in range(0, len(steps), APPLY_CHUNK):
        yield list(steps[start : start + APPLY_CHUNK])
