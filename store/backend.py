"""Where durable state lives: the seam a second backend plugs into.

Everything above the store reaches the database through a :class:`Backend`:
the store owner asks it for the one writer connection (opened and migrated),
readers ask it for a read-only connection of their own.  SQLite through apsw
is the embedded default (:class:`SqliteBackend`, one WAL file in the state
directory); :class:`store.postgres.PostgresBackend` implements the same
methods for a PostgreSQL server several brokers share.  ``dialect`` tells
the few queries that differ which SQL to speak (:mod:`store.dialect`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Iterator, Protocol, Sequence, final

import apsw

from store import database
from store.dialect import SQLITE
from store.schema import Schema


class StoreUnavailable(RuntimeError):
    """The store's server cannot be reached, or the session with it ended during the request; the message says which."""


#: Seconds between tries to reach a store's server again after a session to it was lost (the last repeats).
RECONNECT_PAUSES: Final = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def pauses() -> Iterator[float]:
    """The waits between tries to reach the server again: :data:`RECONNECT_PAUSES`, then its last for ever."""
    yield from RECONNECT_PAUSES
    while True:
        yield RECONNECT_PAUSES[-1]


class Backend(Protocol):
    """Opens connections to one store.  Implementations hold no writer connection themselves
    (a server backend may keep idle readers for reuse)."""

    #: ``"sqlite"`` or ``"postgresql"``.
    dialect: str
    #: Whether other brokers append to the same event log (the store owner then verifies what they
    #: appended instead of refusing a head that moved; ``store.owner``).
    shared: bool

    def open_writer(self, schemas: Sequence[Schema]) -> apsw.Connection:
        """The writer connection, with the event log's and ``schemas``' migrations applied."""
        ...

    def open_reader(self) -> apsw.Connection:
        """A read-only connection that sees every committed change."""
        ...

    def describe(self) -> str:
        """Where the store is, for messages (a path, a server)."""
        ...

    def disk_full(self, exc: BaseException) -> str | None:
        """What ran out of room, when ``exc`` says the store's disk is full (None for any other error)."""
        ...


@final
class SqliteBackend:
    """One SQLite file in WAL mode: one writer, any number of readers."""

    dialect: Final = SQLITE
    shared: Final = False  # one broker owns the file

    def __init__(self, path: Path) -> None:
        self.path = path

    def open_writer(self, schemas: Sequence[Schema]) -> apsw.Connection:
        return database.open_store(self.path, schemas)

    def open_reader(self) -> apsw.Connection:
        return database.connect(self.path, readonly=True)

    def describe(self) -> str:
        return str(self.path)

    def disk_full(self, exc: BaseException) -> str | None:
        if isinstance(exc, apsw.FullError):
            return f"{self.path} (the database or its -wal: the file system holding them is full)"
        return None
