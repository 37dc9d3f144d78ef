"""``agents`` on a shared store: each principal by its whole key, live where this broker runs it.

Found by the invariant fuzzer (docs/FUZZING.md): on PostgreSQL ``agents`` built
each principal as ``AGENT:SESSION`` and held it against the registry's
``HOST/AGENT:SESSION`` keys, so every agent read as ended, ``--live-only``
listed nobody, and a key taken from the listing (the dashboard's revoke) named
no principal at all.
"""

from __future__ import annotations

from typing import Callable

from agents.harness import Run


def test_agents_lists_each_principal_by_its_host_key_and_this_brokers_own_as_live(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice"}, {"name": "bob"}], [{"name": "carol"}])
    alice, bob, carol = a.puppet("alice"), a.puppet("bob"), b.puppet("carol")
    assert alice.key.startswith("alpha/alice:") and carol.key.startswith("beta/carol:")

    listed = {row["principal"]: row for row in a.op("agents")}
    assert listed[alice.key]["live"] is True and listed[bob.key]["live"] is True
    # Control: beta's agent is listed too, and alpha's broker does not run it.
    assert listed[carol.key]["live"] is False
    assert sorted(row["principal"] for row in a.op("agents", live_only=True)) == sorted([alice.key, bob.key])
    assert [row["principal"] for row in b.op("agents", live_only=True)] == [carol.key]

    # The key the listing gives is the one revoke takes (the dashboard revokes from this table).
    revoked = a.op("memory.revoke", target=listed[bob.key]["principal"], reason="its model read a poisoned issue")
    assert revoked["principal"] == bob.key and revoked["ended"] is True
    a.wait_until(lambda: bob.key not in {row["principal"] for row in a.op("agents", live_only=True)}, what="bob to end")
    assert [row["principal"] for row in a.op("agents", live_only=True)] == [alice.key]
