"""The dashboard's tables: a ``DataTable`` whose columns fit the room it has (see :mod:`~broker.dashboard.columns`).

A :class:`FittedTable` is given its columns once and its rows as plain
text each time they change; it decides every column's width from the rows
and its own width, lays each cell out in that width (wrapped, or cut with an
ellipsis), and does it again whenever the terminal -- or the pane it sits
in -- changes size.  Rows are matched by key, so the cursor stays on the
same row across a refresh, and a refresh that changed a few cells rewrites
only those cells (no layout, no selection event).
"""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

from textual import events
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from broker.dashboard.columns import Cell, Column, widths

#: Rows as a table is given them: (key, one plain string per column).
Rows = list[tuple[str, list[str]]]

#: Cells kept clear of the right edge: the vertical scrollbar, when the rows outgrow the pane.
GUTTER = 2


class FittedTable(DataTable[Any]):
    """A table of fixed columns (:class:`Column`) whose widths follow the content and the room."""

    def __init__(self, columns: Sequence[Column], *, share: float | None = None, **kwargs: Any) -> None:
        """``share``: the part of its container's height the table may take (it is as tall as its rows
        up to that); when its rows do not fit there, their cells give up lines (down to one each) before
        any row is pushed out of sight.  None: the table's height comes from the stylesheet alone."""
        super().__init__(**kwargs)
        self.spec = tuple(columns)
        self.share = share
        self.shown: Rows = []
        self._widths: list[int] | None = None
        self._heights: list[int] = []
        if share is not None:
            self.styles.height = "auto"
            self.styles.max_height = f"{share * 100:g}%"

    def on_mount(self) -> None:
        self._place(self.shown)

    def on_resize(self, event: events.Resize) -> None:
        self._place(self.shown)

    def show(self, rows: Rows) -> None:
        """Show ``rows`` (key, texts): the same keys in the same order update cells in place."""
        self._place(rows)

    @property
    def room(self) -> int:
        """Cells the columns may take (with their padding); 0 while the table is not laid out (a hidden tab)."""
        return max(0, self.size.width - GUTTER)

    @property
    def lines_for_rows(self) -> int | None:
        """Lines the rows may take without scrolling (None: no limit is known)."""
        if self.share is None or self.parent is None or not self.parent.size.height:  # type: ignore[attr-defined]
            return None
        return int(self.parent.size.height * self.share) - self.header_height  # type: ignore[attr-defined]

    def has_row(self, key: str) -> bool:
        """Is a row with this key in the table now (not merely waiting for the table to be mounted)?"""
        return any(k.value == key for k in self.rows)

    def column_widths(self) -> list[int]:
        """The widths in use now (without padding), for tests."""
        return list(self._widths or ())

    def _place(self, rows: Rows) -> None:
        if not self.is_mounted:
            self.shown = rows
            return
        room = self.room
        # Hidden (no width yet): natural widths; the table is fitted again when it is shown.
        fitted = widths(self.spec, [cells for _, cells in rows], room if room else 1 << 20, gap=2 * self.cell_padding)
        budget = self.lines_for_rows
        most = max((c.lines for c in self.spec), default=1)
        while True:
            cells = [[Cell(text, min(column.lines, most)) for text, column in zip(texts, self.spec)] for _, texts in rows]
            heights = [max((c.height(w) for c, w in zip(row, fitted)), default=1) for row in cells]
            # Too tall for the room: every cell gives up a line, until each row is one line high.
            if budget is None or sum(heights) <= budget or most == 1:
                break
            most -= 1
        before = self.shown
        self.shown = rows
        if fitted != self._widths:
            self._rebuild(rows, cells, heights, fitted, columns=True)
        elif [k for k, _ in before] != [k for k, _ in rows] or heights != self._heights:
            self._rebuild(rows, cells, heights, fitted, columns=False)
        else:
            for y, ((_, old), (_, new)) in enumerate(zip(before, rows)):
                for x, (was, now) in enumerate(zip(old, new)):
                    if was != now:
                        self.update_cell_at(Coordinate(y, x), cells[y][x], update_width=False)

    def _rebuild(self, rows: Rows, cells: list[list[Cell]], heights: list[int], fitted: list[int], *, columns: bool) -> None:
        current = cursor_key(self)
        self.clear(columns=columns)
        if columns:
            for column, width in zip(self.spec, fitted):
                self.add_column(column.header, width=width, key=column.header)
            self._widths = fitted
        for (key, _), row, height in zip(rows, cells, heights):
            self.add_row(*row, key=key, height=height)
        self._heights = heights
        if current is not None:
            with contextlib.suppress(Exception):
                self.move_cursor(row=self.get_row_index(current), animate=False)


def cursor_key(table: DataTable[Any]) -> str | None:
    """The key of the row under the cursor (None for an empty table)."""
    if table.row_count == 0:
        return None
    try:
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    except Exception:
        return None
