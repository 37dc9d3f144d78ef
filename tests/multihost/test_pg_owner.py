"""The store owner on PostgreSQL: group commit with one job failing alone.

Between two jobs the owner's ``RELEASE``/``SAVEPOINT`` is held back and sent
with the next job's first statement, and an event's INSERT with the statement
after it, in one round trip (store/postgres.py).  Still each failing job rolls
back alone: one whose very first statement fails, one whose held-back event
INSERT is refused by the server (it is sent before the job counts as done),
and one that raises after its write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import outcome
import psycopg
import pytest
import trio

from broker.identity import Principal, Role
from memory import authoring, retrieval
from memory.policy import TrustPolicy
from store import events
from store.chainkey import ChainKey
from store.owner import ChainFiles, StoreOwner, _Job
from store.postgres import PostgresBackend

#: An agent of host alpha's broker, the role the owners below log in with.
ALICE = Principal(agent="alice", session="0123456789ab", role=Role.AGENT, domain="alice", host="alpha")


def alpha_owner(pg_cluster: Any, tmp_path: Path) -> tuple[StoreOwner, Path]:
    """A store owner writing as host alpha's broker on a fresh database, and its chain key file."""
    backend = PostgresBackend(pg_cluster.broker_url(pg_cluster.database(), "alpha"), migrate=False)
    assert backend.identify() == "alpha"
    key_file = tmp_path / "chain-key"
    return StoreOwner(backend, [], chain=ChainFiles(key_file, tmp_path / "chain-anchor")), key_file


async def test_jobs_are_grouped_and_a_job_failing_on_its_first_statement_rolls_back_alone(pg_cluster: Any, tmp_path: Path) -> None:
    url = pg_cluster.broker_url(pg_cluster.database(), "alpha")
    backend = PostgresBackend(url, migrate=False)
    assert backend.identify() == "alpha"  # the broker's host, from its role: what its rows are written as
    owner = StoreOwner(backend, [], chain=ChainFiles(tmp_path / "chain-key", tmp_path / "chain-anchor"))
    results: dict[int, object] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)

        async def job(i: int) -> None:
            def write(conn: Any) -> int:
                if i == 13:
                    conn.execute("SELECT * FROM no_such_table")  # the first statement of its job fails on the server
                events.append(conn, "test.write", actor=events.BROKER_ACTOR, subject=str(i))
                if i == 41:
                    # Held back, then refused at the job's end: row security will not take another host's actor.
                    events.append(conn, "test.forged", actor="beta/mallory:1", subject=str(i))
                if i == 27:
                    raise ValueError("job 27 fails after its write")
                return i

            try:
                results[i] = await owner.call(write)
            except (ValueError, psycopg.Error) as exc:
                results[i] = exc

        async with trio.open_nursery() as jobs:
            for i in range(60):
                jobs.start_soon(job, i)
        stats = owner.statistics()
        subjects = await owner.call(lambda conn: sorted(int(s) for (s,) in conn.execute("SELECT subject FROM events WHERE kind = 'test.write'")))
        owner.close()
        nursery.cancel_scope.cancel()
    assert isinstance(results.pop(13), psycopg.errors.UndefinedTable)
    assert isinstance(results.pop(27), ValueError)
    assert isinstance(results.pop(41), psycopg.errors.InsufficientPrivilege)
    # Control: every other job's write is there, once, and the batches grouped them.
    assert results == {i: i for i in range(60) if i not in (13, 27, 41)}
    assert subjects == [i for i in range(60) if i not in (13, 27, 41)]
    assert stats.jobs >= 60 and stats.batches < stats.jobs


async def test_a_lone_job_failing_before_or_at_its_first_statement_leaves_the_writer_usable(pg_cluster: Any, tmp_path: Path) -> None:
    """Each job alone in its batch (one caller): the held-back BEGIN goes with the first statement,
    or is never sent at all when the job fails before it; either way the next job commits."""
    url = pg_cluster.broker_url(pg_cluster.database(), "alpha")
    backend = PostgresBackend(url, migrate=False)
    backend.identify()
    owner = StoreOwner(backend, [], chain=ChainFiles(tmp_path / "chain-key", tmp_path / "chain-anchor"))

    def before_any_statement(conn: Any) -> None:
        raise ValueError("refused before touching the store")

    def at_first_statement(conn: Any) -> None:
        conn.execute("SELECT * FROM no_such_table")

    def after_a_held_write(conn: Any) -> None:
        events.append(conn, "test.lone", actor=events.BROKER_ACTOR, subject="undone")  # held back, never sent
        raise ValueError("refused after its write")

    def write(subject: str) -> Any:
        return lambda conn: events.append(conn, "test.lone", actor=events.BROKER_ACTOR, subject=subject).seq

    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        for n, failing in enumerate((before_any_statement, at_first_statement, after_a_held_write)):
            try:
                await owner.call(failing)
            except (ValueError, psycopg.Error):
                pass
            else:
                raise AssertionError(f"{failing.__name__} did not fail")
            assert await owner.call(write(f"ok{n}")) > 0  # the control: the writer goes on
        subjects = await owner.call(lambda conn: [s for (s,) in conn.execute("SELECT subject FROM events WHERE kind = 'test.lone' ORDER BY seq")])
        owner.close()
        nursery.cancel_scope.cancel()
    assert subjects == ["ok0", "ok1", "ok2"]


def test_a_writer_sees_what_the_last_lock_holder_committed_whatever_the_default_isolation(pg_cluster: Any) -> None:
    """A database whose default is REPEATABLE READ: a writer that waited for the write lock must still
    see the rows the holder committed (its snapshot is not taken while it waits)."""
    import threading
    import time

    from store.postgres import PgConnection, connect

    database = pg_cluster.database()
    with pg_cluster.admin(database) as admin:
        admin.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = 'repeatable read'")
    url = pg_cluster.url(database)
    a, b = (PgConnection(connect(url), host=None, writer=True) for _ in range(2))
    a.raw.execute("CREATE TABLE seen_by_the_next_writer(n int)")
    a.execute("BEGIN IMMEDIATE")
    a.execute("INSERT INTO seen_by_the_next_writer VALUES (?)", (100,))  # a holds the write lock from here
    seen: dict[str, Any] = {}

    def second_writer() -> None:
        b.execute("BEGIN IMMEDIATE")
        seen["max"] = b.execute("SELECT max(n) FROM seen_by_the_next_writer").fetchone()[0]
        b.execute("COMMIT")

    waiting = threading.Thread(target=second_writer)
    waiting.start()
    time.sleep(0.5)
    assert "max" not in seen  # the control: b waits for the lock while a holds it
    a.execute("COMMIT")
    waiting.join(timeout=10)
    assert seen == {"max": 100}
    a.close()
    b.close()


def test_a_held_insert_failing_at_the_end_of_a_nested_block_leaves_the_writer_usable(pg_cluster: Any) -> None:
    from store.postgres import PgConnection, connect

    conn = PgConnection(connect(pg_cluster.url(pg_cluster.database())), host=None, writer=True)
    conn.raw.execute("CREATE TABLE once(n int PRIMARY KEY)")
    with conn:
        conn.execute("INSERT INTO once VALUES (?)", (1,))
        try:
            with conn:
                conn.execute_later("INSERT INTO once VALUES (?)", (1,))  # a duplicate, sent at the block's end
        except psycopg.errors.UniqueViolation:
            pass
        else:
            raise AssertionError("the duplicate was not refused")
        # The nested block was rolled back alone: the transaction goes on.
        conn.execute("INSERT INTO once VALUES (?)", (2,))
    assert [n for (n,) in conn.execute("SELECT n FROM once ORDER BY n")] == [1, 2]
    # An error raised in a block is the one the caller sees, and what it held back is never sent.
    try:
        with conn:
            conn.execute_later("INSERT INTO once VALUES (?)", (1,))  # would fail if it were sent
            raise ValueError("the caller's own error")
    except ValueError:
        pass
    assert [n for (n,) in conn.execute("SELECT n FROM once ORDER BY n")] == [1, 2]
    conn.close()


def test_two_owners_migrating_a_fresh_database_at_once_migrate_it_once(pg_cluster: Any) -> None:
    import threading

    from broker import composition

    name = "fresh_migrate"
    with pg_cluster.admin() as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = pg_cluster.url(name)
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def owner() -> None:
        start.wait()
        try:
            PostgresBackend(url, migrate=True).open_writer(composition.schemas()).close()
        except BaseException as exc:  # noqa: BLE001 -- reported below
            failures.append(exc)

    threads = [threading.Thread(target=owner) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    with pg_cluster.admin(name) as admin:
        versions = dict(admin.execute("SELECT component, version FROM schema_versions").fetchall())
    assert versions and all(v >= 1 for v in versions.values())  # each component at its latest, recorded once


async def test_replayable_jobs_run_as_whole_batches_and_each_failure_stays_its_own_jobs(pg_cluster: Any, tmp_path: Path) -> None:
    """A batch of replayable jobs sends every write with the COMMIT (a few round trips per batch, not one
    per job).  When the server refuses something in it -- a held INSERT row security will not take, a
    read that fails -- the batch is rolled back and run again job by job: only the failing job fails,
    nothing is written twice, and every twin list is read inside the transaction as before.  A job
    that raises on its own rolls back alone, without a replay."""
    owner, key_file = alpha_owner(pg_cluster, tmp_path)
    policy = TrustPolicy()
    mine = ALICE
    forged = Principal(agent="bob", session="0123456789ab", role=Role.AGENT, domain="bob", host="beta")  # another host's agent
    words = [f"Fact {i % 20}: the build cache of service {i % 20} is keyed on its lockfile." for i in range(60)]

    async def remember_all(failing: dict[int, str], replayable: bool) -> tuple[dict[int, Any], Any, Any]:
        results: dict[int, Any] = {}
        before = owner.statistics()

        async def one(i: int) -> None:
            def job(conn: Any) -> Any:
                how = failing.get(i)
                if how == "read":
                    conn.execute("SELECT * FROM no_such_table")
                out = authoring.remember(conn, policy, forged if how == "forged" else mine, kind="discovery", scope="repo", text=words[i], evidence=None)
                if how == "raise":
                    raise ValueError(f"job {i} fails after its write")
                return out

            try:
                results[i] = await owner.call(job, replayable=replayable)
            except (ValueError, psycopg.Error) as exc:
                results[i] = exc

        async with trio.open_nursery() as jobs:
            for i in range(len(words)):
                jobs.start_soon(one, i)
        return results, before, owner.statistics()

    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        failing = {13: "read", 27: "raise", 41: "forged"}
        results, before, after = await remember_all(failing, replayable=True)
        assert isinstance(results.pop(13), psycopg.errors.UndefinedTable)
        assert isinstance(results.pop(27), ValueError)
        assert isinstance(results.pop(41), psycopg.errors.InsufficientPrivilege)
        assert after.whole_batches > before.whole_batches and after.replayed_batches > before.replayed_batches
        stored = await owner.call(lambda conn: sorted(conn.execute("SELECT id, text FROM claims").fetchall()))
        # Each good job's claim is there once, under the id its reply gave; the failed ones left nothing.
        assert sorted((r["id"], r["text"]) for r in results.values()) == stored
        assert len(stored) == 57
        # Every twin list names exactly the claims with the same words stored before this one.
        for r in results.values():
            assert [t["id"] for t in r["twins"]] == [i for i, text in stored if text == r["text"] and i < r["id"]]
        assert sum(len(r["twins"]) for r in results.values()) > 0

        # A job that raises while the server refused nothing rolls back alone, inside the whole batch:
        # no replay, and the next job's claim id and event chain on from where the failed one began.
        words = [f"Yet another fact {i}" for i in range(40)]
        results, before, after = await remember_all({5: "raise", 6: "raise", 30: "raise"}, replayable=True)
        assert all(isinstance(results.pop(i), ValueError) for i in (5, 6, 30))
        assert len(results) == 37 and after.replayed_batches == before.replayed_batches
        assert after.whole_batches > before.whole_batches
        ids = sorted(r["id"] for r in results.values())
        stored = await owner.call(lambda conn: sorted(conn.execute("SELECT id, text FROM claims WHERE text LIKE 'Yet another%'").fetchall()))
        assert [i for i, _ in stored] == ids == list(range(ids[0], ids[0] + 37))

        # Round trips: with nothing failing, a whole batch takes at most three (its lock and the log's
        # head, the next claim id, the writes with the COMMIT)...
        words = [f"Another fact {i}" for i in range(64)]
        results, before, after = await remember_all({}, replayable=True)
        whole = after.batches - before.batches
        assert len(results) == 64 and after.replayed_batches == before.replayed_batches
        assert after.whole_batches - before.whole_batches == whole
        assert after.round_trips - before.round_trips <= 3 * whole < 64
        # ...and the control: the same jobs, not replayable, take at least one round trip each.
        words = [f"A third fact {i}" for i in range(64)]
        results, before, after = await remember_all({}, replayable=False)
        assert len(results) == 64 and after.whole_batches == before.whole_batches
        assert after.round_trips - before.round_trips >= 64
        verified = await owner.call(lambda conn: events.verify_chain(conn, ChainKey.load(key_file)))
        owner.close()
        nursery.cancel_scope.cancel()
    assert verified.ok, verified.reason


def test_what_a_block_held_back_goes_with_its_commit_and_a_refusal_there_rolls_it_all_back(pg_cluster: Any) -> None:
    from store.postgres import PgConnection, connect

    conn = PgConnection(connect(pg_cluster.url(pg_cluster.database())), host=None, writer=True)
    conn.raw.execute("CREATE TABLE kept(n int PRIMARY KEY)")
    before = conn.round_trips
    with conn:
        conn.execute_later("INSERT INTO kept VALUES (?)", (1,))
        conn.execute_later("INSERT INTO kept VALUES (?)", (2,))
    assert conn.round_trips - before == 1  # BEGIN, the lock, both INSERTs and the COMMIT: one round trip
    try:
        with conn:
            conn.execute("INSERT INTO kept VALUES (?)", (3,))  # sent: inside the transaction the refusal undoes
            conn.execute_later("INSERT INTO kept VALUES (?)", (1,))  # a duplicate, refused with the COMMIT
    except psycopg.errors.UniqueViolation:
        pass
    else:
        raise AssertionError("the held duplicate was not refused")
    assert conn.getautocommit()  # the failed transaction was rolled back, not left open
    assert [n for (n,) in conn.execute("SELECT n FROM kept ORDER BY n")] == [1, 2]
    conn.close()


def test_a_statement_first_prepared_in_a_refused_pipeline_is_prepared_again_not_called_by_a_dead_name(pg_cluster: Any) -> None:
    """psycopg counts a statement as prepared once it sends the Parse inside a pipeline; a pipeline the
    server refused a statement in skips every message after it, that Parse too.  The next use of the
    statement called a name the server never had (InvalidSqlStatementName): a good job of a replayed
    batch failed about one run in ten.  Control: the statement is prepared again afterwards."""
    from store.postgres import PgConnection, connect

    conn = PgConnection(connect(pg_cluster.url(pg_cluster.database())), host=None, writer=True)
    conn.raw.execute("CREATE TABLE kept(n int PRIMARY KEY)")
    conn.raw.execute("CREATE TABLE other(n int)")
    # psycopg forgets what it prepared at a ROLLBACK it has not counted yet, and counting one with nothing
    # prepared keeps it counted: a writer that has run a while has such a ROLLBACK behind it.
    conn.raw.prepare_threshold = 1000  # counted, never prepared
    with conn:
        conn.execute("INSERT INTO kept VALUES (?)", (1,))
    with pytest.raises(psycopg.errors.UniqueViolation):
        with conn:
            conn.execute("INSERT INTO kept VALUES (?)", (1,))
    conn.raw.prepare_threshold = 1  # prepared from its second use: the second use below is in the refused pipeline
    with conn:
        conn.execute("INSERT INTO other VALUES (?)", (1,))
    with pytest.raises(psycopg.errors.UniqueViolation):
        with conn:
            conn.execute_later("INSERT INTO kept VALUES (?)", (1,))  # refused: everything after it is skipped
            conn.execute_later("INSERT INTO other VALUES (?)", (2,))  # its Parse among what was skipped
    for n in (3, 4, 5):
        with conn:
            conn.execute("INSERT INTO other VALUES (?)", (n,))
    assert [n for (n,) in conn.execute("SELECT n FROM other ORDER BY n")] == [1, 3, 4, 5]
    prepared = [text for (text,) in conn.execute("SELECT statement FROM pg_prepared_statements")]
    assert any(text.startswith("INSERT INTO other") for text in prepared), prepared
    conn.close()


@pytest.mark.parametrize("replayable", [True, False])
async def test_a_parameter_psycopg_refuses_fails_its_own_job_alone_even_when_sent_with_another(
    pg_cluster: Any, tmp_path: Path, replayable: bool
) -> None:
    """A held INSERT whose parameter psycopg will not send (a NUL byte: the wire refuses it, the owner
    is reached here directly) fails inside the *next* job's round trip.  In a whole batch that send
    took other jobs' statements with it, so the batch runs again job by job: the NUL job fails, the
    others stand, and the chain verifies (found by review: the later job took the blame, the first
    job's claim was reported stored but was not, and the chain broke)."""
    owner, key_file = alpha_owner(pg_cluster, tmp_path)
    policy = TrustPolicy()
    me = ALICE

    def remember(text: str) -> Any:
        return lambda conn: authoring.remember(conn, policy, me, kind="discovery", scope="repo", text=text, evidence=None)

    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        await owner.call(remember("A first fact about the build cache."), replayable=True)
        jobs = [
            _Job(remember("The cache key \x00 is the lockfile hash."), replayable),
            _Job(lambda conn: retrieval.recall(conn, policy, me, "cache", limit=5), replayable),  # its read sends job 1's writes
            _Job(remember("Another fact about the cache directory."), replayable),
        ]
        for job in jobs:  # queued together, as concurrent calls are: one batch
            owner._send.send_nowait(job)
        for job in jobs:
            await job.done.wait()
        stored = await owner.call(lambda conn: [t for (t,) in conn.execute("SELECT text FROM claims ORDER BY id")])
        verified = await owner.call(lambda conn: events.verify_chain(conn, ChainKey.load(key_file)))
        stats = owner.statistics()
        owner.close()
        nursery.cancel_scope.cancel()
    assert isinstance(jobs[0].result, outcome.Error)
    assert isinstance(jobs[1].result, outcome.Value) and isinstance(jobs[2].result, outcome.Value)
    assert jobs[2].result.value["id"] == 2 and stored == ["A first fact about the build cache.", "Another fact about the cache directory."]
    assert verified.ok, verified.reason
    assert stats.replayed_batches == (1 if replayable else 0)


def test_a_database_that_is_not_utf8_is_refused_with_how_to_make_one(pg_cluster: Any) -> None:
    from broker import composition
    from store import postgres

    with pg_cluster.admin() as admin:
        admin.execute("CREATE DATABASE latin1_store TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        postgres.init(pg_cluster.url("latin1_store"), composition.schemas())
    except postgres.StoreError as exc:
        assert "uses encoding LATIN1; conclave needs UTF8" in str(exc) and "ENCODING 'UTF8'" in str(exc)
    else:
        raise AssertionError("a LATIN1 database was taken")
    # The control: a UTF8 database is taken by the same call.
    with pg_cluster.admin() as admin:
        admin.execute("CREATE DATABASE utf8_store TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'")
    assert postgres.init(pg_cluster.url("utf8_store"), composition.schemas()) > 0


def test_only_a_lost_connection_or_a_server_shutting_down_reads_as_unreachable() -> None:
    """What the owner rewords as ``unavailable`` after a lost session: not the server's own answers
    to a request (a cancel, a deadlock), which keep their words (found by review)."""
    from store.postgres import StoreError

    backend = PostgresBackend("postgresql://nobody@/nowhere", migrate=False)
    for gone in (StoreError("cannot connect"), psycopg.OperationalError("server closed the connection unexpectedly"),
                 psycopg.errors.AdminShutdown("terminating connection due to administrator command"), psycopg.InterfaceError("the connection is closed")):
        assert backend.unreachable(gone), gone
    for answered in (psycopg.errors.QueryCanceled("canceling statement"), psycopg.errors.DeadlockDetected("deadlock"),
                     psycopg.errors.LockNotAvailable("lock timeout"), ValueError("a job's own")):
        assert not backend.unreachable(answered), answered
