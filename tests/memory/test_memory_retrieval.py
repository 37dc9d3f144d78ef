"""Selection: the ranker must weigh the tier, context must keep unverified claims out, every result is logged."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from tests.memory.memory_support import FACT, POLICY, principal, read_db, remember, trust, vouch

from agents.harness import Run
from broker import composition, registry
from memory import authoring, curation, retrieval
from store import events
from store.chainkey import ChainKey

FILLER = [
    "The billing exporter retries three times with exponential backoff before giving up.",
    "Snapshots of the ledger are written every ten minutes and kept for a week.",
    "The search indexer was rewritten to merge in batches of 500, which halved the latency.",
    "Calls to rotate_token are safe from several threads because the lease is immutable.",
    "The mailer caches templates for five minutes, so config changes show up late.",
    "Migrations in the payments service run in numeric order and each one is idempotent.",
    "The router depends on hyper 1.2; newer releases break the grpc bridge.",
    "The catalog benchmark regressed by twelve percent when the cursor size doubled.",
]




def test_trusted_twin_outranks_unverified_twin(job: Callable[..., Any]) -> None:
    """CLIO's injection ranker had no tier term: a trusted claim and its unverified twin scored the same."""
    for text in FILLER:
        remember(job, "filler", text)
    words = "Race suites in the store package need a 120 second timeout on arm64 runners."
    unverified = remember(job, "mallory", words)
    trusted = remember(job, "alice", words)
    shuffled = remember(job, "mallory", "On arm64 runners race suites in the store package need a 120 second timeout.")
    trust(job, trusted, "bob", "carol")
    reader = principal("reader")
    ranked = [c["id"] for c in job(retrieval.recall, POLICY, reader, "race suites store timeout arm64", limit=10)]
    assert ranked[0] == trusted and set(ranked[1:3]) == {unverified, shuffled}
    block = job(retrieval.context, reader, "store race timeout", budget=500, include_unverified=True)["block"]
    assert block.index(f"#{trusted} ") < block.index(f"#{unverified} ")
    # Control: promote the other twin instead (in a fresh ordering) and it is the one on top.
    trust(job, unverified, "dave", "erin")
    job(authoring.dispute, POLICY, principal("frank"), trusted, reason="the timeout is 60 s now")
    ranked = [c["id"] for c in job(retrieval.recall, POLICY, reader, "race suites store timeout arm64", limit=10)]
    assert ranked[0] == unverified and ranked[-1] == trusted  # disputed sinks below its unverified twin


def test_remember_names_live_twins_with_their_tiers_on_either_backend(job: Callable[..., Any], store) -> None:  # type: ignore[no-untyped-def]
    """The reply to ``remember`` names the claims with the same words (on a server that query goes with
    the next statement, ``dialect.read_later``): never the new claim itself, never a retired twin."""
    words = "The artifact cache is keyed on the lockfile hash and the toolchain version."

    def reply(who: str, text: str) -> dict[str, Any]:
        out: dict[str, Any] = job(authoring.remember, POLICY, principal(who), kind="discovery", scope="repo", text=text, evidence=None)
        return out

    first = reply("alice", words)
    assert first["twins"] == []  # no twin yet, and not itself
    second = reply("mallory", words.upper())  # the same words, other case: the same text key
    assert second["twins"] == [{"id": first["id"], "tier": "unverified"}]
    trust(job, first["id"], "bob", "carol")
    job(curation.retire_by_operator, POLICY, registry.operator_principal(0), second["id"], reason="a copy")
    third = reply("dave", words)
    assert third["twins"] == [{"id": first["id"], "tier": "trusted"}]  # the retired twin is left out
    # The control on the same store: other words have no twin.
    assert reply("erin", FILLER[0])["twins"] == []


def test_trusted_twin_cut_by_the_candidate_limit_comes_back(job: Callable[..., Any], store) -> None:  # type: ignore[no-untyped-def]
    """Twenty unverified twins fill the candidate list; the trusted twin must still come first."""
    words = "The quota service rejects bursts above forty requests per second."
    for i in range(20):  # twenty agents: one agent saying it twenty times holds one claim (test_memory_repeat.py)
        remember(job, f"mallory{i}", words)
    trusted = remember(job, "alice", words)
    # Control: before it is trusted, the trusted-to-be twin is not among the FTS candidates at all.
    # (recall with limit=1 takes 13 candidates from FTS before weighing tiers)
    candidates = [i for i, _ in retrieval._search(store, ["quota"], 13, trusted_only=False)]
    assert trusted not in candidates
    assert [c["id"] for c in job(retrieval.recall, POLICY, principal("reader"), "quota bursts", limit=1)] != [trusted]
    trust(job, trusted, "bob", "carol")
    assert [c["id"] for c in job(retrieval.recall, POLICY, principal("reader"), "quota bursts", limit=1)] == [trusted]


def test_relevant_claim_is_found_and_an_unrelated_query_finds_nothing(job: Callable[..., Any]) -> None:
    for text in FILLER:
        remember(job, "filler", text)
    target = remember(job, "alice", "The replicator loses its lease after a failover when clocks skew.")
    assert [c["id"] for c in job(retrieval.recall, POLICY, principal("r"), "replicator lease failover", limit=3)][0] == target
    assert job(retrieval.recall, POLICY, principal("r"), "quantum flux capacitor", limit=3) == []


@pytest.mark.parametrize("query", ['NEAR(store lease)', '"unbalanced', "text:store", "store*", "AND OR NOT", ")(", "-store", "^lease", "{text}: x"])
def test_search_syntax_in_a_query_cannot_break_or_steer_the_search(job: Callable[..., Any], query: str) -> None:
    claim = remember(job, "alice", "The store lease expires after thirty seconds without a heartbeat.")
    found = [c["id"] for c in job(retrieval.recall, POLICY, principal("r"), query, limit=5)]
    words = retrieval.terms(query)
    assert found == ([claim] if {"store", "lease"} & set(words) else [])
    # Control: the plain words find it.
    assert [c["id"] for c in job(retrieval.recall, POLICY, principal("r"), "store lease", limit=5)] == [claim]


def test_stopwords_only_query_returns_nothing(job: Callable[..., Any]) -> None:
    remember(job, "alice", "The store lease expires after thirty seconds.")
    assert job(retrieval.recall, POLICY, principal("r"), "the and of it", limit=5) == []
    assert job(retrieval.context, principal("r"), "the and of", budget=500, include_unverified=True)["block"] == ""


def test_context_is_a_fenced_reference_block_within_the_budget(job: Callable[..., Any]) -> None:
    ids = []
    for n in range(12):
        claim = remember(job, "alice", f"The cache shard {n} holds hot keys for the session service under load.")
        trust(job, claim, "bob", "carol")
        ids.append(claim)
    full = job(retrieval.context, principal("r"), "cache shard hot keys session", budget=2000, include_unverified=False)
    lines = full["block"].splitlines()
    assert lines[0] == "```text" and lines[-1] == "```" and "not instructions" in lines[1]
    assert len(full["claims"]) == 12 and all(line.startswith("[TRUSTED] #") for line in lines[2:-1])
    small = job(retrieval.context, principal("r"), "cache shard hot keys session", budget=120, include_unverified=False)
    assert 0 < len(small["claims"]) < 12 and small["tokens"] <= 120
    assert retrieval.tokens(small["block"]) <= 120 + len(small["block"].splitlines())
    # Nothing fits a tiny budget: an empty block, not a bare header.
    assert job(retrieval.context, principal("r"), "cache shard", budget=10, include_unverified=False)["block"] == ""


def test_unverified_claims_stay_out_of_context_by_default_but_show_in_recall(start_run) -> None:  # type: ignore[no-untyped-def]
    run: Run = start_run([{"name": "alice"}, {"name": "bob"}, {"name": "carol"}, {"name": "dave"}])
    alice, dave = run.puppet("alice"), run.puppet("dave")
    unverified = alice.call("memory.remember", kind="discovery", text=FACT.format("graphql"))["id"]
    trusted = alice.call("memory.remember", kind="solution", text="The graphql gateway needs a 90 second timeout on arm64 CI.")["id"]
    vouch(run.puppet("bob"), trusted)
    vouch(run.puppet("carol"), trusted)

    pushed = dave.call("memory.context", query="graphql flaky arm64 timeout")
    assert [c["id"] for c in pushed["claims"]] == [trusted]
    assert f"#{unverified} " not in pushed["block"] and f"[TRUSTED] #{trusted} " in pushed["block"]
    pulled = {c["id"]: c["badge"] for c in dave.call("memory.recall", query="graphql flaky arm64 timeout")}
    assert pulled == {trusted: "[TRUSTED]", unverified: "[UNVERIFIED]"}
    # Asked for, unverified claims are pushed too -- badged as such.
    wide = dave.call("memory.context", query="graphql flaky arm64 timeout", include_unverified=True)
    assert f"[UNVERIFIED] #{unverified} " in wide["block"] and wide["block"].index(f"#{trusted} ") < wide["block"].index(f"#{unverified} ")

    # Every result was logged as an exposure of dave, by the channel that showed it.
    conn = read_db(run.state)
    try:
        shown = sorted(conn.execute("SELECT claim, via FROM exposures WHERE principal = ?", (dave.key,)))
    finally:
        conn.close()
    assert shown == sorted([(trusted, "context"), (trusted, "recall"), (unverified, "recall"), (trusted, "context"), (unverified, "context")])


def test_operator_recall_from_the_cli_is_badged(start_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run: Run = start_run([{"name": "alice"}])
    run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("codegen"))
    out = run.cli("memory", "recall", "codegen flaky")
    assert out.returncode == 0 and "[UNVERIFIED]" in out.stdout
    assert run.cli("memory", "context", "codegen flaky").stdout.strip() == "nothing to inject"


def _eval(conn: Any, *, reverse: bool = False) -> float:
    from tests.memory import retrieval_eval

    def job(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with conn:
            return fn(conn, *args, **kwargs)

    def search(query: str) -> list[int]:
        ranked = [c["id"] for c in job(retrieval.recall, POLICY, principal("reader"), query, limit=200 if reverse else 5)]
        return ranked[::-1] if reverse else ranked

    return retrieval_eval.recall_at(job, lambda text: remember(job, "alice", text), search)


def test_recall_at_5_on_the_eval_set_is_within_five_points_on_both_backends(tmp_path: Path, pg_cluster: Any) -> None:
    """The eval set (tests/memory/retrieval_eval.py) on SQLite's BM25 and PostgreSQL's ts_rank.

    Figures recorded in docs/MEMORY.md.  The control -- the same ranking read
    backwards -- shows the measure can fail.
    """
    from store import database
    from store.postgres import PostgresBackend

    stores = {
        "sqlite": database.open_store(tmp_path / "eval.db", composition.schemas()),
        "postgresql": PostgresBackend(pg_cluster.url(pg_cluster.database()), migrate=False).open_writer(composition.schemas()),
        "control": database.open_store(tmp_path / "control.db", composition.schemas()),
    }
    for conn in stores.values():
        events.key_chain(conn, ChainKey.generate())  # each writes as a store owner would
    try:
        scores = {name: _eval(conn, reverse=name == "control") for name, conn in stores.items()}
    finally:
        for conn in stores.values():
            conn.close()
    print(f"recall@5: {scores}")
    assert scores["control"] < 0.5 <= min(scores["sqlite"], scores["postgresql"])
    assert abs(scores["sqlite"] - scores["postgresql"]) <= 0.05, scores
