"""One keyed chain, two brokers: forgeries and cuts are named on every host.

Both brokers append to one event log under one HMAC key (alpha made it,
the operator copied it to beta).  Each broker, at every batch, verifies what
the other appended since its own last batch and refuses to append when an
event does not verify or the log shrank.  The attacker here is the database's
table owner -- more than any broker's role: row-level security does not bind
it, it can switch the append-only triggers off -- but it does not hold the
chain key.
"""

from __future__ import annotations

import re

from typing import Any, Callable

import psycopg
import pytest

from agents.harness import Run
from store import events
from store.chainkey import ChainKey
from tests.pgtools import copy_chain_key

FACT = "The release job signs artefacts with the key in the vault, never a local one."


def as_table_owner(pg_cluster: Any, run: Run, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with pg_cluster.admin(run.database) as conn:  # type: ignore[attr-defined]
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def tip(pg_cluster: Any, run: Run) -> events.Head:
    ((seq, digest),) = as_table_owner(pg_cluster, run, "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")
    return events.Head(seq, digest)


def problems(report: dict[str, Any]) -> str:
    return "\n".join(p["problem"] for p in report["problems"])


def test_a_forged_event_and_a_cut_are_named_by_verify_on_both_brokers(two_hosts: Callable[..., tuple[Run, Run]], pg_cluster: Any) -> None:
    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}])
    alice, carol = a.puppet("alice"), b.puppet("carol")
    claim = alice.call("memory.remember", kind="discovery", text=FACT)
    carol.call("memory.show", id=claim["id"])
    carol.call("memory.corroborate", id=claim["id"])
    alice.call("msg.send", to="carol", body="signed with the vault key")

    # The control: one chain both brokers wrote verifies on both, and each verified the other's events.
    for run in (a, b):
        report = run.op("memory.verify")
        assert report["ok"], report["problems"]
    assert a.op("broker.stats")["chain_verified_others"] > 0 and b.op("broker.stats")["chain_verified_others"] > 0

    # The forgery: the table owner appends a promotion in beta's name, linked to the head, MAC'd with a key that is not the team's.
    # Both brokers' background embedding has written its vectors first; should a background write still take
    # the next seq, the owner links to that one instead.
    for run in (a, b):
        assert run.op("memory.settle")["settled"]
    for _ in range(20):
        head = tip(pg_cluster, a)
        forged = head.seq + 1
        row = (forged, events.now(), "memory.promote", "beta/carol:000000000000", str(claim["id"]), '{"note":"trust me"}', head.hash)
        try:
            as_table_owner(pg_cluster, a, "INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                           (*row, events.keyed_digest(ChainKey.generate(), *row)))
            break
        except psycopg.errors.UniqueViolation:
            continue
    else:
        raise AssertionError("the brokers kept appending: the forged event never found a free seq")
    for run in (a, b):
        report = run.op("memory.verify")
        assert not report["ok"] and report["first_bad_event"] == forged
        assert f"event {forged} (memory.promote) fails its keyed hash" in problems(report)
        assert "the broker refuses to append events" in problems(report)
    refusal = carol.try_call("memory.remember", kind="discovery", text="Anything at all, after the forgery.")
    assert refusal["error"]["code"] == "unavailable" and f"event {forged}" in refusal["error"]["message"]

    # The way back (docs/DEPLOYMENT.md): the owner removes the forged tail, every broker restarts and verifies again.
    as_table_owner(pg_cluster, a, "ALTER TABLE events DISABLE TRIGGER events_append_only")
    as_table_owner(pg_cluster, a, "DELETE FROM events WHERE seq >= %s", (forged,))
    as_table_owner(pg_cluster, a, "ALTER TABLE events ENABLE TRIGGER events_append_only")
    for run in (a, b):
        run.stop()
        run.start()
        assert run.op("memory.verify")["ok"]
    alice, carol = a.puppet("alice"), b.puppet("carol")
    alice.call("memory.remember", kind="pattern", text="Release tags are signed by the CI job, not by people.")
    carol.call("memory.remember", kind="pattern", text="The vault key rotates every ninety days.")

    # The cut: once both brokers have seen the head (each verify is a batch that catches up), the owner drops the last two events.
    # A broker's background write between the two verifies and reading the tip would leave the other one short of it:
    # the embedders settle first, and the verifies run again until the tip stands still across both.
    for run in (a, b):
        assert run.op("memory.settle")["settled"]
    seen = tip(pg_cluster, a)
    for _ in range(20):
        for run in (b, a):
            assert run.op("memory.verify")["ok"]
        seen, before = tip(pg_cluster, a), seen
        if seen == before:
            break
    as_table_owner(pg_cluster, a, "ALTER TABLE events DISABLE TRIGGER events_append_only")
    as_table_owner(pg_cluster, a, "DELETE FROM events WHERE seq > %s", (seen.seq - 2,))
    as_table_owner(pg_cluster, a, "ALTER TABLE events ENABLE TRIGGER events_append_only")
    kept = seen.seq - 2
    for run in (a, b):
        report = run.op("memory.verify")
        assert not report["ok"]
        # A broker's own background write (an agent's usage, a batch of vectors) may land between reading the tip
        # and the cut: then it saw, and committed, more than `seen` -- and every event past `kept` is named as cut.
        saw = re.search(r"this broker saw it run to event (\d+): (\d+) event\(s\) were cut", problems(report))
        committed = re.search(r"the broker committed up to event (\d+): (\d+) event\(s\) were cut", problems(report))
        assert saw and committed, problems(report)
        for head, cut in (map(int, saw.groups()), map(int, committed.groups())):
            assert head >= seen.seq and cut == head - kept, (head, cut, seen.seq)


def test_a_broker_without_the_teams_chain_key_will_not_run(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    with pytest.raises(RuntimeError) as refused:
        two_hosts([{"name": "alice"}], [{"name": "carol"}], share_key=False)
    message = str(refused.value)
    assert "every broker sharing the store appends with the one key" in message and "copy alpha's chain-key" in message
    # beta made no key of its own: the log is alpha's, and beta waits for alpha's key.
    a, b = two_hosts.runs  # type: ignore[attr-defined]
    assert not (b.state / "chain-key").exists()

    # The control: with alpha's key copied over, beta runs and appends to the same chain.
    copy_chain_key(a, b)
    b.start()
    b.puppet("carol").call("memory.remember", kind="discovery", text=FACT)
    assert a.op("memory.verify")["ok"] and b.op("memory.verify")["ok"]


def test_two_brokers_keying_a_fresh_shared_log_at_once_key_it_once(pg_cluster: Any) -> None:
    """Each made a key of its own before the other's was there: the log is keyed once, under the write lock."""
    import threading

    from broker import composition
    from store.postgres import PostgresBackend

    database = pg_cluster.database()
    conns, keys = {}, {}
    for host in ("alpha", "beta"):
        backend = PostgresBackend(pg_cluster.broker_url(database, host), migrate=False)
        backend.identify()
        conns[host], keys[host] = backend.open_writer(composition.schemas()), ChainKey.generate()
    start = threading.Barrier(2)

    def key(host: str) -> None:
        start.wait()
        events.key_chain(conns[host], keys[host])

    threads = [threading.Thread(target=key, args=(host,)) for host in conns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        switches = list(conns["alpha"].execute("SELECT actor, payload FROM events WHERE kind = 'store.chain_keyed'"))
        assert len(switches) == 1
        winner = switches[0][0].split("/")[0]
        loser = "beta" if winner == "alpha" else "alpha"
        assert events.refusal(conns[winner]) is None and keys[winner].id in switches[0][1]
        refusal = events.refusal(conns[loser])
        assert refusal is not None and f"copy {winner}'s chain-key file" in refusal
        assert events.verify_chain(conns[loser], keys[winner]).ok
    finally:
        for conn in conns.values():
            conn.close()
