"""``conclave memory verify``: does the database still tell the truth?

Someone with write access to the file (threat T3) can change any row.  The
event log is hash-chained under a key kept outside the database, its head is
anchored outside it, and every change wrote an event in the same
transaction.  So the tables are a projection of the log, and
:func:`check_records` checks both in one walk:

* the chain, its key and its head (``store.integrity``): an edited, inserted
  or dropped event, or one written without the key, breaks the chain at that
  event; a log cut short or appended to disagrees with the anchor and with the
  head the broker committed last; ``--expect-head`` holds it against a head a
  person kept elsewhere; events the broker recorded as lost, and starts that
  found the database disagreeing with its anchor, are listed;
* every table any decision or view reads, rebuilt from the events alone by
  each feature's projector (``Feature.projector``; ``store.projection``) and
  compared row by row, column by column: claims and editions, witnesses with
  their domain, blindness and verdicts, promotions, exposures, settings,
  groom runs, principals, the operator key's digest, mail and deliveries,
  status lines, the fencing reservation.  Derived columns -- a claim's tier,
  a witness's domain, blindness and verdict -- are recomputed by the
  broker's own rules, never read back.  What the events of an older store
  do not carry is listed as not rebuilt, never passed off as checked.

:func:`check_indexes` runs FTS5's own ``integrity-check`` on both search
indexes against the claims they should hold; it needs the writer (SQLite
takes the write lock for it), the rest runs on a read connection.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, final

import apsw
import attrs

from store import dialect, integrity, projection
from store.chainkey import ChainKey
from store.events import Event, Head
from store.projection import Projector


@final
@attrs.frozen
class Problem:
    problem: str
    event: int | None = None
    claim: int | None = None
    #: Where a row disagrees with the log: the table, the row's key, the column (None: the whole row).
    table: str | None = None
    row: list[Any] | None = None
    column: str | None = None
    expected: str | None = None
    found: str | None = None


def check_records(
    conn: apsw.Connection,
    *,
    key: ChainKey | None,
    projectors: Sequence[Callable[[], Projector]],
    committed: Head | None = None,
    expect: integrity.ExpectedHead | None = None,
) -> tuple[integrity.ChainFindings, list[Problem], list[str]]:
    """The chain (against ``committed``, the head the store owner committed last, and ``expect``) and every
    projected table against it; also what could not be rebuilt, in sentences."""
    made = [make() for make in projectors]
    for p in made:
        p.prepare(conn)
    wanted = frozenset().union(*(p.kinds for p in made)) if made else frozenset()
    routes: dict[str, list[Projector]] = {}
    for p in made:
        for kind in p.kinds:
            routes.setdefault(kind, []).append(p)

    def feed(event: Event) -> None:
        for p in routes[event.kind]:
            p.feed(event)

    chain = integrity.check_chain(conn, key, committed=committed, expect=expect, feed=feed, wanted=wanted)
    problems = [Problem(f.problem, event=f.event) for f in chain.findings]
    if key is None:
        # No event past the keying can be believed: every row would be named for it, which says nothing more.
        return chain, problems, ["every table: not rebuilt, since there is no chain key to check the events with"]
    differences, unrebuilt = projection.compare_all(conn, made)
    for d in differences:
        claim = d.row[0] if d.table == "claims" and d.row else None
        problems.append(Problem(d.problem, event=d.event, claim=claim, table=d.table, row=list(d.row) if d.row else None,
                                column=d.column, expected=d.expected, found=d.found))
    return chain, problems, [u.sentence() for u in unrebuilt]


def check_indexes(conn: apsw.Connection) -> list[Problem]:
    """FTS5's integrity-check of both indexes against the claims they should hold (needs the writer)."""
    if dialect.is_postgresql(conn):
        return []  # a generated tsvector column: no one can write it apart from its text
    problems = []
    for index, holds in (("claims_fts", "live claims"), ("trusted_fts", "trusted claims")):
        try:
            conn.execute(f"INSERT INTO {index}({index}, rank) VALUES ('integrity-check', 1)")
        except apsw.Error as exc:
            problems.append(Problem(f"the search index {index} does not match the {holds} it should hold (FTS5 integrity-check: {exc}); a row was edited behind the broker's back"))
    return problems


def report(chain: integrity.ChainFindings, problems: list[Problem], facts: dict[str, Any], not_rebuilt: list[str] | None = None) -> dict[str, Any]:
    # A broken chain names its own first bad event; rows that disagree with good events name theirs.
    in_chain = [f.event for f in chain.findings if f.event is not None]
    with_events = in_chain or [p.event for p in problems if p.event is not None]
    return {
        "ok": not problems,
        "events": chain.walked,
        "head": {"seq": chain.head.seq, "hash": chain.head.hash},
        "first_bad_event": min(with_events) if with_events else None,
        "problems": [attrs.asdict(p) for p in problems],
        "not_rebuilt": list(not_rebuilt or ()),
        "chain": {**chain.facts, **facts},
    }
