"""Claims and their editions: the rows, the search-index membership, the JSON.

A claim's text never changes.  ``remember`` inserts edition 1 of a new
lineage; ``revise`` inserts the next edition -- unverified, with no
witnesses -- and marks the previous one ``superseded``.  Which FTS5 index a
claim sits in follows from its tier alone (:func:`reindex`; on PostgreSQL
partial GIN indexes over the tier need no bookkeeping): every live
claim is in ``claims_fts``, trusted ones also in ``trusted_fts``; retired
and superseded editions are in neither, but their rows stay for audit.

Every function here runs inside a store-owner job (it takes the apsw
connection) and raises :class:`~broker.errors.ConclaveError` for the caller's
mistakes, which rolls the job back.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any, Callable, Final, Iterable, final

import apsw
import attrs

from broker.errors import ConclaveError, ErrorCode
from store import dialect, events
from memory.policy import LIVE_TIERS, Tier

if TYPE_CHECKING:
    from broker.identity import Principal

KINDS: Final = ("discovery", "solution", "pattern", "workflow", "failure")
SCOPES: Final = ("repo", "general")
MAX_TEXT: Final = 4000
MAX_NOTE: Final = 2000

_WORD: Final = re.compile(r"\w+")
_COLUMNS: Final = (
    "id, lineage, edition, supersedes, superseded_by, kind, scope, text, text_key, evidence, author, author_domain, "
    "tier, created_at, last_used_at, retired_at, retired_by, retired_reason, private_to"
)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def text_key(text: str) -> str:
    """Identical for texts with the same words in any order or case: twins and exact duplicates."""
    return hashlib.sha1(" ".join(sorted(words(text))).encode()).hexdigest()


#: What events record of a text: enough for ``verify`` to detect an edit, nothing to read.
digest: Final = events.sha256


@final
@attrs.frozen
class ClaimRow:
    """One edition, as stored."""

    id: int
    lineage: int
    edition: int
    supersedes: int | None
    superseded_by: int | None
    kind: str
    scope: str
    text: str
    text_key: str
    evidence: str | None
    author: str
    author_domain: str
    tier: Tier = attrs.field(converter=Tier)
    created_at: str
    last_used_at: str | None
    retired_at: str | None
    retired_by: str | None
    retired_reason: str | None
    #: The agent name that keeps this claim for itself (a private pool); None: shared.
    private_to: str | None = None

    @property
    def live(self) -> bool:
        return self.tier in LIVE_TIERS

    def visible_to(self, viewer: Principal) -> bool:
        """A shared claim is anyone's; a private one only its agent's (any session) and the operator's."""
        return self.private_to is None or viewer.is_operator or viewer.agent == self.private_to


def load(conn: apsw.Connection, claim_id: int) -> ClaimRow | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM claims WHERE id = ?", (claim_id,)).fetchone()
    return ClaimRow(*row) if row else None


def load_many(conn: apsw.Connection, ids: Iterable[int]) -> dict[int, ClaimRow]:
    wanted = list(dict.fromkeys(ids))
    out: dict[int, ClaimRow] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT {_COLUMNS} FROM claims WHERE id IN ({marks})", chunk):
            out[row[0]] = ClaimRow(*row)
    return out


def require(conn: apsw.Connection, claim_id: int) -> ClaimRow:
    claim = load(conn, claim_id)
    if claim is None:
        raise ConclaveError(ErrorCode.NOT_FOUND, f"there is no claim {claim_id}; `conclave memory recall QUERY` finds claims by their words")
    return claim


def require_visible(conn: apsw.Connection, claim_id: int, viewer: Principal) -> ClaimRow:
    """The claim, if ``viewer`` may see it; another agent's private claim is ``not_found``, word for word
    as a claim that does not exist (its existence is not told either)."""
    claim = require(conn, claim_id)
    if not claim.visible_to(viewer):
        raise ConclaveError(ErrorCode.NOT_FOUND, f"there is no claim {claim_id}; `conclave memory recall QUERY` finds claims by their words")
    return claim


def require_live(conn: apsw.Connection, claim_id: int, verb: str) -> ClaimRow:
    """The claim, if it may still be acted on (not retired, not superseded).

    Raises:
        ConclaveError: ``not_found``, or ``conflict`` naming the current edition.
    """
    claim = require(conn, claim_id)
    if claim.tier is Tier.SUPERSEDED:
        current = current_edition(conn, claim.lineage)
        raise ConclaveError(
            ErrorCode.CONFLICT,
            f"cannot {verb} claim {claim_id}: it was superseded by claim {claim.superseded_by}"
            + (f" (the current edition is {current})" if current and current != claim.superseded_by else "")
            + f"; {verb} the current edition instead",
        )
    if claim.tier is Tier.RETIRED:
        raise ConclaveError(ErrorCode.CONFLICT, f"cannot {verb} claim {claim_id}: it was retired ({claim.retired_reason})")
    return claim


def current_edition(conn: apsw.Connection, lineage: int) -> int | None:
    row = conn.execute("SELECT id FROM claims WHERE lineage = ? AND superseded_by IS NULL ORDER BY edition DESC LIMIT 1", (lineage,)).fetchone()
    return row[0] if row else None


def editions(conn: apsw.Connection, lineage: int) -> list[ClaimRow]:
    return [ClaimRow(*r) for r in conn.execute(f"SELECT {_COLUMNS} FROM claims WHERE lineage = ? ORDER BY edition", (lineage,))]


# Twins are shared claims only: another agent's private claim is never named to anyone.
_TWINS: Final = f"SELECT {_COLUMNS} FROM claims WHERE text_key = ? AND tier IN ('unverified', 'trusted', 'disputed') AND private_to IS NULL ORDER BY id"
_OWN_TWINS: Final = (
    f"SELECT {_COLUMNS} FROM claims WHERE text_key = ? AND tier IN ('unverified', 'trusted', 'disputed') "
    "AND (private_to IS NULL OR private_to = ?) ORDER BY id"
)


def twins(conn: apsw.Connection, key: str, *, besides: int | None, viewer: str | None = None) -> list[ClaimRow]:
    """Live shared claims with the same words as ``key`` (but ``besides``), oldest first, read now;
    with ``viewer`` (an agent name) that agent's own private ones too."""
    if viewer is None:
        return [ClaimRow(*r) for r in conn.execute(_TWINS, (key,)) if r[0] != besides]
    return [ClaimRow(*r) for r in conn.execute(_OWN_TWINS, (key, viewer)) if r[0] != besides]


def twins_later(conn: apsw.Connection, key: str, *, besides: int | None, then: Callable[[list[ClaimRow]], None]) -> None:
    """Live claims with the same words as ``key`` (but ``besides``), handed to ``then`` once read.

    On a server the query goes with the job's (or its batch's) next statement
    instead of taking a round trip of its own (``dialect.read_later``).
    """
    dialect.read_later(conn, _TWINS, (key,), lambda rows: then([ClaimRow(*r) for r in rows if r[0] != besides]))


_NEXT_ID: Final = "SELECT coalesce(max(id), 0) + 1 FROM claims"


def insert(
    conn: apsw.Connection,
    author: Principal,
    *,
    kind: str,
    scope: str,
    text: str,
    evidence: str | None,
    revises: ClaimRow | None = None,
    at: str | None = None,
    private_to: str | None = None,
    key: str | None = None,
) -> ClaimRow:
    """Write a new edition (unverified, no witnesses) and index it; record the event.

    With ``revises`` the new row continues that lineage and the old edition
    becomes ``superseded`` (it leaves the search indexes, its row stays).
    ``key``: ``text_key(text)``, when the caller has it already.
    """
    stamp = at or events.now()
    key = text_key(text) if key is None else key
    # One writer: the next id is max(id) + 1, known before the insert, so a first
    # edition names itself as its lineage, and on a server the INSERT can go with
    # the job's next statement (PgConnection.next_id, execute_later).
    new_id = dialect.next_id(conn, "claims", _NEXT_ID)
    lineage, edition = (revises.lineage, revises.edition + 1) if revises else (new_id, 1)
    dialect.execute_later(
        conn,
        "INSERT INTO claims(id, lineage, edition, supersedes, kind, scope, text, text_key, evidence, author, author_domain, tier, created_at, private_to) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'unverified', ?, ?)",
        (new_id, lineage, edition, revises.id if revises else None, kind, scope, text, key, evidence, author.key, author.domain, stamp, private_to),
    )
    _index(conn, "claims_fts", new_id, text)
    payload: dict[str, Any] = {
        "kind": kind, "scope": scope, "lineage": lineage, "edition": edition, "text_sha256": digest(text), "text_key": key,
        "domain": author.domain,
    }
    if evidence is not None:
        payload["evidence_sha256"] = digest(evidence)
    if private_to is not None:
        payload["private_to"] = private_to
    if revises is not None:
        conn.execute("UPDATE claims SET superseded_by = ? WHERE id = ?", (new_id, revises.id))
        set_tier(conn, revises, Tier.SUPERSEDED)
        payload.update(supersedes=revises.id, superseded_tier=revises.tier.value)
    events.append(conn, "memory.revise" if revises else "memory.remember", actor=author.key, subject=str(new_id), payload=payload, at=stamp)
    if revises is not None:
        # The old edition's own events say it was superseded (a decision reads one claim's events, not its successor's).
        events.append(conn, "memory.tier", actor=author.key, subject=str(revises.id), at=stamp, payload={
            "from": revises.tier.value, "to": Tier.SUPERSEDED.value, "cause": f"revised by {author.key}", "superseded_by": new_id,
        })
    return ClaimRow(
        id=new_id, lineage=lineage, edition=edition, supersedes=revises.id if revises else None, superseded_by=None,
        kind=kind, scope=scope, text=text, text_key=key, evidence=evidence, author=author.key, author_domain=author.domain,
        tier=Tier.UNVERIFIED, created_at=stamp, last_used_at=None, retired_at=None, retired_by=None, retired_reason=None,
        private_to=private_to,
    )


def set_tier(conn: apsw.Connection, claim: ClaimRow, tier: Tier) -> ClaimRow:
    """Store a new tier and move the claim between search indexes to match."""
    if tier is claim.tier:
        return claim
    reindex(conn, claim.id, claim.text, claim.tier, tier)
    conn.execute("UPDATE claims SET tier = ? WHERE id = ?", (tier.value, claim.id))
    return attrs.evolve(claim, tier=tier)


def _indexes(tier: Tier) -> set[str]:
    if tier is Tier.TRUSTED:
        return {"claims_fts", "trusted_fts"}
    return {"claims_fts"} if tier in LIVE_TIERS else set()


def reindex(conn: apsw.Connection, claim_id: int, text: str, old: Tier, new: Tier) -> None:
    if dialect.is_postgresql(conn):
        return  # partial GIN indexes over the tier: membership follows the row
    before, after = _indexes(old), _indexes(new)
    for index in before - after:
        # External content: 'delete' must be given exactly what was indexed (text never changes).
        conn.execute(f"INSERT INTO {index}({index}, rowid, text) VALUES ('delete', ?, ?)", (claim_id, text))
    for index in after - before:
        _index(conn, index, claim_id, text)


def _index(conn: apsw.Connection, index: str, claim_id: int, text: str) -> None:
    if dialect.is_postgresql(conn):
        return
    conn.execute(f"INSERT INTO {index}(rowid, text) VALUES (?, ?)", (claim_id, text))


def touch(conn: apsw.Connection, claim_ids: Iterable[int], at: str) -> None:
    """Note that claims were vouched for (groom's decay reads it, with the exposure log)."""
    conn.executemany("UPDATE claims SET last_used_at = ? WHERE id = ?", [(at, i) for i in claim_ids])


#: The badge of a claim an agent keeps for itself: its own note, confirmed by nobody.
PRIVATE_BADGE: Final = "[PRIVATE]"


def badge(tier: Tier, private: bool = False) -> str:
    return PRIVATE_BADGE if private and tier.live else f"[{tier.value.upper()}]"


def brief(claim: ClaimRow) -> dict[str, Any]:
    """The claim's own fields, without its witnesses (see ``memory.standing.describe``)."""
    return {
        "id": claim.id,
        "kind": claim.kind,
        "scope": claim.scope,
        "text": claim.text,
        "evidence": claim.evidence,
        "tier": claim.tier.value,
        "badge": badge(claim.tier, claim.private_to is not None),
        "private_to": claim.private_to,
        "author": claim.author,
        "author_domain": claim.author_domain,
        "lineage": claim.lineage,
        "edition": claim.edition,
        "supersedes": claim.supersedes,
        "superseded_by": claim.superseded_by,
        "created_at": claim.created_at,
        "last_used_at": claim.last_used_at,
        "retired": (
            {"at": claim.retired_at, "by": claim.retired_by, "reason": claim.retired_reason} if claim.retired_at else None
        ),
    }
