"""Mail floods: a trust domain's budget, set in the team file's ``[mail]`` table.

An agent that sends as fast as it can must not bury the mail others send
(an inbox lists oldest first) nor keep the store's one writer busy: past its
budget a send is refused with ``quota`` before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import Run, make_repo
from broker.composition import team_rules
from broker.errors import ConclaveError, ErrorCode
from broker.mail.budget import MailBudget, MailLimits
from broker.team import TeamError, load
from tests.mail.mailtools import query, word

BUDGET = 20
FLOOD = 200


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused(budget: MailBudget, domain: str, deliveries: int = 1, size: int = 10) -> ConclaveError:
    with pytest.raises(ConclaveError) as caught:
        budget.charge(domain, deliveries=deliveries, size=size)
    assert caught.value.code is ErrorCode.QUOTA
    return caught.value


def test_a_domain_spends_a_minutes_budget_then_the_sustained_rate() -> None:
    clock = Clock()
    budget = MailBudget(MailLimits(deliveries_per_minute=6, bytes_per_minute=10_000), clock=clock)
    for _ in range(6):
        budget.charge("mallory", deliveries=1, size=10)
    error = refused(budget, "mallory")
    assert "deliveries_per_minute" in error.message and "mallory" in error.message and "try again in 10.0 s" in error.message
    # Another domain has its own budget.
    budget.charge("carol", deliveries=1, size=10)
    # One message's worth comes back every 10 s (6 per minute), not more.
    clock.now += 10
    budget.charge("mallory", deliveries=1, size=10)
    refused(budget, "mallory")
    # A message to several counts once per recipient, its bytes too.
    clock.now += 60
    refused(budget, "mallory", deliveries=7)
    budget.charge("mallory", deliveries=5, size=10)
    clock.now += 600
    too_big = refused(budget, "mallory", deliveries=1, size=10_001)
    assert "bytes_per_minute" in too_big.message and "more than a whole minute's budget" in too_big.message
    budget.charge("mallory", deliveries=1, size=10_000)
    assert budget.refused == 4


@pytest.mark.parametrize(
    "table, problem",
    [
        ('[mail]\ndeliveries_per_minute = 0\n', "deliveries_per_minute must be a whole number of at least 1"),
        ('[mail]\nbytes_per_minute = "lots"\n', "bytes_per_minute must be a whole number"),
        ('[mail]\nmessages_per_hour = 5\n', "unknown key(s) messages_per_hour"),
        ('mail = 5\n', "mail must be a table"),
    ],
)
def test_the_mail_table_is_checked_when_the_team_file_is_read(tmp_path: Path, table: str, problem: str) -> None:
    repo = make_repo(tmp_path / "r")
    team = tmp_path / "team.toml"
    team.write_text(f'{table}\n[[agent]]\nname = "alice"\ncommand = ["true"]\n')
    with pytest.raises(TeamError) as caught:
        load(team, repo=repo, rules=team_rules())
    assert problem in str(caught.value)
    # Control: a good table is read.
    team.write_text('[mail]\ndeliveries_per_minute = 30\n\n[[agent]]\nname = "alice"\ncommand = ["true"]\n')
    assert MailLimits.from_table(load(team, repo=repo, rules=team_rules()).mail) == MailLimits(deliveries_per_minute=30)


def start(tmp_path_factory: pytest.TempPathFactory, per_minute: int) -> Run:
    team = [{"name": "mallory", "may_spawn": 1}, {"name": "carol"}, {"name": "bob"}]
    return Run(tmp_path_factory.mktemp("flood"), team, extra_toml=f"\n[mail]\ndeliveries_per_minute = {per_minute}\n").start()


def flood_then_carol(run: Run) -> dict[str, Any]:
    """mallory mails bob (and everyone) as fast as she can; carol sends bob one message in the middle."""
    mallory, carol, bob = run.puppet("mallory"), run.puppet("carol"), run.puppet("bob")
    stats_before = run.op("mail.stats")
    accepted = over = 0
    carol_id = None
    for i in range(FLOOD):
        reply = mallory.try_call("msg.send", to="bob" if i % 4 else "all", body=f"noise {i} " + "x" * 200)
        if reply["ok"]:
            accepted += 1
        else:
            assert reply["error"]["code"] == "quota", reply
            over += 1
        if i == FLOOD // 2:
            carol_id = carol.call("msg.send", to="bob", body=f"the real news {word()}")["id"]
    page = bob.call("msg.inbox", unread=True, limit=BUDGET + 5)
    stats_after = run.op("mail.stats")
    return {
        "accepted": accepted,
        "over": over,
        "carol_on_first_page": carol_id in [m["id"] for m in page],
        "store_jobs": stats_after["store_jobs"] - stats_before["store_jobs"],
        "over_budget": stats_after["over_budget"] - stats_before["over_budget"],
    }


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    run = start(tmp_path_factory, BUDGET)
    try:
        yield run
    finally:
        run.close()


def test_a_flood_cannot_bury_another_agents_mail_nor_load_the_store(budgeted: Run, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Attack: mallory sends 200 messages to bob and to all as fast as she can.
    Past her budget each is refused with quota before any store job, so carol's
    one message lands on the first page of bob's inbox (oldest first), and the
    store did one job per accepted send.  Control: the same flood under a budget
    too large to bite buries carol's message past that page -- the property
    could fail, and does without the budget."""
    outcome = flood_then_carol(budgeted)
    # A message to all costs 2 deliveries here (carol and bob); the bucket refills 20/min during the flood.
    assert outcome["accepted"] <= BUDGET + 5 and outcome["over"] >= FLOOD - BUDGET - 5, outcome
    assert outcome["over_budget"] == outcome["over"]
    assert outcome["carol_on_first_page"], outcome
    # One store job per accepted send, carol's send and bob's inbox: the refusals cost the store nothing.
    assert outcome["store_jobs"] == outcome["accepted"] + 2, outcome
    control = start(tmp_path_factory, 100_000)
    try:
        unbudgeted = flood_then_carol(control)
    finally:
        control.close()
    assert unbudgeted["accepted"] == FLOOD and not unbudgeted["carol_on_first_page"], unbudgeted


def test_a_domain_shares_one_budget_and_others_keep_theirs(budgeted: Run) -> None:
    """mallory's child is her trust domain: it cannot reopen her exhausted
    budget.  carol's budget is her own, and the operator has none."""
    kid = budgeted.spawn_puppet("mallory", "kid")
    while budgeted.puppet("mallory").try_call("msg.send", to="bob", body="drain")["ok"]:
        pass
    reply = kid.try_call("msg.send", to="bob", body="the child tries")
    assert reply["error"]["code"] == "quota" and "trust domain mallory" in reply["error"]["message"], reply
    assert budgeted.puppet("carol").call("msg.send", to="bob", body="carol is fine")["to"] == "bob"
    for _ in range(BUDGET + 5):
        budgeted.op("msg.send", to="bob", body="the operator is a person")
    # Nothing refused was written: every stored message from mallory's domain was accepted.
    stored = query(budgeted, "SELECT count(*) FROM mail_messages WHERE sender_box LIKE 'mallory%'")[0][0]
    assert stored <= 2 * (BUDGET + 5)
    assert budgeted.op("mail.stats")["over_budget"] >= 2
