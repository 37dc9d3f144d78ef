"""The exposure log: which principal the broker showed which claim, and how.

Every claim a ``recall``, a ``context`` injection or an agent's ``show``
returns is logged here, so a later corroboration can be judged *blind* (an
independent rediscovery) or *informed* (agreement after reading).

Informed-ness is decided per **trust domain** and per **lineage**, which is
stricter than "that principal, that edition": a claim shown to an agent's
earlier session, to its child or to its parent, or an earlier edition of the
same claim, makes the domain's corroboration informed.  Otherwise a restart
or a child that reads on the parent's behalf would launder an informed
witness into a blind one.  (What one domain tells another by mail is beyond
what the broker can see; see docs/MEMORY.md.)

Exposures are reads, not changes, so they write no event: this table is
itself the log.  The verdict a corroboration got is kept on its row and in
its event, so later edits here cannot rewrite history unnoticed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Iterable, Protocol

import apsw

from store import dialect

if TYPE_CHECKING:
    from broker.identity import Principal

VIAS: Final = ("recall", "context", "show")


class Shown(Protocol):
    """Anything naming a claim and its lineage (a full row, or a context line)."""

    @property
    def id(self) -> int: ...

    @property
    def lineage(self) -> int: ...


def record(conn: apsw.Connection, principal: Principal, shown: Iterable[Shown], via: str, at: str) -> None:
    """Log that ``principal`` was shown each claim (groom's decay reads the latest per claim)."""
    if via not in VIAS:
        raise ValueError(f"unknown exposure channel {via!r}")
    rows = [(c.id, c.lineage) for c in shown]
    if not rows:
        return
    if dialect.is_postgresql(conn):
        # One statement for the whole block (a row per claim, not one each), sent with the next statement.
        dialect.execute_later(
            conn,
            "INSERT INTO exposures(claim, lineage, principal, domain, via, at) "
            "SELECT claim, lineage, ?, ?, ?, ? FROM unnest(?::bigint[], ?::bigint[]) AS shown(claim, lineage)",
            (principal.key, principal.domain, via, at, [c for c, _ in rows], [l for _, l in rows]),
        )
        return
    conn.executemany(
        "INSERT INTO exposures(claim, lineage, principal, domain, via, at) VALUES (?,?,?,?,?,?)",
        [(c, l, principal.key, principal.domain, via, at) for c, l in rows],
    )


def seen_by_domain(conn: apsw.Connection, domain: str, lineage: int) -> bool:
    """Has any principal of ``domain`` been shown any edition of this claim?"""
    return conn.execute("SELECT 1 FROM exposures WHERE domain = ? AND lineage = ? LIMIT 1", (domain, lineage)).fetchone() is not None


def count(conn: apsw.Connection) -> int:
    return conn.execute("SELECT count(*) FROM exposures").fetchone()[0]
