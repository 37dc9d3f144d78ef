"""A run's record on disk, and how it reads on a terminal.

Two kinds of file under ``<state>/logs/`` make up what ``conclave run``
shows and ``conclave logs`` reads back:

* ``<agent>-<session>.log`` -- everything one principal's process wrote to
  stdout and stderr, byte for byte (for Claude Code and Codex, the readable
  lines made of their structured stream).  The broker reads the process's
  pipes and writes the log (``broker.capture``: the agent holds no
  descriptor into it), before anything is shown, so the log is complete
  whatever happens to the terminal watching it -- up to its cap
  (``log_cap``, 64 MiB): past it the log goes on in ``<name>.1``,
  ``<name>.2``, ..., the first segment and the newest are kept, and what
  was dropped between them is counted, reported and marked in place.  A
  child ``alice/kid`` writes ``alice__kid-<session>.log``.
* ``run-<N>.jsonl`` -- the run's journal: one JSON object per line for each
  thing the broker saw happen (a spawn, an exit with its status in words, a
  restart, a lock wait that lasts, mail to the operator, the shutdown).
  ``N`` counts the broker's starts on this state directory (``conclave
  agents --run N`` uses the same numbers).

Both are shown the same way everywhere (:class:`Renderer`): a principal's
output line is ``alice:1a2b3c4d5e6f | text`` with the prefix in a colour
chosen from the agent's name (the same colour in every run and in ``conclave
logs``), and a journal line about it is ``alice:1a2b3c4d5e6f > exited 0``.
An agent writes only after the ``|`` of its own prefix, so no output line
can pass for one of the broker's.  Control characters an agent prints are
spelled out (:func:`broker.literal.visible`); the log keeps the bytes.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zlib
from pathlib import Path
from typing import Final, Iterable, final

import attrs

from broker.literal import visible

#: A line longer than this is cut on the terminal (the log keeps all of it).
MAX_SHOWN: Final = 4000
#: A reader never holds more than this of one line: a longer one comes out cut, marked, and the
#: lines after it follow (the log keeps all of it).
VIEW_LINE: Final = 1 << 16
#: A log past its first segment goes on in ``<name>.1``, ``<name>.2``, ... (broker.capture).
SEGMENT_PATTERN: Final = re.compile(r"^(?P<base>.+\.log)(?:\.(?P<index>[1-9][0-9]*))?$")
#: Bytes read from a log at a time.
CHUNK: Final = 1 << 16
JOURNAL_PATTERN: Final = re.compile(r"^run-(\d+)\.jsonl$")
#: A principal's log file name (no directory part: a journal line cannot point elsewhere).
LOG_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*-[0-9a-f]+\.log$")
BROKER_PREFIX: Final = "conclave"

# Colours for agents' prefixes (no red: that is for failures).
_PALETTE: Final = ("36", "33", "32", "35", "34", "96", "93", "92", "95", "94")
_RESET: Final = "\x1b[0m"
_BOLD: Final = "\x1b[1m"
_RED: Final = "\x1b[31m"


def journal_path(logs: Path, run: int) -> Path:
    return logs / f"run-{run}.jsonl"


def journals(logs: Path) -> dict[int, Path]:
    """Every run journal in ``logs``, by run number."""
    try:
        names = os.listdir(logs)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        m = JOURNAL_PATTERN.match(name)
        if m:
            found[int(m.group(1))] = logs / name
    return found


def log_name(agent: str, session: str) -> str:
    """The file name of a principal's log (``/`` in a child's name becomes ``__``)."""
    return f"{agent.replace('/', '__')}-{session}.log"


def segment_path(logs: Path, name: str, index: int) -> Path:
    """Segment ``index`` of the log named ``name`` (``alice-1a2b.log``, ``alice-1a2b.log.1``, ...)."""
    return logs / (name if index == 0 else f"{name}.{index}")


def segments(logs: Path, name: str) -> list[Path]:
    """The segments of a log that exist, oldest first."""
    try:
        entries = os.listdir(logs)
    except OSError:
        return []
    found = []
    for entry in entries:
        m = SEGMENT_PATTERN.match(entry)
        if m and m.group("base") == name:
            found.append((int(m.group("index") or 0), logs / entry))
    return [path for _, path in sorted(found)]


@final
class LineSplitter:
    """Bytes into lines, never holding more than ``limit`` bytes of one line.

    A longer line comes out cut at ``limit``, with ``cut=True``; the rest of
    it, up to its newline, is skipped (the log has it).
    """

    def __init__(self, limit: int = VIEW_LINE) -> None:
        self.limit = limit
        self._partial = b""
        self._skipping = False

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        out: list[tuple[bytes, bool]] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                out.append((self._partial + data[start:end], False))
            self._partial = b""
            start = end + 1
        if not self._skipping:
            self._partial += data[start:]
            if len(self._partial) > self.limit:
                out.append((self._partial[: self.limit], True))
                self._partial = b""
                self._skipping = True
        return out

    def flush(self) -> list[tuple[bytes, bool]]:
        """The unfinished last line (at the end of the output)."""
        rest, self._partial, self._skipping = self._partial, b"", False
        return [(rest, False)] if rest else []



@final
@attrs.frozen
class Notice:
    """One line of the run journal: something the broker saw happen.

    ``kind`` is one of ``run``, ``spawn``, ``exit``, ``lock_wait``,
    ``lock_waited``, ``mail``, ``stopping``, ``dropped``, ``end``;
    ``principal`` the agent it is about (None: the run itself); ``log`` the
    principal's log file name (on ``spawn``); ``failed`` marks an exit that
    counts against the run.
    """

    at: str
    kind: str
    text: str
    principal: str | None = None
    log: str | None = None
    failed: bool = False

    def to_line(self) -> bytes:
        raw = {k: v for k, v in attrs.asdict(self).items() if v not in (None, False)}
        return (json.dumps(raw, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes | str) -> Notice | None:
        """The notice on one journal line, or None for a line that is not one (a torn last line)."""
        try:
            raw = json.loads(line)
            return cls(
                at=str(raw["at"]),
                kind=str(raw["kind"]),
                text=str(raw["text"]),
                principal=raw.get("principal"),
                log=raw.get("log"),
                failed=bool(raw.get("failed", False)),
            )
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def agent(self) -> str | None:
        return None if self.principal is None else self.principal.rpartition(":")[0]


def colour_of(name: str) -> str:
    """The ANSI colour of an agent's prefix: from its name, so it is the same in every run and view."""
    return _PALETTE[zlib.crc32(name.encode()) % len(_PALETTE)]


@final
class Renderer:
    """Turns output lines and notices into terminal lines, prefixes aligned and (optionally) coloured."""

    def __init__(self, *, colour: bool) -> None:
        self.colour = colour
        self._width = len(BROKER_PREFIX)

    def reserve(self, names: Iterable[str]) -> None:
        """Align prefixes for these agents from the first line on (a session adds 13 characters)."""
        self._width = max([self._width, *(len(n) + 13 for n in names)])

    def _prefix(self, who: str, mark: str) -> str:
        self._width = max(self._width, len(who))
        padded = who.ljust(self._width)
        if not self.colour:
            return f"{padded} {mark} "
        code = _BOLD if who == BROKER_PREFIX else f"\x1b[{colour_of(who.rpartition(':')[0])}m"
        return f"{code}{padded} {mark}{_RESET} "

    def output(self, principal: str, text: str, *, cut: bool = False) -> str:
        """One line a principal printed, shown literally; ``cut``: the line went on (the log has the rest)."""
        if len(text) > MAX_SHOWN:
            more = "more than " if cut else ""
            text = visible(text[:MAX_SHOWN]) + f"... ({more}{len(text) - MAX_SHOWN} more characters in the log)"
        else:
            text = visible(text) + ("... (the line goes on in the log)" if cut else "")
        return self._prefix(principal, "|") + text + "\n"

    def notice(self, notice: Notice) -> str:
        text = visible(notice.text)
        if notice.failed and self.colour:
            text = f"{_RED}{text}{_RESET}"
        return self._prefix(notice.principal or BROKER_PREFIX, ">") + text + "\n"


@final
def open_log(path: Path) -> int | None:
    """A descriptor for reading an agent's log, or None: never through a symlink, never anything but a
    regular file (a log replaced by a link to a key, or by a device, is not read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


@final
@attrs.frozen
class Line:
    """One line of an agent's output as read back; ``cut``: it went on past :data:`VIEW_LINE` (the log has the rest)."""

    text: str
    cut: bool = False


class LogTail:
    """Reads the lines the broker appends to one principal's log, from where the last read stopped,
    across its segments (``<name>``, ``<name>.1``, ...; a segment dropped past the cap is skipped).

    Reading never blocks (they are regular files) and never changes them.  A
    partial last line waits for its newline until :meth:`drain`; a line
    longer than :data:`VIEW_LINE` comes out cut, and the lines after it follow.
    """

    def __init__(self, logs: Path, name: str) -> None:
        self.logs = logs
        self.name = name
        self.index = 0
        self.offset = 0
        self._splitter = LineSplitter(VIEW_LINE)
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return segment_path(self.logs, self.name, self.index)

    def read(self, *, limit: int = 64 * CHUNK) -> list[Line]:
        """Complete lines appended since the last read (about ``limit`` bytes' worth at most)."""
        out: list[Line] = []
        budget = limit
        while budget > 0:
            if self._fd is None:
                self._fd = open_log(self.path)
                if self._fd is None:
                    if not self._skip_to_next():
                        break
                    continue
            chunk = os.pread(self._fd, CHUNK, self.offset)
            if chunk:
                self.offset += len(chunk)
                budget -= len(chunk)
                out += [Line(_decode(line), cut) for line, cut in self._splitter.feed(chunk)]
                continue
            if not self._skip_to_next():
                break
        return out

    def drain(self) -> list[Line]:
        """Everything left, the partial last line included."""
        lines: list[Line] = []
        while True:
            more = self.read()
            if not more and not self._has_more():
                break
            lines += more
        lines += [Line(_decode(line), cut) for line, cut in self._splitter.flush()]
        return lines

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _has_more(self) -> bool:
        if self._fd is None:
            return False
        try:
            return os.fstat(self._fd).st_size > self.offset
        except OSError:
            return False

    def _skip_to_next(self) -> bool:
        """At the end of this segment: go on to the next one that exists, if the writer has started one."""
        if segment_path(self.logs, self.name, self.index + 1).exists():
            following = [self.index + 1]
        elif self._fd is not None and not self._dropped():
            return False  # the writer is still on this segment
        else:  # this one (or the next ones) went past the cap: the next that is left
            following = [i for i in (_segment_index(p) for p in segments(self.logs, self.name)) if i > self.index]
        if not following:
            return False
        self.close()
        self.index, self.offset = min(following), 0
        return True


    def _dropped(self) -> bool:
        try:
            return self._fd is not None and os.fstat(self._fd).st_nlink == 0
        except OSError:
            return True


def _segment_index(path: Path) -> int:
    m = SEGMENT_PATTERN.match(path.name)
    return int(m.group("index") or 0) if m else -1


def _decode(raw: bytes) -> str:
    return raw.rstrip(b"\r").decode("utf-8", errors="replace")


def read_journal(path: Path, *, offset: int = 0) -> tuple[list[Notice], int]:
    """The complete notices in a journal from ``offset``, and the offset after the last one."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1  # a line still being written waits for its newline
    notices = [n for line in data[:end].splitlines() if (n := Notice.from_line(line)) is not None]
    return notices, offset + end


def matches(principal: str | None, agent: str | None) -> bool:
    """Whether a line about ``principal`` belongs to ``agent``'s view: the agent and its
    children (``alice`` takes ``alice/kid``), or exactly one principal (``alice:1a2b...``)."""
    if agent is None:
        return True
    if principal is None:
        return False
    if ":" in agent:
        return principal == agent
    name = principal.rpartition(":")[0]
    return name == agent or name.startswith(agent + "/")


@final
class RunReader:
    """Reads a run back from its journal and logs, from another process (``conclave logs``).

    Each :meth:`poll` returns what is new: ``("notice", Notice)`` entries
    and ``(principal, Line)`` output lines.  A principal's remaining output
    comes just before its exit notice; the files carry no timestamps, so
    that is where its output is known to end.  ``agent`` keeps only that
    agent's lines (and its children's) and the run's own notices.
    """

    def __init__(self, logs: Path, run: int, *, agent: str | None = None) -> None:
        self.logs = logs
        self.journal = journal_path(logs, run)
        self.agent = agent
        self.ended = False
        self.seen: set[str] = set()  # agent names the journal mentions
        self._offset = 0
        self._tails: dict[str, LogTail] = {}

    def poll(self, *, final: bool = False) -> list[tuple[str, Notice | Line]]:
        """What was written since the last poll; ``final`` also takes partial last lines."""
        out: list[tuple[str, Notice | Line]] = []
        notices, self._offset = read_journal(self.journal, offset=self._offset)
        for n in notices:
            if n.principal is not None:
                self.seen.add(n.principal.rpartition(":")[0])
            wanted = n.principal is None or matches(n.principal, self.agent)
            if n.kind == "spawn" and n.principal and n.log and LOG_PATTERN.match(n.log) and wanted:
                self._tails[n.principal] = LogTail(self.logs, n.log)
            elif n.kind == "exit" and n.principal in self._tails:
                tail = self._tails.pop(n.principal)
                out += [(n.principal, line) for line in tail.drain()]
                tail.close()
            elif n.kind == "end":
                self.ended = True
            if wanted:
                out.append(("notice", n))
        for principal, tail in self._tails.items():
            out += [(principal, line) for line in (tail.drain() if final or self.ended else tail.read())]
        return out

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()
        self._tails.clear()
