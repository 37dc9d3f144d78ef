"""The run as it happens: what ``conclave run`` shows, and the journal it keeps.

The broker's side of the operator's view (the files and how they read are
:mod:`broker.runlog`).  :class:`RunView` is told by the supervisor when an
agent starts and ends, by the mail feature when mail reaches the operator,
and by ``run_broker`` when the run is stopping; it watches the lock table's
wait line itself.  Each of those becomes a line in the run journal
(``logs/run-<N>.jsonl``, written whether or not anyone watches) and, unless
the run is quiet, a line on the terminal among the agents' own output.

Two promises shape it:

* **The logs are always complete.**  Agents write their log files
  themselves; the view only reads them (a tail per live principal, every
  :data:`TICK` seconds), so nothing the view does -- or fails to do -- can
  lose a byte of them.
* **The broker never waits on the terminal.**  Lines go into a bounded
  buffer (:class:`Terminal`); a worker thread writes them out.  A terminal
  that falls behind (a slow link, Ctrl-S) loses lines from the *view* only,
  and a line says how many and where they still are.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import trio

from broker.runlog import LogTail, Notice, Renderer, journal_path
from store import events

if TYPE_CHECKING:
    from broker.core import BrokerCore

#: The key of the view in ``core.extensions``.
EXTENSION: Final = "view"
#: Seconds between reads of the agents' logs.
TICK: Final = 0.1
#: A lock wait is announced once it has lasted this long.
LOCK_WAIT_NOTICE: Final = 3.0
#: Seconds between looks at the lock table's wait line.
LOCK_LOOK: Final = 1.0
#: Lines the terminal may fall behind before lines are dropped from the view.
CAPACITY: Final = 5000
#: Bytes read from one log per tick (the rest waits for the next tick).
READ_PER_TICK: Final = 1 << 18
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
    """A terminal the broker writes to without ever waiting on it.

    :meth:`put` never blocks: past :data:`CAPACITY` pending lines it drops
    the line and counts it.  :meth:`run` hands batches to a worker thread,
    which may block on the terminal as long as it likes.
    """

    def __init__(self, fd: int, *, capacity: int = CAPACITY) -> None:
        self.fd = fd
        self._send, self._receive = trio.open_memory_channel[str](capacity)
        self.dropped = 0
        self.broken = False

    @property
    def full(self) -> bool:
        return self._send.statistics().current_buffer_used >= self._send.statistics().max_buffer_size

    def put(self, line: str) -> None:
        if self.broken:
            return
        try:
            self._send.send_nowait(line)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def close(self) -> None:
        """No more lines: :meth:`run` returns once the pending ones are written."""
        self._send.close()

    async def run(self, renderer: Renderer) -> None:
        async with self._receive:
            async for first in self._receive:
                batch = [first]
                while len(batch) < 1000:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if self.dropped:
                    note = Notice(events.now(), "dropped", f"{self.dropped} line(s) not shown: the terminal fell behind; every line is in the logs (conclave logs)")
                    batch.append(renderer.notice(note))
                    self.dropped = 0
                data = "".join(batch).encode("utf-8", errors="replace")
                if not self.broken:
                    # A terminal that never drains (Ctrl-S) keeps its thread; the broker goes on.
                    self.broken = not await trio.to_thread.run_sync(_write_all, self.fd, data, abandon_on_cancel=True)


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
    team is done.  The ``spawned``/``exited``/``mail``/``stopping`` methods
    never block and may be called from any task.
    """

    def __init__(self, logs: Path, run: int, *, terminal: Terminal | None, colour: bool = False) -> None:
        self.logs = logs
        self.run_number = run
        self.terminal = terminal
        self.renderer = Renderer(colour=colour)
        self.journal = journal_path(logs, run)
        self._journal_fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._tails: dict[str, LogTail] = {}
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
        if self.terminal is not None:
            self._tails[principal] = LogTail(log)

    def exited(self, outcome: Outcome) -> None:
        principal = f"{outcome.agent}:{outcome.session}"
        tail = self._tails.pop(principal, None)
        if tail is not None:
            for line in tail.drain():
                self._show_output(principal, line)
            tail.close()
        if outcome.failed:
            self.failed += 1
        self._note("exit", outcome.describe(), principal=principal, failed=outcome.failed)

    def mail(self, sender: str, message_id: int, thread: str, subject: str | None, body: str) -> None:
        """Mail reached the operator's inbox."""
        first = subject or next((line for line in body.splitlines() if line.strip()), "")
        if len(first) > 120:
            first = first[:119] + "\u2026"
        self._note("mail", f"mail to the operator, message {message_id} (thread {thread}): {first}  [conclave msg inbox]", principal=sender)

    def git(self, kind: str, text: str, *, principal: str | None = None) -> None:
        """Something about git the person should see now: a refused bring-in, commits an agent left."""
        self._note(f"git_{kind}", text, principal=principal, failed=kind == "refused")

    def share_reached(self, principal: str, limit: int | None) -> None:
        """An agent reached its share of processes: its forks now fail inside its box, nobody else's."""
        of = f" of {limit} processes" if limit else ""
        self._note(
            "share",
            f"reached its share{of} (max_processes in the team file): its further forks fail; the broker, other agents and you keep theirs",
            principal=principal,
            failed=True,
        )

    def note(self, kind: str, text: str) -> None:
        """A line of the broker's own (what an earlier broker left, ...)."""
        self._note(kind, text)

    def stopping(self, reason: str, agents: int, grace: float) -> None:
        """The run was told to stop (a signal, or the operator's ``conclave stop``)."""
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

    async def finish(self, stopped_by: str | None, *, exit_code: int | None = None, flush_timeout: float = 10.0) -> None:
        """The team is done: show what is left of every log, say how it ended, flush the terminal."""
        for principal, tail in list(self._tails.items()):
            for line in tail.drain():
                self._show_output(principal, line)
            tail.close()
        self._tails.clear()
        failed = f"; {self.failed} failed" if self.failed else ""
        how = f"stopped by {stopped_by}{' (the terminal closed)' if stopped_by == 'SIGHUP' else ''}" if stopped_by else "every agent has exited"
        code = f"; exit code {exit_code}" if exit_code is not None else ""
        self._note("end", f"run {self.run_number} ended: {how}{failed}{code}", failed=bool(self.failed))
        fd, self._journal_fd = self._journal_fd, -1
        os.close(fd)
        if self.terminal is not None:
            self.terminal.close()
            with trio.move_on_after(flush_timeout):
                await self._terminal_done.wait()

    def close(self) -> None:
        """Release the journal (``finish`` does it too; this is for a run that ended in an error)."""
        for tail in self._tails.values():
            tail.close()
        self._tails.clear()
        if self._journal_fd >= 0:
            fd, self._journal_fd = self._journal_fd, -1
            os.close(fd)

    # -- its own tasks ------------------------------------------------------------------

    async def run(self, core: BrokerCore, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tail the logs onto the terminal and watch the lock table's wait line."""
        async with trio.open_nursery() as nursery:
            if self.terminal is not None:
                nursery.start_soon(self._write_terminal)
                nursery.start_soon(self._tail_logs)
            nursery.start_soon(self._watch_waits, core)
            task_status.started()

    async def _write_terminal(self) -> None:
        assert self.terminal is not None
        try:
            await self.terminal.run(self.renderer)
        finally:
            self._terminal_done.set()

    async def _tail_logs(self) -> None:
        while True:
            await trio.sleep(TICK)
            for principal, tail in list(self._tails.items()):
                lines = tail.read(limit=READ_PER_TICK)
                if lines:
                    for line in lines:
                        self._show_output(principal, line)
                    # Requests waiting meanwhile go first: the view works in small steps.
                    await trio.lowlevel.checkpoint()

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
                self._note(
                    "lock_wait",
                    f"waiting {waited:.0f} s for {what} ({w['mode']}), #{w['position']} in line  [conclave lock list names the holders]",
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
            try:
                os.write(self._journal_fd, notice.to_line())
            except OSError:
                pass  # a full disk must not stop the run; the event log has the facts
        if self.terminal is not None:
            self.terminal.put(self.renderer.notice(notice))

    def _show_output(self, principal: str, line: str) -> None:
        assert self.terminal is not None
        if self.terminal.full:
            self.terminal.dropped += 1
        else:
            self.terminal.put(self.renderer.output(principal, line))

