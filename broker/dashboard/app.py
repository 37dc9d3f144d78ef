"""``conclave dashboard``: the operator's live view of a team, on Textual.

Four tabs (keys ``1``-``4``):

* **Agents** -- every principal, live and past: state, status line, locks
  held and waited for, unread mail, lines of output; below, the selected
  agent's output, live.
* **Locks** -- everything held, and the wait line with each waiter's time.
* **Mail** -- threads, the operator's inbox, the thread on screen under a
  header naming it and whom ``r`` replies to.
* **Claims** -- by tier, with a tier filter and a search box; the selected
  claim's biography and its trust graph.

Actions (``p`` promote, ``x`` retire, ``v`` revoke, ``f`` force-release,
``r`` reply) ask for confirmation, then go through the broker as the
operator -- the same connection and the same proof as the CLI
(:mod:`broker.dashboard.link`).

Responsiveness: the UI's event loop never waits on the broker (requests run
on the link's thread) nor on the disk (log files are read on a thread of
their own); each agent keeps at most ``keep`` lines; the broker is asked at
most once per ``refresh`` seconds, and the claim list only when the memory's
event log moved.

With no broker running the dashboard says so, keeps trying, and shows the
agents' output from the log files (a finished run stays readable); the other
panes need a broker and say that.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections import deque
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Input, Label, Select, Static, TabbedContent, TabPane
from textual.widgets import Footer as TextualFooter

from broker.clikit import Target
from broker.dashboard import model
from broker.dashboard.columns import Column
from broker.dashboard.link import BrokerLink, NoBroker, Refused
from broker.dashboard.output import OutputView
from broker.dashboard.screens import Ask
from broker.dashboard.tables import FittedTable, Rows, cursor_key
from broker.dashboard.tail import LogName, LogTailer, OutputBuffer, clean
from broker.errors import ConclaveError

TIER_CHOICES = [("live tiers", "live"), ("trusted", "trusted"), ("unverified", "unverified"), ("disputed", "disputed"), ("retired", "retired"), ("superseded", "superseded"), ("every tier", "all")]

#: Which tab each action belongs to (the footer shows an action only there).
ACTION_TAB = {"promote": "claims", "retire": "claims", "search": "claims", "revoke": "agents", "force_release": "locks", "reply": "mail"}


#: The table that takes the keyboard when a tab opens.
FOCUS = {"agents": "#agents", "locks": "#holdings", "mail": "#threads", "claims": "#claims"}

#: Every table's columns: the narrowest each may get, how it shares the room, how many lines a cell may take
#: (broker.dashboard.columns).  Chosen so that at 80 columns every column of every table is on screen.
COLUMNS: dict[str, tuple[Column, ...]] = {
    "agents": (
        Column("agent", least=12, weight=1.5),
        Column("state", least=9, lines=3, weight=0.6),
        Column("status", least=12, lines=3, weight=2),
        Column("holds", least=12, lines=6, weight=2),
        Column("waits for", least=12, lines=4, weight=2),
        Column("unread", shrinks=False),
    ),
    "holdings": (
        Column("resource", least=12, lines=3, weight=2),
        Column("mode", shrinks=False),
        Column("holder", least=12, weight=1.5),
        Column("held for", shrinks=False),
        Column("token", least=5),
        Column("expires", least=8, lines=2, weight=0.5),
    ),
    "waiting": (
        Column("place", shrinks=False),
        Column("waiter", least=12, weight=1.5),
        Column("resources", least=12, lines=3, weight=2),
        Column("mode", shrinks=False),
        Column("waiting for", shrinks=False),
    ),
    "threads": (
        Column("thread", least=8),
        Column("between", least=12, lines=2, weight=2),
        Column("msgs", shrinks=False),
        Column("last", shrinks=False),
    ),
    "inbox": (
        Column("id", shrinks=False),
        Column("from", least=12, weight=1),
        Column("thread", least=8, weight=0.5),
        Column("at", shrinks=False),
        Column("message", least=20, lines=2, weight=3),
    ),
    "claims": (
        Column("id", shrinks=False),
        Column("tier", shrinks=False),
        Column("kind", shrinks=False),
        Column("author", least=12, weight=1),
        Column("witnesses", shrinks=False),
        Column("used", shrinks=False),
        Column("text", least=20, lines=2, weight=4),
    ),
}

#: Below this many columns the Mail and Claims tabs stack their list above the detail instead of beside it.
NARROW = 140


def _texts(*values: Any) -> list[str]:
    """Table cells as plain text, cleaned of terminal controls (agent-written strings are never read as markup)."""
    return [clean(str(v)) if v is not None else "" for v in values]


class KeyedTabs(TabbedContent):
    """Tabs that follow the keys (and clicks on their headers) only, never the focus.

    Textual's ``TabbedContent`` also switches to a pane when something inside it takes the focus, by a
    message that arrives a moment later.  The dashboard focuses a pane's table after each switch, so on a
    busy machine a key pressed meanwhile was undone: ``4`` showed the claims, then the late focus message
    from the agents table switched back (and the two could ping-pong).  Hidden widgets cannot take the
    focus from the keyboard, so nothing a person does needs the focus to choose the tab.
    """

    def _on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        event.stop()
        event.prevent_default()  # not TabbedContent's own handler either


class Footer(TextualFooter):
    """Textual's footer, rebuilt only when the keys it shows change.

    Textual's ``Footer`` throws its keys away and mounts new ones at every change of the screen's
    bindings -- each focus change and each ``refresh_bindings``, several per tab switch -- and mounting
    a key restyles it: about half the CPU of a tab switch, for a footer that mostly shows the same
    keys.  This one compares what it would show (key, action, words, enabled, tooltip) with what it
    shows, and rebuilds only on a difference."""

    _shown_keys: tuple[tuple[Any, ...], ...] | None = None

    def bindings_changed(self, screen: Screen[Any]) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    def keys_shown(self) -> tuple[tuple[Any, ...], ...]:
        """What ``compose`` reads to show its keys: the bindings shown, and the command palette's."""
        palette = self.app.COMMAND_PALETTE_BINDING
        return tuple(
            (key, b.action, b.description, b.group, enabled, tooltip) for key, (_, b, enabled, tooltip) in self.screen.active_bindings.items() if b.show or key == palette
        )

    async def _recompose_if_changed(self) -> None:
        if not self.is_attached:
            return
        keys = self.keys_shown()
        if keys != self._shown_keys:
            self._shown_keys = keys
            await self.recompose()


def _table(table_id: str, *, share: float | None = None) -> FittedTable:
    return FittedTable(COLUMNS[table_id], share=share, id=table_id, cursor_type="row", zebra_stripes=True)


class DashboardApp(App[None]):
    """The dashboard.  ``refresh`` seconds between broker reads, ``tail`` between log reads."""

    TITLE = "conclave dashboard"
    CSS = """
    #banner { height: auto; max-height: 4; padding: 0 1; background: $boost; }
    #tabs { height: 1fr; }
    TabPane { height: 1fr; padding: 0; }
    #banner.down { background: $warning 40%; }
    #status { height: 1; padding: 0 1; color: $text-muted; }
    #status.error { color: $error; }
    DataTable { height: 1fr; }
    #output-title { padding: 0 1; background: $boost; width: 100%; height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    #output { height: 1fr; min-height: 3; }
    .side { width: 3fr; }
    .main { width: 2fr; }
    .narrow .split { layout: vertical; }
    .narrow .side { width: 100%; height: 3fr; }
    .narrow .main { width: 100%; height: 2fr; }
    #thread-title { padding: 0 1; background: $boost; width: 100%; }
    #claim-filters { height: 3; }
    #tier { width: 24; }
    #search { width: 1fr; }
    .caption { padding: 0 1; background: $boost; width: 100%; }
    #bio, #graph, #thread-view { padding: 0 1; }
    """
    BINDINGS = [
        Binding("1", "tab('agents')", "Agents"),
        Binding("2", "tab('locks')", "Locks"),
        Binding("3", "tab('mail')", "Mail"),
        Binding("4", "tab('claims')", "Claims"),
        Binding("p", "promote", "Promote"),
        Binding("x", "retire", "Retire"),
        Binding("slash", "search", "Search"),
        Binding("v", "revoke", "Revoke"),
        Binding("f", "force_release", "Force-release"),
        Binding("r", "reply", "Reply"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, target: Target, *, refresh: float = 1.0, tail: float = 0.2, keep: int = 1000) -> None:
        super().__init__()
        self.target = target
        self.paths = target.paths()
        self.refresh_every = refresh
        self.tail_every = tail
        self.link = BrokerLink(target)
        self.tailer = LogTailer(self.paths.logs)
        self.output = OutputBuffer(keep)
        self._tail_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conclave-dashboard-tail")
        self._tail_closed = False
        self._wake = asyncio.Event()
        # What the broker said last (None: never asked, or no broker).
        self.broker = "connecting"
        self.broker_note = ""
        self.last_seen: str | None = None
        self.agents: list[dict[str, Any]] | None = None
        self.board: dict[str, Any] | None = None
        self.locks: dict[str, Any] | None = None
        self.claims: list[dict[str, Any]] | None = None
        self.sends: list[dict[str, Any]] | None = None
        self.inbox: list[dict[str, Any]] | None = None
        self.lognames: dict[str, LogName] = {}
        self.log_times: dict[str, str] = {}
        self._memory_seq: int | None = None
        self._mail_seq: int | None = None
        self._claims_at = 0.0
        self._inbox_unread: int | None = None
        # Selections, by key.
        self.selected_agent: str | None = None
        self.selected_claim: int | None = None
        self.selected_thread: str | None = None
        # The thread on screen (what the Mail tab's header names and `r` answers): one value, read together.
        self.thread_view: model.ThreadView | None = None
        self.claim_detail: dict[str, Any] | None = None
        self.claim_graph: str = ""
        self._shown: dict[str, Any] = {}
        # Figures for the benchmark: how long our latest refreshes took (bounded: the app may run for days).
        self.tick_seconds: deque[float] = deque(maxlen=10_000)

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(Text("conclave dashboard: connecting to the broker..."), id="banner")
        with KeyedTabs(initial="agents-tab", id="tabs"):
            with TabPane("1 Agents", id="agents-tab"):
                with Vertical():
                    # As tall as its rows, up to two thirds of the tab: the output pane keeps the rest.
                    yield _table("agents", share=0.65)
                    yield Label(Text("output: select an agent"), id="output-title")
                    yield OutputView(id="output")
            with TabPane("2 Locks", id="locks-tab"):
                with Vertical():
                    yield Label(Text("held"), classes="caption")
                    yield _table("holdings")
                    yield Label(Text("wait line (first in line is served first)"), classes="caption")
                    yield _table("waiting")
            with TabPane("3 Mail", id="mail-tab"):
                with Horizontal(classes="split"):
                    with Vertical(classes="side"):
                        yield Label(Text("threads"), classes="caption")
                        yield _table("threads")
                        yield Label(Text("operator's inbox"), id="inbox-title", classes="caption")
                        yield _table("inbox")
                    with Vertical(classes="main"):
                        yield Label(Text("select a thread (or an inbox message) to read it"), id="thread-title")
                        with VerticalScroll():
                            yield Static(Text(""), id="thread-view")
            with TabPane("4 Claims", id="claims-tab"):
                with Horizontal(classes="split"):
                    with Vertical(classes="side"):
                        with Horizontal(id="claim-filters"):
                            yield Select(TIER_CHOICES, value="live", allow_blank=False, id="tier")
                            yield Input(placeholder="search claims (/)", id="search")
                        yield _table("claims")
                    with VerticalScroll(classes="main", id="claim-side"):
                        yield Static(Text("select a claim"), id="bio")
                        yield Static(Text(""), id="graph")
        yield Static(Text(""), id="status")
        yield Footer()

    @property
    def main(self) -> Screen[None]:
        """The dashboard's own screen: queries go there, not to a dialog that may be on top."""
        return self.screen_stack[0] if self.screen_stack else self.screen

    def _shutting_down(self) -> bool:
        # Textual clears `_running` as its shutdown starts; the widgets go soon after.
        return not getattr(self, "_running", True)

    def _gone(self) -> bool:
        """Whether the app is closing or its screens are gone: a widget's message delivered now is dropped
        (a late ``Input.Changed`` reached the claims filter with no screen left: 'No screens on stack')."""
        return self._shutting_down() or not self.screen_stack

    def on_mount(self) -> None:
        self._fit_layout(self.size.width)
        self.main.query_one("#agents", DataTable).focus()
        # A full collection walks every widget, style and cache Textual made at start-up:
        # 115-160 ms pauses, measured.  Those objects live as long as the app; park them.
        self.call_after_refresh(gc.freeze)
        self.run_worker(self._poll_loop(), name="poll", group="loops")
        self.run_worker(self._tail_loop(), name="tail", group="loops")

    def on_resize(self, event: events.Resize) -> None:
        self._fit_layout(event.size.width)

    def _fit_layout(self, width: int) -> None:
        # Side by side, a list and its detail each get half the width: too little below NARROW columns.
        self.main.set_class(width < NARROW, "narrow")

    async def on_unmount(self) -> None:
        self.link.close()
        self._tail_closed = True
        self._tail_thread.shutdown(wait=False, cancel_futures=True)

    # -- reading the broker ----------------------------------------------------------------

    async def _poll_loop(self) -> None:
        while not self._shutting_down():
            await self.poll_once()
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.refresh_every)

    def wake(self) -> None:
        """Read the broker now (after an action) instead of at the next tick."""
        self._wake.set()

    async def poll_once(self) -> None:
        call = self.link.call
        try:
            self.agents = await call("agents")
            self.board = await call("status.board")
            self.locks = await call("lock.list")
            head = await call("memory.log", {"kind": "memory", "limit": 1})
            seq = head[-1]["seq"] if head else 0
            due = time.monotonic() - self._claims_at >= (self.refresh_every if self._tab() == "claims" else 3 * self.refresh_every)
            memory_moved = seq != self._memory_seq
            if self.claims is None or (memory_moved and due):
                self.claims = await call("memory.list", {"include_retired": True, "limit": 1000})
                self._memory_seq, self._claims_at = seq, time.monotonic()
                if self.selected_claim is not None:
                    await self._load_claim(self.selected_claim)
            head = await call("memory.log", {"kind": "msg.send", "limit": 1})
            seq = head[-1]["seq"] if head else 0
            mail_moved = seq != self._mail_seq
            if mail_moved:
                self.sends = await call("memory.log", {"kind": "msg.send", "limit": 500})
                self._mail_seq = seq
                if self.selected_thread is not None:
                    await self._load_thread(self.selected_thread)
            unread = self.board.get("operator_unread", 0) if self.board else 0
            # Reading the inbox marks it read, so it is read only while the Mail tab is on screen.
            if self._tab() == "mail" and (self.inbox is None or unread != self._inbox_unread or mail_moved):
                self.inbox = await call("msg.inbox", {"include_acked": True, "limit": 200})
                self._inbox_unread = 0
            elif self._tab() != "mail":
                self._inbox_unread = unread
            self.broker, self.broker_note = "running", ""
            self.last_seen = datetime.now(timezone.utc).strftime("%H:%M:%S")
        except NoBroker as exc:
            self.broker, self.broker_note = "none", str(exc)
        except Refused as exc:
            self.broker, self.broker_note = "refused", str(exc)
        except ConclaveError as exc:
            self.broker, self.broker_note = "refused", f"{exc.message} [{exc.code.value}]"
        if not self._shutting_down():
            self.render_panes()

    # -- reading the log files -------------------------------------------------------------

    def _tail_poll(self) -> tuple[dict[str, list[str]], dict[str, LogName], dict[str, str]]:
        # On the tail's thread: hand back copies, so the UI's loop never reads what this thread writes.
        return self.tailer.poll(), dict(self.tailer.names), dict(self.tailer.modified)

    async def _tail_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Checked with no await before the submit: the unmount that shuts the thread down runs on this
            # loop too, so it cannot come in between (a submit after it raises; a test run saw that race).
            if self._tail_closed:
                return
            new, names, modified = await loop.run_in_executor(self._tail_thread, self._tail_poll)
            if self._shutting_down():
                return
            started = time.perf_counter()
            self.log_times = modified
            self.apply_output(new, names)
            self.tick_seconds.append(time.perf_counter() - started)
            await asyncio.sleep(self.tail_every)

    def apply_output(self, new: Mapping[str, list[str]], names: Mapping[str, LogName]) -> None:
        fresh = set(names) - set(self.lognames)
        self.lognames = dict(names)
        for key, lines in new.items():
            self.output.add(key, lines)
        if self.selected_agent in new:
            self.main.query_one("#output", OutputView).grew(len(new[self.selected_agent]), self.output.view(self.selected_agent))
            self.render_output_title()
        if fresh and self.broker == "none":
            self.render_agents()  # with no broker the agent list is the log files

    # -- drawing ---------------------------------------------------------------------------

    def _tab(self) -> str:
        try:
            active = self.main.query_one("#tabs", TabbedContent).active
        except Exception:
            return "agents"
        return (active or "agents-tab").removesuffix("-tab")

    def _changed(self, name: str, value: Any) -> bool:
        if self._shown.get(name) == value:
            return False
        self._shown[name] = value
        return True

    def render_panes(self) -> None:
        started = time.perf_counter()
        self.render_banner()
        self.render_agents()
        self.render_locks()
        self.render_mail()
        self.render_claims()
        self.tick_seconds.append(time.perf_counter() - started)

    def render_banner(self) -> None:
        banner = self.main.query_one("#banner", Static)
        state = str(self.paths.state)
        if self.broker == "running":
            live = len((self.board or {}).get("agents", ()))
            locks = self.locks or {}
            counts = model.tier_counts(self.claims or [])
            text = (
                f"broker running ({state}) | agents {live} live | locks {len(locks.get('holdings', ()))} held, "
                f"{len(locks.get('waiting', ()))} waiting | operator unread {(self.board or {}).get('operator_unread', 0)} | "
                f"claims {counts['trusted']} trusted, {counts['unverified']} unverified, {counts['disputed']} disputed"
            )
        elif self.broker == "none":
            since = f" (last seen {self.last_seen}; the panes show what it said then)" if self.last_seen else ""
            missing = "" if self.paths.state.exists() else " (nothing is there yet: is --state-dir right?)"
            text = (
                f"no broker is running for {state}{missing}{since}. Waiting for one: start it with `conclave run --team TEAM.toml`. "
                f"Agents' output is read from {self.paths.logs}; locks, mail, claims and actions need a running broker."
            )
        elif self.broker == "refused":
            text = f"cannot act as the operator here: {self.broker_note}"
        else:
            text = "connecting to the broker..."
        banner.set_class(self.broker != "running", "down")
        if self._changed("banner", text):
            banner.update(Text(text))

    def agent_rows(self) -> list[model.AgentRow]:
        keys = self.lognames
        return model.agent_rows(
            self.agents if self.broker == "running" or self.agents is not None else None,
            self.board,
            self.locks,
            keys,
            self.output.counts,
            {k: self.output.last(k) for k in keys},
            datetime.now(timezone.utc),
            self.log_times,
        )

    def _show(self, table_id: str, rows: Rows) -> bool:
        """Show ``rows`` in a table, if they differ from what it shows (True when they did)."""
        if not self._changed(table_id, rows):
            return False
        self.main.query_one(f"#{table_id}", FittedTable).show(rows)
        return True

    def render_agents(self) -> None:
        rows = self.agent_rows()
        # No running line count here: a table row costs milliseconds to redraw, and 32 busy
        # agents would redraw every row every second (the output title counts instead).
        # What its binary reported using goes under its state (a column more would not fit at 80).
        shown = [
            (r.key, _texts(r.key, r.state + (f"\n{r.usage}" if r.usage else ""), r.status, "\n".join(r.holds), "\n".join(r.waits), r.unread or ""))
            for r in rows
        ]
        self._show("agents", shown)
        # The cursor starts once the broker has said who is live (or that none runs): on a live agent of
        # the current run, else the newest session -- never on whichever log file sorted first.
        if self.selected_agent is None and self.broker != "connecting":
            first = model.first_agent(rows)
            table = self.main.query_one("#agents", FittedTable)
            # The tab's widgets may not be mounted yet (a broker that refuses at once answers first):
            # the rows wait in the table, and the cursor is placed at a later refresh.
            if first is not None and table.has_row(first):
                table.move_cursor(row=table.get_row_index(first), animate=False)
                self._select_agent(first)

    def render_locks(self) -> None:
        now = datetime.now(timezone.utc)
        self._show("holdings", [(h[0], _texts(*h[:5], model.when(h[5]) if h[5] else "")) for h in model.holding_rows(self.locks, now)])
        self._show("waiting", [(f"{w[0]}:{w[1]}", _texts(*w)) for w in model.waiting_rows(self.locks, now)])

    def render_mail(self) -> None:
        threads = model.thread_rows(self.sends or [])
        self._show("threads", [(t.thread, _texts(t.thread, ", ".join(t.participants), t.messages, t.last_at[11:19])) for t in threads])
        inbox = self.inbox or []
        unread = (self.board or {}).get("operator_unread", 0)
        title = f"operator's inbox ({len(inbox)} shown" + (f", {unread} unread: open this tab to read" if self._tab() != "mail" and unread else "") + ")"
        if self._changed("inbox-title", title):
            self.main.query_one("#inbox-title", Label).update(Text(title), layout=False)
        self._show(
            "inbox",
            [(str(m["id"]), _texts(m["id"], m["sender"], m["thread"], m["at"][11:19], ("" if m.get("read") else "new: ") + " ".join(m["body"].split()))) for m in inbox],
        )

    def render_claims(self) -> None:
        if self._gone():
            return
        tier = self.main.query_one("#tier", Select).value
        search = self.main.query_one("#search", Input).value
        shown = model.claim_rows(self.claims or [], tier=None if tier == "all" else str(tier), search=search)
        self._show("claims", [(str(c["id"]), _texts(c["id"], c["tier"], c["kind"], c["author"], model.witnesses(c), model.uses(c), " ".join(c["text"].split()))) for c in shown])

    def render_claim_detail(self) -> None:
        if self._shutting_down():
            return
        if self.claim_detail is None:
            return
        self.main.query_one("#bio", Static).update(Text("\n".join(model.biography(self.claim_detail))))
        self.main.query_one("#graph", Static).update(Text("\n" + "\n".join(clean(line) for line in self.claim_graph.splitlines())))

    def render_thread(self) -> None:
        if self._shutting_down() or self.thread_view is None:
            return
        view = self.thread_view
        self.main.query_one("#thread-title", Label).update(Text(view.header()))
        self.main.query_one("#thread-view", Static).update(Text("\n".join(model.message_lines(view.messages or ()))))

    def say(self, text: str, *, error: bool = False) -> None:
        if self._shutting_down():
            return
        status = self.main.query_one("#status", Static)
        status.set_class(error, "error")
        status.update(Text(text), layout=False)

    # -- selections ------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#agents")
    def _agent_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._gone():
            return
        # The row under the cursor now: a rebuilt table fires for row 0 first, then for the kept row.
        key = cursor_key(event.data_table)
        if key is not None:
            self._select_agent(key)

    def _select_agent(self, key: str) -> None:
        if key == self.selected_agent:
            return
        self.selected_agent = key
        self.main.query_one("#output", OutputView).show(self.output.view(key))
        self.render_output_title()

    def render_output_title(self) -> None:
        key = self.selected_agent
        if key is None:
            return
        count = self.output.counts.get(key, 0)
        where = "" if key in self.lognames else "  (no log file yet)"
        text = f"output of {key}: {count:,} line(s) read, the last {self.output.keep:,} kept{where}  (Tab here to scroll back; End follows)"
        if self._changed("output-title", text):
            # One line high either way: repaint it, do not re-lay out the screen.
            self.main.query_one("#output-title", Label).update(Text(text), layout=False)

    @on(DataTable.RowHighlighted, "#claims")
    def _claim_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._gone():
            return
        key = cursor_key(event.data_table)
        if key is None:
            return
        cid = int(key)
        if cid != self.selected_claim:
            self.selected_claim = cid
            self.run_worker(self._load_claim(cid), group="claim", exclusive=True)

    async def _load_claim(self, cid: int) -> None:
        try:
            detail = await self.link.call("memory.show", {"id": cid})
            drawn = await self.link.call("memory.graph", {"claim": cid, "format": "text"})
        except (NoBroker, Refused) as exc:
            self.say(f"claim #{cid}: {exc}", error=True)
            return
        except ConclaveError as exc:
            self.say(f"claim #{cid}: {exc.message}", error=True)
            return
        if cid == self.selected_claim:
            self.claim_detail, self.claim_graph = detail, drawn["rendered"]
            self.render_claim_detail()

    # Two tables pick the thread on screen: the threads and the inbox.  The one the person is in (has
    # the focus) decides; a table refilled in the background (new mail) moves its own cursor, and that
    # must not swap the thread under the person's eyes -- nor the thread `r` answers.
    @on(DataTable.RowHighlighted, "#threads")
    @on(DataTable.RowHighlighted, "#inbox")
    def _mail_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._gone():
            return
        if event.data_table.has_focus or self.selected_thread is None:
            self._open_thread_of(event.data_table)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if event.widget.id in ("threads", "inbox"):
            self._open_thread_of(event.widget)  # type: ignore[arg-type]

    def _open_thread_of(self, table: DataTable[Any]) -> None:
        key = cursor_key(table)
        if key is None:
            return
        if table.id == "threads":
            self._open_thread(key)
            return
        message = next((m for m in self.inbox or [] if str(m["id"]) == key), None)
        if message is not None:
            self._open_thread(message["thread"])

    def _open_thread(self, thread: str) -> None:
        if thread != self.selected_thread:
            self.selected_thread = thread
            self.thread_view = model.ThreadView(thread)  # reading it: the header says so and `r` waits
            self.render_thread()
            self.run_worker(self._load_thread(thread), group="thread", exclusive=True)

    async def _load_thread(self, thread: str) -> None:
        try:
            messages = await self.link.call("msg.thread", {"thread": thread})
        except (NoBroker, Refused, ConclaveError) as exc:
            problem = f"thread {thread} could not be read: {getattr(exc, 'message', exc)}"
            if thread == self.selected_thread:
                self.thread_view = model.ThreadView(thread, problem=problem)
                self.render_thread()
            self.say(problem, error=True)
            return
        if thread == self.selected_thread:
            self.thread_view = model.ThreadView(thread, tuple(messages))
            self.render_thread()

    @on(Select.Changed, "#tier")
    @on(Input.Changed, "#search")
    def _filter_changed(self) -> None:
        self.render_claims()

    @on(TabbedContent.TabActivated)
    def _tab_changed(self) -> None:
        if self._gone():
            return
        pane = self.main.query_one(f"#{self._tab()}-tab", TabPane)
        focused = self.focused
        # Keys typed right after the tab key (4 then /) may already have moved focus into the pane.
        if focused is None or pane not in focused.ancestors:
            self.main.query_one(FOCUS[self._tab()], DataTable).focus()
        self.refresh_bindings()
        if self._tab() in ("mail", "claims"):
            self.wake()

    # -- actions ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        tab = ACTION_TAB.get(action)
        return tab is None or tab == self._tab()

    def action_tab(self, name: str) -> None:
        self.main.query_one("#tabs", TabbedContent).active = f"{name}-tab"

    def action_search(self) -> None:
        self.main.query_one("#search", Input).focus()

    def _row_key(self, table_id: str) -> str | None:
        return cursor_key(self.main.query_one(table_id, DataTable))

    def _needs_broker(self, what: str) -> bool:
        if self.broker == "running":
            return True
        if self.broker == "refused":
            self.say(f"{what}: cannot act as the operator here ({self.broker_note})", error=True)
        else:
            self.say(f"{what} needs a running broker ({self.broker_note or 'none answers yet'})", error=True)
        return False

    def action_promote(self) -> None:
        if not self._needs_broker("promoting a claim"):
            return
        key = self._row_key("#claims")
        if key is None:
            return self.say("select a claim to promote first", error=True)
        claim = self._claim(int(key))
        self._confirm(
            Ask(f"Promote claim #{key} to trusted?", _claim_summary(claim) + "\nA person's promotion makes it trusted regardless of witnesses; it is recorded with your reason.", need="optional", confirm="Promote"),
            "memory.promote",
            lambda reason: {"id": int(key), **({"reason": reason} if reason else {})},
            lambda r: f"claim #{r['id']} is now {r['tier']}",
        )

    def action_retire(self) -> None:
        if not self._needs_broker("retiring a claim"):
            return
        key = self._row_key("#claims")
        if key is None:
            return self.say("select a claim to retire first", error=True)
        claim = self._claim(int(key))
        self._confirm(
            Ask(f"Retire claim #{key}?", _claim_summary(claim) + "\nRetiring writes a tombstone with your reason; nothing is deleted (conclave memory unretire brings it back).", need="required", confirm="Retire"),
            "memory.retire",
            lambda reason: {"id": int(key), "reason": reason},
            lambda r: f"claim #{r['id']} is now {r['tier']}",
        )

    def action_revoke(self) -> None:
        if not self._needs_broker("revoking a principal"):
            return
        key = self._row_key("#agents")
        if key is None or ":" not in key:
            return self.say("select an agent's session to revoke first", error=True)
        self._confirm(
            Ask(f"Revoke {key}?", "Its corroborations and disputes stop counting, claims that needed them are recomputed, and a live process is ended.", need="optional", confirm="Revoke"),
            "memory.revoke",
            lambda reason: {"target": key, **({"reason": reason} if reason else {})},
            lambda r: f"revoked {r['principal']}" + (" and ended its process" if r.get("ended") else "") + f"; {len(r.get('changes', []))} claim(s) changed tier",
        )

    def action_force_release(self) -> None:
        if not self._needs_broker("force-releasing a lock"):
            return
        key = self._row_key("#holdings")
        if key is None:
            return self.say("select a held lock to force-release first", error=True)
        holders = [h["holder"] for h in (self.locks or {}).get("holdings", ()) if h["resource"] == key]
        self._confirm(
            Ask(f"Force-release {key}?", f"Held by {', '.join(holders) or 'nobody now'}. The holder is not asked; the release is logged with your reason.", need="required", confirm="Force-release"),
            "lock.force_release",
            lambda reason: {"resource": key, "reason": reason},
            lambda r: f"force-released {key}",
        )

    def action_reply(self) -> None:
        if not self._needs_broker("replying"):
            return
        # The thread on screen, as its header names it: the reply goes there and to the agent it names.
        view = self.thread_view
        if view is None:
            return self.say("select a thread (or an inbox message) to reply to first", error=True)
        if view.messages is None:
            return self.say(f"thread {view.thread} is not on screen yet ({view.problem or 'still reading it'}); press r when it shows", error=True)
        to = view.reply_to
        if to is None:
            return self.say(f"thread {view.thread} has no agent in it to reply to", error=True)
        thread = view.thread
        self._confirm(
            Ask(f"Reply to {to} in thread {thread}", "Sent as the operator; it lands in their inbox.", field="message", need="required", confirm="Send"),
            "msg.send",
            lambda body: {"to": to, "body": body, "thread": thread},
            lambda r: f"sent message #{r['id']} to {', '.join(r['recipients'])}",
        )

    def _claim(self, cid: int) -> Mapping[str, Any]:
        return next((c for c in self.claims or [] if c["id"] == cid), {"id": cid, "text": "", "tier": "?", "author": "?"})

    def _confirm(self, ask: Ask, op: str, args: Callable[[str], dict[str, Any]], done: Callable[[Any], str]) -> None:
        def answered(value: str | None) -> None:
            if value is None:
                self.say(f"{ask.confirm.lower()}: cancelled; nothing was sent")
                return
            self.run_worker(self._act(op, args(value), done), group="act")

        self.push_screen(ask, answered)

    async def _act(self, op: str, args: dict[str, Any], done: Callable[[Any], str]) -> None:
        try:
            result = await self.link.call(op, args)
        except (NoBroker, Refused) as exc:
            self.say(f"{op}: {exc}", error=True)
            return
        except ConclaveError as exc:
            self.say(f"{op} refused: {exc.message} [{exc.code.value}]", error=True)
            return
        self.say(done(result))
        self._claims_at = 0.0  # the claim list is due at once
        if op.startswith("memory.") and self.selected_claim is not None:
            await self._load_claim(self.selected_claim)
        if op == "msg.send" and self.selected_thread is not None:
            await self._load_thread(self.selected_thread)
        self.wake()


def _claim_summary(claim: Mapping[str, Any]) -> str:
    return f"[{claim.get('tier')}] by {claim.get('author')}: {clean(' '.join(str(claim.get('text', '')).split()))[:300]}"
