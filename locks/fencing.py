"""Fencing tokens: a number on every grant that only ever grows.

A holder passes its token to whatever it writes; the receiver rejects a token
lower than the last it saw, so a holder whose lock expired (or was
force-released) while it was paused cannot clobber its successor's work.

Tokens grow across broker restarts too: the store keeps a reservation
(``lock_fencing.reserved``) that is always ahead of every issued token, and a
new broker starts after it.  The reservation moves forward a block at a time,
written behind through the journal, long before the issued tokens reach it.
Each move also writes a ``lock.reserve`` event, and a starting broker takes
the larger of the row and the last such event (its hash checked): a row
lowered behind the broker's back would hand out tokens again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import apsw

from store import dialect, events

if TYPE_CHECKING:  # not at run time: the verify's walk process imports RESERVE, and would pay for trio
    from locks.journal import Journal
    from store.owner import StoreOwner

#: Tokens reserved at a time; a restart skips at most this many.
BLOCK: Final = 1 << 20


@final
class FencingTokens:
    def __init__(self) -> None:
        self._next = 1
        self._asked = 0

    @property
    def last_issued(self) -> int:
        return self._next - 1

    async def load(self, store: StoreOwner) -> None:
        """Start after everything a previous broker may have issued, and reserve a block."""

        def reserve(conn: apsw.Connection) -> tuple[int, int]:
            row = conn.execute("SELECT reserved FROM lock_fencing WHERE id = 1").fetchone()
            start = max(row[0] if row else 0, reserved_by_events(conn)) + 1
            _persist(conn, start + BLOCK)
            return start, start + BLOCK

        self._next, self._asked = await store.call(reserve)

    def issue(self, journal: Journal) -> int:
        token = self._next
        self._next += 1
        if self._next + BLOCK // 2 > self._asked:
            upto = self._asked = self._next + BLOCK
            journal.also(lambda conn: _persist(conn, upto))
        return token


RESERVE: Final = "lock.reserve"


def reserved_by_events(conn: apsw.Connection) -> int:
    """How far the keyed log says tokens were reserved (0 before reservations were events)."""
    found = events.checked(conn, f"seq = (SELECT max(seq) FROM events WHERE kind = '{RESERVE}')")
    return int(found[0].payload["upto"]) if found else 0


def _persist(conn: apsw.Connection, upto: int) -> None:
    larger = "greatest" if dialect.is_postgresql(conn) else "max"  # the two-argument maximum
    conn.execute(
        "INSERT INTO lock_fencing(id, reserved) VALUES (1, ?) "
        f"ON CONFLICT(id) DO UPDATE SET reserved = {larger}(lock_fencing.reserved, excluded.reserved)",
        (upto,),
    )
    events.append(conn, RESERVE, actor=events.BROKER_ACTOR, subject="lock_fencing", payload={"upto": upto})
