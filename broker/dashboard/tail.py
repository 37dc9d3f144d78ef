"""Agents' output, read from their log files as it grows.

The supervisor writes each agent's stdout and stderr to
``<state>/logs/<agent>-<session>.log`` (a child ``parent/child`` as
``parent__child``).  The dashboard reads those files directly -- it needs no
broker for them, so a finished run's output stays browsable.

Two owners, so no lock is needed between the reading thread and the UI:

* :class:`LogTailer` belongs to the thread that reads: it knows each file's
  offset and the unfinished last line, and :meth:`LogTailer.poll` returns
  only the lines that appeared since the last call.  It reads at most
  ``max_read`` bytes per file per poll; a file that grew faster than that is
  skipped ahead and the gap is said in the output.
* :class:`OutputBuffer` belongs to the UI: the last ``keep`` lines of each
  log, and a count of all lines seen.

Agent output is untrusted text (an agent's model or shell wrote it), so
every line is cleaned of terminal control sequences before a person's
terminal sees it: an agent must not be able to retitle the window, move the
cursor, or hide text in the operator's view.
"""

from __future__ import annotations

import os
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Final, Iterable, final

import attrs

from broker.literal import visible
from broker.capture import SEGMENTS
from broker.limits import MIN_LOG_CAP
from broker.runlog import open_log, segment_path, segments
from broker.terminal import printable

#: The broker's own log sits beside the agents'; it is shown too, under this key.
BROKER_LOG: Final = "broker.log"
MAX_LINE: Final = 2000
#: On first sight of a file, read at most this much of its end (its earlier lines are history).
FIRST_READ: Final = 256 * 1024

def clean(line: str) -> str:
    """One line without terminal control sequences, other invisible characters (a bidi override)
    spelled out, tabs expanded, at most ``MAX_LINE`` characters."""
    text = visible(printable(line).replace("\n", " "), keep_newlines=True).expandtabs(4)
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "\u2026"


@final
@attrs.frozen
class LogName:
    """Who a log file belongs to, read from its name."""

    key: str  # "agent:session", or "broker" for the broker's own log
    agent: str
    session: str | None

    @classmethod
    def parse(cls, path: Path) -> LogName | None:
        if path.name == BROKER_LOG:
            return cls("broker", "broker", None)
        if path.suffix != ".log":
            return None
        stem, dash, session = path.stem.rpartition("-")
        if not dash or not stem or not session:
            return None
        agent = stem.replace("__", "/")
        return cls(f"{agent}:{session}", agent, session)


@attrs.define
class _Follow:
    path: Path
    offset: int = 0
    partial: bytes = b""
    cut: bool = False  # reading starts mid-line: drop everything up to the next newline
    #: Which segment of the log is being read (past its cap a log goes on in ``<name>.1``, ...).
    segment: int = 0
    looked: float = 0.0


@final
class LogTailer:
    """Follows every log file in one directory; call :meth:`poll` from one thread only."""

    def __init__(self, logs: Path, *, max_read: int = 1 << 20) -> None:
        self.logs = logs
        self.max_read = max_read
        self._files: dict[str, _Follow] = {}
        self.names: dict[str, LogName] = {}
        #: When each file was last seen to change (UTC ISO time, as the store writes times).
        self.modified: dict[str, str] = {}

    def discover(self) -> list[LogName]:
        """Look for log files not yet followed; start each at its last ``FIRST_READ`` bytes."""
        try:
            entries = os.scandir(self.logs)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        with entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    continue
                name = LogName.parse(Path(entry.path))
                if name is None or name.key in self._files:
                    continue
                stat = entry.stat(follow_symlinks=False)
                start = max(0, stat.st_size - FIRST_READ)
                self._files[name.key] = _Follow(Path(entry.path), offset=start, cut=start > 0)
                self.names[name.key] = name
                self.modified[name.key] = _iso(stat.st_mtime)
                found.append(name)
        return found

    def path_of(self, key: str) -> Path | None:
        follow = self._files.get(key)
        return None if follow is None else follow.path

    def poll(self) -> dict[str, list[str]]:
        """Lines that appeared in each file since the last poll (finished lines only), cleaned."""
        self.discover()
        out: dict[str, list[str]] = {}
        for key, follow in self._files.items():
            lines = self._read(key, follow)
            if lines:
                out[key] = lines
        return out

    def count(self, key: str) -> tuple[int, str | None]:
        """How many finished lines the file holds from its start, and the last one (cleaned); ``(0, None)``
        for a file that is gone or is not a plain file.  Reads the whole file, a chunk at a time
        (``conclave dashboard --json`` reports every log's size in lines)."""
        follow = self._files.get(key)
        fd = None if follow is None else open_log(follow.path)
        if fd is None:
            return 0, None
        lines, offset, last, pending = 0, 0, b"", b""
        keep = MAX_LINE * 4  # a line is shown cut at MAX_LINE characters: its start is enough
        try:
            while chunk := os.pread(fd, 1 << 20, offset):
                offset += len(chunk)
                head, newline, rest = chunk.rpartition(b"\n")
                if not newline:
                    pending = (pending + chunk)[:keep]
                    continue
                lines += head.count(b"\n") + 1
                before, inner, after = head.rpartition(b"\n")
                last = after[:keep] if inner else (pending + head)[:keep]
                pending = rest[:keep]
        finally:
            os.close(fd)
        return lines, clean(last.decode("utf-8", errors="replace").rstrip("\r")) if lines else None

    def _read(self, key: str, follow: _Follow) -> list[str]:
        fd = open_log(follow.path)
        if fd is None:
            return []
        try:
            lines = self._read_from(fd, follow, key)
        finally:
            os.close(fd)
        if not lines:
            self._next_segment(follow)
        return lines

    def _next_segment(self, follow: _Follow) -> None:
        """Once a segment has stopped growing and the broker has started the next, follow the newest."""
        base = follow.path.name if follow.segment == 0 else follow.path.name.rsplit(".", 1)[0]
        if not segment_path(self.logs, base, follow.segment + 1).exists():
            # The next one is not there: either this segment is still being written, or the ones after
            # it went past the cap already.  Only a segment of a full one's size may be done: look at
            # the directory for those, once a second at most.
            now = time.monotonic()
            if follow.offset < MIN_LOG_CAP // SEGMENTS // 2 or now - follow.looked < 1.0:
                return
            follow.looked = now
        newest = segments(self.logs, base)[-1:]
        if newest and newest[0] != follow.path:
            follow.path, follow.offset, follow.cut = newest[0], 0, False
            follow.segment = int(newest[0].name.rsplit(".", 1)[1]) if newest[0].name != base else 0

    def _read_from(self, fd: int, follow: _Follow, key: str | None = None) -> list[str]:
        stat = os.fstat(fd)
        size = stat.st_size
        if key is not None and size != follow.offset:
            self.modified[key] = _iso(stat.st_mtime)
        if size < follow.offset:  # truncated or replaced: start again
            follow.offset, follow.partial, follow.cut = 0, b"", False
        if size == follow.offset:
            return []
        out: list[str] = []
        if size - follow.offset > self.max_read:
            out.append(f"[conclave dashboard: {size - self.max_read - follow.offset} bytes of output skipped to keep up]")
            follow.offset, follow.partial, follow.cut = size - self.max_read, b"", True
        data = os.pread(fd, size - follow.offset, follow.offset)
        follow.offset += len(data)
        *done, rest = (follow.partial + data).split(b"\n")
        if follow.cut:
            if not done:  # still inside the line we started in the middle of
                follow.partial = b""
                return out
            done, follow.cut = done[1:], False
        if len(rest) > MAX_LINE * 4:  # a line that never ends is shown in pieces
            done, rest = [*done, rest], b""
        follow.partial = rest
        out += [clean(raw.decode("utf-8", errors="replace").rstrip("\r")) for raw in done]
        return out


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="microseconds")


@final
class OutputBuffer:
    """The last ``keep`` lines of each log, and how many lines each has shown in all (the UI's)."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1 line, not {keep}")
        self.keep = keep
        self._lines: dict[str, deque[str]] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: str, lines: Iterable[str]) -> None:
        lines = list(lines)
        self._lines.setdefault(key, deque(maxlen=self.keep)).extend(lines)
        self.counts[key] = self.counts.get(key, 0) + len(lines)

    def lines(self, key: str) -> list[str]:
        return list(self._lines.get(key, ()))

    def view(self, key: str) -> deque[str]:
        """The live buffer of one log (the UI reads it in place; only :meth:`add` changes it)."""
        return self._lines.setdefault(key, deque(maxlen=self.keep))

    def last(self, key: str) -> str | None:
        held = self._lines.get(key)
        return held[-1] if held else None
