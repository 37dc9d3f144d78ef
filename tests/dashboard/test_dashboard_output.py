"""The output pane: follows the tail, holds still while scrolled back, follows again on End."""

from __future__ import annotations

import asyncio
from collections import deque

from textual.app import App, ComposeResult

from broker.dashboard.output import OutputView


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield OutputView(id="out")


def test_the_view_follows_new_lines_holds_when_scrolled_back_and_follows_again() -> None:
    async def scenario() -> None:
        app = Host()
        async with app.run_test(size=(40, 5)) as pilot:
            view = app.query_one(OutputView)
            buffer: deque[str] = deque((f"line {i}" for i in range(20)), maxlen=50)
            view.show(buffer)
            view.focus()
            await pilot.pause()
            assert view.lines == [f"line {i}" for i in range(15, 20)]  # the tail
            buffer.extend(["line 20", "line 21"])
            view.grew(2, buffer)
            assert view.lines[-1] == "line 21" and view.following
            await pilot.press("pageup")
            held = view.lines
            assert held[-1] != "line 21" and not view.following
            buffer.extend(["line 22", "line 23"])
            view.grew(2, buffer)
            assert view.lines == held  # new output arrives below; what is being read stays put
            await pilot.press("home")
            assert view.lines[0] == "line 0"
            await pilot.press("end")
            assert view.following and view.lines[-1] == "line 23"
            # Rendering a line wider than the pane crops it to the pane.
            buffer.append("x" * 100)
            view.grew(1, buffer)
            await pilot.pause()
            assert view.render_line(4).cell_length == 40

    asyncio.run(scenario())
