"""The chain's head, kept outside the database: what shows a log cut short.

A chain proves every link, but not that links are missing at the end:
delete the last N events and what is left is a perfectly good, shorter
chain.  So the store owner writes the head -- the last event's ``(seq,
hash)`` -- to this file (``StatePaths.chain_anchor``) at every commit that
moved it and at shutdown, and ``conclave memory verify`` holds the database
against it.

The record is written *before* the commit and names the head before the
batch as well as the head after it: a broker killed between the two leaves a
database at either, and both are accepted.  The file has two slots written
in turn, each MAC'd with the chain key, so a torn write leaves the other
slot good and a slot edited without the key is refused.  One ``pwrite`` per
batch, on a file kept open: it survives the broker being killed (it is in the
kernel's cache).  The ``fdatasync`` that makes it survive a power failure runs
on a thread of its own, at most every 50 ms (``store.owner``): syncing after
every batch halved serial commit throughput.  So a power failure can cost the
anchor its last 50 ms -- and the database, which commits with
``synchronous=NORMAL``, its commits since the last checkpoint; verify then
reports a mismatch that the power failure made, and says it may have.

What it cannot show: someone who holds the key (a process running as the
user outside every sandbox can read it) can rewrite this file too; someone
who kept an old copy of the database *and* this file can roll both back to
it.  A head a person noted elsewhere (``verify --expect-head``) catches both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Final, final

import attrs

from store.chainkey import ChainKey
from store.events import Head

SLOT: Final = 512
VERSION: Final = 1
#: What each kind of record's MAC covers first, so one file's records never verify as the other's.
ANCHOR: Final = b"conclave anchor\0"
HIGH_WATER: Final = b"conclave high-water\0"


@final
@attrs.frozen
class AnchorRecord:
    """One slot: the head before the batch in flight, and the head it commits (equal when idle)."""

    before: Head
    head: Head
    key_id: str
    written: int  # which write this was; the newest valid slot wins

    def accepts(self, found: Head) -> bool:
        return found == self.head or found == self.before


@final
@attrs.frozen
class AnchorReading:
    """What the anchor file says: the newest good record, or why there is none."""

    record: AnchorRecord | None
    problem: str | None = None
    missing: bool = False


def _body(before: Head, head: Head, key_id: str, written: int) -> dict[str, object]:
    return {"v": VERSION, "before": [before.seq, before.hash], "head": [head.seq, head.hash], "key_id": key_id, "written": written}


def _mac(key: ChainKey, body: dict[str, object], tag: bytes) -> str:
    return key.mac(tag + json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


@final
class AnchorFile:
    """The writer's handle: an open file and the count of records written."""

    def __init__(self, path: Path, key: ChainKey, *, tag: bytes = ANCHOR) -> None:
        self.path = path
        self._key = key
        self._tag = tag
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        previous = read(path, key, tag=tag).record
        self._written = previous.written if previous is not None else 0
        #: The head of the newest record written (or found) here.
        self.head = previous.head if previous is not None else None

    def identity(self) -> tuple[int, int]:
        """The device and inode of the file this handle writes (what the path must still name)."""
        st = os.fstat(self._fd)
        return st.st_dev, st.st_ino

    def write(self, before: Head, head: Head, *, sync: bool = True) -> None:
        """Record ``head`` (and the head before it) in the slot not holding the newest record.

        With ``sync`` (the default) it is on disk when this returns; without,
        it is in the kernel's cache and :meth:`sync` makes it durable.
        """
        self._written += 1
        body = _body(before, head, self._key.id, self._written)
        line = json.dumps({**body, "mac": _mac(self._key, body, self._tag)}, separators=(",", ":")).encode()
        if len(line) >= SLOT:
            raise ValueError("an anchor record outgrew its slot")
        try:
            os.pwrite(self._fd, line.ljust(SLOT - 1) + b"\n", (self._written % 2) * SLOT)
        except OSError as exc:
            self._written -= 1  # the next write goes to the same slot, never over the newest good record
            exc.filename = exc.filename or str(self.path)
            raise
        self.head = head
        if sync:
            os.fdatasync(self._fd)

    def sync(self) -> None:
        """Make every record written so far durable (safe from another thread while the writer goes on)."""
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read(path: Path, key: ChainKey | None, *, tag: bytes = ANCHOR) -> AnchorReading:
    """The newest record in ``path`` whose MAC holds under ``key`` (``tag``: which kind of record)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return AnchorReading(None, f"the anchor file {path} is missing", missing=True)
    except OSError as exc:
        return AnchorReading(None, f"cannot read the anchor file {path}: {exc.strerror}")
    if key is None:
        return AnchorReading(None, "the anchor cannot be checked without the chain key")
    good: list[AnchorRecord] = []
    foreign: set[str] = set()
    for offset in (0, SLOT):
        chunk = data[offset : offset + SLOT].strip()
        if not chunk:
            continue
        try:
            raw = json.loads(chunk)
            body = {k: raw[k] for k in ("v", "before", "head", "key_id", "written")}
            mac = raw["mac"]
        except (ValueError, KeyError, TypeError):
            continue
        if body["key_id"] != key.id:
            foreign.add(str(body["key_id"]))
            continue
        if mac != _mac(key, body, tag):
            continue
        try:
            good.append(AnchorRecord(Head(*body["before"]), Head(*body["head"]), body["key_id"], int(body["written"])))
        except TypeError:
            continue
    if good:
        return AnchorReading(max(good, key=lambda r: r.written))
    if foreign:
        return AnchorReading(None, f"the anchor file was written under key {', '.join(sorted(foreign))}, not the chain key {key.id}")
    if not data.strip():
        return AnchorReading(None, f"the anchor file {path} is empty")
    return AnchorReading(None, f"the anchor file {path} fails its MAC: it was edited without the chain key")


def compare(reading: AnchorReading, found: Head) -> str | None:
    """Why the database's head ``found`` does not agree with the anchor; None when it does."""
    if reading.record is None:
        return reading.problem
    record = reading.record
    if record.accepts(found):
        return None
    anchored = record.head
    for recorded in (anchored, record.before):
        if found.seq == recorded.seq:
            return (f"event {found.seq} is not the event the anchor recorded (hash {found.hash[:16]}..., anchored {recorded.hash[:16]}...): "
                    "the end of the log was replaced")
    if found.seq < record.before.seq:
        return (f"the event log ends at event {found.seq}, but the anchor recorded event {anchored.seq}: "
                f"the last {anchored.seq - found.seq} event(s) were cut (or lost to a power failure)")
    if found.seq > anchored.seq:
        return (f"the event log runs to event {found.seq}, past the anchored head (event {anchored.seq}): "
                f"{found.seq - anchored.seq} event(s) were appended behind the broker's back (or the anchor's last writes were lost to a power failure)")
    return (f"the event log ends at event {found.seq}, between the heads the anchor recorded ({record.before.seq} and {anchored.seq}), "
            "and at neither: the log was cut and rewritten")


def locate(reading: AnchorReading, hash_at: Callable[[int], str | None], last: Head) -> tuple[Head | None, str | None]:
    """On a log several brokers append to: where this broker's anchored head is in it, or why it is not.

    Other brokers go on appending while this one is away, so the log may run
    past the anchored head; what must hold is that the head is still *in*
    the log (the event at its seq, with its hash), or the head before the
    batch that was in flight.  ``hash_at(seq)`` reads one event's hash;
    ``last`` is the log's last event.  Returns the head found (None when
    neither is there) and the problem (None when one is).
    """
    record = reading.record
    if record is None:
        return None, reading.problem
    for recorded in (record.head, record.before):
        if recorded.seq == 0 or hash_at(recorded.seq) == recorded.hash:
            return recorded, None
    if last.seq < record.before.seq:
        return None, (f"the event log ends at event {last.seq}, but this broker anchored event {record.head.seq}: "
                      f"the last {record.head.seq - last.seq} event(s) were cut")
    return None, (f"event {record.head.seq} is not the event this broker anchored ({record.head.hash[:16]}...): "
                  "the log was rewritten")
