"""The output pane: the last lines of one agent's log, following the tail.

Textual's ``Log`` re-lays out the whole screen every time it scrolls to new
lines; with a busy agent that is several full layouts a second (about 35 ms
each on this project's machine, measured in bench/dashboard_bench.py).  This
view draws only the lines on screen, straight from the agent's buffer
(:class:`~broker.dashboard.tail.OutputBuffer`), so new output repaints the
pane and nothing else.  It follows the tail unless the person scrolls back
(up, page up, home); end (or scrolling to the bottom) follows again.
"""

from __future__ import annotations

from itertools import islice
from typing import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.strip import Strip
from textual.widget import Widget


class OutputView(Widget, can_focus=True):
    """A bottom-anchored window on a list of lines; ``back`` lines up from the end."""

    DEFAULT_CSS = """
    OutputView { background: $surface; }
    OutputView:focus { background-tint: $foreground 5%; }
    """
    BINDINGS = [
        Binding("up", "scroll(1)", "Older", show=False),
        Binding("down", "scroll(-1)", "Newer", show=False),
        Binding("pageup", "page(1)", "Page up", show=False),
        Binding("pagedown", "page(-1)", "Page down", show=False),
        Binding("home", "scroll(1000000000)", "Oldest", show=False),
        Binding("end", "follow", "Follow", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: Sequence[str] = ()
        self.back = 0  # 0: following the tail
        self._style: Style | None = None  # rich_style is costly per line; kept until the styles change

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style = None

    @property
    def following(self) -> bool:
        return self.back == 0

    @property
    def lines(self) -> list[str]:
        """The lines on screen now, top to bottom (for tests and the benchmark)."""
        height = max(1, self.size.height)
        end = len(self._lines) - self.back
        return list(islice(self._lines, max(0, end - height), max(0, end)))

    def show(self, lines: Sequence[str]) -> None:
        """Point the view at another agent's lines, following their tail."""
        self._lines, self.back = lines, 0
        self.refresh()

    def grew(self, added: int, lines: Sequence[str]) -> None:
        """``added`` lines were appended to the shown lines (``lines`` is the buffer now)."""
        self._lines = lines
        if self.back:
            # Scrolled back: keep the same lines on screen while new ones arrive below.
            self.back = min(self.back + added, max(0, len(lines) - 1))
        self.refresh()

    def action_scroll(self, amount: int) -> None:
        self.back = max(0, min(self.back + amount, max(0, len(self._lines) - self.size.height)))
        self.refresh()

    def action_page(self, pages: int) -> None:
        self.action_scroll(pages * max(1, self.size.height - 1))

    def action_follow(self) -> None:
        self.back = 0
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        end = len(self._lines) - self.back
        index = end - height + y
        style = self._style
        if style is None:
            style = self._style = self.rich_style
        if not 0 <= index < len(self._lines) or index >= end:
            return Strip.blank(width, style)
        return Strip([Segment(self._lines[index], style)]).crop_extend(0, width, style)

