"""Column widths and cell layout (pure): what a table shows when its text is wider than the terminal."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from broker.dashboard.app import COLUMNS
from broker.dashboard.columns import Cell, Column, layout, widths

AGENT_ROW = [
    "alice:1af719865057",
    "live",
    "refactoring the tokenizer's error recovery so that partial input keeps its positions",
    "src/tokenizer/recovery.py (exclusive)\nsrc/tokenizer/positions.py (exclusive)",
    "src/tokenizer/recovery.py (exclusive) for 7.5 s, #1 in line",
    "1",
]


def test_columns_that_fit_keep_their_natural_widths() -> None:
    cols = [Column("id", shrinks=False), Column("text", least=10)]
    assert widths(cols, [["7", "short text"], ["12", "tiny"]], room=80) == [2, 10]
    # A cap holds a long column back even when there is room.
    assert widths([Column("status", cap=20)], [["x" * 50]], room=200) == [20]


def test_a_long_column_gives_way_and_the_short_ones_stay_whole() -> None:
    """The newcomer's 120x40 Agents table: a long status pushed `waits for` and `unread` off screen."""
    cols = COLUMNS["agents"]
    # Control: with no room limit every column takes its whole text -- what a DataTable does on its own,
    # and far more than 120 columns.
    natural = widths(cols, [AGENT_ROW], room=10_000)
    assert natural[2] == len(AGENT_ROW[2]) and sum(natural) + 12 > 118
    for room in (78, 118, 198):
        got = widths(cols, [AGENT_ROW], room=room)
        assert sum(got) + 2 * len(got) <= room, (room, got)
        for column, width, whole in zip(cols, got, natural):
            assert width >= min(whole, max(column.least, len(column.header))), (room, column.header, width)
        assert got[-1] == len("unread")  # never shrinks, never hidden


def test_the_widest_column_for_its_weight_shrinks_first() -> None:
    cols = [Column("a", least=4), Column("b", least=4, weight=3)]
    assert widths(cols, [["x" * 40, "y" * 40]], room=44) == [10, 30]
    # Nothing shrinks below its least: the table scrolls instead (the widths stay readable).
    assert widths(cols, [["x" * 40, "y" * 40]], room=5) == [4, 4]


def test_a_one_cell_column_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="narrower than 2 cells"):
        Column("text", least=1)
    assert Column("text", least=2).least == 2  # control


def test_cells_wrap_at_words_break_paths_at_slashes_and_end_in_an_ellipsis() -> None:
    assert layout("killed by SIGTERM", 9, 3) == ("killed by", "SIGTERM")
    assert layout("src/tokenizer/recovery.py (exclusive)", 20, 3) == ("src/tokenizer/", "recovery.py", "(exclusive)")
    two = layout("one two three four five six", 9, 2)
    assert len(two) == 2 and two[-1].endswith("\u2026") and all(cell_len(line) <= 9 for line in two)
    # One-line cells keep as much as fits.
    assert layout("alice:1af719865057", 12, 1) == ("alice:1af71\u2026",)
    assert layout("short", 12, 1) == ("short",)
    # Wide characters are measured in cells.
    assert all(cell_len(line) <= 4 for line in layout("日本語のテキスト", 4, 9))


def test_a_cell_keeps_its_whole_text_and_says_how_tall_it_is() -> None:
    cell = Cell(AGENT_ROW[3], lines=6)
    assert str(cell) == AGENT_ROW[3] and cell.cell_len == len("src/tokenizer/positions.py (exclusive)")
    assert cell.height(80) == 2 and cell.height(20) == 6
    assert Cell("x" * 100, lines=2).height(10) == 2


def test_rows_given_before_the_table_is_mounted_wait_for_it() -> None:
    """A broker that refuses at once (or is absent) answers before the Agents tab is mounted: the rows
    wait in the table and the cursor is placed later (placing it at once raised and ended the dashboard)."""
    import asyncio

    from textual.app import App

    from broker.dashboard.tables import FittedTable

    rows = [("alice:a1", ["alice:a1", "live", "", "", "", ""]), ("bob:b1", ["bob:b1", "live", "", "", "", "1"])]

    async def main() -> None:
        app = App[None]()
        async with app.run_test(size=(80, 24)) as pilot:
            table = FittedTable(COLUMNS["agents"], id="agents")
            table.show(rows)
            assert not table.has_row("alice:a1") and table.row_count == 0
            await app.screen.mount(table)
            await pilot.pause()
            assert table.has_row("alice:a1") and [str(c) for c in table.get_row_at(1)][-1] == "1"
            assert min(table.column_widths()) >= 2

    asyncio.run(main())
