"""Blind-witness laundering: reading a claim through a reply, then vouching "blind".

With ``require_blind`` a claim needs at least one counted witness that
rediscovered it without having been shown it.  The replies to corroborate
and dispute carry the claim's text; each records an exposure for the
caller, so a witness that read the text that way is informed from then on.
Through a real broker, with real agent processes.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from tests.memory.memory_support import FACT, REDISCOVERED, read_db

from agents.harness import Run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    team = [{"name": n} for n in ("alice", "bob", "carol", "dave")]
    with Run(tmp_path_factory.mktemp("laundering"), team, extra_toml="\n[policy]\nquorum = 2\nrequire_blind = true\n") as r:
        yield r


def remember(run: Run, who: str, topic: str) -> int:
    return run.puppet(who).call("memory.remember", kind="discovery", text=FACT.format(topic))["id"]


def informed_second_witness(run: Run, who: str, claim: int, topic: str) -> None:
    """``who`` reads the claim by recall, then vouches: an honest informed witness."""
    run.puppet(who).call("memory.recall", query=f"{topic} flaky", limit=50)
    assert run.puppet(who).call("memory.corroborate", id=claim)["blind"] is False


def test_dispute_then_corroborate_is_informed(run: Run) -> None:
    """Attack: bob disputes the claim by id (its text comes back in the reply),
    withdraws nothing, and then corroborates it -- as a 'blind' rediscovery.
    With carol's informed vouch that made a quorum with a blind witness."""
    claim = remember(run, "alice", "sharder")
    bob = run.puppet("bob")
    disputed = bob.call("memory.dispute", id=claim, reason="looked wrong at first")
    assert FACT.format("sharder") == disputed["text"]  # the reply did show him the text
    vouched = bob.call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("sharder"))
    assert vouched["blind"] is False and vouched["witness"] == "informed", vouched
    informed_second_witness(run, "carol", claim, "sharder")
    assert run.op("memory.show", id=claim)["tier"] != "trusted"


def test_corroborate_revise_corroborate_is_informed(run: Run) -> None:
    """Attack: bob corroborates edition 1 blind (honestly: he had not seen it)
    and reads its text in the reply; alice revises it; bob vouches for edition 2
    'blind' and carol informed: trusted, on a laundered blind witness."""
    claim = remember(run, "alice", "scheduler")
    bob = run.puppet("bob")
    first = bob.call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("scheduler"))
    assert first["blind"] is True and first["text"] == FACT.format("scheduler")
    edition = run.puppet("alice").call("memory.revise", id=claim, text=FACT.format("scheduler v2"))["id"]
    again = bob.call("memory.corroborate", id=edition, evidence=REDISCOVERED.format("scheduler v2"))
    assert again["blind"] is False, again
    informed_second_witness(run, "carol", edition, "scheduler")
    assert run.op("memory.show", id=edition)["tier"] == "unverified"


def test_corroborating_twice_does_not_launder_either(run: Run) -> None:
    """bob's second vouch for the same edition comes after his first reply showed it."""
    claim = remember(run, "alice", "indexer")
    bob = run.puppet("bob")
    assert bob.call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("indexer"))["blind"] is True
    assert bob.call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("indexer"))["blind"] is False


def test_a_genuinely_blind_witness_still_counts(run: Run) -> None:
    """Control: dave was never shown the claim -- no recall, no reply, no show --
    and says in its own words what it found: blind, and with carol's informed vouch the claim is trusted."""
    claim = remember(run, "alice", "compressor")
    informed_second_witness(run, "carol", claim, "compressor")
    blind = run.puppet("dave").call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("compressor"))
    assert blind["blind"] is True and blind["tier"] == "trusted", blind
    # The exposure log says how each witness saw it: carol by recall (and her reply), dave only in his reply.
    conn = read_db(run.state)
    try:
        seen = {(domain, via) for domain, via in conn.execute("SELECT domain, via FROM exposures WHERE claim = ?", (claim,))}
    finally:
        conn.close()
    assert seen == {("carol", "recall"), ("carol", "show"), ("dave", "show")}
