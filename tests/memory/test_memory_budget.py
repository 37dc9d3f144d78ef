"""``context``'s token budget: ``--budget-tokens N``, the team file's ``[memory] context_budget_tokens``,
claims never cut in the middle, and a last line saying how many were left out.

Through a real broker with puppet agents, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest
from tests.memory.memory_support import backend_run, vouch

from agents.harness import Run
from memory import retrieval
from memory.policy import PolicyError
from memory.settings import MemorySettings

TEAM = ["alice", "bob", "carol", "dave"]
TEAM_BUDGET = 90
TOPICS = ("ledger", "invoice", "refund", "payout", "chargeback", "settlement")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with backend_run(request, tmp_path_factory.mktemp(f"budget-{request.param}"), TEAM, f"context_budget_tokens = {TEAM_BUDGET}\n") as r:
        alice = r.puppet("alice")
        for topic in TOPICS:
            claim = alice.call("memory.remember", kind="discovery", text=f"The billing {topic} job retries three times and then pages the billing rota.")["id"]
            vouch(r.puppet("bob"), claim)
            vouch(r.puppet("carol"), claim)
        yield r


def claim_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.startswith("[")]


def test_the_team_files_budget_is_the_default_and_a_call_may_name_its_own(run: Run) -> None:
    dave = run.puppet("dave")
    default = dave.call("memory.context", query="billing job retries")
    assert default["budget"] == TEAM_BUDGET and 0 < default["tokens"] <= TEAM_BUDGET
    assert 0 < len(default["claims"]) < len(TOPICS)
    # Control: a call that names a budget gets it, and the larger budget holds every claim.
    roomy = dave.call("memory.context", query="billing job retries", budget=1000)
    assert roomy["budget"] == 1000 and len(roomy["claims"]) == len(TOPICS) and roomy["left_out"] == 0


def test_claims_are_never_cut_and_the_block_says_how_many_were_left_out(run: Run) -> None:
    texts = {f"The billing {t} job retries three times and then pages the billing rota." for t in TOPICS}
    for budget in (40, 60, 90, 120, 150, 200):
        got = run.puppet("dave").call("memory.context", query="billing job retries", budget=budget)
        shown = claim_lines(got["block"])
        assert got["tokens"] <= budget, (budget, got["tokens"])
        assert retrieval.tokens(got["block"]) <= budget + len(got["block"].splitlines())
        # Every line is a whole claim: its text as stored, never a prefix of it.
        assert all(line.split(") ", 1)[1] in texts for line in shown), shown
        assert len(shown) + got["left_out"] == len(TOPICS), (budget, got)
        if got["left_out"] and shown:
            assert got["block"].splitlines()[-2] == f"({got['left_out']} more matching claim{'s' if got['left_out'] > 1 else ''} left out to fit the token budget)"
        if not got["left_out"]:
            assert "left out" not in got["block"]


def test_budget_tokens_from_the_command_line(run: Run) -> None:
    out = run.cli("memory", "context", "billing job retries", "--budget-tokens", "100", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["budget"] == 100 and got["tokens"] <= 100 and got["left_out"] == len(TOPICS) - len(got["claims"])
    human = run.cli("memory", "context", "billing job retries", "--budget-tokens", "100")
    assert "left out to fit the token budget" in human.stdout
    refused = run.cli("memory", "context", "billing job retries", "--budget-tokens", "0")
    assert refused.returncode != 0
    nothing = run.cli("memory", "context", "billing job retries", "--budget-tokens", "12")
    assert nothing.returncode == 0 and "do not fit 12 tokens" in nothing.stdout


@pytest.mark.parametrize("value", [0, -5, 20_001, "500", 1.5, True])
def test_a_bad_team_budget_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(PolicyError, match="context_budget_tokens"):
        MemorySettings.from_tables({}, {"context_budget_tokens": value})
    # Control: a whole number in range is taken and recorded with the settings.
    taken = MemorySettings.from_tables({}, {"context_budget_tokens": 750})
    assert taken.context_budget_tokens == 750 and taken.as_dict()["memory"]["context_budget_tokens"] == 750
