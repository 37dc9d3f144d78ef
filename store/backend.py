"""Where durable state lives: the seam a second backend plugs into.

Everything above the store reaches the database through a :class:`Backend`:
the store owner asks it for the one writer connection (opened and migrated),
readers ask it for a read-only connection of their own.  SQLite through apsw
is the embedded default (:class:`SqliteBackend`, one WAL file in the state
directory); a server backend implements the same three methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence, final

import apsw

from store import database
from store.schema import Schema


class Backend(Protocol):
    """Opens connections to one store.  Implementations hold no connection themselves."""

    def open_writer(self, schemas: Sequence[Schema]) -> apsw.Connection:
        """The writer connection, with the event log's and ``schemas``' migrations applied."""
        ...

    def open_reader(self) -> apsw.Connection:
        """A read-only connection that sees every committed change."""
        ...

    def describe(self) -> str:
        """Where the store is, for messages (a path, a server)."""
        ...


@final
class SqliteBackend:
    """One SQLite file in WAL mode: one writer, any number of readers."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open_writer(self, schemas: Sequence[Schema]) -> apsw.Connection:
        return database.open_store(self.path, schemas)

    def open_reader(self) -> apsw.Connection:
        return database.connect(self.path, readonly=True)

    def describe(self) -> str:
        return str(self.path)
