"""The run as it happens: what ``conclave run`` shows, and the journal it keeps.

The broker's side of the operator's view (the files and how they read are
:mod:`broker.runlog`).  :class:`RunView` is handed every line an agent
prints by the supervisor (which reads the agents' pipes and writes their
logs, :mod:`broker.capture`), told when an agent starts and ends, by the
mail feature when mail reaches the operator, and by ``run_broker`` when the
run is stopping; it watches the lock table's wait line itself.  Each event
becomes a line in the run journal (``logs/run-<N>.jsonl``, written whether
or not anyone watches) and, unless the run is quiet, a line among the
agents' own output.

Three promises shape it:

* **The logs are always complete.**  The broker writes each agent's log
  before the line reaches the view, so nothing the view does -- or fails to
  do -- loses a byte of them (past the log's cap, what is dropped is
  counted and reported: :mod:`broker.capture`).
* **To a file or a pipe, nothing is dropped.**  When stdout is not a
  terminal (a file, ``| tee``, CI) every line and every event is written, in
  order; when the writer falls behind, the agents' lines wait for it (and
  so, through their pipes, do the agents) -- never the broker's own work.
* **On a terminal the broker never waits.**  Agents' lines go into a
  bounded buffer written by a worker thread; a terminal that falls behind
  (a slow link, Ctrl-S) loses agents' lines from the *view* only, never the
  broker's events, and a line says how many and where the full record is.
"""

from __future__ import annotations

import os
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import trio

from broker.runlog import Notice, Renderer, journal_path
from store import events

if TYPE_CHECKING:
    from broker.core import BrokerCore

#: The key of the view in ``core.extensions``.
EXTENSION: Final = "view"
#: A lock wait is announced once it has lasted this long.
LOCK_WAIT_NOTICE: Final = 3.0
#: Seconds between looks at the lock table's wait line.
LOCK_LOOK: Final = 1.0
#: Agents' lines the writer may fall behind before a terminal sheds them (or, to a file, the agents wait).
CAPACITY: Final = 5000
#: Lines handed to the writer thread at once.
BATCH: Final = CAPACITY
#: How each way of stopping a run reads (``RunSummary.stopped_by`` is the key).
STOP_WORDS: Final = {
    "SIGINT": "Ctrl-C (SIGINT)",
    "SIGTERM": "SIGTERM",
    "SIGHUP": "SIGHUP (the terminal closed)",
    "SIGQUIT": "SIGQUIT",
    "operator": "conclave stop",
}


class Outcome(Protocol):
    """How a principal's process ended (``broker.supervisor.AgentOutcome``)."""

    agent: str
    session: str
    failed: bool

    def describe(self) -> str: ...


def view_of(core: BrokerCore) -> RunView | None:
    """The running broker's view, if it has one (an operator command's in-process core has none)."""
    view = core.extensions.get(EXTENSION)
    return view if isinstance(view, RunView) else None


@final
class Terminal:
    """Where the run is shown: a terminal (sheds agents' lines under pressure) or a file or
    pipe (drops nothing, and makes agents' lines wait for room).

    :meth:`notice` queues a broker event and never blocks or drops;
    :meth:`output` queues an agent's line, waiting for room when nothing may
    be shed.  :meth:`run` hands batches, in order, to a worker thread, which
    may block on the descriptor as long as it likes.
    """

    def __init__(self, fd: int, *, capacity: int = CAPACITY, shed: bool | None = None) -> None:
        self.fd = fd
        self.capacity = capacity
        #: A terminal may shed agents' lines; a file or a pipe never does.
        self.shed = os.isatty(fd) if shed is None else shed
        self._lines: deque[tuple[bool, str]] = deque()
        self._outputs = 0
        self._has_lines = trio.lowlevel.ParkingLot()
        self._has_room = trio.lowlevel.ParkingLot()
        self._closed = False
        #: Agents' lines shed since the last line that said so, and in all.
        self.dropped = 0
        self.dropped_total = 0
        self.broken = False
        #: Said in the line that reports shed lines: where the full record is.
        self.record = "conclave logs"

    @property
    def full(self) -> bool:
        return self._outputs >= self.capacity

    def notice(self, line: str) -> None:
        """A broker event: always queued, in order."""
        if self.broken or self._closed:
            return
        self._lines.append((False, line))
        self._has_lines.unpark_all()

    async def output(self, line: str) -> None:
        """An agent's line: shed on a terminal that fell behind; elsewhere wait for room."""
        if self.broken or self._closed:
            return
        while self._outputs >= self.capacity:
            if self.shed:
                self.dropped += 1
                self.dropped_total += 1
                return
            await self._has_room.park()
            if self.broken or self._closed:
                return
        self._lines.append((True, line))
        self._outputs += 1
        if self._has_lines:  # the writer waits for lines (waking nobody costs more than the line)
            self._has_lines.unpark_all()

    def close(self) -> None:
        """No more lines: :meth:`run` returns once the pending ones are written."""
        self._closed = True
        self._has_lines.unpark_all()
        self._has_room.unpark_all()

    async def run(self, renderer: Renderer) -> None:
        while True:
            while not self._lines:
                if self._closed:
                    return
                await self._has_lines.park()
            batch = []
            while self._lines and len(batch) < BATCH:
                is_output, line = self._lines.popleft()
                self._outputs -= is_output
                batch.append(line)
            self._has_room.unpark_all()
            if self.dropped:
                note = Notice(events.now(), "dropped", f"{self.dropped} line(s) not shown: the terminal fell behind; every line is in the logs ({self.record})")
                batch.append(renderer.notice(note))
                self.dropped = 0
            data = "".join(batch).encode("utf-8", errors="replace")
            if not self.broken:
                # A terminal that never drains (Ctrl-S) keeps its thread; the broker goes on.
                self.broken = not await trio.to_thread.run_sync(_write_all, self.fd, data, abandon_on_cancel=True)
            if self.broken:
                self._lines.clear()
                self._outputs = 0
                self._has_room.unpark_all()


def _write_all(fd: int, data: bytes) -> bool:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        return True
    except OSError:  # the reader went away (`conclave run | head`): stop showing, keep running
        return False


@final
class RunView:
    """What one run shows and records; one per ``conclave run``.

    Call :meth:`run` in the broker's nursery and :meth:`finish` once the
    team is done.  :meth:`output` takes an agent's line (it may wait, see
    :class:`Terminal`); the other methods never block and may be called
    from any task.
    """

    def __init__(self, logs: Path, run: int, *, terminal: Terminal | None, colour: bool = False) -> None:
        self.logs = logs
        self.run_number = run
        self.terminal = terminal
        if terminal is not None:
            terminal.record = f"conclave logs --run {run}; files in {logs}"
        self.renderer = Renderer(colour=colour)
        self.journal = journal_path(logs, run)
        self._journal_fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._journal_lost = 0
        self._announced_waits: dict[tuple[str, tuple[str, ...], str], str] = {}
        self._terminal_done = trio.Event()
        self._stopping_at: float | None = None
        self._grace = 0.0
        self.failed = 0

    # -- what the broker tells it ---------------------------------------------------

    def started(self, repo: Path, agents: list[str]) -> None:
        self.renderer.reserve(agents)
        names = ", ".join(agents)
        self._note("run", f"run {self.run_number} on {repo}: {len(agents)} agent(s) ({names}); logs in {self.logs}; Ctrl-C stops")

    def spawned(self, principal: str, pid: int | None, log: Path, *, attempt: int, attempts: int, sandbox: str | None = None) -> None:
        again = f", attempt {attempt} of {attempts}" if attempt > 1 else ""
        box = f", sandbox {sandbox}" if sandbox else ""
        self._note("spawn", f"started (pid {pid}{box}{again}); log {log.name}", principal=principal, log=log.name)

    async def output(self, principal: str, text: str, *, cut: bool = False) -> None:
        """One line an agent printed (already in its log)."""
        if self.terminal is not None:
            await self.terminal.output(self.renderer.output(principal, text, cut=cut))

    def exited(self, outcome: Outcome) -> None:
        principal = f"{outcome.agent}:{outcome.session}"
        if outcome.failed:
            self.failed += 1
        usage = getattr(outcome, "usage", None)
        used = f"; used {usage['tokens']:,} tokens" + (f", ${usage['cost_usd']:.4f}" if usage.get("cost_usd") is not None else "") if usage else ""
        self._note("exit", outcome.describe() + used, principal=principal, failed=outcome.failed)

    def note(self, kind: str, text: str, *, principal: str | None = None, failed: bool = False) -> None:
        """Anything else the operator must hear of (an agent's usage, its output past the cap, a full disk, what an earlier broker left)."""
        self._note(kind, text, principal=principal, failed=failed)

    def mail(self, sender: str, message_id: int, thread: str, subject: str | None, body: str) -> None:
        """Mail reached the operator's inbox."""
        first = subject or next((line for line in body.splitlines() if line.strip()), "")
        if len(first) > 120:
            first = first[:119] + "\u2026"
        self._note("mail", f"mail to the operator, message {message_id} (thread {thread}): {first}  [conclave msg inbox]", principal=sender)

    def share_reached(self, principal: str, limit: int | None) -> None:
        """An agent reached its share of processes: its forks now fail inside its box, nobody else's."""
        of = f" of {limit} processes" if limit else ""
        self._note(
            "share",
            f"reached its share{of} (max_processes in the team file): its further forks fail; the broker, other agents and you keep theirs",
            principal=principal,
            failed=True,
        )

    def stopping(self, reason: str, agents: int, grace: float) -> None:
        """The run was told to stop (a signal, the operator's ``conclave stop``, its timeout or budget)."""
        now = trio.current_time()
        why = STOP_WORDS.get(reason, reason)
        if self._stopping_at is None:
            self._stopping_at, self._grace = now, grace
            if agents:
                text = f"{why}: stopping. SIGTERM sent to {agents} agent(s); SIGKILL in {grace:g} s to any still running"
            else:
                text = f"{why}: stopping"
        else:
            left = max(0.0, self._stopping_at + self._grace - now)
            text = f"{why} again: already stopping; SIGKILL in {left:.1f} s to any agent still running"
        self._note("stopping", text)

    async def finish(self, stopped_by: str | None, *, exit_code: int | None = None, flush_timeout: float | None = None) -> None:
        """The team is done: say how it ended, flush the view (a file or pipe gets a minute)."""
        failed = f"; {self.failed} failed" if self.failed else ""
        how = f"stopped by {stopped_by}{' (the terminal closed)' if stopped_by == 'SIGHUP' else ''}" if stopped_by else "every agent has exited"
        code = f"; exit code {exit_code}" if exit_code is not None else ""
        self._note("end", f"run {self.run_number} ended: {how}{failed}{code}", failed=bool(self.failed))
        fd, self._journal_fd = self._journal_fd, -1
        os.close(fd)
        if self.terminal is not None:
            self.terminal.close()
            if flush_timeout is None:
                flush_timeout = 10.0 if self.terminal.shed else 60.0
            with trio.move_on_after(flush_timeout):
                await self._terminal_done.wait()

    def close(self) -> None:
        """Release the journal (``finish`` does it too; this is for a run that ended in an error)."""
        if self._journal_fd >= 0:
            fd, self._journal_fd = self._journal_fd, -1
            os.close(fd)
        if self.terminal is not None:
            self.terminal.close()

    # -- its own tasks ------------------------------------------------------------------

    async def run(self, core: BrokerCore, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the view and watch the lock table's wait line."""
        async with trio.open_nursery() as nursery:
            if self.terminal is not None:
                nursery.start_soon(self._write_terminal)
            nursery.start_soon(self._watch_waits, core)
            task_status.started()

    async def _write_terminal(self) -> None:
        assert self.terminal is not None
        try:
            await self.terminal.run(self.renderer)
        finally:
            self._terminal_done.set()

    async def _watch_waits(self, core: BrokerCore) -> None:
        while True:
            await trio.sleep(LOCK_LOOK)
            table = core.extensions.get("locks")
            waiting = getattr(table, "waiting", None)
            if waiting is not None:
                self._look_at_waits(table, waiting())

    def _look_at_waits(self, table: Any, line: list[dict[str, Any]]) -> None:
        now = datetime.now(timezone.utc)
        current = set()
        for w in line:
            key = (w["waiter"], tuple(w["resources"]), w["since"])
            current.add(key)
            if key in self._announced_waits or not w["since"]:
                continue
            waited = (now - datetime.fromisoformat(w["since"])).total_seconds()
            if waited >= LOCK_WAIT_NOTICE:
                what = " ".join(w["resources"])
                self._announced_waits[key] = what
                holders = w.get("blocked_by") or []
                held = f"; held by {', '.join(holders)}" if holders else ""
                self._note(
                    "lock_wait",
                    f"waiting {waited:.0f} s for {what} ({w['mode']}), #{w['position']} in line{held}  [conclave lock list]",
                    principal=w["waiter"],
                )
        for key in [k for k in self._announced_waits if k not in current]:
            what = self._announced_waits.pop(key)
            waited = (now - datetime.fromisoformat(key[2])).total_seconds()
            held = getattr(table, "held_by", None)
            got = held is not None and all(r in held(key[0]) for r in key[1])
            verb = "got" if got else "stopped waiting for"
            self._note("lock_waited", f"{verb} {what} after {waited:.1f} s", principal=key[0])

    # -- writing ---------------------------------------------------------------------------

    def _note(self, kind: str, text: str, *, principal: str | None = None, log: str | None = None, failed: bool = False) -> None:
        notice = Notice(events.now(), kind, text, principal=principal, log=log, failed=failed)
        if self._journal_fd >= 0:  # closed by finish(): the run is over
            self._journal(notice)
        if self.terminal is not None:
            self.terminal.notice(self.renderer.notice(notice))

    def _journal(self, notice: Notice) -> None:
        try:
            if self._journal_lost:
                lost = Notice(notice.at, "journal", f"{self._journal_lost} earlier line(s) of this journal could not be written (the disk was full); the event log has the facts (conclave memory log)")
                os.write(self._journal_fd, lost.to_line())
                self._journal_lost = 0
            os.write(self._journal_fd, notice.to_line())
        except OSError:
            self._journal_lost += 1  # a full disk must not stop the run; the event log has the facts
