"""How wide each table column is, and how a cell that does not fit is shown (pure, no UI).

Textual's ``DataTable`` sizes a column by its widest cell and lets the table
scroll sideways.  On a real terminal that hides whatever is to the right of
one long cell: a long status line pushed ``waits for`` and ``unread`` off an
80- or 120-column screen, and a claim's text ended up as a one-character
sliver at the edge.  So the dashboard decides the widths itself, from the
content and the room there is:

* every column starts at its *natural* width (its widest line, header
  included), but never wider than its ``cap``;
* when the columns do not fit, the widest shrinkable columns (for their
  ``weight``) give way first, one cell at a time, never below their
  ``least`` width -- so long columns end up sharing the room, and a short
  one is left whole;
* a cell narrower than its text wraps onto at most ``lines`` lines, and the
  last line that fits ends in an ellipsis (:class:`Cell`).

The widths and the layout of a cell are plain functions of the text and the
room, so they are tested without a terminal (tests/dashboard/test_dashboard_columns.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, Iterable, Sequence, final

import attrs
from rich.cells import cell_len, chop_cells
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

ELLIPSIS: Final = "\u2026"


@final
@attrs.frozen
class Column:
    """One column: its header, the narrowest it may get, the widest it may take, how many lines a cell may use,
    and its ``weight``: when the room is short the columns shrink toward widths in proportion to their weights."""

    header: str
    least: int = 6
    cap: int | None = None
    lines: int = 1
    shrinks: bool = True
    weight: float = 1.0  # how much of the room it holds on to when the columns must shrink

    def __attrs_post_init__(self) -> None:
        if self.least < 2:
            raise ValueError(f"column {self.header!r}: a column narrower than 2 cells shows nothing readable")


def widths(columns: Sequence[Column], cells: Iterable[Sequence[str]], room: int, *, gap: int = 2) -> list[int]:
    """The width of each column (without its ``gap`` of padding) for rows ``cells`` in ``room`` cells.

    A column is as wide as its widest line or its header, at most its ``cap``.  If that is too wide for ``room``, the shrinkable column
    widest for its weight loses a cell, then the next, and so on, never below
    its ``least`` nor its header.  When even
    that does not fit, the widths stay at their least and the table scrolls.
    """
    natural = [cell_len(c.header) for c in columns]
    for row in cells:
        for i, value in enumerate(row[: len(columns)]):
            natural[i] = max(natural[i], max((cell_len(line) for line in value.split("\n")), default=0))
    out = [n if c.cap is None else min(n, max(c.cap, c.least)) for c, n in zip(columns, natural)]
    # A header is never cut (a column reads by its name); one that must not shrink keeps its text whole.
    floor = [min(w, max(c.least, cell_len(c.header))) if c.shrinks else w for c, w in zip(columns, out)]
    over = sum(out) + gap * len(out) - room
    while over > 0:
        # The widest column that may still give way gives one cell.
        candidates = [i for i, w in enumerate(out) if w > floor[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: (out[i] / columns[i].weight, -i))
        out[widest] -= 1
        over -= 1
    return out


#: Where a word too long for its column is best broken: after these (a path at a slash, a name at a dash).
BREAK_AFTER: Final = "/-_.,;:"


@lru_cache(maxsize=4096)
def layout(text: str, width: int, lines: int) -> tuple[str, ...]:
    """``text`` in ``width`` cells: each of its lines wrapped at spaces (a word longer than the width is
    broken after a ``/``, ``-``, ``_``, ``.`` where one fits, else at the width), at most ``lines`` lines
    in all; the last line kept ends in an ellipsis when anything was left out.  A one-line cell is cut
    at the width, not at a word."""
    width = max(1, width)
    out: list[str] = []
    for part in text.split("\n"):
        # A one-line cell keeps as much of its text as fits (alice:0f3c9… rather than alice:…).
        out += _wrap(part, width) if lines > 1 else chop_cells(part, width) or [""]
    if len(out) <= lines:
        return tuple(out)
    kept = out[:lines]
    last = kept[-1]
    if cell_len(last) >= width:
        last = chop_cells(last, width - 1)[0] if width > 1 else ""
    kept[-1] = last + ELLIPSIS
    return tuple(kept)


def _wrap(line: str, width: int) -> list[str]:
    out: list[str] = []
    current = ""
    for word in line.split():
        while word:
            if cell_len(current) + (1 if current else 0) + cell_len(word) <= width:
                current, word = f"{current} {word}" if current else word, ""
            elif current:
                out.append(current)
                current = ""
            else:
                head = next((h for h in chop_cells(word, width) if h), word[:1])
                cut = max(head.rfind(c) for c in BREAK_AFTER) + 1
                if cut < max(2, len(head) // 3):  # no separator, or one so early that the piece is a stub
                    cut = len(head)
                out.append(word[:cut])
                word = word[cut:]
    out.append(current)
    return out


class Cell:
    """A cell's text, shown in its column's width: wrapped onto at most ``lines`` lines, then cut with an ellipsis.

    The whole text stays in the cell (``str(cell)``, ``cell.plain``): only
    what the terminal shows is laid out.  Agent-written text arrives here
    already cleaned (:func:`broker.dashboard.tail.clean`) and is never read
    as markup.
    """

    __slots__ = ("plain", "lines")

    def __init__(self, text: str, lines: int = 1) -> None:
        self.plain = text
        self.lines = lines

    def __str__(self) -> str:
        return self.plain

    def __repr__(self) -> str:
        return f"Cell({self.plain!r}, lines={self.lines})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cell) and (self.plain, self.lines) == (other.plain, other.lines)

    def __hash__(self) -> int:
        return hash((self.plain, self.lines))

    @property
    def cell_len(self) -> int:
        return max((cell_len(line) for line in self.plain.split("\n")), default=0)

    def height(self, width: int) -> int:
        """How many lines the cell takes in ``width`` cells."""
        return len(layout(self.plain, width, self.lines))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text("\n".join(layout(self.plain, options.max_width, self.lines)), no_wrap=True, overflow="ellipsis", end="")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, self.cell_len)
