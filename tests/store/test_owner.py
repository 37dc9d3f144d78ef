"""The store owner and the event log: one writer, group commit, a chain that shows tampering."""

from __future__ import annotations

import trio
import pytest

from store import events
from store.backend import SqliteBackend
from store.chainkey import ChainKey
from store.database import connect
from store.database import open_store as open_unkeyed
from store.owner import ChainFiles, StoreOwner

KEY = ChainKey.generate()


def open_store(path, schemas):
    """The writer connection keyed as the store owner keys its own."""
    conn = open_unkeyed(path, schemas)
    events.key_chain(conn, KEY)
    return conn


def chain_files(tmp_path):
    return ChainFiles(tmp_path / "chain-key", tmp_path / "chain-anchor")


async def test_concurrent_jobs_are_grouped_and_a_failing_job_rolls_back_alone(tmp_path):
    owner = StoreOwner(SqliteBackend(tmp_path / "db"), [], chain=chain_files(tmp_path))
    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        results: dict[int, object] = {}

        async def job(i: int) -> None:
            def write(conn):
                events.append(conn, "test.write", actor="tester:1", subject=str(i))
                if i == 13:
                    raise ValueError("job 13 fails")
                return i

            try:
                results[i] = await owner.call(write)
            except ValueError as exc:
                results[i] = exc

        async with trio.open_nursery() as jobs:
            for i in range(50):
                jobs.start_soon(job, i)
        stats = owner.statistics()
        owner.close()
        nursery.cancel_scope.cancel()
    assert isinstance(results.pop(13), ValueError)
    assert results == {i: i for i in range(50) if i != 13}
    assert stats.jobs == 50 and stats.batches < 50  # grouped: fewer transactions than jobs
    conn = connect(tmp_path / "db")
    subjects = sorted(int(r[0]) for r in conn.execute("SELECT subject FROM events WHERE kind = 'test.write'"))
    assert subjects == [i for i in range(50) if i != 13]
    assert events.verify_chain(conn, ChainKey.load(tmp_path / "chain-key")).ok


def test_the_event_log_refuses_update_and_delete_through_sqlite(tmp_path):
    conn = open_store(tmp_path / "db", [])
    with conn:
        events.append(conn, "test.one", actor="tester:1", payload={"n": 1})
    import apsw

    with pytest.raises(apsw.ConstraintError, match="append-only"):
        conn.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(apsw.ConstraintError, match="append-only"):
        conn.execute("DELETE FROM events")
    assert conn.execute("SELECT count(*) FROM events WHERE kind = 'test.one'").fetchone()[0] == 1


def test_verify_names_the_first_event_edited_behind_the_log(tmp_path):
    conn = open_store(tmp_path / "db", [])
    with conn:
        for n in range(5):
            events.append(conn, "test.n", actor="tester:1", payload={"n": n})
    assert events.verify_chain(conn, KEY).ok  # control: untouched chain verifies
    # T3: someone with the file drops the trigger and rewrites event 3.
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET payload = '{\"n\":99}' WHERE seq = 3")
    report = events.verify_chain(conn, KEY)
    assert not report.ok and report.first_bad == 3 and "altered" in report.reason


def test_verify_notices_a_deleted_event(tmp_path):
    conn = open_store(tmp_path / "db", [])
    with conn:
        for n in range(4):
            events.append(conn, "test.n", actor="tester:1")
    conn.execute("DROP TRIGGER events_append_only_delete")
    conn.execute("DELETE FROM events WHERE seq = 2")
    report = events.verify_chain(conn, KEY)
    assert report.first_bad == 2 and "missing" in report.reason


def test_an_event_needs_an_actor(tmp_path):
    conn = open_store(tmp_path / "db", [])
    with pytest.raises(ValueError, match="no default actor"):
        events.append(conn, "test.x", actor="")


def test_a_feature_brings_its_own_schema_and_migrations_are_idempotent(tmp_path):
    """The store lists no feature's tables: a component hands them over, and a later release adds one migration."""
    from store.database import migrate
    from store.schema import Schema

    widgets = Schema("widgets", ["CREATE TABLE widgets (id INTEGER PRIMARY KEY)", "ALTER TABLE widgets ADD COLUMN name TEXT"])
    conn = open_store(tmp_path / "db", [widgets])
    version = conn.pragma("user_version")
    assert version == len(events.SCHEMA.migrations) + 2
    assert migrate(conn, [widgets]) == version  # again: nothing changes, nothing fails
    assert conn.pragma("user_version") == version
    later = Schema("widgets", [*widgets.migrations, "CREATE INDEX widgets_by_name ON widgets(name)"])
    assert migrate(conn, [later]) == version + 1
    versions = dict(conn.execute("SELECT component, version FROM schema_versions"))
    assert versions == {"events": len(events.SCHEMA.migrations), "widgets": 3}
    # Control: a store opened without the feature has no widgets table.
    bare = open_store(tmp_path / "bare", [])
    assert bare.execute("SELECT count(*) FROM sqlite_master WHERE name = 'widgets'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'widgets'").fetchone() == (1,)


def test_a_batch_of_events_chains_exactly_like_events_appended_one_at_a_time(tmp_path):
    pending = [
        events.Pending(
            "test.n",
            f"tester:{n % 3}",
            None if n % 2 else f"subject {n}",
            {"n": n, "é": [n, "ü", None]} if n % 4 else None,
            f"2026-11-29T00:00:{n:02d}.000000+00:00",
        )
        for n in range(1, 40)
    ]
    first = dict(actor="tester:1", at="2026-11-29T00:00:00.000000+00:00")
    # Both logs start from the same store.chain_keyed event, so every later hash must agree.
    open_store(tmp_path / "one", []).close()
    import shutil

    shutil.copyfile(tmp_path / "one", tmp_path / "many")
    one, many = open_store(tmp_path / "one", []), open_store(tmp_path / "many", [])
    with one:
        events.append(one, "test.first", **first)
        for p in pending:
            events.append(one, p.kind, actor=p.actor, subject=p.subject, payload=p.payload, at=p.at)
        events.append(one, "test.last", **first)
    with many:
        events.append(many, "test.first", **first)
        # seq 1 is the store.chain_keyed event that opens every keyed log
        assert events.append_many(many, pending) == 2 + len(pending)
        events.append(many, "test.last", **first)  # the chain goes on after a batch
    rows = "SELECT seq, at, kind, actor, subject, payload, prev_hash, hash FROM events ORDER BY seq"
    written = many.execute(rows).fetchall()
    assert written == one.execute(rows).fetchall()
    assert len(written) == len(pending) + 3
    assert events.verify_chain(many, KEY).ok
    assert [e.payload for e in events.read(many, kind_prefix="test.n")] == [p.payload or {} for p in pending]


def test_a_batch_with_an_event_without_actor_writes_nothing(tmp_path):
    conn = open_store(tmp_path / "db", [])
    good = events.Pending("test.n", "tester:1", None, None, events.now())
    with pytest.raises(ValueError, match="no default actor"):
        with conn:
            events.append_many(conn, [good, good._replace(actor="")])
    assert conn.execute("SELECT count(*) FROM events WHERE kind = 'test.n'").fetchone()[0] == 0
    with conn:  # control: the same batch with its actor is written
        events.append_many(conn, [good, good])
    assert conn.execute("SELECT count(*) FROM events WHERE kind = 'test.n'").fetchone()[0] == 2


def _write(conn):
    events.append(conn, "test.write", actor="tester:1", subject="x")
    return "written"


async def _each_heard(owner, jobs: list) -> dict[int, object]:  # type: ignore[type-arg]
    """Send every job at once (one batch, or a few); what each caller heard: its result or its exception."""
    results: dict[int, object] = {}

    async def one(i: int) -> None:
        try:
            results[i] = await owner.call(jobs[i])
        except Exception as exc:  # noqa: BLE001 -- what each caller heard is the assertion
            results[i] = exc

    async with trio.open_nursery() as nursery:
        for i in range(len(jobs)):
            nursery.start_soon(one, i)
    return results


async def test_every_job_of_a_batch_refused_together_hears_the_refusal_itself(tmp_path):
    """A batch refused whole (here: the database file renamed over behind the owner) gives each job an
    outcome of its own: 20 jobs sent at once all hear "unavailable", none an error from a result
    another job's caller already took (a broker stopping on a swapped store once crashed so)."""
    import os
    import shutil

    from store.backend import StoreUnavailable

    db = tmp_path / "db"
    owner = StoreOwner(SqliteBackend(db), [], chain=chain_files(tmp_path))

    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        assert await owner.call(_write) == "written"  # control: the live file takes writes
        shutil.copy(db, tmp_path / "copy")
        os.rename(tmp_path / "copy", db)
        before = owner.statistics().batches
        results = await _each_heard(owner, [_write] * 20)
        batches = owner.statistics().batches - before
        owner.close()
        nursery.cancel_scope.cancel()
    assert batches < 20, batches  # grouped: some batch held several jobs
    assert all(isinstance(r, StoreUnavailable) for r in results.values()), {i: repr(r) for i, r in results.items()}
    assert all("is not the file this" in str(r) for r in results.values()), str(results[0])


async def test_every_job_of_a_transaction_that_fails_as_a_whole_hears_the_failure_itself(tmp_path):
    """The other way a batch fails together: the transaction itself (a commit refused, the write lock's
    savepoints gone).  Here one job ends the transaction under the owner, so the savepoint after it is
    gone; every job of its batch hears that failure, each from an outcome of its own (a shared one
    made every caller after the first raise AlreadyUsedError)."""
    import apsw

    db = tmp_path / "db"
    owner = StoreOwner(SqliteBackend(db), [], chain=chain_files(tmp_path))

    def rogue(conn):
        conn.execute("ROLLBACK")  # the owner's transaction, and every savepoint in it, gone
        return "rolled back"

    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        assert await owner.call(_write) == "written"  # control: a batch of one good job commits
        results = await _each_heard(owner, [rogue if i == 10 else _write for i in range(20)])
        assert await owner.call(_write) == "written"  # the owner goes on after the failed batch
        owner.close()
        nursery.cancel_scope.cancel()
    failed = {i: r for i, r in results.items() if isinstance(r, Exception)}
    assert 10 in failed and len(failed) > 1, results  # the rogue's batch held others, and they failed with it
    assert all(isinstance(r, apsw.SQLError) for r in failed.values()), {i: repr(r) for i, r in failed.items()}
    assert all(r == "written" for i, r in results.items() if i not in failed)
