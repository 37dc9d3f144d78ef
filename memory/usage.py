"""Usage: how often each claim was pushed in ``context`` and found by ``recall``, and when last.

Gitmoot counts a claim's uses so a curator can see what the team leans on
and what nobody ever reads.  conclave already logs every showing (the
exposure log, for blind witnesses), so usage is *read* from it rather than
written a second time: one source, nothing extra to keep consistent, and
nothing in a call's path that could fail because of counting.

What counts:

* ``context`` -- the claim was pushed inside a ``context`` block (only the
  claims that fit the budget are logged; a linked claim pushed counts too);
* ``recall`` -- the claim was a *direct* ``recall`` hit (claims a recall
  reached through a link are logged as ``show``).

What does not: an agent's ``show`` and the replies to its corroborations and
disputes (``show``), previews (``preview``: logged as ``show``), the
eval's read-only passes (logged nowhere), and anything the operator reads
(the operator's own trust domain, ``operator``, is left out: the curator
reading the memory is not the team using it).
"""

from __future__ import annotations

from typing import Any, Final, Iterable

import apsw

from broker.identity import OPERATOR_NAME

#: The exposure channels that count as use, and the name each is reported under.
COUNTED: Final = ("context", "recall")


def empty() -> dict[str, Any]:
    return {via: {"count": 0, "last": None} for via in COUNTED}


def of_claims(conn: apsw.Connection, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """``{claim: {"context": {"count", "last"}, "recall": {"count", "last"}}}`` for each of ``ids``."""
    wanted = list(dict.fromkeys(ids))
    out = {i: empty() for i in wanted}
    if not wanted:
        return out
    marks = ",".join("?" * len(wanted))
    rows = conn.execute(
        f"SELECT claim, via, count(*), max(at) FROM exposures WHERE claim IN ({marks}) AND via IN ('context', 'recall') "
        f"AND domain <> ? GROUP BY claim, via",
        [*wanted, OPERATOR_NAME],
    )
    for claim, via, count, last in rows:
        out[claim][via] = {"count": count, "last": last}
    return out


def never_used_sql() -> str:
    """A condition on ``claims c``: no agent was ever pushed it or found it by recall (groom's review)."""
    return (
        "NOT EXISTS (SELECT 1 FROM exposures e WHERE e.claim = c.id AND e.via IN ('context', 'recall') "
        f"AND e.domain <> '{OPERATOR_NAME}')"
    )
