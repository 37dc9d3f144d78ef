"""Links between claims: typed, authored, logged, and followed one hop by ``recall --expand`` and ``context``.

A person curating a memory by hand draws lines between notes ("this fix
depends on that finding"); ``conclave memory link A B --kind depends-on``
is that line.  A link is a write like any other: the connection's
principal is its author, it is an event (``memory.link``) in the same
transaction, and it changes neither claim's trust -- it is a pointer, not a
witness.

Three kinds, and which way each is followed from a claim that was found:

=============  ===========================  ======================================
kind           A -> B means                 followed
=============  ===========================  ======================================
relates-to     A and B are about one thing  both ways (A finds B, B finds A)
depends-on     A needs B to be understood   A finds B (the dependency)
supersedes     A replaces B                 B finds A (the newer claim); never A -> B
=============  ===========================  ======================================

Each end is stored as the claim named *and* its lineage: a link follows the
live edition of either end, so revising a claim keeps its links.  A link to
a retired or superseded-only lineage leads nowhere until it lives again.

What a followed link may show is decided by the reader's rules, never the
link's: ``context`` takes a linked claim only if it would take it as a hit
(trusted, unless unverified claims were asked for) and only into the budget
the direct hits left; ``recall`` shows it badged with its tier.  The link's
``why`` is the linker's own words, unvetted: it is shown in ``recall`` and
``show``, never in ``context``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Iterable

import apsw
import attrs

from broker.errors import ConclaveError, ErrorCode
from memory import claims
from memory.policy import Tier
from store import events

if TYPE_CHECKING:
    from broker.identity import Principal

KINDS: Final = ("relates-to", "depends-on", "supersedes")
_LIVE: Final = frozenset(t.value for t in Tier if t.live)
#: The event a link writes (``verify`` holds every ``claim_relations`` row against one).
EVENT: Final = "memory.link"
MAX_WHY: Final = 1000
#: Linked claims one search appends at most (beyond them, the direct hits' links are not followed).
MAX_FOLLOWED: Final = 200


def link(conn: apsw.Connection, author: Principal, source: int, target: int, *, kind: str, why: str | None) -> dict[str, Any]:
    """Record ``source --kind--> target`` as ``author``; the claims' tiers are untouched.

    Raises:
        ConclaveError: ``invalid_args`` (unknown kind, a claim linked to its
            own lineage), ``not_found``, ``conflict`` (an end that is not
            live, or the same link already drawn).
    """
    if kind not in KINDS:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"memory.link: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    for end in (source, target):
        claims.require_visible(conn, end, author)  # another agent's private claim does not exist for the linker
    a = claims.require_live(conn, source, "link")
    b = claims.require_live(conn, target, "link")
    if a.lineage == b.lineage:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"memory.link: claims {source} and {target} are editions of one claim; link two different claims")
    existing = conn.execute(
        "SELECT id FROM claim_relations WHERE source_lineage = ? AND target_lineage = ? AND kind = ?", (a.lineage, b.lineage, kind)
    ).fetchone()
    if existing is not None:
        raise ConclaveError(ErrorCode.CONFLICT, f"memory.link: claim {source} already {kind} claim {target} (link {existing[0]})")
    at = events.now()
    conn.execute(
        "INSERT INTO claim_relations(source, target, source_lineage, target_lineage, kind, why, author, author_domain, at) VALUES (?,?,?,?,?,?,?,?,?)",
        (a.id, b.id, a.lineage, b.lineage, kind, why, author.key, author.domain, at),
    )
    row = conn.last_insert_rowid()
    payload: dict[str, Any] = {"row": row, "target": b.id, "kind": kind, "source_lineage": a.lineage, "target_lineage": b.lineage, "domain": author.domain}
    if why is not None:
        payload["why_sha256"] = claims.digest(why)
    events.append(conn, EVENT, actor=author.key, subject=str(a.id), payload=payload, at=at)
    return {"id": row, "source": a.id, "target": b.id, "kind": kind, "why": why, "author": author.key, "at": at}


def of_claim(conn: apsw.Connection, claim: claims.ClaimRow) -> list[dict[str, Any]]:
    """Every link drawn to or from any edition of ``claim`` (for ``show`` and ``export``), oldest first."""
    rows = conn.execute(
        "SELECT id, source, target, kind, why, author, at FROM claim_relations WHERE source_lineage = ? OR target_lineage = ? ORDER BY id",
        (claim.lineage, claim.lineage),
    )
    return [{"id": i, "source": s, "target": t, "kind": k, "why": w, "author": a, "at": at} for i, s, t, k, w, a, at in rows]


@attrs.frozen
class Followed:
    """A claim reached through one link from a hit."""

    claim: int
    came_from: int
    kind: str
    link: int
    why: str | None
    #: The reached claim's tier and pool, read with it (so a caller can judge it before loading its text).
    tier: Tier = Tier.UNVERIFIED
    private_to: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"from": self.came_from, "kind": self.kind, "link": self.link, "why": self.why}


def follow(conn: apsw.Connection, hits: Iterable[claims.ClaimRow | Any], *, viewer: str | None, besides: Iterable[int] = ()) -> list[Followed]:
    """One hop from ``hits`` (in their order): the live edition at the far end of each link, once each.

    ``hits`` need ``id`` and ``lineage``; claims in ``besides`` (the hits
    themselves) are never returned, nor a private claim of any agent but
    ``viewer`` (an agent name; None: no private claim at all).  Tiers are
    not looked at here: the caller applies its own rules to what comes back.
    """
    order = {}
    for h in hits:
        order.setdefault(h.lineage, h.id)
    if not order:
        return []
    marks = ",".join("?" * len(order))
    lineages = list(order)
    rows = conn.execute(
        f"SELECT id, source_lineage, target_lineage, kind, why FROM claim_relations "
        f"WHERE (source_lineage IN ({marks}) AND kind IN ('relates-to', 'depends-on')) "
        f"OR (target_lineage IN ({marks}) AND kind IN ('relates-to', 'supersedes')) ORDER BY id",
        lineages + lineages,
    ).fetchall()
    reached: list[tuple[int, int, int, str, str | None]] = []  # (hit's rank, far lineage, link, kind, why)
    rank = {lineage: n for n, lineage in enumerate(order)}
    hit_ids = list(order.values())
    for link_id, src, dst, kind, why in rows:
        if src in order and kind in ("relates-to", "depends-on"):
            reached.append((rank[src], dst, link_id, kind, why))
        if dst in order and kind in ("relates-to", "supersedes"):
            reached.append((rank[dst], src, link_id, kind, why))
    reached.sort(key=lambda r: (r[0], r[2]))
    far = {lineage for _, lineage, *_ in reached}
    live = _live_editions(conn, far, viewer)
    seen = set(besides) | set(order.values())
    out: list[Followed] = []
    for hit_rank, lineage, link_id, kind, why in reached:
        edition = live.get(lineage)
        if edition is None or edition[0] in seen:
            continue
        claim, tier, private_to = edition
        seen.add(claim)
        out.append(Followed(claim, hit_ids[hit_rank], kind, link_id, why, Tier(tier), private_to))
        if len(out) >= MAX_FOLLOWED:
            break
    return out


def _live_editions(conn: apsw.Connection, lineages: set[int], viewer: str | None) -> dict[int, tuple[int, str, str | None]]:
    """``{lineage: (id, tier, private_to)}`` of each lineage's live edition that ``viewer`` may see."""
    if not lineages:
        return {}
    marks = ",".join("?" * len(lineages))
    # By lineage only (its index); the tier and the pool are judged here, so no planner walks the tier index.
    rows = conn.execute(f"SELECT lineage, id, tier, private_to FROM claims WHERE lineage IN ({marks})", list(lineages))
    return {
        lineage: (i, tier, private_to)
        for lineage, i, tier, private_to in rows
        if tier in _LIVE and (private_to is None or private_to == viewer)
    }


def count(conn: apsw.Connection) -> int:
    return conn.execute("SELECT count(*) FROM claim_relations").fetchone()[0]
