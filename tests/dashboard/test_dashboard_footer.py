"""The dashboard's footer: each tab's actions, rebuilt only when the keys it shows change.

Textual's own footer mounts all its keys anew at every focus change (several per tab switch), about
half of a tab switch's CPU.  The dashboard's shows the same keys, and changes them when a tab's
actions come and go -- checked here against what Textual itself says is bound, with no broker
running (the keys do not depend on one).
"""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input
from textual.widgets._footer import FooterKey

from broker.clikit import Target
from broker.dashboard.app import DashboardApp, Footer
from tests.dashboard.dashtools import drive, press, until


def _keys(app: DashboardApp) -> list[FooterKey]:
    return list(app.main.query_one(Footer).query(FooterKey))


def _words(app: DashboardApp) -> set[str]:
    return {key.description for key in _keys(app)}


def test_the_footer_shows_each_tabs_actions_and_is_rebuilt_only_when_they_change(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    app = DashboardApp(Target(False, tmp_path / "repo", tmp_path / "state"), refresh=0.2, tail=0.05)

    async def scenario(pilot: Pilot[None]) -> None:
        footer = app.main.query_one(Footer)
        palette = app.COMMAND_PALETTE_BINDING
        bound = lambda: {b.description for key, (_, b, _, _) in app.screen.active_bindings.items() if b.show or key == palette}  # noqa: E731
        agents = await until(pilot, lambda: "Revoke" in _words(app) and _keys(app), "the agents tab's keys")
        assert _words(app) == bound() and "Promote" not in _words(app) and "Quit" in _words(app)
        # The focus moves inside the tab (the table, then the output pane, then back): the same keys, not rebuilt.
        app.main.query_one("#output").focus()
        await press(pilot, "end")
        app.main.query_one("#agents").focus()
        await press(pilot, "down")
        assert _keys(app) == agents and all(key.is_attached for key in agents)
        # Control: a tab whose actions differ rebuilds the footer, with exactly what is bound there.
        await press(pilot, "4")
        await until(pilot, lambda: "Promote" in _words(app), "the claims tab's keys")
        assert _words(app) == bound() and {"Retire", "Search"} <= _words(app) and "Revoke" not in _words(app)
        assert not any(key in agents for key in _keys(app))
        # Into the search box: the letters type there, so their actions leave the footer -- and come back after.
        await press(pilot, "slash")
        await until(pilot, lambda: isinstance(app.focused, Input) and "Promote" not in _words(app), "the keys of the search box")
        assert _words(app) == bound() and "Promote" not in _words(app)
        app.main.query_one("#claims").focus()
        await until(pilot, lambda: "Promote" in _words(app), "the claims table's keys again")
        assert _words(app) == bound() and footer.keys_shown() == footer._shown_keys
        await press(pilot, "1")
        await until(pilot, lambda: "Revoke" in _words(app), "the agents tab's keys again")
        assert _words(app) == bound()

    drive(app, scenario)
