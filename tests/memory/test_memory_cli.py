"""The memory from a terminal: a claim's trail, witnesses' evidence, text from stdin,
refusals that read the same everywhere, paging and a complete export."""

from __future__ import annotations

import json
import re
from typing import Iterator

import pytest

from agents.harness import Run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    run = Run(tmp_path_factory.mktemp("memcli"), [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}])
    try:
        yield run.start()
    finally:
        run.close()


@pytest.fixture(scope="module")
def story(run: Run) -> dict[str, int]:
    """alice writes a claim; bob is shown it, then vouches; carol vouches blind; alice revises it;
    carol disputes the new edition; the operator promotes it."""
    alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
    first = alice.call("memory.remember", kind="discovery", text="The importer skips hidden files when it walks a tree.", evidence="read importer.walk")
    bob.call("memory.recall", query="importer hidden files")
    bob.call("memory.corroborate", id=first["id"], evidence="bob ran the importer on a tree with .hidden")
    carol.call("memory.corroborate", id=first["id"], evidence="carol's own test of walk(): hidden files are skipped when the importer walks a tree.")
    second = alice.call("memory.revise", id=first["id"], text="The importer skips hidden files and directories when it walks a tree.")
    carol.call("memory.dispute", id=second["id"], reason="directories are walked in carol's test")
    run.op("memory.promote", id=second["id"], reason="checked by hand")
    return {"first": first["id"], "second": second["id"]}


def test_a_claims_trail_shows_every_edition_and_everyone_who_touched_it(run, story):
    rows = json.loads(run.cli("memory", "trail", str(story["second"]), "--json").stdout)
    seen = [(r["principal"].split(":")[0], r["action"], r["claim"]) for r in rows]
    first, second = story["first"], story["second"]
    for expected in [
        ("alice", "authored", first),
        ("bob", "shown", first),
        ("bob", "corroborated", first),
        ("carol", "corroborated", first),
        ("alice", "revised", second),
        ("carol", "disputed", second),
        ("operator", "promoted", second),
    ]:
        assert expected in seen, (expected, seen)
    bob_vouch = next(r for r in rows if r["action"] == "corroborated" and r["principal"].startswith("bob:"))
    carol_vouch = next(r for r in rows if r["action"] == "corroborated" and r["principal"].startswith("carol:"))
    assert bob_vouch["blind"] is False and carol_vouch["blind"] is True  # bob had been shown it, carol had not
    assert any(r["action"] == "tier" for r in rows), "tier changes belong to the trail"
    evented = [r["seq"] for r in rows if r["seq"] is not None]
    assert evented == sorted(evented)  # in the event log's order (memory.trails)
    # Asked from either edition, the trail is the same.
    assert json.loads(run.cli("memory", "trail", str(first), "--json").stdout) == rows
    human = run.cli("memory", "trail", str(second))
    assert human.returncode == 0 and f"trail of claim {second}" in human.stdout and "informed" in human.stdout and "blind" in human.stdout


def test_an_agents_trail_is_kept_and_an_unknown_agent_is_an_error(run, story):
    bob = run.cli("memory", "trail", "--agent", "bob", "--json")
    assert bob.returncode == 0 and {r["action"] for r in json.loads(bob.stdout)} == {"corroborated"}
    nobody = run.cli("memory", "trail", "--agent", "bobby")
    assert nobody.returncode == 1 and "no agent named bobby has run" in nobody.stderr and nobody.stdout == ""
    both = run.cli("memory", "trail", str(story["first"]), "--agent", "bob")
    neither = run.cli("memory", "trail")
    assert both.returncode == neither.returncode == 2 and "not both" in both.stderr


def test_show_prints_each_witnesss_evidence(run, story):
    shown = run.cli("memory", "show", str(story["first"]))
    assert shown.returncode == 0
    assert re.search(r"corroborated by bob:\S+ .*\n +evidence: bob ran the importer on a tree with \.hidden", shown.stdout)
    assert re.search(r"corroborated by carol:\S+ .*\n +evidence: carol's own test of walk\(\): hidden files", shown.stdout)


def test_remember_reads_its_text_from_stdin(run):
    text = "The build cache lives in .cache/build and is safe to delete between runs."
    out = run.puppet("alice").sh(*conclave_args("memory", "remember", "--kind", "discovery", "--text", "-", "--json"), stdin=text + "\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["text"] == text


def conclave_args(*args: str) -> list[str]:
    from broker.entry import conclave_argv

    return conclave_argv(*args)


def test_too_much_text_is_refused_with_the_same_words_in_an_agent_and_at_a_terminal(run):
    """Past the wire's 1 MiB line the broker hangs up on a request; the refusal must
    still be the op's own sentence, inside an agent as at the operator's terminal."""
    alice = run.puppet("alice")
    for size in (20_000, 2_000_000):
        body = "x" * size
        as_agent = alice.sh(*conclave_args("msg", "send", "--to", "operator", "-"), stdin=body)
        as_operator = run.cli("msg", "send", "--to", "alice", "-", stdin=body)
        expected = f"conclave: msg.send: the body is {size} bytes; the limit is 16384 bytes of UTF-8"
        assert as_agent.returncode == as_operator.returncode == 1
        assert as_agent.stderr.startswith(expected) and as_agent.stderr == as_operator.stderr, (as_agent.stderr, as_operator.stderr)
        assert "line_too_long" not in as_agent.stderr
    for size in (5_000, 2_000_000):
        claim = alice.sh(*conclave_args("memory", "remember", "--kind", "discovery", "--text", "-"), stdin="word " * (size // 5))
        assert claim.returncode == 1 and claim.stderr == f"conclave: memory.remember: text is {size} characters; at most 4000 [invalid_args]\n"
    # The CLI's words are the op's own (what a client of the wire or MCP is told).
    direct = alice.try_call("memory.remember", kind="discovery", text="word " * 1000)
    assert direct["error"] == {"code": "invalid_args", "message": "memory.remember: text is 5000 characters; at most 4000"}
    # Control: text within the limits goes through.
    assert alice.sh(*conclave_args("msg", "send", "--to", "operator", "-"), stdin="x" * 1000).returncode == 0


def test_list_pages_on_with_before(run, story):
    everything = [c["id"] for c in json.loads(run.cli("memory", "list", "--all", "--limit", "1000", "--json").stdout)]
    assert len(everything) >= 3 and everything == sorted(everything, reverse=True)
    first = run.cli("memory", "list", "--all", "--limit", "2")
    assert f"more: conclave memory list --before {everything[1]} --limit 2" in first.stdout
    pages, before = [], None
    while True:
        args = ["memory", "list", "--all", "--limit", "2", "--json"] + (["--before", str(before)] if before else [])
        page = [c["id"] for c in json.loads(run.cli(*args).stdout)]
        if not page:
            break
        pages += page
        before = page[-1]
    assert pages == everything


def test_export_writes_every_claim_with_its_biography(run, story):
    out = run.cli("memory", "export", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    claims = [json.loads(line) for line in out.stdout.splitlines()]
    assert [c["id"] for c in claims] == sorted(c["id"] for c in claims)
    every = {c["id"] for c in json.loads(run.cli("memory", "list", "--all", "--limit", "1000", "--json").stdout)}
    assert {c["id"] for c in claims} == every  # superseded editions included
    first = next(c for c in claims if c["id"] == story["first"])
    assert {w["evidence"] for w in first["corroborations"]} == {"bob ran the importer on a tree with .hidden", "carol's own test of walk(): hidden files are skipped when the importer walks a tree."}
    assert first["tier"] == "superseded" and {e["id"] for e in first["editions"]} == {story["first"], story["second"]}
    second = next(c for c in claims if c["id"] == story["second"])
    assert second["disputes"] and second["promotions"] and "memory.tier" in {h["kind"] for h in second["history"]}
    # Paging by the op: pages of two join up to the same claims, in order.
    ids, after = [], 0
    while after is not None:
        page = run.op("memory.export", after=after, limit=2)
        ids += [c["id"] for c in page["claims"]]
        after = page["next"]
    assert ids == [c["id"] for c in claims]
    markdown = run.cli("memory", "export", "--format", "markdown").stdout
    assert all(f"## Claim {i}:" in markdown for i in every) and "carol's own test of walk()" in markdown
    assert run.cli("memory", "export", "--format", "xml").returncode == 2


def test_a_workflow_given_as_an_order_is_refused_with_its_fact_form_and_the_fact_form_is_stored(run):
    """Issue 23: `memory remember --kind workflow --text "Run the tests with python3 -m pytest -q"`
    is an order to the reader; the refusal says how to state it as a fact, and that fact is stored."""
    alice = run.puppet("alice")
    order = alice.sh(*conclave_args("memory", "remember", "--kind", "workflow", "--text", "Run the tests with python3 -m pytest -q"))
    assert order.returncode == 1, order.stdout
    assert "rule directive" in order.stderr and "nothing was stored" in order.stderr
    assert 'write "The tests run with `python3 -m pytest -q`"' in order.stderr, order.stderr
    # The same refusal, with the same advice, for a client of the wire or MCP.
    direct = alice.try_call("memory.remember", kind="workflow", text="Run the tests with python3 -m pytest -q")
    assert direct["error"]["code"] == "rejected" and "The tests run with `python3 -m pytest -q`" in direct["error"]["message"]
    # Control: the advice, followed, is stored -- a command in backquotes, mentioned as a fact.
    for fact in ("The tests run with `python3 -m pytest -q`", "The tests run with `python3 -m pytest -q` from the repository root."):
        stored = alice.sh(*conclave_args("memory", "remember", "--kind", "workflow", "--text", fact, "--json"))
        assert stored.returncode == 0, stored.stderr
        assert json.loads(stored.stdout)["text"] == fact
    # A dangerous command stays refused in backquotes: the advice is not a way around `executable`.
    wiper = alice.try_call("memory.remember", kind="workflow", text="The cache is cleared with `rm -rf ~/.cache/build`.")
    assert wiper["error"]["code"] == "rejected" and "rule executable" in wiper["error"]["message"]
