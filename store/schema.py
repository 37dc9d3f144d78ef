"""A component's tables: numbered migrations of readable SQL.

Each feature keeps its schema in its own package (``memory/schema.py``,
``locks/schema.py``, ...) and hands the store a :class:`Schema`; the store
applies them in the order given and never lists them itself, so adding a
feature never means editing the store.  A schema carries two lists: SQLite's
and PostgreSQL's (the second dialect's types, full-text columns and
row-level security policies differ too much for one text to serve both).
"""

from __future__ import annotations

from typing import final

import attrs


@final
@attrs.frozen
class Schema:
    """One component's migrations, applied in order and recorded in ``schema_versions``.

    ``component`` names the row that tracks how far it has got; a migration
    once released is never edited, only followed by another.
    """

    component: str
    migrations: tuple[str, ...] = attrs.field(converter=tuple)
    #: The same tables for the PostgreSQL backend (``store.postgres``): their own numbered
    #: migrations, readable SQL like these.  Empty: the component runs on SQLite only.
    postgresql: tuple[str, ...] = attrs.field(default=(), converter=tuple)
