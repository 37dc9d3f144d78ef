"""Who may make a claim trusted: attacks on the witness count, through a real broker.

Every agent here is a real process the broker spawned; every author and
witness is the principal of the connection the request came on.  One run
serves the module (the tests use disjoint claims); the agents an attack
restarts or revokes are its own (frank, grace: nobody else's test uses them);
the attack under another trust policy starts its own run.  Words only
(``embedder = "none"``): the attacks are on who counts, not on meaning, and a
witness's own words are matched by the words rule (tests/memory/test_memory_meaning.py
holds the same rules by meaning, with the real embedder).
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest
from tests.memory.memory_support import FACT, WORDS_ONLY, memory_events, witnesses, vouch, REDISCOVERED

from agents.harness import Run
from broker.errors import ConclaveError


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    team = [
        {"name": "alice", "may_spawn": 4},
        {"name": "bob", "may_spawn": 4},
        {"name": "carol"},
        {"name": "dave"},
        {"name": "erin"},
        {"name": "frank", "restart": "on-failure"},  # revoked by test_revoke_cascades_a_demotion
        {"name": "grace", "restart": "on-failure"},  # crashed and restarted by test_restarted_author_cannot_corroborate
    ]
    with Run(tmp_path_factory.mktemp("witnesses"), team, extra_toml=WORDS_ONLY) as r:
        yield r


def remember(run: Run, who: str, text: str, kind: str = "discovery") -> int:
    return run.puppet(who).call("memory.remember", kind=kind, text=text)["id"]


def test_request_naming_its_own_witness_is_refused(run: Run) -> None:
    """CLIO's hole: the model passed source_agent/source_session and named its own witnesses."""
    claim = remember(run, "alice", FACT.format("ledger"))
    bob = run.puppet("bob")
    # The attack: bob's request says the witness is carol (or names an author, or a session).
    for field, value in (("witness", "carol:1"), ("source_agent", "carol"), ("source_session", "s2"), ("principal", "carol:1")):
        request = {"id": 1, "op": "memory.corroborate", "args": {"id": claim, field: value}}
        reply = bob.raw(json.dumps(request) + "\n")
        assert reply["ok"] is False and reply["error"]["code"] == "identity_field", reply
    reply = bob.raw(json.dumps({"id": 2, "op": "memory.remember", "args": {"kind": "discovery", "text": FACT.format("x"), "author": "carol:1"}}) + "\n")
    assert reply["error"]["code"] == "identity_field"
    assert run.op("memory.show", id=claim)["corroborations"] == []
    # Control: the same request without the field is recorded -- as bob, the connection's principal.
    after = vouch(bob, claim)
    assert witnesses(after) == [(bob.key, True, None)]


def test_spawned_child_cannot_vouch_for_its_parent(run: Run) -> None:
    """A child alice spawned corroborates alice's claim: one trust domain, so it does not count."""
    claim = remember(run, "alice", FACT.format("raft"))
    kid = run.spawn_puppet("alice", "kid1")
    result = vouch(kid, claim)
    assert (result["counted"], result["reason_not_counted"], result["tier"]) == (False, "author_domain", "unverified")
    assert witnesses(result) == [(kid.key, False, "author_domain")]
    # Control: two independent agents on the same claim make it trusted.
    vouch(run.puppet("carol"), claim)
    final = vouch(run.puppet("dave"), claim)
    assert final["tier"] == "trusted" and sorted(final["standing"]["counted_domains"]) == ["carol", "dave"]


def test_parent_cannot_vouch_for_its_child(run: Run) -> None:
    """alice's child authors; alice corroborates her own child's claim."""
    kid = run.spawn_puppet("alice", "kid2")
    claim = kid.call("memory.remember", kind="solution", text=FACT.format("billing"))["id"]
    result = vouch(run.puppet("alice"), claim)
    assert (result["counted"], result["reason_not_counted"]) == (False, "author_domain")
    # Control: bob is another domain and counts.
    assert vouch(run.puppet("bob"), claim)["counted"] is True


def test_siblings_spawned_by_one_agent_cannot_author_and_vouch(run: Run) -> None:
    """The sybil attack: bob spawns three children; one authors, the other two vouch."""
    s1, s2, s3 = (run.spawn_puppet("bob", f"sib{i}") for i in (1, 2, 3))
    claim = s1.call("memory.remember", kind="pattern", text=FACT.format("planner"))["id"]
    s2.call("memory.corroborate", id=claim)
    result = s3.call("memory.corroborate", id=claim)
    assert result["tier"] == "unverified"
    assert witnesses(result) == [(s2.key, False, "author_domain"), (s3.key, False, "author_domain")]
    # Control: two agents outside bob's domain promote it.
    vouch(run.puppet("carol"), claim)
    assert vouch(run.puppet("erin"), claim)["tier"] == "trusted"


def test_same_agent_twice_counts_once(run: Run) -> None:
    """carol corroborates the same claim twice, the second time on a fresh connection."""
    claim = remember(run, "alice", FACT.format("indexer"))
    carol = run.puppet("carol")
    vouch(carol, claim)
    second = carol.call("memory.corroborate", id=claim, fresh=True)
    assert (second["counted"], second["reason_not_counted"], second["tier"]) == (False, "domain_already_counted", "unverified")
    assert len(second["corroborations"]) == 2  # recorded all the same
    # Control: a second domain completes the quorum.
    assert vouch(run.puppet("dave"), claim)["tier"] == "trusted"


def test_substring_confusion_corroboration_lands_only_on_the_id_given(run: Run) -> None:
    """CLIO found the target by substring; two claims share most of their words here."""
    short = remember(run, "alice", "The gateway retry budget is three attempts.")
    longer = remember(run, "alice", "The gateway retry budget is three attempts on arm64 CI.")
    bob = run.puppet("bob")
    vouch(bob, longer)
    assert len(run.op("memory.show", id=longer)["corroborations"]) == 1
    assert run.op("memory.show", id=short)["corroborations"] == []
    # Text is not a target: an id must be a number.
    with pytest.raises(ConclaveError) as refused:
        vouch(bob, "The gateway retry budget")
    assert refused.value.code.value == "invalid_args"
    # Control: corroborating the short one lands on the short one.
    vouch(bob, short)
    assert len(run.op("memory.show", id=short)["corroborations"]) == 1
    assert len(run.op("memory.show", id=longer)["corroborations"]) == 1


def test_rewriting_a_trusted_claim_starts_an_unverified_edition(run: Run) -> None:
    """CLIO's update kept 'trusted' on new text.  Here the new edition starts from nothing."""
    claim = remember(run, "alice", FACT.format("scheduler"))
    vouch(run.puppet("bob"), claim)
    assert vouch(run.puppet("carol"), claim)["tier"] == "trusted"
    alice = run.puppet("alice")
    edition = alice.call("memory.revise", id=claim, text="The scheduler tests are flaky on arm64 CI because DNS lookups time out.")
    assert edition["tier"] == "unverified" and edition["corroborations"] == [] and edition["supersedes"] == claim
    old = run.op("memory.show", id=claim)
    assert old["tier"] == "superseded" and old["superseded_by"] == edition["id"]
    assert old["text"] == FACT.format("scheduler") and len(old["corroborations"]) == 2  # kept for audit
    assert [e["id"] for e in old["editions"]] == [claim, edition["id"]]
    assert "memory.revise" in [e.kind for e in memory_events(run.state, subject=str(edition["id"]))]
    # Neither edition is pushed as trusted: the old one is not live, the new one is unverified.
    block = run.puppet("dave").call("memory.context", query="scheduler tests flaky arm64")["block"]
    assert f"#{claim} " not in block and f"#{edition['id']} " not in block
    # Another domain may not rewrite alice's claim, and the old edition cannot be vouched for.
    with pytest.raises(ConclaveError) as forbidden:
        run.puppet("dave").call("memory.revise", id=edition["id"], text="The scheduler tests pass everywhere.")
    assert forbidden.value.code.value == "forbidden"
    with pytest.raises(ConclaveError) as stale:
        vouch(run.puppet("dave"), claim)
    assert stale.value.code.value == "conflict" and str(edition["id"]) in stale.value.message
    # Control: the new edition earns trust the same way the first did.
    vouch(run.puppet("bob"), edition["id"])
    assert vouch(run.puppet("erin"), edition["id"])["tier"] == "trusted"


def test_corroboration_after_reading_is_informed_and_a_rediscovery_is_blind(run: Run) -> None:
    claim = remember(run, "alice", FACT.format("exporter"))
    carol = run.puppet("carol")
    assert claim in [c["id"] for c in carol.call("memory.recall", query="exporter tests flaky")]
    assert vouch(carol, claim)["blind"] is False
    # Control: dave was never shown the claim, and says in his own words what he found.
    assert run.puppet("dave").call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("exporter"))["blind"] is True
    rows = {w["principal"]: w["blind"] for w in run.op("memory.show", id=claim)["corroborations"]}
    assert rows == {carol.key: False, run.puppet("dave").key: True}


def test_a_child_reading_makes_its_parent_informed(run: Run) -> None:
    """Laundering: bob's child reads the claim, then bob 'rediscovers' it.  Informed-ness is per domain."""
    claim = remember(run, "alice", FACT.format("compactor"))
    kid = run.spawn_puppet("bob", "reader")
    kid.call("memory.context", query="compactor tests flaky", include_unverified=True)
    assert run.puppet("bob").call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("compactor"))["blind"] is False
    # Control: erin's domain never saw it.
    assert run.puppet("erin").call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("compactor"))["blind"] is True


def test_agents_cannot_promote_retire_or_revoke(run: Run) -> None:
    """Operator ops are refused by process ancestry, over the wire and from the CLI in the agent's tree."""
    claim = remember(run, "alice", FACT.format("notifier"))
    alice = run.puppet("alice")
    for op, args in (("memory.promote", {"id": claim}), ("memory.retire", {"id": claim, "reason": "x"}), ("memory.revoke", {"target": "bob:1"}), ("memory.groom", {})):
        reply = alice.try_call(op, **args)
        assert reply["error"]["code"] == "forbidden", (op, reply)
    cli = alice.conclave("memory", "promote", str(claim), "--json")
    assert cli.returncode == 1 and "operator" in cli.stderr
    assert run.op("memory.show", id=claim)["tier"] == "unverified"
    # Control: the operator's own terminal may.
    done = run.cli("memory", "promote", str(claim), "--reason", "checked by hand", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tier"] == "trusted"


def test_restarted_author_cannot_corroborate(run: Run) -> None:
    """grace authors, crashes, is restarted with a new session, and vouches for her own claim."""
    grace = run.puppet("grace")
    first_session = grace.key
    # A text like no other test's here: the others' FACT claims are alice's, and one of them restated by another
    # domain never shown it would be retired as that claim's rediscovery (tests/memory/test_memory_meaning.py).
    claim = grace.call("memory.remember", kind="failure", text="The uploader gives up after five failed chunk retries and drops the file.")["id"]
    grace.exit(1)
    # Wait for the broker to restart grace under a new session before reconnecting to her puppet.
    run.wait_until(
        lambda: any(a["agent"] == "grace" and a["principal"] != first_session for a in run.op("agents", live_only=True)),
        timeout=20,
        what="grace's restart",
    )
    reborn = run.puppet("grace", fresh=True)
    assert reborn.key != first_session and reborn.identity["domain"] == "grace"
    result = vouch(reborn, claim)
    assert (result["counted"], result["reason_not_counted"]) == (False, "author_domain")
    # Control: bob is independent.
    assert vouch(run.puppet("bob"), claim)["counted"] is True


def test_informed_only_quorum_under_require_blind_is_refused(start_run) -> None:  # type: ignore[no-untyped-def]
    """With require_blind, witnesses who all read the claim first cannot promote it, however many."""
    run = start_run(
        [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}, {"name": "dave"}],
        extra_toml="\n[policy]\nquorum = 3\nrequire_blind = true\n" + WORDS_ONLY,
    )
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("resolver"))["id"]
    for who in ("bob", "carol"):
        run.puppet(who).call("memory.recall", query="resolver tests flaky")
    vouch(run.puppet("bob"), claim)
    result = vouch(run.puppet("carol"), claim)
    assert result["tier"] == "unverified" and result["standing"]["quorum"] == 3
    assert [w["blind"] for w in result["corroborations"]] == [False, False]
    # A third informed domain reaches the quorum of 3, and is still refused.
    run.puppet("dave").call("memory.recall", query="resolver")
    third = vouch(run.puppet("dave"), claim)
    assert third["tier"] == "unverified" and "blind" in third["standing"]["short_of_trust"]
    # Control: the same claim with one blind witness among the counted ones is trusted.
    claim2 = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("linker"))["id"]
    run.puppet("bob").call("memory.recall", query="linker tests flaky")
    vouch(run.puppet("bob"), claim2)
    vouch(run.puppet("carol"), claim2)
    assert run.puppet("dave").call("memory.corroborate", id=claim2, evidence=REDISCOVERED.format("linker"))["tier"] == "trusted"


def test_revoke_cascades_a_demotion(run: Run) -> None:
    """frank's session turns out to be compromised; what it vouched for must not stay trusted on its word."""
    frank = run.puppet("frank")
    needs_frank = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("vm"))["id"]
    without_frank = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("gc"))["id"]
    vouch(frank, needs_frank)
    assert vouch(run.puppet("carol"), needs_frank)["tier"] == "trusted"
    vouch(run.puppet("carol"), without_frank)
    assert vouch(run.puppet("dave"), without_frank)["tier"] == "trusted"

    result = run.op("memory.revoke", target=frank.key, reason="prompt-injected")
    assert result["changes"] == [{"id": needs_frank, "from": "trusted", "to": "unverified"}] and result["ended"] is True
    demoted = run.op("memory.show", id=needs_frank)
    assert demoted["tier"] == "unverified"
    assert (frank.key, False, "revoked") in witnesses(demoted)
    tier_events = [e for e in memory_events(run.state, subject=str(needs_frank), kind="memory.tier")]
    assert tier_events[-1].payload["cause"] == f"revoked {frank.key}" and tier_events[-1].payload["to"] == "unverified"
    # Control: a claim that never needed frank stays trusted.
    assert run.op("memory.show", id=without_frank)["tier"] == "trusted"
    # frank's live process was ended and, although restart = on-failure, not restarted.
    run.wait_until(lambda: not [a for a in run.op("agents", live_only=True) if a["agent"] == "frank"], timeout=15, what="frank to end")
    assert [a["revoked_at"] is not None for a in run.op("agents") if a["agent"] == "frank"] == [True]
    # Clear errors for the operator, for an unknown principal, and for a second revoke.
    for target, code in (("operator:uid0", "forbidden"), ("nobody:123", "not_found"), (frank.key, "conflict"), ("no-colon", "invalid_args")):
        with pytest.raises(ConclaveError) as refused:
            run.op("memory.revoke", target=target)
        assert refused.value.code.value == code, target
    cli = run.cli("memory", "revoke", "ghost:1")
    assert cli.returncode == 1 and "ghost:1" in cli.stderr
