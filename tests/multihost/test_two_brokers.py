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
    after_carol = carol_b.call("memory.corroborate", id=claim["id"])
    assert after_carol["tier"] == "unverified" and counted(after_carol) == {carol_b.key: True}

    # The namesake: alice on beta is the same agent (one trust domain), so she cannot vouch for alpha's alice.
    twin = alice_b.call("memory.corroborate", id=claim["id"])
    assert counted(twin)[alice_b.key] is False and twin["tier"] == "unverified"

    # A sybil child of alpha's alice is alice's domain too: it cannot vouch for its parent's claim.
    kid = a.spawn_puppet("alice", "kid")
    assert kid.key.startswith("alpha/alice/kid:")
    sybil = kid.call("memory.corroborate", id=claim["id"])
    assert counted(sybil)[kid.key] is False and sybil["tier"] == "unverified"

    trusted = bob_a.call("memory.corroborate", id=claim["id"])
    assert trusted["tier"] == "trusted"
    assert {k for k, v in counted(trusted).items() if v} == {carol_b.key, bob_a.key}

    # And the other way: beta's claim, vouched for by alpha's agents, is trusted on both brokers.
    theirs = carol_b.call("memory.remember", kind="pattern", text=OTHER)
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
