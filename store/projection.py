"""The tables as a projection of the keyed event log: rebuild every row from the events, name every difference.

Every change the broker makes writes its row and its event in one
transaction, and the events are keyed (``store.events``): someone editing the
file without the key can change a row but cannot make an event that
verifies.  So a table a decision or a view reads is, in truth, a function
of the log.  ``conclave memory verify`` computes that function -- each
feature's :class:`Projector`, fed every event in order, says what each of its
tables must hold -- and :func:`compare` holds it against the rows, naming
each difference: the table, the row's key, the column, what the events say
and what the row holds.

What an expected value may be:

* a plain value (``"trusted"``, ``3``, ``None``): the column must equal it;
  in a column the table names in ``digests`` (a claim's text, a mail body)
  the value is the SHA-256 the event recorded, and the column's text must
  hash to it -- neither text is ever echoed: a difference names the digests;
* :class:`FromRow`: a column computed from the row's other columns by the
  broker's own rule (a claim's ``text_key`` from its text), checked once
  those columns were;
* :data:`UNKNOWN`: the events of an older database do not carry this
  column; it is not compared, and :class:`Unrebuilt` says how many rows and
  why, so verify never pretends.

Adding a column to a projected table: give its expected value where the
feature's projector builds that table's rows (one place per table, next to
the :class:`Table` that names the columns), from the events -- and if no
event carries it yet, make the event that writes the row carry it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Final, Iterable, Mapping, Protocol, Sequence, final

import apsw
import attrs

from store.events import Event, sha256

#: Differences named per table before the rest are only counted (a wiped table would list every row).
MAX_NAMED: Final = 200
#: Characters of a found or expected value shown in a sentence.
SHOWN: Final = 60


@final
class _Unknown:
    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


#: The events do not carry this column (an older database): not compared, counted.
UNKNOWN: Final = _Unknown()


@final
@attrs.frozen
class FromRow:
    """The column follows from the row's other columns by the broker's rule (``fn(row)`` is its value)."""

    fn: Callable[[Mapping[str, Any]], Any]


@final
@attrs.frozen
class Check:
    """The column must pass ``test``; ``expected`` says in words what it should be (for the sentence)."""

    test: Callable[[Any], bool]
    expected: str


@final
@attrs.frozen
class Table:
    """A projected table: its name, the columns that identify a row, and the columns compared.

    With no ``key`` the table is compared as a multiset of whole rows (the
    exposure log: its ids are not the events' to give); ``ident`` then names
    a found row in a sentence.
    """

    name: str
    key: tuple[str, ...]
    columns: tuple[str, ...]
    ident: str | None = None
    #: Columns whose expected value is the SHA-256 of their text (the events never carry the text).
    digests: tuple[str, ...] = ()
    #: What a row is called in a sentence ("claim", "message").
    noun: str = "row"
    #: Only rows matching this SQL condition are projected (None: every row).
    where: str | None = None


@final
@attrs.frozen
class Row:
    """What the events say one row must hold, and the event that vouches for it.

    ``values``: by column name, or a tuple in the table's column order (what
    a projector with many rows builds: one comparison per row when all is well).
    """

    seq: int
    values: dict[str, Any] | tuple[Any, ...]


@final
@attrs.frozen
class Difference:
    """One way a table disagrees with the log."""

    table: str
    row: tuple[Any, ...] | None
    column: str | None
    expected: str | None
    found: str | None
    problem: str
    event: int | None = None


@final
@attrs.frozen
class Unrebuilt:
    """Rows (or one column of them) the events of this database do not carry enough to rebuild."""

    table: str
    column: str | None
    rows: int
    why: str

    def sentence(self) -> str:
        what = f"{self.table}.{self.column}" if self.column else self.table
        return f"{what}: {self.rows} row(s) not rebuilt from the log ({self.why}); taken as found"


@final
@attrs.frozen
class Projection:
    """One table's expected content: keyed rows, or (no key) a multiset of whole rows."""

    table: Table
    rows: Mapping[tuple[Any, ...], Row] = attrs.field(factory=dict)
    multiset: Counter[tuple[Any, ...]] = attrs.field(factory=Counter)
    #: Found rows matching this (key -> why) are not compared: they predate what the events carry.
    legacy: Callable[[tuple[Any, ...]], str | None] | None = None
    #: Extra differences the projector found in the events themselves (a verdict the broker made on tampered rows).
    findings: tuple[Difference, ...] = ()


class Projector(Protocol):
    """A feature's rebuild of its tables: fed every event that verifies, in order, then asked for the tables.

    ``kinds`` is every event kind it reads (the walk parses no other
    payload).  :meth:`projections` may read the database for what the
    events of an older store cannot say (rows written before they did).
    """

    kinds: frozenset[str]

    def prepare(self, conn: apsw.Connection) -> None:
        """Before the walk: read what older stores kept only in rows (nothing, for most)."""
        ...

    def feed(self, event: Event) -> None: ...

    def projections(self, conn: apsw.Connection) -> Iterable[Projection]: ...

    def unrebuilt(self) -> list[Unrebuilt]: ...


def shown(value: Any) -> str:
    """A value for a sentence: short, quoted, never a whole text."""
    if value is None:
        return "NULL"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def _same(expected: Any, found: Any) -> bool:
    if isinstance(expected, bool) or isinstance(found, bool):
        return (None if expected is None else int(expected)) == (None if found is None else int(found))
    return bool(expected == found)


def compare(conn: apsw.Connection, projection: Projection) -> tuple[list[Difference], list[Unrebuilt]]:
    """Hold ``projection`` against the table's rows; every difference, and what could not be compared."""
    table = projection.table
    if not table.key:
        return _compare_multiset(conn, projection), []
    # Read, never copied: a projector may make each row only when it is asked for (a million claims' rows
    # held at once would cost more than the rest of the verify).
    expected = projection.rows
    matched = 0
    previous: tuple[Any, ...] | None = None
    differences: list[Difference] = list(projection.findings)
    unknown: Counter[str] = Counter()
    legacy: Counter[str] = Counter()
    cols = (*table.key, *table.columns)
    where = f" WHERE {table.where}" if table.where else ""
    named = 0
    width = len(table.key)
    hashed = [i for i, c in enumerate(table.columns) if c in table.digests]

    def add(diff: Difference) -> None:
        nonlocal named
        named += 1
        if named <= MAX_NAMED:
            differences.append(diff)

    for found in conn.execute(f"SELECT {', '.join(cols)} FROM {table.name}{where} ORDER BY {', '.join(table.key)}"):
        key = tuple(found[: len(table.key)])
        # Rows come in key order, so a key found twice is found twice in a row: the second has no event of its own.
        row = expected.get(key) if key != previous else None
        if row is not None:
            matched += 1
        previous = key
        label = _label(table, key)
        if row is None:
            why = projection.legacy(key) if projection.legacy is not None else None
            if why is not None:
                legacy[why] += 1
                continue
            add(Difference(table.name, key, None, None, "present",
                           f"{table.name}: {label} has no event that wrote it: it was inserted behind the broker's back"))
            continue
        wants = row.values if isinstance(row.values, tuple) else tuple(row.values.get(c, UNKNOWN) for c in table.columns)
        got = found[width:]
        if hashed:
            got = list(got)
            for i in hashed:
                if isinstance(got[i], str):
                    got[i] = sha256(got[i])
            got = tuple(got)
        if wants == got:  # the common case: one comparison (a FromRow, Check or UNKNOWN never equals a value)
            continue
        values = dict(zip(cols, found))
        for i, column in enumerate(table.columns):
            want = wants[i]
            if want == got[i]:
                continue
            if want is UNKNOWN:
                unknown[column] += 1
                continue
            problem = _digests(want, got[i]) if i in hashed else _mismatch(want, found[width + i], values)
            if problem is not None:
                exp, fnd = problem
                add(Difference(table.name, key, column, exp, fnd,
                               f"{table.name}: {label}, column {column}: the events (event {row.seq}) say {exp}, the row holds {fnd}",
                               row.seq))
    if matched < len(expected):  # some rows are missing: find which (only then is every key read into a set)
        present = {tuple(r) for r in conn.execute(f"SELECT {', '.join(table.key)} FROM {table.name}{where}")}
        missing = ((key, row) for key, row in expected.items() if key not in present)
    else:
        missing = iter(())
    for key, row in missing:
        add(Difference(table.name, key, None, "present", None,
                       f"{table.name}: {_label(table, key)} is missing: event {row.seq} wrote it, and the row was deleted behind the broker's back",
                       row.seq))
    if named > MAX_NAMED:
        differences.append(Difference(table.name, None, None, None, None, f"{table.name}: {named - MAX_NAMED} more difference(s) not listed"))
    unrebuilt = [Unrebuilt(table.name, column, n, "older events do not record it") for column, n in sorted(unknown.items())]
    unrebuilt += [Unrebuilt(table.name, None, n, why) for why, n in sorted(legacy.items())]
    return differences, unrebuilt


def _label(table: Table, key: tuple[Any, ...]) -> str:
    if len(key) == 1:
        return f"{table.noun} {key[0]}"
    return f"{table.noun} ({', '.join(f'{k} {shown(v)}' for k, v in zip(table.key, key))})"


def _digests(want: str | None, got: str | None) -> tuple[str, str]:
    """A text column that differs, in digests only (``got`` is already the found text's SHA-256)."""
    return (f"text with sha256 {want[:16]}..." if want else "NULL"), (f"text with sha256 {got[:16]}..." if got else "NULL")


def _mismatch(want: Any, got: Any, row: Mapping[str, Any]) -> tuple[str, str] | None:
    """None when ``got`` is what ``want`` asks; else (expected, found) as safe words."""
    if isinstance(want, FromRow):
        value = want.fn(row)
        return None if _same(value, got) else (shown(value), shown(got))
    if isinstance(want, Check):
        return None if want.test(got) else (want.expected, shown(got))
    return None if _same(want, got) else (shown(want), shown(got))


def _compare_multiset(conn: apsw.Connection, projection: Projection) -> list[Difference]:
    table = projection.table
    expected = Counter(projection.multiset)
    extra: list[tuple[Any, tuple[Any, ...]]] = []
    ident = table.ident or "rowid"
    where = f" WHERE {table.where}" if table.where else ""
    for found in conn.execute(f"SELECT {ident}, {', '.join(table.columns)} FROM {table.name}{where} ORDER BY {ident}"):
        values = tuple(int(v) if isinstance(v, bool) else v for v in found[1:])
        if expected[values] > 0:
            expected[values] -= 1
        else:
            extra.append((found[0], values))
    out: list[Difference] = list(projection.findings)
    for ident_value, values in extra[:MAX_NAMED]:
        described = ", ".join(f"{c} {shown(v)}" for c, v in zip(table.columns, values))
        out.append(Difference(table.name, (ident_value,), None, None, "present",
                              f"{table.name}: {table.noun} {ident_value} ({described}) has no event that wrote it: it was inserted or changed behind the broker's back"))
    missing = [(values, n) for values, n in expected.items() if n > 0]
    for values, n in missing[:MAX_NAMED]:
        described = ", ".join(f"{c} {shown(v)}" for c, v in zip(table.columns, values))
        out.append(Difference(table.name, None, None, "present", None,
                              f"{table.name}: {n} {table.noun}(s) ({described}) the events wrote are missing: deleted or changed behind the broker's back"))
    more = max(0, len(extra) - MAX_NAMED) + max(0, len(missing) - MAX_NAMED)
    if more:
        out.append(Difference(table.name, None, None, None, None, f"{table.name}: {more} more difference(s) not listed"))
    return out


def compare_all(conn: apsw.Connection, projectors: Sequence[Projector]) -> tuple[list[Difference], list[Unrebuilt]]:
    """Every projector's tables against the database (after the walk fed them)."""
    differences: list[Difference] = []
    unrebuilt: list[Unrebuilt] = []
    for projector in projectors:
        for projection in projector.projections(conn):
            found, missing = compare(conn, projection)
            differences += found
            unrebuilt += missing
        unrebuilt += projector.unrebuilt()
    return differences, unrebuilt
