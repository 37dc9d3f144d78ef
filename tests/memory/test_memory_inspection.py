"""What the operator reads back: a claim's biography, an agent's trail, the log, lists and figures.

Words only (``embedder = "none"``): what is read back, not meaning; bob's own words match by the words rule."""

from __future__ import annotations

import json
from typing import Iterator

import pytest
from tests.memory.memory_support import FACT, WORDS_ONLY, vouch, REDISCOVERED

from agents.harness import Run
from broker.errors import ConclaveError, ErrorCode


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, dict[str, int]]]:
    team = [{"name": "alice", "may_spawn": 1}, {"name": "bob"}, {"name": "carol"}]
    with Run(tmp_path_factory.mktemp("inspect"), team, extra_toml=WORDS_ONLY) as run:
        alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
        claim = alice.call("memory.remember", kind="discovery", text=FACT.format("session"), evidence="seen in CI run 4411")["id"]
        carol.call("memory.recall", query="session tests flaky")
        bob.call("memory.corroborate", id=claim, evidence=REDISCOVERED.format("session"))
        vouch(carol, claim)
        edition = alice.call("memory.revise", id=claim, text="The session tests are flaky on arm64 CI because the fixture reuses a fixed port.")["id"]
        kid = run.spawn_puppet("alice", "helper")
        other = kid.call("memory.remember", kind="failure", text="The session fixture leaks one socket per test.")["id"]
        bob.call("memory.dispute", id=other, reason="the leak was fixed last week")
        run.op("memory.retire", id=other, reason="fixed upstream")
        yield run, {"claim": claim, "edition": edition, "other": other}


def test_show_tells_a_claims_whole_biography(story: tuple[Run, dict[str, int]]) -> None:
    run, ids = story
    bio = run.op("memory.show", id=ids["edition"])
    assert [e["id"] for e in bio["editions"]] == [ids["claim"], ids["edition"]]
    first = run.op("memory.show", id=ids["claim"])
    assert [(c["principal"].split(":")[0], c["blind"], c["counted"]) for c in first["corroborations"]] == [("bob", True, True), ("carol", False, True)]
    assert first["corroborations"][0]["evidence"] == REDISCOVERED.format("session")
    kinds = [h["kind"] for h in first["history"]]
    # the revision, and the tier event that marks this edition superseded (its own events say so)
    assert kinds == ["memory.remember", "memory.corroborate", "memory.corroborate", "memory.tier", "memory.revise", "memory.tier"]
    retired = run.op("memory.show", id=ids["other"])
    assert retired["tier"] == "retired" and retired["retired"]["reason"] == "fixed upstream"
    assert retired["disputes"][0]["reason"] == "the leak was fixed last week"
    assert [h["kind"] for h in retired["history"]][-3:] == ["memory.dispute", "memory.tier", "memory.retire"]
    human = run.cli("memory", "show", str(ids["claim"]))
    assert human.returncode == 0 and "blind, counted" in human.stdout and "informed, counted" in human.stdout


def test_trail_lists_what_an_agent_and_its_children_did_in_time_order(story: tuple[Run, dict[str, int]]) -> None:
    run, ids = story
    trail = run.op("memory.trail", of_agent="alice")
    assert [(r["action"], r["claim"]) for r in trail] == [("authored", ids["claim"]), ("revised", ids["edition"]), ("authored", ids["other"])]
    assert trail[-1]["principal"].startswith("alice/helper:")
    bob = run.op("memory.trail", of_agent="bob")
    assert [(r["action"], r["claim"], r["counted"]) for r in bob] == [("corroborated", ids["claim"], True), ("disputed", ids["other"], True)]
    # An agent that never ran here is an error (an empty trail would read as "did nothing").
    with pytest.raises(ConclaveError) as unknown:
        run.op("memory.trail", of_agent="dave")
    assert unknown.value.code is ErrorCode.NOT_FOUND and "no agent named dave" in unknown.value.message
    cli = run.cli("memory", "trail", "--agent", "bob", "--json")
    assert cli.returncode == 0 and len(json.loads(cli.stdout)) == 2


def test_a_claims_trail_follows_the_event_log_and_names_the_reply_a_witness_was_shown(story: tuple[Run, dict[str, int]]) -> None:
    """A corroboration's reply shows the claim, and that exposure is written in the same job, with the
    same timestamp: sorted by time, "shown via show" came before the corroboration it answered."""
    run, ids = story
    rows = run.op("memory.trail", claim=ids["claim"])
    steps = [(r["principal"].split(":")[0], r["action"], r["note"] and r["note"].rsplit(":", 1)[0]) for r in rows if r["claim"] == ids["claim"]]
    assert steps == [
        ("alice", "authored", "edition 1"),
        ("carol", "shown", "via recall"),  # carol read it before she vouched: her vouch is informed
        ("bob", "corroborated", None),
        ("bob", "shown", "the reply to its corroboration"),
        ("carol", "shown", "via show"),  # `vouch` reads the claim before it corroborates
        ("carol", "corroborated", None),
        ("carol", "tier", "unverified -> trusted; corroborate by carol"),
        ("carol", "shown", "the reply to its corroboration"),  # sent once the job, tier change and all, was done
        ("alice", "tier", "trusted -> superseded; revised by alice"),  # the edition's own events say it was superseded
    ], steps
    bob_vouch = next(r for r in rows if r["action"] == "corroborated" and r["principal"].startswith("bob:"))
    bob_reply = next(r for r in rows if r["note"] == "the reply to its corroboration" and r["principal"].startswith("bob:"))
    assert bob_reply["at"] == bob_vouch["at"] and bob_reply["reply_to"] == bob_vouch["seq"]
    assert bob_reply["seq"] > bob_vouch["seq"]  # placed by its own memory.shown event, written last in the witness's job
    # The edition's own trail goes on in the same order: the revision, then what followed it.
    assert [r["action"] for r in rows if r["claim"] == ids["edition"]] == ["revised"]
    evented = [r["seq"] for r in rows if r["seq"] is not None]
    assert evented == sorted(evented) and len(set(evented)) == len(evented)


def test_log_filters_by_kind_agent_claim_and_time(story: tuple[Run, dict[str, int]]) -> None:
    run, ids = story
    everything = run.op("memory.log")
    assert {e["kind"] for e in everything} >= {"memory.remember", "memory.corroborate", "memory.revise", "memory.dispute", "memory.retire", "memory.tier"}
    assert [e["actor"].split(":")[0] for e in run.op("memory.log", kind="corroborate")] == ["bob", "carol"]
    assert all(e["actor"].startswith("bob:") for e in run.op("memory.log", of_agent="bob"))
    assert [e["kind"] for e in run.op("memory.log", claim=ids["other"])] == ["memory.remember", "memory.dispute", "memory.tier", "memory.retire"]
    middle = everything[len(everything) // 2]["at"]
    assert all(e["at"] >= middle for e in run.op("memory.log", since=middle))
    assert all(e["at"] <= middle for e in run.op("memory.log", until=middle))
    assert len(run.op("memory.log", limit=2)) == 2


def test_list_and_stats(story: tuple[Run, dict[str, int]]) -> None:
    run, ids = story
    live = run.op("memory.list")
    assert [c["id"] for c in live] == [ids["edition"]]
    assert {c["id"] for c in run.op("memory.list", include_retired=True)} == set(ids.values())
    assert [c["id"] for c in run.op("memory.list", tier="superseded")] == [ids["claim"]]
    assert [c["id"] for c in run.op("memory.list", of_agent="alice", include_retired=True, kind="failure")] == [ids["other"]]
    stats = run.op("memory.stats")
    assert stats["by_tier"] == {"unverified": 1, "trusted": 0, "disputed": 0, "superseded": 1, "retired": 1}
    assert stats["corroborations"] == {"total": 2, "counted": 2, "blind": 1, "unread": 0} and stats["policy"]["quorum"] == 2


def test_retire_and_unretire_keep_the_row_and_recompute_the_standing(start_run) -> None:  # type: ignore[no-untyped-def]
    run: Run = start_run([{"name": "alice"}, {"name": "bob"}, {"name": "carol"}], extra_toml=WORDS_ONLY)
    claim = run.puppet("alice").call("memory.remember", kind="pattern", text="The cache keys include the tenant id.")["id"]
    vouch(run.puppet("bob"), claim)
    vouch(run.puppet("carol"), claim)
    run.op("memory.retire", id=claim, reason="cache removed")
    assert run.puppet("bob").call("memory.recall", query="cache keys tenant") == []
    back = run.op("memory.unretire", id=claim, reason="cache is back")
    assert back["tier"] == "trusted" and back["retired"] is None
    assert [c["id"] for c in run.puppet("bob").call("memory.recall", query="cache keys tenant")] == [claim]
