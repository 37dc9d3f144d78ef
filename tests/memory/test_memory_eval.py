"""``conclave memory eval``: the production recall and context paths scored against an exam file,
through a real broker on both backends; every miss classified; nothing written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import Run
from broker.demo import CLAIM as DEMO_CLAIM
from tests.memory.memory_support import BACKENDS, started_run, vouch

ROOT = Path(__file__).resolve().parents[2]
RETRY = "The retry queue drains slowly when the cache is cold after a deploy of the billing service."
FILLER = "Retry queue shard {} keeps retry queue entries for the retry queue worker."


@pytest.fixture(scope="module", params=BACKENDS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield from started_run(request, tmp_path_factory.mktemp(f"eval-{request.param}"), ["alice", "bob", "carol"])


@pytest.fixture(scope="module")
def corpus(run: Run) -> dict[str, int]:
    """The demo's claim (trusted by bob and carol), an unverified one, a retired one, a revised one,
    and a claim buried under twenty fillers that repeat its query's words."""
    alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")

    def remember(text: str) -> int:
        return alice.call("memory.remember", kind="discovery", text=text)["id"]

    ids = {"demo": remember(DEMO_CLAIM)}
    vouch(bob, ids["demo"])
    vouch(carol, ids["demo"])
    ids["unverified"] = remember("The nightly backup job writes its archive to the shared scratch volume.")
    ids["retired"] = remember("The staging database is refreshed from production every Sunday night.")
    run.op("memory.retire", id=ids["retired"], reason="staging is refreshed daily now")
    ids["revised"] = remember("The image thumbnails are cached for one hour by the edge proxy.")
    ids["current"] = alice.call("memory.revise", id=ids["revised"], text="The image thumbnails are cached for six hours by the edge proxy.")["id"]
    ids["buried"] = remember(RETRY)
    for n in range(20):
        remember(FILLER.format(n))
    return ids


def exam(tmp_path: Path, queries: list[dict[str, Any]], **extra: Any) -> Path:
    path = tmp_path / "exam.json"
    path.write_text(json.dumps({"version": 1, "queries": queries, **extra}, indent=1))
    return path


def evaluate(run: Run, path: Path, *more: str) -> dict[str, Any]:
    out = run.cli("memory", "eval", str(path), "--json", *more)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def scored(run: Run, queries: list[dict[str, Any]], budget: int | None = None) -> dict[str, Any]:
    """The op ``conclave memory eval`` sends for an exam of ``queries``, on the operator's connection (no new
    interpreter); its reply is the command's report without the fixture's own fields (its path and hash)."""
    return run.op("memory.eval", queries=queries, **({} if budget is None else {"budget": budget}))


def misses(report: dict[str, Any], path: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(q["q"], m["claim"]): m for q in report["queries"] for m in q[path]["misses"]}


def test_eval_scores_both_paths_per_category_and_classifies_every_miss(run, corpus, tmp_path):
    queries = [
        {"q": "config loader encoding", "expect": [corpus["demo"]], "cat": "exact"},
        {"q": "which character set do settings use", "expect": [corpus["demo"]], "cat": "vocabulary"},
        {"q": "nightly backup archive", "expect": [corpus["unverified"]], "cat": "exact"},
        {"q": "staging database refreshed", "expect": [corpus["retired"]], "cat": "stale"},
        {"q": "thumbnails cached by the edge proxy", "expect": [corpus["revised"]], "cat": "stale"},
        {"q": "retry queue", "expect": [corpus["buried"]], "cat": "ranking"},
    ]
    path = exam(tmp_path, queries)
    report = evaluate(run, path)

    assert report["fixture"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert report["corpus"]["claims"] == 26 and report["corpus"]["live"] == 24 and len(report["corpus"]["sha256"]) == 64

    recall, context = report["summary"]["recall"]["by_category"], report["summary"]["context"]["by_category"]
    assert recall["exact"] == {"queries": 2, "recall@5": 1.0, "recall@15": 1.0}  # recall finds the unverified claim too
    assert context["exact"] == {"queries": 2, "recall@5": 0.5, "recall@15": 0.5}  # context pushes only the trusted one
    assert recall["vocabulary"]["recall@15"] == recall["stale"]["recall@15"] == 0.0
    assert recall["ranking"] == {"queries": 1, "recall@5": 0.0, "recall@15": 0.0}
    assert recall["all"]["queries"] == 6

    by_recall, by_context = misses(report, "recall"), misses(report, "context")
    vocab = by_recall[("which character set do settings use", corpus["demo"])]
    assert vocab["class"] == "vocabulary_mismatch" and vocab["missed_at"] == [5, 15]
    assert by_recall[("staging database refreshed", corpus["retired"])]["class"] == "stale_label"
    superseded = by_recall[("thumbnails cached by the edge proxy", corpus["revised"])]
    assert superseded["class"] == "stale_label" and superseded["current"] == corpus["current"]
    buried = by_recall[("retry queue", corpus["buried"])]
    assert buried["class"] == "ranking_loss" and buried["rank"] > 15, buried  # below twenty fillers that repeat the words
    excluded = by_context[("nightly backup archive", corpus["unverified"])]
    assert excluded["class"] == "scope_exclusion" and "unverified" in excluded["why"]
    # Control: the same claim on the recall path is no miss at all.
    assert ("nightly backup archive", corpus["unverified"]) not in by_recall
    assert ("config loader encoding", corpus["demo"]) not in by_recall and ("config loader encoding", corpus["demo"]) not in by_context
    assert report["summary"]["recall"]["misses"] == {"vocabulary_mismatch": 1, "ranking_loss": 1, "scope_exclusion": 0, "stale_label": 2}

    human = run.cli("memory", "eval", str(path))
    assert human.returncode == 0, human.stderr
    assert report["fixture"]["sha256"] in human.stdout and "ranking_loss (rank" in human.stdout and "scope_exclusion" in human.stdout


def test_a_claim_ranked_between_5_and_15_is_a_ranking_loss_at_5_only(run, corpus, tmp_path):
    report = scored(run, [{"q": "retry queue cache cold deploy billing", "expect": [corpus["buried"]], "cat": "c"}])
    assert report["summary"]["recall"]["by_category"]["c"]["recall@5"] == 1.0  # its own words lift it to the top
    # The fillers' words alone bury it: the rank is the one recall --limit 200 would show.
    deep = report_rank(run, "retry queue", corpus["buried"])
    report = scored(run, [{"q": "retry queue", "expect": [corpus["buried"]], "cat": "c"}])
    assert misses(report, "recall")[("retry queue", corpus["buried"])]["rank"] == deep


def report_rank(run: Run, query: str, claim: int) -> int:
    rows = run.op("memory.recall", query=query, limit=200)
    return [r["id"] for r in rows].index(claim) + 1


def test_eval_writes_nothing_and_shows_no_one_anything(run, corpus, tmp_path):
    """An eval must not count as use or make a later witness 'informed': it logs no exposure and no event."""
    queries = [{"q": "nightly backup archive", "expect": [corpus["unverified"]], "cat": "c"}]
    before = run.op("memory.stats")
    first = scored(run, queries)
    scored(run, queries, budget=50)
    after = run.op("memory.stats")
    assert (after["exposures"], after["events"]) == (before["exposures"], before["events"])
    # Control: the production recall of the same query does log what it showed.
    run.puppet("bob").call("memory.recall", query="nightly backup archive")
    assert run.op("memory.stats")["exposures"] > after["exposures"]
    # Reads leave the corpus fingerprint alone; a new claim changes it.
    assert scored(run, queries)["corpus"] == first["corpus"]
    run.puppet("carol").call("memory.remember", kind="discovery", text="The nightly backup job skips the scratch volume on holidays.")
    assert scored(run, queries)["corpus"]["sha256"] != first["corpus"]["sha256"]


def test_an_agent_cannot_run_the_eval(run, corpus):
    """The attack: an agent scores queries against claim ids to learn what exists without being logged as shown it."""
    refused = run.puppet("bob").try_call("memory.eval", queries=[{"q": "config loader", "expect": [corpus["demo"]], "cat": "c"}])
    assert refused["error"]["code"] == "forbidden", refused
    # Control: the operator may.
    assert run.op("memory.eval", queries=[{"q": "config loader", "expect": [corpus["demo"]], "cat": "c"}])["summary"]["recall"]["by_category"]["c"]["recall@5"] == 1.0


UNUSABLE = [
    (b"{not json", "is not a usable exam"),
    (json.dumps({"queries": []}).encode(), 'needs a non-empty "queries" list'),
    (json.dumps({"version": 2, "queries": [{"q": "x", "expect": [1], "cat": "c"}]}).encode(), "is version 2"),
    (json.dumps({"queries": [{"q": "x", "expect": [1], "cat": "c", "weight": 2}]}).encode(), "query 1 has unknown key(s) weight"),
    (json.dumps({"queries": [{"q": "x", "expect": ["1"], "cat": "c"}]}).encode(), 'query 1: "expect" must be a non-empty list of claim ids'),
    (json.dumps({"queries": [{"q": " ", "expect": [1], "cat": "c"}]}).encode(), 'query 1: "q" must be a non-empty string'),
]


def test_an_unusable_fixture_is_refused_saying_what_is_wrong(run, corpus, tmp_path):
    from memory import evaluation

    path = tmp_path / "bad.json"
    # The command reads and checks the exam before it asks the broker: refused with exit 2 (usage), in words or --json ...
    for body, says in (UNUSABLE[0], UNUSABLE[-1]):
        path.write_bytes(body)
        out = run.cli("memory", "eval", str(path))
        assert out.returncode == 2 and says in out.stderr and out.stdout == "", (says, out.stderr)
    as_json = run.cli("memory", "eval", str(path), "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stderr)["error"]["code"] == "usage"
    # ... with the check the command runs (evaluation.check_fixture) naming each fault.
    for body, says in UNUSABLE[1:]:
        with pytest.raises(ValueError) as refused:
            evaluation.check_fixture(json.loads(body))
        assert says in str(refused.value), (says, refused.value)
    # The op checks the same when a client of the wire sends it directly.
    with pytest.raises(Exception, match="query 1: .q. must be a non-empty string"):
        run.op("memory.eval", queries=[{"q": " ", "expect": [1], "cat": "c"}])
    # Control: the same store scores a well-formed exam.
    assert scored(run, [{"q": "config loader", "expect": [corpus["demo"]], "cat": "c"}])["summary"]


def test_a_missing_fixture_is_a_usage_error(run, tmp_path):
    out = run.cli("memory", "eval", str(tmp_path / "nope.json"))
    assert out.returncode == 2 and "cannot read the fixture" in out.stderr


def test_the_shipped_demo_fixture_scores_the_demos_corpus(run, corpus):
    """docs/examples/eval-demo.json names claim 1, the demo's trusted finding (here too: claim 1)."""
    assert corpus["demo"] == 1
    shipped = ROOT / "docs" / "examples" / "eval-demo.json"
    report = evaluate(run, shipped)
    assert report["fixture"]["sha256"] == hashlib.sha256(shipped.read_bytes()).hexdigest()
    for path in ("recall", "context"):
        by_cat = report["summary"][path]["by_category"]
        assert by_cat["exact"]["recall@5"] == by_cat["paraphrase"]["recall@5"] == 1.0, by_cat
        assert by_cat["vocabulary"]["recall@15"] == 0.0  # words only here; the miss is named
    assert [m["class"] for q in report["queries"] for m in q["recall"]["misses"]] == ["vocabulary_mismatch"]


def test_a_private_claim_is_a_scope_exclusion_until_shared(run, corpus, tmp_path):
    alice = run.puppet("alice")
    secret = alice.call("memory.remember", kind="discovery", text="The private eval note says the flaky runner is number seven.", private=True)["id"]
    queries = [{"q": "flaky runner number seven", "expect": [secret], "cat": "pool"}]
    report = scored(run, queries)
    miss = misses(report, "recall")[("flaky runner number seven", secret)]
    assert miss["class"] == "scope_exclusion" and "private pool" in miss["why"]
    # Control: shared, the same query finds it.
    alice.call("memory.share", id=secret)
    assert scored(run, queries)["summary"]["recall"]["by_category"]["pool"]["recall@5"] == 1.0
