"""The lock feature's one table rebuilt from the keyed log: how far fencing tokens were reserved.

Lock state is never stored (it dies with the broker) and its history *is*
the event log, so the only row is ``lock_fencing.reserved``: the largest
``upto`` of the ``lock.reserve`` events (``locks.fencing``).  A store whose
reservations predate those events cannot be rebuilt, and verify says so.
"""

from __future__ import annotations

from typing import Any, Final, Iterable, final

import apsw

from locks.fencing import RESERVE
from store.events import Event
from store.projection import Projection, Row, Table, Unrebuilt

FENCING_TABLE: Final = Table("lock_fencing", ("id",), ("reserved",), noun="reservation")


@final
class LocksLog:
    kinds = frozenset({RESERVE})

    def __init__(self) -> None:
        self._upto: tuple[int, int] | None = None

    def prepare(self, conn: apsw.Connection) -> None:
        pass

    def feed(self, event: Event) -> None:
        upto = int(event.payload["upto"])
        if self._upto is None or upto > self._upto[1]:
            self._upto = (event.seq, upto)

    def projections(self, conn: apsw.Connection) -> Iterable[Projection]:
        rows: dict[tuple[Any, ...], Row] = {}
        if self._upto is not None:
            rows[(1,)] = Row(self._upto[0], {"reserved": self._upto[1]})
        yield Projection(FENCING_TABLE, rows, legacy=None if rows else (lambda key: "reserved before reservations were events"))

    def unrebuilt(self) -> list[Unrebuilt]:
        return []
