"""A run's record on disk, and how it reads on a terminal.

Two kinds of file under ``<state>/logs/`` make up what ``conclave run``
shows and ``conclave logs`` reads back:

* ``<agent>-<session>.log`` -- everything one principal's process wrote to
  stdout and stderr, byte for byte.  The process writes it directly (the
  broker is not in that path), so the log is complete whatever happens to
  the broker or to the terminal watching it.  A child ``alice/kid`` writes
  ``alice__kid-<session>.log``.
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


@final
@attrs.frozen
class Notice:
    """One line of the run journal: something the broker saw happen.

    ``kind`` is one of ``run``, ``spawn``, ``exit``, ``lock_wait``,
    ``lock_waited``, ``mail``, ``git_refused``, ``git_left``, ``git_index``,
    ``stopping``, ``dropped``, ``end``;
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

    def output(self, principal: str, text: str) -> str:
        """One line a principal printed, shown literally."""
        if len(text) > MAX_SHOWN:
            text = text[:MAX_SHOWN] + f"... ({len(text) - MAX_SHOWN} more characters in the log)"
        return self._prefix(principal, "|") + visible(text) + "\n"

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


class LogTail:
    """Reads the lines a process appends to its log, from where the last read stopped.

    Reading never blocks (it is a regular file) and never changes the file.
    A partial last line waits for its newline until :meth:`drain`.
    """

    def __init__(self, path: Path, *, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""
        self._fd: int | None = None
        self._open()

    def _open(self) -> bool:
        self._fd = open_log(self.path)
        return self._fd is not None

    def read(self, *, limit: int = 64 * CHUNK) -> list[str]:
        """Complete lines appended since the last read (at most about ``limit`` bytes' worth)."""
        if self._fd is None and not self._open():
            return []
        assert self._fd is not None
        data = bytearray()
        while len(data) < limit:
            chunk = os.pread(self._fd, CHUNK, self.offset)
            if not chunk:
                break
            self.offset += len(chunk)
            data += chunk
        if not data:
            return []
        data = self._partial + data
        *lines, self._partial = bytes(data).split(b"\n")
        return [_decode(line) for line in lines]

    def drain(self) -> list[str]:
        """Everything left, the partial last line included."""
        lines = []
        while True:
            more = self.read()
            if not more:
                break
            lines += more
        if self._partial:
            lines.append(_decode(self._partial))
            self._partial = b""
        return lines

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
    and ``(principal, text)`` output lines.  A principal's remaining output
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

    def poll(self, *, final: bool = False) -> list[tuple[str, Notice | str]]:
        """What was written since the last poll; ``final`` also takes partial last lines."""
        out: list[tuple[str, Notice | str]] = []
        notices, self._offset = read_journal(self.journal, offset=self._offset)
        for n in notices:
            if n.principal is not None:
                self.seen.add(n.principal.rpartition(":")[0])
            wanted = n.principal is None or matches(n.principal, self.agent)
            if n.kind == "spawn" and n.principal and n.log and LOG_PATTERN.match(n.log) and wanted:
                self._tails[n.principal] = LogTail(self.logs / n.log)
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
