"""Meaning on PostgreSQL: two brokers, one store, the real local embedder.

Each broker embeds its own host's claims (only it may write their rows) and
searches everyone's vectors; a rediscovery on one host of a claim made on
the other is linked and counted like any blind witness.
"""

from __future__ import annotations

from typing import Any, Callable

from agents.harness import Run

FACT = "The integration tests time out because the mock server starts after the first request."


def test_a_claim_from_one_host_is_found_by_meaning_and_rediscovered_on_the_other(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}, {"name": "dave"}])
    claim = a.puppet("alice").call("memory.remember", kind="discovery", text=FACT)["id"]
    a.puppet("alice").call("memory.remember", kind="pattern", text="Database migrations run before the web workers start.")
    assert a.op("memory.settle")["settled"]
    # beta searches alpha's vectors: a question in French finds alpha's claim.
    found = b.puppet("dave").call("memory.recall", query="pourquoi les tests d'intégration expirent-ils", limit=1)
    assert [c["id"] for c in found] == [claim]
    # carol on beta, never shown it, finds the same thing herself: beta embeds her claim and links it.
    again = b.puppet("carol").call("memory.remember", kind="discovery", text="Integration tests hit a timeout since the mock server only starts once the first request has been sent.")["id"]
    assert b.op("memory.settle")["settled"]
    shown: dict[str, Any] = a.op("memory.show", id=claim)
    rediscovery = [c for c in shown["corroborations"] if c["restatement"] == again]
    assert len(rediscovery) == 1 and rediscovery[0]["principal"].startswith("beta/carol:") and rediscovery[0]["counted"]
    retired = b.op("memory.show", id=again)
    assert retired["tier"] == "retired" and retired["retired"]["by"] == "beta/broker"
    for run in (a, b):
        assert run.op("memory.verify")["ok"] is True
