"""``conclave dashboard``: the operator's live view of a team, on Textual.

Four tabs (keys ``1``-``4``):

* **Agents** -- every principal, live and past: state, status line, locks
  held and waited for, unread mail, lines of output; below, the selected
  agent's output, live.
* **Locks** -- everything held, and the wait line with each waiter's time.
* **Mail** -- threads, the operator's inbox, the selected thread; ``r``
  replies.
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
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Input, Label, Select, Static, TabbedContent, TabPane

from broker.clikit import Target
from broker.dashboard import model
from broker.dashboard.link import BrokerLink, NoBroker, Refused
from broker.dashboard.output import OutputView
from broker.dashboard.screens import Ask
from broker.dashboard.tail import LogName, LogTailer, OutputBuffer, clean
from broker.errors import ConclaveError

TIER_CHOICES = [("live tiers", "live"), ("trusted", "trusted"), ("unverified", "unverified"), ("disputed", "disputed"), ("retired", "retired"), ("superseded", "superseded"), ("every tier", "all")]

#: Which tab each action belongs to (the footer shows an action only there).
ACTION_TAB = {"promote": "claims", "retire": "claims", "search": "claims", "revoke": "agents", "force_release": "locks", "reply": "mail"}


#: The table that takes the keyboard when a tab opens.
FOCUS = {"agents": "#agents", "locks": "#holdings", "mail": "#threads", "claims": "#claims"}


def _cells(*values: Any) -> list[Text]:
    """Table cells as plain Text: agent-written strings are never read as markup."""
    return [Text(clean(str(v)) if v is not None else "") for v in values]


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
    #agents { height: 1fr; }
    #output-title { padding: 0 1; background: $boost; width: 100%; }
    #output { height: 2fr; }
    .side { width: 1fr; }
    .main { width: 1fr; }
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
        self._memory_seq: int | None = None
        self._mail_seq: int | None = None
        self._claims_at = 0.0
        self._inbox_unread: int | None = None
        # Selections, by key.
        self.selected_agent: str | None = None
        self.selected_claim: int | None = None
        self.selected_thread: str | None = None
        self.thread_messages: list[dict[str, Any]] = []
        self.claim_detail: dict[str, Any] | None = None
        self.claim_graph: str = ""
        self._shown: dict[str, Any] = {}
        # Figures for the benchmark: how long our latest refreshes took (bounded: the app may run for days).
        self.tick_seconds: deque[float] = deque(maxlen=10_000)

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(Text("conclave dashboard: connecting to the broker..."), id="banner")
        with TabbedContent(initial="agents-tab", id="tabs"):
            with TabPane("1 Agents", id="agents-tab"):
                with Vertical():
                    yield DataTable(id="agents", cursor_type="row", zebra_stripes=True)
                    yield Label(Text("output: select an agent"), id="output-title")
                    yield OutputView(id="output")
            with TabPane("2 Locks", id="locks-tab"):
                with Vertical():
                    yield Label(Text("held"), classes="caption")
                    yield DataTable(id="holdings", cursor_type="row", zebra_stripes=True)
                    yield Label(Text("wait line (first in line is served first)"), classes="caption")
                    yield DataTable(id="waiting", cursor_type="row", zebra_stripes=True)
            with TabPane("3 Mail", id="mail-tab"):
                with Horizontal():
                    with Vertical(classes="side"):
                        yield Label(Text("threads"), classes="caption")
                        yield DataTable(id="threads", cursor_type="row", zebra_stripes=True)
                        yield Label(Text("operator's inbox"), id="inbox-title", classes="caption")
                        yield DataTable(id="inbox", cursor_type="row", zebra_stripes=True)
                    with VerticalScroll(classes="main"):
                        yield Static(Text("select a thread"), id="thread-view")
            with TabPane("4 Claims", id="claims-tab"):
                with Horizontal():
                    with Vertical(classes="side"):
                        with Horizontal(id="claim-filters"):
                            yield Select(TIER_CHOICES, value="live", allow_blank=False, id="tier")
                            yield Input(placeholder="search claims (/)", id="search")
                        yield DataTable(id="claims", cursor_type="row", zebra_stripes=True)
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

    def on_mount(self) -> None:
        self.main.query_one("#agents", DataTable).add_columns("agent", "state", "status", "holds", "waits for", "unread", "usage")
        self.main.query_one("#holdings", DataTable).add_columns("resource", "mode", "holder", "held for", "token", "expires")
        self.main.query_one("#waiting", DataTable).add_columns("#", "waiter", "resources", "mode", "waiting for")
        self.main.query_one("#threads", DataTable).add_columns("thread", "between", "msgs", "last")
        self.main.query_one("#inbox", DataTable).add_columns("id", "from", "thread", "at", "message")
        self.main.query_one("#claims", DataTable).add_columns("id", "tier", "kind", "author", "witnesses", "text")
        self.main.query_one("#agents", DataTable).focus()
        # A full collection walks every widget, style and cache Textual made at start-up:
        # 115-160 ms pauses, measured.  Those objects live as long as the app; park them.
        self.call_after_refresh(gc.freeze)
        self.run_worker(self._poll_loop(), name="poll", group="loops")
        self.run_worker(self._tail_loop(), name="tail", group="loops")

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

    def _tail_poll(self) -> tuple[dict[str, list[str]], dict[str, LogName]]:
        return self.tailer.poll(), dict(self.tailer.names)

    async def _tail_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Checked with no await before the submit: the unmount that shuts the thread down runs on this
            # loop too, so it cannot come in between (a submit after it raises; a test run saw that race).
            if self._tail_closed:
                return
            new, names = await loop.run_in_executor(self._tail_thread, self._tail_poll)
            if self._shutting_down():
                return
            started = time.perf_counter()
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
        if fresh and self.broker != "running":
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
        )

    def render_agents(self) -> None:
        rows = self.agent_rows()
        table = self.main.query_one("#agents", DataTable)
        cells = [
            # No running line count here: a table row costs milliseconds to redraw, and 32 busy
            # agents would redraw every row every second (the output title counts instead).
            (r.key, _cells(r.key, r.state, r.status, "; ".join(r.holds), "; ".join(r.waits), r.unread or "", r.usage))
            for r in rows
        ]
        if not self._changed("agents", [(k, [c.plain for c in cs]) for k, cs in cells]):
            return
        _refill(table, cells)
        if self.selected_agent is None and rows:
            self._select_agent(rows[0].key)

    def render_locks(self) -> None:
        now = datetime.now(timezone.utc)
        holdings = model.holding_rows(self.locks, now)
        waiting = model.waiting_rows(self.locks, now)
        if self._changed("holdings", holdings):
            _refill(self.main.query_one("#holdings", DataTable), [(h[0], _cells(*h)) for h in holdings])
        if self._changed("waiting", waiting):
            _refill(self.main.query_one("#waiting", DataTable), [(f"{w[0]}:{w[1]}", _cells(*w)) for w in waiting])

    def render_mail(self) -> None:
        threads = model.thread_rows(self.sends or [])
        rows = [(t.thread, _cells(t.thread, ", ".join(t.participants), t.messages, t.last_at[11:19])) for t in threads]
        if self._changed("threads", [(k, [c.plain for c in cs]) for k, cs in rows]):
            _refill(self.main.query_one("#threads", DataTable), rows)
        inbox = self.inbox or []
        unread = (self.board or {}).get("operator_unread", 0)
        title = f"operator's inbox ({len(inbox)} shown" + (f", {unread} unread: open this tab to read" if self._tab() != "mail" and unread else "") + ")"
        if self._changed("inbox-title", title):
            self.main.query_one("#inbox-title", Label).update(Text(title), layout=False)
        rows = [
            (str(m["id"]), _cells(m["id"], m["sender"], m["thread"], m["at"][11:19], ("" if m.get("read") else "new: ") + (m["body"].splitlines() or [""])[0]))
            for m in inbox
        ]
        if self._changed("inbox", [(k, [c.plain for c in cs]) for k, cs in rows]):
            _refill(self.main.query_one("#inbox", DataTable), rows)

    def render_claims(self) -> None:
        tier = self.main.query_one("#tier", Select).value
        search = self.main.query_one("#search", Input).value
        shown = model.claim_rows(self.claims or [], tier=None if tier == "all" else str(tier), search=search)
        rows = [
            (str(c["id"]), _cells(c["id"], c["tier"], c["kind"], c["author"], c.get("counted_corroborations", ""), " ".join(c["text"].split())))
            for c in shown
        ]
        if self._changed("claims", [(k, [c.plain for c in cs]) for k, cs in rows]):
            _refill(self.main.query_one("#claims", DataTable), rows)

    def render_claim_detail(self) -> None:
        if self._shutting_down():
            return
        if self.claim_detail is None:
            return
        self.main.query_one("#bio", Static).update(Text("\n".join(model.biography(self.claim_detail))))
        self.main.query_one("#graph", Static).update(Text("\n" + "\n".join(clean(line) for line in self.claim_graph.splitlines())))

    def render_thread(self) -> None:
        if self._shutting_down():
            return
        if self.selected_thread is None:
            return
        target = model.reply_target(self.thread_messages)
        lines = [f"thread {self.selected_thread}" + (f"  (r replies to {target})" if target else ""), "", *model.message_lines(self.thread_messages)]
        self.main.query_one("#thread-view", Static).update(Text("\n".join(lines)))

    def say(self, text: str, *, error: bool = False) -> None:
        if self._shutting_down():
            return
        status = self.main.query_one("#status", Static)
        status.set_class(error, "error")
        status.update(Text(text), layout=False)

    # -- selections ------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#agents")
    def _agent_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # The row under the cursor now: a rebuilt table fires for row 0 first, then for the kept row.
        key = _cursor_key(event.data_table)
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
        key = _cursor_key(event.data_table)
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

    @on(DataTable.RowHighlighted, "#threads")
    def _thread_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = _cursor_key(event.data_table)
        if key is not None:
            self._open_thread(key)

    @on(DataTable.RowHighlighted, "#inbox")
    def _inbox_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = _cursor_key(event.data_table)
        message = next((m for m in self.inbox or [] if str(m["id"]) == key), None)
        if message is not None:
            self._open_thread(message["thread"])

    def _open_thread(self, thread: str) -> None:
        if thread != self.selected_thread:
            self.selected_thread = thread
            self.run_worker(self._load_thread(thread), group="thread", exclusive=True)

    async def _load_thread(self, thread: str) -> None:
        try:
            messages = await self.link.call("msg.thread", {"thread": thread})
        except (NoBroker, Refused, ConclaveError) as exc:
            self.say(f"thread {thread}: {getattr(exc, 'message', exc)}", error=True)
            return
        if thread == self.selected_thread:
            self.thread_messages = messages
            self.render_thread()

    @on(Select.Changed, "#tier")
    @on(Input.Changed, "#search")
    def _filter_changed(self) -> None:
        self.render_claims()

    @on(TabbedContent.TabActivated)
    def _tab_changed(self) -> None:
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
        return _cursor_key(self.main.query_one(table_id, DataTable))

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
        if self.selected_thread is None:
            return self.say("select a thread (or an inbox message) to reply to first", error=True)
        to = model.reply_target(self.thread_messages)
        if to is None:
            return self.say(f"thread {self.selected_thread} has no agent in it to reply to", error=True)
        thread = self.selected_thread
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


def _refill(table: DataTable, rows: list[tuple[str, list[Text]]]) -> None:
    """Show ``rows`` (key, cells) in ``table``.

    When the keys are the same as before, only the cells that changed are
    rewritten (the cursor does not move and no selection event fires);
    otherwise the table is rebuilt with the cursor kept on the same key.
    """
    before: list[tuple[str, list[str]]] = getattr(table, "_conclave_rows", [])
    after = [(key, [c.plain for c in cells]) for key, cells in rows]
    table._conclave_rows = after  # type: ignore[attr-defined]
    if [k for k, _ in before] == [k for k, _ in after]:
        columns = table.ordered_columns
        for y, ((_, old), (_, cells)) in enumerate(zip(before, rows)):
            for x, (was, cell) in enumerate(zip(old, cells)):
                if was != cell.plain:
                    # Widening a column re-measures the whole table: only when the text no longer fits.
                    table.update_cell_at(Coordinate(y, x), cell, update_width=cell.cell_len > columns[x].content_width)
        return
    current = _cursor_key(table)
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if current is not None:
        with contextlib.suppress(Exception):
            table.move_cursor(row=table.get_row_index(current), animate=False)


def _cursor_key(table: DataTable) -> str | None:
    """The key of the row under the cursor (None for an empty table)."""
    if table.row_count == 0:
        return None
    try:
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    except Exception:
        return None
