"""Nothing acknowledged is lost: one event the store cannot write never takes a batch of lock history with it.

The attack that found it: a lock name with a lone surrogate was granted, and
its ``lock.grant`` event (unencodable as UTF-8) failed the batch it was in,
dropping every other agent's events written with it.  Names like that are
refused at the edge now; these tests put an unwritable event straight into
the journal to prove the writer's own fallback, and keep the wire-level
attack to show other agents' history survives whatever the edge decides.
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from agents.harness import Run
from locks import schema as locks_schema
from locks.journal import Journal
from store import events
from store.backend import SqliteBackend
from store.database import connect
from store.owner import ChainFiles, StoreOwner

BAD = "x\ud800"  # a lone surrogate: a Python str, but not UTF-8


def owner(tmp_path: Path) -> StoreOwner:
    return StoreOwner(SqliteBackend(tmp_path / "state.db"), [locks_schema.SCHEMA], chain=ChainFiles(tmp_path / "chain-key", tmp_path / "chain-anchor"))


def lock_events(tmp_path: Path) -> list[tuple[str, str, str | None]]:
    conn = connect(tmp_path / "state.db", readonly=True)
    try:
        return [(k, a, s) for k, a, s in conn.execute("SELECT kind, actor, subject FROM events WHERE kind LIKE 'lock.%' ORDER BY seq")]
    finally:
        conn.close()


async def test_an_unwritable_event_costs_only_itself_and_is_reported(tmp_path: Path, nursery, caplog) -> None:
    store = owner(tmp_path)
    await nursery.start(store.run)
    journal = Journal(store)
    await nursery.start(journal.run)
    # Control: a batch of good events is written whole, and nothing is reported lost.
    journal.add("lock.grant", actor="alice:1", subject="before.txt")
    await journal.flush()
    assert lock_events(tmp_path) == [("lock.grant", "alice:1", "before.txt")]
    assert store.statistics().lost_events == 0
    # The same batch with one unwritable event in the middle, and a bookkeeping job after it.
    ran: list[int] = []
    journal.add("lock.grant", actor="alice:1", subject="a.txt")
    journal.add("lock.grant", actor="mallory:1", subject=BAD, payload={"resources": [BAD]})
    journal.add("lock.release", actor="bob:1", subject="b.txt")
    journal.also(lambda conn: ran.append(conn.execute("SELECT count(*) FROM events").fetchone()[0]))
    journal.add("lock.grant", actor="carol:1", subject="c.txt")
    with caplog.at_level(logging.WARNING):
        await journal.flush()
        await trio.sleep(0.05)  # the report's own event is written right after the batch
    assert lock_events(tmp_path) == [
        ("lock.grant", "alice:1", "before.txt"),
        ("lock.grant", "alice:1", "a.txt"),
        ("lock.release", "bob:1", "b.txt"),
        ("lock.grant", "carol:1", "c.txt"),
    ]
    assert len(ran) == 1  # the job in the batch ran too, in order
    assert store.statistics().lost_events == 1
    assert any(r.levelno == logging.ERROR and "LOST 1 event(s)" in r.getMessage() and "mallory:1" in r.getMessage() for r in caplog.records)
    conn = connect(tmp_path / "state.db", readonly=True)
    reported = events.read(conn, kind_prefix="broker.error")
    conn.close()
    assert len(reported) == 1 and reported[0].subject == "event_lost"
    assert reported[0].payload["event"]["actor"] == "mallory:1"
    assert reported[0].payload["event"]["subject"] == "x\\ud800"  # escaped, so the report itself can be written
    assert "UnicodeEncodeError" in reported[0].payload["reason"]


def test_other_agents_lock_history_survives_a_hostile_lock_name(tmp_path: Path) -> None:
    """Through the wire: whatever the broker answers alice, bob's history is all there, and nothing is silently lost."""
    with Run(tmp_path, [{"name": "alice"}, {"name": "bob"}]) as run:
        alice, bob = run.puppet("alice"), run.puppet("bob")
        bob.call("lock.acquire", resources=["bob-before.txt"])
        line = '{"id": 1, "op": "lock.acquire", "args": {"resources": ["name://x\\ud800"]}}\n'
        reply = alice.raw(line)
        bob.call("lock.acquire", resources=["bob-after.txt"])
        bob.call("lock.release", resources=["bob-before.txt", "bob-after.txt"])
        logged = [(e["kind"], e["subject"]) for e in run.op("lock.log") if e["actor"].startswith("bob:")]
        assert logged == [("lock.grant", "bob-before.txt"), ("lock.grant", "bob-after.txt"), ("lock.release", "bob-before.txt bob-after.txt")]
        stats = run.op("broker.stats")
        verified = run.cli("memory", "verify", "--json")
        if reply["ok"]:
            # Granted: its event cannot be written, so it must be reported -- never silently dropped.
            assert stats["lost_events"] == 1
            assert verified.returncode == 1 and "could not write an event it had acknowledged" in verified.stdout
        else:
            # Refused at the edge: nothing was acknowledged, nothing is lost.
            assert reply["error"]["code"] in ("invalid_args", "bad_json"), reply
            assert stats["lost_events"] == 0 and verified.returncode == 0, verified.stdout
