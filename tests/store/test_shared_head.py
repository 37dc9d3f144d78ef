"""What a broker on a shared log checks at every batch: the head it saw, and everything after it.

On a store several brokers share, the head moves between one broker's
batches; each broker verifies what was appended since its own last view
(``events.verify_after``) and, at start, finds its anchored head in a log
that may have grown (``anchor.locate``).  These are the checks themselves,
on a SQLite file whose triggers the attacker drops; the two-broker test
(tests/multihost/test_shared_chain.py) runs them on PostgreSQL through real
brokers.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from store import anchor, events
from store.chainkey import ChainKey
from store.database import open_store

KEY = ChainKey.generate()


def log_of(path: Path, n: int) -> apsw.Connection:
    conn = open_store(path, [])
    events.key_chain(conn, KEY)
    with conn:
        for i in range(n):
            events.append(conn, "test.n", actor=f"host{i % 2}/agent:1", payload={"n": i})
    conn.execute("DROP TRIGGER events_append_only_delete")
    return conn


def append_raw(conn: apsw.Connection, key: ChainKey, kind: str) -> int:
    last = events.head(conn)
    row = (last.seq + 1, events.now(), kind, "host1/agent:1", None, "{}", last.hash)
    conn.execute("INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?)",
                 (*row, events.keyed_digest(key, *row)))
    return last.seq + 1


def test_events_appended_after_the_seen_head_are_verified_and_move_it(tmp_path: Path) -> None:
    conn = log_of(tmp_path / "db", 3)
    seen = events.head(conn)
    # Another broker appends two events with the team's key: they verify, and the head moves to the last.
    append_raw(conn, KEY, "test.other")
    last = append_raw(conn, KEY, "test.other")
    report = events.verify_after(conn, KEY, seen)
    assert report.ok and report.events == 2 and report.head == events.head(conn) and report.head.seq == last
    # Nothing new: the head stays.
    assert events.verify_after(conn, KEY, report.head) == events.ChainReport(0, None, None, report.head)


def test_an_event_appended_without_the_key_is_named(tmp_path: Path) -> None:
    conn = log_of(tmp_path / "db", 3)
    seen = events.head(conn)
    good = append_raw(conn, KEY, "test.other")  # the control, in the same walk
    forged = append_raw(conn, ChainKey.generate(), "memory.promote")
    report = events.verify_after(conn, KEY, seen)
    assert report.first_bad == forged and "fails its keyed hash" in report.reason
    assert report.head.seq == good  # what verified before it


def test_a_cut_and_a_deleted_head_are_named(tmp_path: Path) -> None:
    conn = log_of(tmp_path / "db", 5)
    seen = events.head(conn)
    conn.execute("DELETE FROM events WHERE seq > ?", (seen.seq - 2,))
    report = events.verify_after(conn, KEY, seen)
    assert report.first_bad == seen.seq - 1 and f"saw it run to event {seen.seq}: 2 event(s) were cut" in report.reason

    # The event a broker saw last deleted, and a new one linked to it in its place by someone who could: still named.
    other = log_of(tmp_path / "other", 5)
    seen = events.head(other)
    append_raw(other, KEY, "test.other")
    other.execute("DELETE FROM events WHERE seq = ?", (seen.seq,))
    report = events.verify_after(other, KEY, seen)
    assert report.first_bad == seen.seq and "is gone from the log" in report.reason


def test_the_anchored_head_is_found_in_a_log_that_grew_and_missed_in_one_that_was_cut(tmp_path: Path) -> None:
    conn = log_of(tmp_path / "db", 4)
    mine = events.head(conn)
    file = anchor.AnchorFile(tmp_path / "anchor", KEY)
    file.write(mine, mine)
    file.close()
    reading = anchor.read(tmp_path / "anchor", KEY)
    append_raw(conn, KEY, "test.other")  # others appended while this broker was away
    hash_at = lambda seq: events.hash_at(conn, seq)  # noqa: E731
    assert anchor.locate(reading, hash_at, events.head(conn)) == (mine, None)
    conn.execute("DELETE FROM events WHERE seq >= ?", (mine.seq - 1,))
    found, problem = anchor.locate(reading, hash_at, events.head(conn))
    assert found is None and f"anchored event {mine.seq}: the last 2 event(s) were cut" in problem
