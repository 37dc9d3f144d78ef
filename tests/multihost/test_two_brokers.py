"""Many brokers, one truth: two hosts' brokers on one PostgreSQL store.

Each test starts two real brokers (``conclave run``), ``alpha`` and
``beta``, on two clones of one repository, each logging in to the same
database with a role of its own.  Identity stays local (each broker
authenticates its own agents); principals carry their broker's host.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from agents.harness import Run

FACT = "The integration suite needs the postgres service started before the workers."
OTHER = "The arm64 runners cache the cargo registry under the workspace target directory."


def counted(claim: dict[str, Any]) -> dict[str, bool]:
    return {c["principal"]: c["counted"] for c in claim["corroborations"]}


def test_agents_on_two_hosts_corroborate_each_other_into_trusted(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice", "may_spawn": 1}, {"name": "bob"}], [{"name": "carol"}, {"name": "alice"}])
    alice_a, bob_a = a.puppet("alice"), a.puppet("bob")
    carol_b, alice_b = b.puppet("carol"), b.puppet("alice")
    assert alice_a.key.startswith("alpha/alice:") and carol_b.key.startswith("beta/carol:")

    # A claim from alpha, vouched for by beta's carol and alpha's bob: trusted.
    claim = alice_a.call("memory.remember", kind="discovery", text=FACT)
    assert claim["author"] == alice_a.key
    after_carol = carol_b.call("memory.corroborate", id=claim["id"], evidence="Seen here too: the integration suite needs postgres running before the workers start.")
    assert after_carol["tier"] == "unverified" and counted(after_carol) == {carol_b.key: True}

    # The namesake: alice on beta is the same agent (one trust domain), so she cannot vouch for alpha's alice.
    twin = alice_b.call("memory.corroborate", id=claim["id"])
    assert counted(twin)[alice_b.key] is False and twin["tier"] == "unverified"

    # A sybil child of alpha's alice is alice's domain too: it cannot vouch for its parent's claim.
    kid = a.spawn_puppet("alice", "kid")
    assert kid.key.startswith("alpha/alice/kid:")
    sybil = kid.call("memory.corroborate", id=claim["id"])
    assert counted(sybil)[kid.key] is False and sybil["tier"] == "unverified"

    bob_a.call("memory.show", id=claim["id"])  # bob reads it first: informed
    trusted = bob_a.call("memory.corroborate", id=claim["id"])
    assert trusted["tier"] == "trusted"
    assert {k for k, v in counted(trusted).items() if v} == {carol_b.key, bob_a.key}

    # And the other way: beta's claim, vouched for by alpha's agents, is trusted on both brokers.
    theirs = carol_b.call("memory.remember", kind="pattern", text=OTHER)
    for witness in (alice_a, bob_a):
        witness.call("memory.show", id=theirs["id"])
    alice_a.call("memory.corroborate", id=theirs["id"])
    assert bob_a.call("memory.corroborate", id=theirs["id"])["tier"] == "trusted"
    seen_from_beta = {c["id"]: c["tier"] for c in carol_b.call("memory.recall", query="integration postgres workers arm64 cargo registry")}
    assert seen_from_beta == {claim["id"]: "trusted", theirs["id"]: "trusted"}

    # Every host's operator sees one verifiable log written by both brokers.
    for run in (a, b):
        report = run.op("memory.verify")
        assert report["ok"], report["problems"]
    actors = {e["actor"].split("/")[0] for e in a.op("memory.log", limit=500)}
    assert {"alpha", "beta"} <= actors


def test_mail_from_one_host_wakes_an_inbox_wait_on_the_other(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}])
    alice, carol = a.puppet("alice"), b.puppet("carol")
    got: dict[str, Any] = {}

    def wait() -> None:
        started = time.monotonic()
        got["inbox"] = carol.call("msg.inbox", wait=20)
        got["after"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # carol is waiting on beta before alice sends on alpha
    assert "inbox" not in got
    sent = alice.call("msg.send", to="carol", body="the fixtures moved to tests/data")
    waiter.join(timeout=20)
    assert not waiter.is_alive()
    assert [m["id"] for m in got["inbox"]] == [sent["id"]] and got["inbox"][0]["sender"] == alice.key
    assert got["after"] < 10  # woken by the notification, long before the wait's 20 s


def test_a_named_lock_held_on_one_host_makes_the_other_wait_until_its_agent_exits(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice"}, {"name": "bob"}], [{"name": "carol"}])
    alice, carol = a.puppet("alice"), b.puppet("carol")
    held = alice.call("lock.acquire", resources=["name://deploy"])["grants"][0]

    # Fail fast on beta names the host that holds it; a path of the same spelling is beta's own.
    refusal = carol.try_call("lock.acquire", resources=["name://deploy"])
    assert refusal["error"]["code"] == "locked" and "held on host alpha" in refusal["error"]["message"]
    assert carol.call("lock.acquire", resources=["deploy"])["grants"]  # paths stay per host (a checkout each)

    got: dict[str, Any] = {}

    def wait() -> None:
        started = time.monotonic()
        got["grant"] = carol.call("lock.acquire", resources=["name://deploy"], wait=20)["grants"][0]
        got["after"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.8)
    assert "grant" not in got  # still waiting while alice holds it
    alice.exit()  # her process ends: alpha releases everything she held
    waiter.join(timeout=20)
    assert not waiter.is_alive() and got["grant"]["resource"] == "name://deploy"
    assert got["grant"]["token"] > held["token"]  # fencing tokens grow across hosts
    # And now alpha's bob waits for beta's carol.
    bob = a.puppet("bob")
    assert "held on host beta" in bob.try_call("lock.acquire", resources=["name://deploy"])["error"]["message"]


def test_killing_a_broker_releases_its_locks_for_the_other_host(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}], extra_toml='\n[[slot]]\nname = "gpu"\ncapacity = 1\n')
    a.puppet("alice").call("lock.acquire", resources=["name://release", "slot://gpu"])
    carol = b.puppet("carol")
    assert carol.try_call("lock.acquire", resources=["slot://gpu"])["error"]["code"] == "locked"
    assert a.process is not None
    a.process.kill()  # no goodbye: the broker's database session simply ends
    a.process.wait()
    grants = carol.call("lock.acquire", resources=["name://release", "slot://gpu"], wait=15)["grants"]
    assert [g["resource"] for g in grants] == ["name://release", "slot://gpu"]


def test_a_slot_counts_units_across_hosts(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    slot = '\n[[slot]]\nname = "db"\ncapacity = 2\n'
    a, b = two_hosts([{"name": "alice"}, {"name": "bob"}], [{"name": "carol"}], extra_toml=slot)
    a.puppet("alice").call("slot.acquire", name="db")
    b.puppet("carol").call("slot.acquire", name="db")
    # Two units, one held on each host: alpha's bob must wait although alpha itself holds only one.
    refusal = a.puppet("bob").try_call("slot.acquire", name="db")
    assert refusal["error"]["code"] == "locked" and "every unit is held" in refusal["error"]["message"]
    b.puppet("carol").call("slot.release", name="db")
    assert a.puppet("bob").call("slot.acquire", name="db", wait=10)["grants"][0]["resource"] == "slot://db"


def test_a_release_is_answered_only_once_the_other_host_can_take_it(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    """Released on alpha means free on beta at once: a fail-fast acquire right after the
    release's reply never finds the hold still on the server (the hold used to be given
    back a moment after the reply)."""
    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}])
    alice, carol = a.puppet("alice"), b.puppet("carol")
    for _ in range(25):
        alice.call("lock.acquire", resources=["name://deploy"])
        # Control: while alice holds it, beta's fail-fast acquire is refused.
        assert carol.try_call("lock.acquire", resources=["name://deploy"])["error"]["code"] == "locked"
        alice.call("lock.release", resources=["name://deploy"])
        assert carol.call("lock.acquire", resources=["name://deploy"])["grants"][0]["resource"] == "name://deploy"
        carol.call("lock.release", resources=["name://deploy"])


def test_a_cross_host_wait_whose_client_hung_up_takes_nothing(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    """carol's CLI on beta waits for a lock alpha holds, then is killed.  When alice releases,
    nothing may be granted to the dead wait: bob on alpha gets the lock at once."""
    a, b = two_hosts([{"name": "alice"}, {"name": "bob"}], [{"name": "carol"}])
    alice, bob, carol = a.puppet("alice"), a.puppet("bob"), b.puppet("carol")
    alice.call("lock.acquire", resources=["name://deploy"])
    script = "conclave lock acquire name://deploy --wait 60 & p=$!; sleep 1.5; kill -9 $p; wait $p; exit 0"
    assert carol.sh("sh", "-c", script).returncode == 0
    time.sleep(0.6)  # past the wait's next poll: it has seen the hang-up
    alice.call("lock.release", resources=["name://deploy"])
    time.sleep(0.6)  # a wait that missed the hang-up would take it now
    assert bob.call("lock.acquire", resources=["name://deploy"])["grants"][0]["resource"] == "name://deploy"
    # Control: a live wait on beta does get it when bob lets go.
    got: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: got.update(carol.call("lock.acquire", resources=["name://deploy"], wait=20)))
    waiter.start()
    time.sleep(0.5)
    bob.call("lock.release", resources=["name://deploy"])
    waiter.join(timeout=20)
    assert got["grants"][0]["resource"] == "name://deploy"


def test_a_broker_whose_store_session_ends_takes_back_what_stood_on_it(two_hosts: Callable[..., tuple[Run, Run]], pg_cluster: Any) -> None:
    """alpha's lease session is ended by the server (as a restart or an administrator would): the
    server has dropped its holds, so alpha must not let alice go on holding, nor bob go on waiting,
    on the strength of them.  It takes them back at once (``lock.lost``), connects a new session,
    and grants across hosts again -- with the other host seeing the new holds."""
    a, b = two_hosts([{"name": "alice"}, {"name": "bob"}], [{"name": "carol"}])
    alice, bob, carol = a.puppet("alice"), a.puppet("bob"), b.puppet("carol")
    alice.call("lock.acquire", resources=["name://deploy", "notes.txt"])
    assert carol.try_call("lock.acquire", resources=["name://deploy"])["error"]["code"] == "locked"  # the control
    waited: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: waited.update(bob.try_call("lock.acquire", resources=["name://deploy"], wait=30)))
    waiter.start()
    a.wait_until(lambda: a.op("lock.list")["waiting"], timeout=10, what="bob to wait in alpha's line")
    assert not [e for e in a.op("lock.log", limit=10_000) if e["kind"] == "lock.lost"]

    with pg_cluster.admin(a.database) as admin:  # type: ignore[attr-defined]
        ended = admin.execute(
            "SELECT pg_terminate_backend(l.pid) FROM (SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted) l "
            "JOIN pg_stat_activity s ON s.pid = l.pid JOIN conclave_brokers br ON br.role = s.usename WHERE br.host = 'alpha'"
        ).fetchall()
    assert ended == [(True,)]  # alpha's lease session, the one holding its advisory locks

    waiter.join(timeout=10)
    assert waited["error"]["code"] == "unavailable" and "session with the store's server ended" in waited["error"]["message"]
    lost = [e for e in a.op("lock.log", limit=10_000) if e["kind"] == "lock.lost"]
    assert [(e["payload"]["holder"], e["payload"]["resources"]) for e in lost] == [(alice.call("whoami")["key"], ["name://deploy"])]
    assert [h["resource"] for h in a.op("lock.list")["holdings"]] == ["notes.txt"]  # a path lock stands on nothing remote
    assert carol.call("lock.acquire", resources=["name://deploy"], wait=10)["grants"][0]["resource"] == "name://deploy"
    assert alice.try_call("lock.release", resources=["name://deploy"])["error"]["code"] in ("not_found", "conflict", "invalid_args")

    # A new session: alpha grants across hosts again, and beta sees the hold.
    deadline = time.monotonic() + 10
    while "error" in (reply := alice.try_call("lock.acquire", resources=["name://after"])) and time.monotonic() < deadline:
        assert reply["error"]["code"] == "unavailable"
        time.sleep(0.1)
    assert reply["result"]["grants"][0]["resource"] == "name://after"
    assert "held on host alpha" in carol.try_call("lock.acquire", resources=["name://after"])["error"]["message"]


def test_one_agent_asking_twice_at_once_across_hosts_is_granted_once(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    """alice's two processes ask for the same named lock at once while beta holds it.  Both wait on
    the server (a session's advisory locks stack, so both get the server's hold when carol lets go);
    the local table must still grant alice the lock once and refuse the other ask as a conflict."""
    import shlex

    from broker.entry import conclave_argv

    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}])
    alice, carol = a.puppet("alice"), b.puppet("carol")
    carol.call("lock.acquire", resources=["name://deploy"])
    ask = shlex.join(conclave_argv("lock", "acquire", "name://deploy", "--wait", "20", "--json"))
    script = f"({ask} > one.out 2>&1; echo $? > one.rc) & ({ask} > two.out 2>&1; echo $? > two.rc) & sleep 1.5; echo go > go; wait"
    both = threading.Thread(target=lambda: alice.sh("sh", "-c", script, timeout=60))
    both.start()
    a.wait_until(lambda: (a.repo / "go").exists(), timeout=20, what="both asks to wait")
    carol.call("lock.release", resources=["name://deploy"])
    both.join(timeout=40)
    codes = sorted(int((a.repo / f"{n}.rc").read_text()) for n in ("one", "two"))
    outs = [(a.repo / f"{n}.out").read_text() for n in ("one", "two")]
    held = [h for h in a.op("lock.list")["holdings"] if h["resource"] == "name://deploy"]
    assert len(held) == 1, held  # granted once
    assert codes[0] == 0 and codes[1] != 0, (codes, outs)
    assert any("already" in out for out in outs), outs
    # The control: the one grant is a real one -- beta cannot have it.
    assert carol.try_call("lock.acquire", resources=["name://deploy"])["error"]["code"] == "locked"
