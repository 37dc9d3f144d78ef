"""An agent's output: read by the broker through pipes, written by the broker into capped logs.

An agent never holds a descriptor into ``<state>/logs``.  Its stdout and
stderr are pipes whose reading ends only the broker holds; the broker writes
what arrives to the principal's log and hands it, line by line, to the run
view.  So an agent cannot truncate its log, seek back and write a
false history, or fill the file system through it: the worst it can do is
print a lot, and what passes its cap is counted and reported.

* :class:`OutputLog` -- one principal's log on disk: segments
  ``<name>.log``, ``<name>.log.1``, ... of a quarter of the cap each.  The
  first segment (how the agent started) and the newest ones are kept within
  the cap (``log_cap``, 64 MiB by default); a segment in between is dropped
  whole, its bytes and lines counted, an event recorded, and a marker line
  left where it was.  A write the file system refuses (full, over quota) is
  counted as lost, reported once, and retried with the next output: the
  log recovers by itself when space returns, with a marker saying how much
  was lost.  Nothing here raises into the broker.
* :class:`Capture` -- one principal's pipes: each chunk to its log, each line
  (``broker.runlog.LineSplitter``: never more than 64 KiB of one) to the run
  view, and a structured stream through its decoder first.

The supervisor makes one :class:`Capture` (with its :class:`OutputLog`) per
principal; the capture runs :func:`pump` on each of its pipes.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Final, Protocol, final

import attrs
import trio

from broker.limits import DEFAULT_LOG_CAP, MIN_LOG_CAP
from broker.runlog import VIEW_LINE, LineSplitter, segment_path

if TYPE_CHECKING:
    from broker.limits import Usage
    from broker.spec import OutputDecoder

MIB: Final = 1 << 20
#: A log is written in this many segments of a quarter of the cap each.
SEGMENTS: Final = 4
#: Bytes read from a pipe at a time.
READ_SIZE: Final = 1 << 16
#: Seconds a pump lets a pipe fill after a chunk smaller than GATHER_BELOW bytes (a line is shown
#: at most this much later).
GATHER: Final = 0.05
GATHER_BELOW: Final = 4096


@final
@attrs.frozen
class LogReport:
    """Something about a log the operator must hear of: ``kind`` is ``dropped`` (past the cap),
    ``disk_full`` (a write was refused) or ``recovered`` (writes go through again)."""

    kind: str
    text: str
    payload: dict[str, Any]


@final
class OutputLog:
    """One principal's output on disk, capped, written only by the broker.

    Call :meth:`write` with whatever the agent printed (as the broker will
    show it); it returns what the operator must be told.  :meth:`close` at
    the principal's end.  ``figures()`` says how much was written, dropped
    past the cap and lost to a refused write.
    """

    def __init__(self, logs: Path, name: str, *, cap: int = DEFAULT_LOG_CAP) -> None:
        self.logs = logs
        self.name = name
        self.cap = max(cap, MIN_LOG_CAP)
        self.segment_size = self.cap // SEGMENTS
        self.path = segment_path(logs, name, 0)
        self.written = 0
        self.dropped_bytes = 0
        self.dropped_lines = 0
        self.lost_bytes = 0
        self.lost_lines = 0
        #: [index, bytes, lines, marker bytes, marker lines] of every segment on disk, oldest first;
        #: the last is being written.  Markers are the broker's own lines, never counted as output.
        self._kept: list[list[int]] = [[0, 0, 0, 0, 0]]
        self._fd: int | None = None
        self._failing: str | None = None
        self._lost_since = (0, 0)  # bytes, lines lost in the current refusal
        self._dropped_unmarked = (0, 0)
        self._at_line_start = True
        self._partial_written = 0
        self._writing_data = False
        # Made at once, empty if the agent never prints: a run's agents are listed from their logs when
        # no broker is running (the dashboard, `conclave logs`).  A refusal here is met again, and
        # reported, at the first write.
        try:
            self._fd = self._open()
        except OSError:
            self._fd = None

    def _open(self) -> int:
        return os.open(segment_path(self.logs, self.name, self._kept[-1][0]), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)

    def write(self, data: bytes) -> list[LogReport]:
        """Append ``data``; never raises.  What the operator must hear of is returned."""
        if not data:
            return []
        reports: list[LogReport] = []
        current = self._kept[-1]
        if current[1] > 0 and current[1] + len(data) > self.segment_size:
            reports += self._rotate()
        marker = self._marker()
        self._writing_data, self._partial_written = False, 0
        try:
            if self._fd is None:
                self._fd = self._open()
            if marker:
                self._write_all(marker)
                self._kept[-1][3] += len(marker)
                self._kept[-1][4] += marker.count(b"\n")
                self._dropped_unmarked = (0, 0)
            self._writing_data = True
            self._write_all(data)
        except OSError as exc:
            return reports + self._refused(exc, data)
        self.written += len(data)
        if self._failing is not None:
            reports.append(self._recovered())
        return reports

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def figures(self) -> dict[str, int]:
        """Bytes written; bytes and lines dropped past the cap; bytes and lines lost to refused writes."""
        return {
            "bytes": self.written,
            "dropped_bytes": self.dropped_bytes,
            "dropped_lines": self.dropped_lines,
            "lost_bytes": self.lost_bytes,
            "lost_lines": self.lost_lines,
        }

    @property
    def failing(self) -> str | None:
        """Why writes are refused right now (None while they go through)."""
        return self._failing

    # -- inside -------------------------------------------------------------------------

    def _write_all(self, data: bytes) -> None:
        """Write all of ``data``; on a refusal, ``_partial_written`` says how much went through."""
        assert self._fd is not None
        current = self._kept[-1]
        at = 0
        self._partial_written = 0
        while at < len(data):
            done = os.write(self._fd, data[at:] if at else data)
            current[1] += done
            current[2] += data.count(b"\n", at, at + done)
            at += done
            self._partial_written = at
            self._at_line_start = data[at - 1 : at] == b"\n"

    def _marker(self) -> bytes:
        """The line that says, in the log itself, what is missing just before it."""
        parts = []
        if self._dropped_unmarked[0]:
            # Older markers may have gone with the segments after them: this one says it all.
            parts.append(
                f"[conclave: {self.dropped_bytes} bytes ({self.dropped_lines} lines) of this agent's output were dropped before "
                f"this line to keep its log within log_cap = {_size(self.cap)}; the first and the latest output are kept]"
            )
        lost_bytes, lost_lines = self._lost_since
        if self._failing is not None and lost_bytes:
            parts.append(f"[conclave: {lost_bytes} bytes ({lost_lines} lines) of output were lost here: {self._failing}]")
        if not parts:
            return b""
        lead = b"" if self._at_line_start else b"\n"
        return lead + "\n".join(parts).encode() + b"\n"

    def _rotate(self) -> list[LogReport]:
        self.close()  # a line cut by the rotation goes on in the next segment (readers follow it)
        reports = []
        # Keep the first segment and the newest; drop the oldest in between until a new one fits.
        while len(self._kept) > 1 and sum(s[1] for s in self._kept) + self.segment_size > self.cap:
            index, size, lines, marker_size, marker_lines = self._kept.pop(1)
            try:
                os.unlink(segment_path(self.logs, self.name, index))
            except FileNotFoundError:
                pass
            except OSError:
                continue  # cannot be removed: it stays, and is not counted as dropped
            size, lines = size - marker_size, lines - marker_lines
            self.dropped_bytes += size
            self.dropped_lines += lines
            bytes_, lines_ = self._dropped_unmarked
            self._dropped_unmarked = (bytes_ + size, lines_ + lines)
            reports.append(LogReport(
                "dropped",
                f"output past log_cap = {_size(self.cap)}: {size} bytes ({lines} lines) dropped from the middle of {self.name} "
                f"({self.dropped_bytes} bytes in all); the first and the latest output are kept",
                {"log": self.name, "bytes": size, "lines": lines, "total_bytes": self.dropped_bytes, "total_lines": self.dropped_lines, "cap": self.cap},
            ))  # fmt: skip
        self._kept.append([self._kept[-1][0] + 1, 0, 0, 0, 0])
        return reports

    def _refused(self, exc: OSError, data: bytes) -> list[LogReport]:
        self.close()  # a fresh open with the next write: the file may have gone with the space
        written = self._partial_written if self._writing_data else 0
        self.written += written
        lost, lines = len(data) - written, data.count(b"\n", written)
        self.lost_bytes += lost
        self.lost_lines += lines
        bytes_, lines_ = self._lost_since
        self._lost_since = (bytes_ + lost, lines_ + lines)
        if self._failing is not None:
            return []
        self._failing = _why(exc, self.logs)
        return [LogReport(
            "disk_full",
            f"cannot write {self.name}: {self._failing}; its output is counted as lost until writes go through again "
            "(free space under the logs; conclave gc prunes old runs)",
            {"log": self.name, "error": self._failing, "errno": exc.errno},
        )]  # fmt: skip

    def _recovered(self) -> LogReport:
        lost_bytes, lost_lines = self._lost_since
        report = LogReport(
            "recovered",
            f"{self.name} is written again; {lost_bytes} bytes ({lost_lines} lines) were lost while {self._failing}",
            {"log": self.name, "lost_bytes": lost_bytes, "lost_lines": lost_lines, "error": self._failing},
        )
        self._failing = None
        self._lost_since = (0, 0)
        return report


def _why(exc: OSError, where: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full under {where} ({exc.strerror})"
    return f"{exc.strerror or exc} under {where}"


def _size(n: int) -> str:
    if n % MIB == 0:
        return f"{n // MIB} MiB"
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} bytes"


async def pump(stream: trio.abc.ReceiveStream, take: Callable[[bytes], Awaitable[None]]) -> None:
    """Read ``stream`` to its end (or until it is closed under us), handing each chunk to ``take``.

    A small chunk (an agent printing line by line) is followed by :data:`GATHER` seconds' pause,
    so such an agent is read in a few chunks a second rather than a wake-up per line (what each
    wake-up costs the broker is its whole cost there); bulk output is read straight on.
    """
    try:
        while True:
            chunk = await stream.receive_some(READ_SIZE)
            if not chunk:
                return
            await take(chunk)
            if len(chunk) < GATHER_BELOW:
                await trio.sleep(GATHER)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        return


#: A line of a structured stream longer than this is not parsed (it is shown cut, marked).
STRUCTURED_LINE: Final = 16 * MIB
#: Seconds a pipe of an exited agent may stay open with nothing in it before it is closed under its pump.
DRAIN: Final = 3.0
#: Seconds the output of an exited agent may take to reach the log and the view in all.
GIVE_UP: Final = 120.0


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\r").decode("utf-8", errors="replace")


@final
class Capture:
    """One principal's output on its way from its pipes to its log, the run view and the meter.

    :meth:`start` runs one pump per pipe in the supervisor's nursery; they
    are shielded from the broker's shutdown so that what an agent printed
    last is still written.  :meth:`finish` (once the process and everything
    it left behind are gone) drains the pipes and closes them.
    ``on_output`` hears the trio time of each chunk (the idle timers).
    """

    def __init__(
        self,
        principal: str,
        log: OutputLog,
        *,
        view: RunViewLike | None,
        decoder: OutputDecoder | None,
        report: Callable[[LogReport], Awaitable[None]],
        on_usage: Callable[[Usage], Awaitable[None]],
        on_output: Callable[[float], None] = lambda now: None,
    ) -> None:
        self.principal = principal
        self.log = log
        self.view = view if view is not None and view.terminal is not None else None
        self.decoder = decoder
        self.report = report
        self.on_usage = on_usage
        self.on_output = on_output
        self.usage: Usage | None = None
        self._streams: list[trio.abc.ReceiveStream] = []
        #: Since when each pump has waited on its pipe (None while it is busy with what it read).
        self._reading: dict[trio.abc.ReceiveStream, float | None] = {}
        self._scopes: list[trio.CancelScope] = []
        self._open = 0
        self._done = trio.Event()

    def write(self, data: bytes) -> None:
        """The broker's own line in the log (a start that failed); nothing is reported."""
        self.log.write(data)

    def start(self, nursery: trio.Nursery, stdout: trio.abc.ReceiveStream | None, stderr: trio.abc.ReceiveStream | None) -> None:
        for stream, structured in ((stdout, self.decoder is not None), (stderr, False)):
            if stream is not None:
                self._open += 1
                self._streams.append(stream)
                scope = trio.CancelScope(shield=True)
                self._scopes.append(scope)
                nursery.start_soon(self._pump, stream, structured, scope)
        if not self._open:
            self._done.set()

    async def finish(self) -> dict[str, int]:
        """Let the pipes drain, close them, close the log; its figures.

        Everything that held a pipe open is dead by now, so each pipe ends
        once it is read: a pump that waits for the view (a file that is slow
        to take lines) is waited for.  A pipe that stays open :data:`DRAIN`
        seconds with nothing in it is closed under its pump; past
        :data:`GIVE_UP` seconds in all the pumps are stopped.
        """
        if not self._streams:  # never started (the program could not be run): nothing to drain
            self.log.close()
            return self.log.figures()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(GIVE_UP):
                while not self._done.is_set():
                    now = trio.current_time()
                    for stream, since in list(self._reading.items()):
                        if since is not None and now - since >= DRAIN:
                            await stream.aclose()
                    with trio.move_on_after(0.05):
                        await self._done.wait()
            for scope in self._scopes:
                scope.cancel()
            for stream in self._streams:
                await stream.aclose()
            await self._done.wait()
        self.log.close()
        return self.log.figures()

    async def _pump(self, stream: trio.abc.ReceiveStream, structured: bool, scope: trio.CancelScope) -> None:
        splitter = LineSplitter(STRUCTURED_LINE if structured else VIEW_LINE)
        reading = self._reading

        async def take(chunk: bytes) -> None:
            reading[stream] = None
            await self._take(chunk, splitter, structured)
            reading[stream] = trio.current_time()

        reading[stream] = trio.current_time()
        try:
            with scope:
                await pump(stream, take)
                reading.pop(stream, None)
                await self._lines(splitter.flush(), structured)
        except Exception:  # noqa: BLE001 -- a bug here must not end the broker; the log keeps what it got
            import logging

            logging.getLogger("conclave.broker").exception("reading %s's output failed", self.principal)
        finally:
            reading.pop(stream, None)
            self._open -= 1
            if not self._open:
                self._done.set()

    async def _take(self, chunk: bytes, splitter: LineSplitter, structured: bool) -> None:
        self.on_output(trio.current_time())
        if structured:
            await self._lines(splitter.feed(chunk), structured)
            return
        await self._write(chunk)  # the bytes exactly as printed
        if self.view is not None:
            for line, cut in splitter.feed(chunk):
                await self.view.output(self.principal, _text(line), cut=cut)

    async def _lines(self, lines: list[tuple[bytes, bool]], structured: bool) -> None:
        if not lines:
            return
        if not structured:  # the unfinished last line, at the end
            for line, cut in lines:
                if self.view is not None:
                    await self.view.output(self.principal, _text(line), cut=cut)
            return
        assert self.decoder is not None
        shown: list[str] = []
        for line, cut in lines:
            if cut:
                shown.append(f"[conclave: a line of more than {STRUCTURED_LINE // MIB} MiB was cut here] {_text(line[:VIEW_LINE])}")
            else:
                shown += self.decoder.feed(line)
        if shown:
            await self._write("".join(t + "\n" for t in shown).encode("utf-8", errors="replace"))
            if self.view is not None:
                for text in shown:
                    await self.view.output(self.principal, text)
        if self.decoder.usage != self.usage:
            self.usage = self.decoder.usage
            await self.on_usage(self.usage)

    async def _write(self, data: bytes) -> None:
        for report in self.log.write(data):
            try:
                await self.report(report)
            except Exception:  # noqa: BLE001 -- the store may be out of space too; the log keeps going
                import logging

                logging.getLogger("conclave.broker").exception("could not report %s for %s", report.kind, self.principal)


class RunViewLike(Protocol):
    """What :class:`Capture` needs of the run view (``broker.output.RunView``)."""

    terminal: Any

    async def output(self, principal: str, text: str, *, cut: bool = False) -> None: ...
