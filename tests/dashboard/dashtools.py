"""Driving the dashboard in tests: Textual's own test driver (``App.run_test`` / ``Pilot``)
against a real broker the harness started, and readers for what the panes show."""

from __future__ import annotations

import asyncio
import io
import sys
import time
import unicodedata
from typing import Any, Awaitable, Callable, TypeVar

from rich.console import Console
from rich.text import Text
from textual import events
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from agents.harness import Run
from broker.clikit import Target
from broker.dashboard.app import DashboardApp
from broker.dashboard.output import OutputView

T = TypeVar("T")

#: A team agent that prints a numbered line every 20 ms, with a window-title escape in each.
PRINTER = [
    sys.executable,
    "-I",
    "-c",
    "import sys, time\n"
    "for i in range(1_000_000):\n"
    "    print(f'printer line {i} \\x1b]0;pwned\\x07\\x1b[2Jdone', flush=True)\n"
    "    time.sleep(0.02)\n",
]


def app_for(run: Run, **kwargs: Any) -> DashboardApp:
    kwargs.setdefault("refresh", 0.2)
    kwargs.setdefault("tail", 0.05)
    return DashboardApp(Target(False, run.repo, run.state), **kwargs)


def drive(app: DashboardApp, scenario: Callable[[Pilot[None]], Awaitable[None]], size: tuple[int, int] = (180, 50)) -> None:
    """Run ``scenario`` against the app, headless, on a fresh asyncio loop (the suite's own loop is trio's)."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            # As a person would: look at the first screen before pressing keys (a tab key
            # pressed while the tabs are still mounting is overridden by their initial tab).
            await until(pilot, lambda: app.broker != "connecting" and app.main.query_one("#tabs").active == "agents-tab", "the first screen")
            await pilot.pause(0.1)
            await scenario(pilot)

    asyncio.run(main())


async def until(pilot: Pilot[None], check: Callable[[], T], what: str, timeout: float = 15) -> T:
    """Let the app run until ``check()`` is truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; {_state(pilot.app)}")
        # Not pilot.pause: its round of callbacks through every widget, 20 times a second, cost the
        # test process more CPU than the dashboard it watches.  The app runs on this loop meanwhile.
        await asyncio.sleep(0.05)


def _state(app: Any) -> str:
    """What the dashboard was showing, for a failure message."""
    try:
        return (
            f"tab {app._tab()!r}, focus {app.focused!r}, broker {app.broker!r} ({app.broker_note!r}), "
            f"status {shown(app, '#status')!r}, search {app.main.query_one('#search').value!r}, "
            f"inbox {[m['id'] for m in app.inbox or []]}, claims table {[r[0] for r in rows(app, '#claims')]}"
        )
    except Exception as exc:  # the app may be half shut down
        return f"(state unavailable: {exc!r})"


async def press(pilot: Pilot[None], *keys: str) -> None:
    """Press ``keys`` one by one, each handled to its end before the next, as ``Pilot.press`` does --
    without its waits for the process to go idle.

    ``Pilot.press`` sleeps after every key until this process spends under 1 ms of CPU in 20 ms, for
    up to a second, twice.  The dashboard under test never idles that way (it tails a busy agent's
    log every 50 ms and asks the broker every 200 ms), so every key cost about two seconds, and the
    app's drawing went on all that time: most of this directory's time.  Here each key is posted as
    the terminal driver posts it, then the app and every widget on screen are let run until none has a
    message left in its queue -- the key, whatever it was forwarded to, and whatever that set off."""
    app = pilot.app
    for key in keys:
        app.post_message(_key_event(key))
        await settle(pilot)


async def settle(pilot: Pilot[None], rounds: int = 100) -> None:
    """Let the app handle everything queued, and what that queued in turn, until no queue holds a message."""
    for _ in range(rounds):
        await pilot._wait_for_screen()  # everything queued before this call is handled
        if all(node.message_queue_size == 0 for node in (pilot.app, *pilot.app.screen.walk_children(with_self=True))):
            return


def _key_event(key: str) -> events.Key:
    """The key event Textual's own ``App._press_keys`` makes for ``key`` (a character or a key's name)."""
    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    try:
        char: str | None = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


async def type_text(pilot: Pilot[None], text: str) -> None:
    """Type into the input that has the focus (waiting for one to have it), and wait until it holds the text."""
    app = pilot.app
    field = await until(pilot, lambda: isinstance(app.focused, Input) and app.focused, "an input with the focus")
    before = field.value
    await press(pilot, *("space" if ch == " " else ch for ch in text))
    await until(pilot, lambda: field.value == before + text, f"{text!r} in the input")


def rows(app: DashboardApp, table: str) -> list[list[str]]:
    """A table's rows as the person sees the cells (plain text)."""
    widget = app.main.query_one(table, DataTable)
    return [[str(cell) for cell in widget.get_row_at(i)] for i in range(widget.row_count)]


def _matches(cell: str, wanted: str) -> bool:
    """``wanted`` ending in ``:`` or ``/`` is a prefix (``alice:`` for any session); otherwise the whole first cell."""
    return cell.startswith(wanted) if wanted.endswith((":", "/")) else cell == wanted


def row_for(app: DashboardApp, table: str, first_cell: str) -> list[str] | None:
    return next((r for r in rows(app, table) if _matches(r[0], first_cell)), None)


def shown(app: DashboardApp, selector: str) -> str:
    """The text a Static (or the active screen's Static) shows."""
    widget = (app.screen if selector.startswith("#ask") else app.main).query_one(selector, Static)
    content = widget.content
    return content.plain if isinstance(content, Text) else str(content)


def screen_text(app: DashboardApp) -> str:
    """The whole screen as a person sees it (what Textual would draw on the terminal), as plain text."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), record=True, color_system=None, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def output_lines(app: DashboardApp) -> list[str]:
    return app.main.query_one("#output", OutputView).lines


async def select_row(pilot: Pilot[None], table: str, first_cell: str) -> None:
    """Move the table's cursor onto the row whose first cell is ``first_cell`` (see ``_matches``), with the keyboard."""
    app = pilot.app
    widget = app.main.query_one(table, DataTable)
    widget.focus()
    await until(pilot, lambda: row_for(app, table, first_cell) is not None, f"a row {first_cell!r} in {table}")
    target = next(i for i, r in enumerate(rows(app, table)) if _matches(r[0], first_cell))
    while widget.cursor_row != target:
        await press(pilot, "down" if widget.cursor_row < target else "up")
