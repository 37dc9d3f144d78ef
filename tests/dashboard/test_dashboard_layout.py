"""What a person sees of each pane at 80x24, 120x40 and 200x60, against a real broker with a busy team.

A newcomer found, on a real terminal: at 120x40 the Agents table cut
``waits for`` and hid ``unread`` (one long status pushed them off the
right edge); the claims table's text column was one character wide; inbox
lines were cut at about 17 characters; at 80x24 only three agent rows
showed and the cursor started on an old run's agent.  Each test reads the
screen as drawn (:func:`screen_text`) and the widths the tables chose.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from textual.pilot import Pilot

from agents.harness import Run
from broker.dashboard.app import COLUMNS
from broker.dashboard.tables import FittedTable
from broker.errors import ConclaveError
from tests.dashboard.dashtools import app_for, drive, press, row_for, screen_text, until

SIZES = [(80, 24), (120, 40), (200, 60)]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
STATUS = "refactoring the tokenizer's error recovery so that partial input keeps its positions"
LONG_CLAIM = "The tokenizer's partial-input tests need the fixtures under tests/fixtures/partial unpacked before they run."
LONG_MAIL = "The integration tests on the arm64 runner fail with a timeout in test_tokenizer_partial_input; raise the limit?"


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A second run on a state directory whose first run had an agent that sorts first (aardvark)."""
    root = tmp_path_factory.mktemp("busy")
    old = Run(root / "run", [{"name": "aardvark"}])
    old.start()
    old.puppet("aardvark").call("status.set", text="an old run")
    old.stop()
    run = Run(root / "run", [{"name": n} for n in NAMES], reuse=True)
    run.start()
    alice, carol, erin = run.puppet("alice"), run.puppet("carol"), run.puppet("erin")
    alice.call("status.set", text=STATUS)
    alice.call("lock.acquire", resources=["src/tokenizer/recovery.py", "src/tokenizer/positions.py"])
    # erin waits for alice's lock on a thread of its own (a puppet answers one command at a time).
    waiter = threading.Thread(target=_quietly, args=(erin.call, "lock.acquire"), kwargs={"resources": ["src/tokenizer/recovery.py"], "wait": 120})
    waiter.start()
    run.wait_until(lambda: run.op("lock.list")["waiting"], what="erin in the wait line")
    carol.call("msg.send", to="alice", body="tell me when recovery.py is free")
    carol.call("msg.send", to="operator", body=LONG_MAIL, subject="arm64")
    cid = alice.call("memory.remember", kind="discovery", text=LONG_CLAIM)["id"]
    try:
        yield {"run": run, "claim": cid, "old": "aardvark"}
    finally:
        _quietly(alice.call, "lock.release", resources=["src/tokenizer/recovery.py", "src/tokenizer/positions.py"])
        waiter.join(timeout=30)
        run.close()


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except ConclaveError:
        pass


def _fits(app: Any, table_id: str) -> list[int]:
    """The table's column widths, checked: every one readable, and all of them inside the table (no sideways scroll)."""
    table = app.main.query_one(f"#{table_id}", FittedTable)
    widths = table.column_widths()
    assert len(widths) == len(COLUMNS[table_id]), (table_id, widths)
    assert min(widths) >= 2, f"{table_id}: a column {min(widths)} cell(s) wide: {widths}"
    for column, width in zip(COLUMNS[table_id], widths):
        assert width >= min(column.least, len(column.header)), (table_id, column.header, width)
    assert sum(widths) + 2 * len(widths) <= table.size.width, f"{table_id}: {widths} overflow {table.size.width} cells"
    return widths


def test_every_pane_shows_every_column_at_80x24_120x40_and_200x60(busy: dict[str, Any]) -> None:
    run, cid = busy["run"], busy["claim"]

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await until(pilot, lambda: (r := row_for(app, "#agents", "erin:")) and r[4], "erin waiting, in the table")
        for width, height in SIZES:
            await pilot.resize_terminal(width, height)
            size = f"{width}x{height}"
            # Agents: every column's header on screen, alice's unread count and erin's wait beside their names.
            await press(pilot, "1")
            # Waited for until every agent's row is drawn too: a screen read in the frame after a resize can hold
            # the table clipped to its old height (frank's row missing at 120x40 once, in a full suite run).
            screen = await until(
                pilot,
                lambda: app.size.width == width and "unread" in (s := screen_text(app)) and all(f" {n}:" in s for n in NAMES) and s,
                f"the agents pane at {size}, every agent's row on it",
            )
            _fits(app, "agents")
            for header in ("agent", "state", "status", "holds", "waits for", "unread"):
                assert header in screen, (size, header, screen)
            alice_line = next(line for line in screen.splitlines() if " alice:" in line)
            assert alice_line.rstrip().endswith(" 1") and "refactoring" in alice_line, (size, alice_line)
            erin_line = next(line for line in screen.splitlines() if " erin:" in line)
            assert "src/" in erin_line.split("live", 1)[1], (size, erin_line)  # the wait starts on erin's own line
            # Every agent of the current run has its row on screen, and the output pane still has lines.
            for name in NAMES:
                assert f" {name}:" in screen, (size, name, screen)
            assert app.main.query_one("#output").size.height >= 3
            # Locks: holder and waiter, with their resources.
            await press(pilot, "2")
            screen = await until(pilot, lambda: "wait line" in (s := screen_text(app)) and s, f"the locks pane at {size}")
            _fits(app, "holdings")
            _fits(app, "waiting")
            assert "src/tokenizer/" in screen and "erin:" in screen and "exclusive" in screen
            # Mail: the inbox shows the message well past 17 characters.
            await press(pilot, "3")
            screen = await until(pilot, lambda: "arm64 runner" in (s := screen_text(app)) and s, f"the inbox at {size}")
            _fits(app, "inbox")
            _fits(app, "threads")
            inbox_line = next(line for line in screen.splitlines() if "The integration tests" in line)
            assert "The integration tests on the" in inbox_line, (size, inbox_line)
            # Claims: the text column is wide enough to read, and the claim's first words are on screen.
            await press(pilot, "4")
            screen = await until(pilot, lambda: "witnesses" in (s := screen_text(app)) and "unverified" in s and s, f"the claims pane at {size}")
            widths = _fits(app, "claims")
            assert widths[-1] >= 20, (size, widths)
            claim_line = next(line for line in screen.splitlines() if line.startswith(f" {cid} ") and "unverified" in line)
            assert "The tokenizer's" in claim_line and "partial-input" in screen, (size, claim_line)

    drive(app_for(run), scenario, size=SIZES[0])


def test_the_cursor_starts_on_a_live_agent_of_this_run_not_an_old_runs(busy: dict[str, Any]) -> None:
    """An earlier run left aardvark's log, which sorts before every agent of this run."""
    run = busy["run"]

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        key = await until(pilot, lambda: app.selected_agent, "a selected agent")
        table = app.main.query_one("#agents", FittedTable)
        assert not key.startswith("aardvark:"), key
        live = {a["principal"]: a for a in run.op("agents") if a["live"]}
        assert key in live and live[key]["run"] == max(a["run"] for a in live.values())
        assert table.get_row_at(table.cursor_row)[0].plain == key  # the cursor is on the agent the output shows
        assert str(app.main.query_one("#output-title").content).startswith(f"output of {key}:")
        # The old run's agent is still listed (below the live ones), not hidden.
        assert row_for(app, "#agents", "aardvark:")[1] != "live"

    drive(app_for(run), scenario, size=(80, 24))


def test_with_no_broker_the_cursor_starts_on_the_newest_session(tmp_path: Path) -> None:
    """Control for the test above, where no agent is live: the most recently written log, not the first by name."""
    first = Run(tmp_path / "run", [{"name": "aardvark"}])
    first.start()
    first.stop()
    second = Run(tmp_path / "run", [{"name": "zed"}], reuse=True)
    second.start()
    zed = second.puppet("zed").key
    second.stop()

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await until(pilot, lambda: app.broker == "none" and row_for(app, "#agents", "aardvark:"), "the logs of both runs")
        await until(pilot, lambda: app.selected_agent == zed, f"the cursor on {zed}")

    drive(app_for(second), scenario, size=(80, 24))
