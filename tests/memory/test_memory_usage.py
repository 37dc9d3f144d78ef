"""Usage: each claim's context pushes (inside the budget) and direct recall hits, with the last time of each.

Through a real broker with puppet agents, on SQLite and on PostgreSQL.  The
counts are read from the exposure log (``memory/usage.py``): a push or a hit
is counted exactly when it was shown by that channel.  What must not count
-- previews, the operator's reads, an agent's ``show``, a claim a recall
reached only through a link, a claim left out of the budget -- is each
checked beside a call that does count.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest
from tests.memory.memory_support import backend_run, vouch

from agents.harness import Run

TEAM = ["alice", "bob", "carol", "dave"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    # review_unused_days: about a second, so a claim can be "old" within the test.
    with backend_run(request, tmp_path_factory.mktemp(f"usage-{request.param}"), TEAM, "review_unused_days = 0.00002\n") as r:
        yield r


def trusted(run: Run, text: str) -> int:
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text=text)["id"]
    vouch(run.puppet("bob"), claim)
    vouch(run.puppet("carol"), claim)
    return claim


def usage(run: Run, claim: int) -> dict[str, Any]:
    return run.op("memory.show", id=claim)["usage"]


def counts(run: Run, claim: int) -> tuple[int, int]:
    u = usage(run, claim)
    return u["context"]["count"], u["recall"]["count"]


def test_pushes_inside_the_budget_and_direct_recall_hits_are_counted_with_their_last_time(run: Run) -> None:
    hit = trusted(run, "The osprey uploader resumes a broken transfer from its last acknowledged chunk.")
    linked = trusted(run, "Acknowledged chunks are kept for a day in the spool directory.")
    run.puppet("bob").call("memory.link", source=hit, target=linked, kind="depends-on")
    before = {hit: counts(run, hit), linked: counts(run, linked)}
    dave = run.puppet("dave")

    pushed = dave.call("memory.context", query="osprey uploader resumes broken transfer", budget=400)
    assert [c["id"] for c in pushed["claims"]] == [hit, linked]
    assert counts(run, hit) == (before[hit][0] + 1, before[hit][1])
    assert counts(run, linked) == (before[linked][0] + 1, before[linked][1])  # a linked claim pushed is a push

    found = dave.call("memory.recall", query="osprey uploader resumes broken transfer", expand=True)
    assert [(c["id"], bool(c.get("linked"))) for c in found] == [(hit, False), (linked, True)]
    assert counts(run, hit)[1] == before[hit][1] + 1
    assert counts(run, linked)[1] == before[linked][1]  # reached through a link: not a direct hit

    u = usage(run, hit)
    assert u["context"]["last"] is not None and u["recall"]["last"] is not None and u["recall"]["last"] >= u["context"]["last"]
    # The same figures in list --json and in export.
    listed = next(c for c in run.op("memory.list", limit=1000) if c["id"] == hit)
    assert listed["usage"] == u
    out = run.cli("memory", "list", "--json")
    assert next(c for c in json.loads(out.stdout) if c["id"] == hit)["usage"] == u
    exported = run.op("memory.export", after=hit - 1, limit=1)["claims"][0]
    assert exported["id"] == hit and exported["usage"] == u
    shown = run.cli("memory", "show", str(hit))
    assert "used: pushed in context 1 time" in shown.stdout and "found by recall 1 time" in shown.stdout


def test_a_claim_left_out_of_the_budget_is_not_counted_as_pushed(run: Run) -> None:
    first = trusted(run, "The heron cache warms itself from the nightly snapshot.")
    second = trusted(run, "The heron cache drops entries older than a week during the nightly snapshot.")
    dave = run.puppet("dave")
    tight = dave.call("memory.context", query="heron cache nightly snapshot", budget=90, expand=False)
    assert len(tight["claims"]) == 1 and tight["left_out"] == 1
    inside, outside = tight["claims"][0]["id"], ({first, second} - {tight["claims"][0]["id"]}).pop()
    assert counts(run, inside) == (1, 0) and counts(run, outside) == (0, 0)
    # Control: with room for both, both are pushed and both counted.
    dave.call("memory.context", query="heron cache nightly snapshot", budget=400, expand=False)
    assert counts(run, inside) == (2, 0) and counts(run, outside) == (1, 0)


def test_previews_shows_and_the_operators_reads_do_not_count(run: Run) -> None:
    claim = trusted(run, "The kestrel scheduler skips a run when the previous one is still going.")
    dave = run.puppet("dave")
    start = counts(run, claim)
    preview = dave.call("memory.context", query="kestrel scheduler skips run", preview=True)
    assert [c["id"] for c in preview["claims"]] == [claim]  # the preview shows the block...
    dave.call("memory.recall", query="kestrel scheduler skips run", preview=True)
    dave.call("memory.show", id=claim)
    run.op("memory.context", query="kestrel scheduler skips run")
    run.op("memory.recall", query="kestrel scheduler skips run")
    assert run.cli("memory", "context", "kestrel scheduler skips run").returncode == 0
    assert counts(run, claim) == start  # ...and none of these is a use
    # Control: the same agent's real push and real recall count, once each.
    dave.call("memory.context", query="kestrel scheduler skips run")
    dave.call("memory.recall", query="kestrel scheduler skips run")
    assert counts(run, claim) == (start[0] + 1, start[1] + 1)


def test_groom_lists_old_never_used_trusted_claims_for_review_and_retires_none(run: Run) -> None:
    idle = trusted(run, "The puffin exporter writes one file per tenant.")
    used = trusted(run, "The puffin importer reads tenant files in name order.")
    run.puppet("dave").call("memory.recall", query="importer name order")
    run.op("memory.show", id=idle)  # the operator reading it is not the team using it
    time.sleep(2.0)  # both are now older than review_unused_days (about 1.7 s)
    plan = run.op("memory.groom", dry_run=True)
    flagged = {u["claim"] for u in plan["unused"]}
    assert idle in flagged and used not in flagged
    assert "never used by an agent" in next(u for u in plan["unused"] if u["claim"] == idle)["reason"]
    done = run.op("memory.groom", dry_run=False)
    assert idle in {u["claim"] for u in done["unused"]} and idle not in {r["claim"] for r in done["retire"]}
    assert run.op("memory.show", id=idle)["tier"] == "trusted"  # review only: still trusted, still live
    human = run.cli("memory", "groom", "--dry-run")
    assert f"claim {idle} (discovery) is trusted for review" in human.stdout
