"""What ``conclave memory verify`` checks below the features: the chain, its key, its head.

* the key file: there, readable, a key, and not readable by others;
* the chain (:func:`store.events.verify_chain`): every link, keyed from the
  switch-over event on;
* the head: the database against the anchor file and against the head the
  store owner committed last (a log cut or appended to shows here, not in the
  chain);
* a head a person noted elsewhere (``--expect-head SEQ:HASH``);
* what the broker recorded about itself: a start that found the database
  disagreeing with its anchor (``store.anchor_mismatch``), and acknowledged
  events it could not write (``broker.error`` / ``event_lost``).

Each finding is a sentence naming what was found; the memory's own checks
(rows against their events) are added by ``memory.verify``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Final, final

import apsw
import attrs

from store import anchor, events
from store.chainkey import ChainKey, ChainKeyError, loose_mode
from store.events import Head

#: A noted head may give the hash in full or by its first this-many hex digits.
MIN_HASH_PREFIX: Final = 16
_EXPECT: Final = re.compile(r"^(\d+):([0-9a-f]+)$")


@final
@attrs.frozen
class Finding:
    problem: str
    event: int | None = None


@final
@attrs.frozen
class ExpectedHead:
    """A head a person kept outside the machine: ``SEQ:HASH`` (the hash may be a prefix)."""

    seq: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> ExpectedHead:
        """Raises ValueError naming what is wrong with ``text``."""
        match = _EXPECT.match(text.strip().lower())
        if match is None or int(match.group(1)) < 1:
            raise ValueError(f"--expect-head wants SEQ:HASH as `conclave memory verify` prints it (e.g. 1234:9f86d081884c7d65...), got {text!r}")
        if len(match.group(2)) < MIN_HASH_PREFIX or len(match.group(2)) > 64:
            raise ValueError(f"--expect-head: give the hash in full or at least its first {MIN_HASH_PREFIX} hex digits (got {len(match.group(2))})")
        return cls(int(match.group(1)), match.group(2))


@final
@attrs.frozen
class ChainFindings:
    """The chain-level half of a verify report."""

    walked: int
    head: Head
    findings: tuple[Finding, ...]
    facts: dict[str, Any]


def load_key(path: Path) -> tuple[ChainKey | None, list[Finding]]:
    """The chain key for verifying, and what is wrong with its file."""
    try:
        key = ChainKey.load(path)
    except ChainKeyError as exc:
        return None, [Finding(str(exc))]
    if key is None:
        return None, [Finding(f"the chain key {path} is missing: keyed events cannot be checked (restore it from your copy)")]
    mode = loose_mode(path)
    found = [Finding(f"the chain key {path} is readable or writable by others (mode {mode:o}); it should be 0600")] if mode is not None else []
    return key, found


def check_anchor(anchor_path: Path, key: ChainKey | None, committed: Head | None) -> tuple[list[Finding], anchor.AnchorReading]:
    """The anchor file against the head the store owner committed last (read it from the owner)."""
    reading = anchor.read(anchor_path, key)
    if committed is None:
        return [], reading
    problem = anchor.compare(reading, committed)
    return ([Finding(f"anchor: {problem}")] if problem else []), reading


def check_chain(
    conn: apsw.Connection,
    key: ChainKey | None,
    *,
    committed: Head | None,
    expect: ExpectedHead | None,
    feed: Callable[[events.Event], None] | None = None,
    wanted: frozenset[str] = frozenset(),
) -> ChainFindings:
    """Walk the chain on ``conn``; hold it against the owner's committed head and a head a person expects.

    ``feed`` gets every event of a kind in ``wanted`` whose hash holds, in
    order, during the same walk (the tables' projections).
    """
    report = events.verify_chain(conn, key, feed=feed, wanted=wanted)
    found: list[Finding] = []
    if not report.ok:
        found.append(Finding(report.reason or "the event chain is broken", report.first_bad))
    walked_head = events.head(conn)
    if committed is not None and committed.seq:
        at = events.hash_at(conn, committed.seq)
        if at is None:
            found.append(Finding(f"the event log ends at event {walked_head.seq}, but the broker committed up to event {committed.seq}: "
                                 f"{committed.seq - walked_head.seq} event(s) were cut behind its back", walked_head.seq + 1))
        elif at != committed.hash:
            found.append(Finding(f"event {committed.seq} is not the event the broker committed: the log was rewritten behind its back", committed.seq))
    facts: dict[str, Any] = {
        "keyed_from": report.keyed_from,
        "key_id": report.key_id,
        "unkeyed_events": (report.keyed_from - 1) if report.keyed_from else report.events,
    }
    if expect is not None:
        at = events.hash_at(conn, expect.seq)
        after = max(0, walked_head.seq - expect.seq)
        if at is None:
            found.append(Finding(f"the head you expected (event {expect.seq}) is not in the log, which ends at event {walked_head.seq}: "
                                 f"{expect.seq - walked_head.seq} event(s) were cut since you noted it", walked_head.seq + 1))
        elif not at.startswith(expect.hash):
            found.append(Finding(f"event {expect.seq} is not the head you expected (its hash is {at[:MIN_HASH_PREFIX]}..., you noted {expect.hash[:MIN_HASH_PREFIX]}...): "
                                 "the history up to it was rewritten", expect.seq))
        facts["expected_head"] = {"seq": expect.seq, "hash": expect.hash, "found": at is not None and at.startswith(expect.hash), "events_after": after}
    found += recorded_findings(conn)
    return ChainFindings(report.events, walked_head, tuple(found), facts)


def recorded_findings(conn: apsw.Connection) -> list[Finding]:
    """What brokers recorded about the log itself: starts that found it disagreeing with its anchor, events lost."""
    found = []
    rows = conn.execute(
        "SELECT seq, kind, payload FROM events WHERE kind = 'store.anchor_mismatch' "
        "OR (kind = 'broker.error' AND subject = 'event_lost') ORDER BY seq"
    )
    for seq, kind, payload in rows:
        body = _json(payload)
        if kind == "store.anchor_mismatch":
            found.append(Finding(f"event {seq}: when the store was opened, the database disagreed with its anchor: {body.get('problem')}", seq))
        else:
            lost = body.get("event") or {}
            found.append(Finding(
                f"event {seq}: the broker could not write an event it had acknowledged: {lost.get('kind')} by {lost.get('actor')} "
                f"on {lost.get('subject')} at {lost.get('at')} ({body.get('reason')})", seq))
    return found


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
