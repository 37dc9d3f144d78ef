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

A corroboration's blindness is decided from this table, so every showing
also writes a ``memory.shown`` event (who, which claims and lineages, how):
``conclave memory verify`` rebuilds the table from those events and
recomputes every corroboration's blindness from them, so an exposure row
deleted to pass an informed witness off as blind is named.  (Stores from
before this carry a ``memory.exposures_logged`` event: exposure rows older
than it are taken as found.)  The verdict a corroboration got is kept on its
row and in its event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Iterable, Protocol

import apsw

from store import dialect, events

if TYPE_CHECKING:
    from broker.identity import Principal

VIAS: Final = ("recall", "context", "show")
#: The event each showing writes (``memory.projection`` rebuilds the table from it).
SHOWN: Final = "memory.shown"
#: Written once per store: exposure rows older than it were written before showings were events.
LOGGED: Final = "memory.exposures_logged"


def start_log(conn: apsw.Connection) -> None:
    """Mark where the exposure log starts being events (once per store; a fresh store starts with it).

    Not on a store that refuses appends (its key missing, its files rolled
    back): operator commands must still read it, and nothing is shown there.
    """
    if events.refusal(conn) is None and conn.execute(f"SELECT 1 FROM events WHERE kind = '{LOGGED}' LIMIT 1").fetchone() is None:
        before = conn.execute("SELECT coalesce(max(id), 0) FROM exposures").fetchone()[0]
        events.append(conn, LOGGED, actor=events.BROKER_ACTOR, payload={"before": before})


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
    events.append(conn, SHOWN, actor=principal.key, at=at, payload={"via": via, "domain": principal.domain, "claims": [list(r) for r in rows]})
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
