"""The trust graph: who vouched for whom, grouped by trust domain.

The model and its renderers are pure and tested on hand-made claims; the
selection and the command run against a real broker whose puppets author,
corroborate (blind and informed, from another domain and from the author's
own), and dispute.  SVG needs Graphviz's ``dot``: one test proves the
message when it is missing (a PATH without it), another the real SVG --
and fails, saying how to install it, on a machine without Graphviz
(``make test`` installs it; see the Makefile).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.memory.memory_support import vouch

from agents.harness import Run
from memory import graph
from memory.graphviz import GraphvizError, find_dot, to_svg


def claim(cid: int, author: str, corroborations: list[dict[str, Any]] = (), disputes: list[dict[str, Any]] = (), **extra: Any) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "id": cid,
        "author": author,
        "author_domain": author.split(":")[0].split("/")[0],
        "tier": extra.pop("tier", "unverified"),
        "text": extra.pop("text", f"claim {cid} text"),
        "corroborations": list(corroborations),
        "disputes": list(disputes),
        **extra,
    }


def witness(principal: str, *, blind: bool = False, counted: bool = True, reason: str | None = None) -> dict[str, Any]:
    return {"principal": principal, "domain": principal.split(":")[0].split("/")[0], "blind": blind, "counted": counted, "reason_not_counted": reason}


# -- the model (pure) -----------------------------------------------------------------------


def test_witnesses_become_edges_to_the_author_grouped_by_domain() -> None:
    drawn = graph.build(
        "claim 1",
        [
            claim(
                1,
                "alice:s1",
                corroborations=[
                    witness("bob:s2", blind=True),
                    witness("carol:s3"),
                    witness("alice/helper:s4", counted=False, reason="author_domain"),
                    witness("bob/kid:s5", counted=False, reason="domain_already_counted"),
                ],
                disputes=[witness("dave:s6", counted=False, reason="covered_by_promotion")],
                tier="trusted",
            )
        ],
    )
    assert {d: [n.principal for n in ns] for d, ns in drawn.domains().items()} == {
        "alice": ["alice/helper:s4", "alice:s1"],
        "bob": ["bob/kid:s5", "bob:s2"],
        "carol": ["carol:s3"],
        "dave": ["dave:s6"],
    }
    assert [(e.source, e.target, e.label) for e in drawn.edges] == [
        ("bob:s2", "alice:s1", "#1 blind, counted"),
        ("carol:s3", "alice:s1", "#1 informed, counted"),
        ("alice/helper:s4", "alice:s1", "#1 informed, not counted: author's own domain"),
        ("bob/kid:s5", "alice:s1", "#1 informed, not counted: domain already counted"),
        ("dave:s6", "alice:s1", "#1 disputed, not counted: covered by the operator's promotion"),
    ]
    author = next(n for n in drawn.nodes if n.principal == "alice:s1")
    assert author.authored == (1,) and [n.authored for n in drawn.nodes if n.principal != "alice:s1"] == [()] * 5
    # The wire form survives a round trip.
    assert graph.TrustGraph.from_dict(json.loads(json.dumps(drawn.as_dict()))) == drawn


def test_the_same_principal_across_claims_is_one_node_and_a_repeated_claim_is_drawn_once() -> None:
    one = claim(1, "alice:s1", corroborations=[witness("bob:s2")])
    drawn = graph.build("agent bob", [one, claim(2, "bob:s2", corroborations=[witness("alice:s1", blind=True)]), one])
    assert [n.principal for n in drawn.nodes] == ["alice:s1", "bob:s2"]
    assert [(e.source, e.target, e.claim) for e in drawn.edges] == [("bob:s2", "alice:s1", 1), ("alice:s1", "bob:s2", 2)]
    assert [c.id for c in drawn.claims] == [1, 2]


def test_a_claim_without_what_a_graph_needs_is_refused_naming_the_field() -> None:
    good = claim(1, "alice:s1", corroborations=[witness("bob:s2")])
    assert graph.build("x", [good]).edges  # control: the same claim, whole, draws
    for broken, field in (
        ({k: v for k, v in good.items() if k != "author_domain"}, "author_domain"),
        ({k: v for k, v in good.items() if k != "corroborations"}, "corroborations"),
        ({**good, "corroborations": [{"principal": "bob:s2"}]}, "domain"),
    ):
        with pytest.raises(graph.GraphError, match=f"'{field}'"):
            graph.build("x", [broken])
    with pytest.raises(graph.GraphError, match="text, dot, mermaid"):
        graph.render(graph.build("x", [good]), "svg")


def test_text_rendering_names_domains_members_and_every_verdict() -> None:
    drawn = graph.build("claim 1", [claim(1, "alice:s1", corroborations=[witness("bob:s2", blind=True), witness("alice:s3", counted=False, reason="author_domain")])])
    text = graph.to_text(drawn)
    assert "[alice]" in text and "[bob]" in text
    assert "alice:s1  (author of #1)" in text
    assert re.search(r"bob:s2\s+--> alice:s1\s+#1 blind, counted", text)
    assert re.search(r"alice:s3\s+--> alice:s1\s+#1 informed, not counted: author's own domain", text)
    empty = graph.to_text(graph.build("claim 2", [claim(2, "carol:s9")]))
    assert "no witnesses yet" in empty and "carol:s9" in empty  # control: an author alone is still drawn


HOSTILE = 'eve"];\n evil -> x [label="pwned'


def test_dot_and_mermaid_quote_hostile_names_so_they_stay_inside_their_label() -> None:
    """A name with quotes, brackets and a newline must not close its label and add graph statements."""
    drawn = graph.build("claim 1", [claim(1, "alice:s1", corroborations=[witness(f"bob:{HOSTILE}")], text=HOSTILE)])
    dot = graph.to_dot(drawn)
    # Every line is one statement we wrote: no line starts with the attacker's `evil`.
    assert not any(line.strip().startswith("evil") for line in dot.splitlines())
    assert '\\"];\\n evil' in dot  # the name is there, escaped
    mermaid = graph.to_mermaid(drawn)
    assert not any(line.strip().startswith("evil") for line in mermaid.splitlines())
    assert "#34;" in mermaid and "#93;" in mermaid  # the quote and bracket are entities
    for line in mermaid.splitlines():
        if "|" in line:  # an edge: exactly one quoted label between the pipes
            assert line.count('"') == 2 and line.count("|") == 2, line
    # The title is front matter: a subject with quotes and a line of dashes stays one quoted line.
    titled = graph.to_mermaid(graph.build(f"agent {HOSTILE}\n---\nflowchart TB", []))
    head = titled.splitlines()[:4]
    assert head[0] == "---" and head[1].startswith('title: "') and head[1].endswith('"') and head[2:] == ["---", "flowchart LR"]


def test_graphviz_parses_the_hostile_dot_as_one_graph_of_our_nodes() -> None:
    dot_program = need_graphviz()
    drawn = graph.build("claim 1", [claim(1, "alice:s1", corroborations=[witness(f"bob:{HOSTILE}")], text=HOSTILE)])
    canon = subprocess.run([dot_program, "-Tcanon"], input=graph.to_dot(drawn), capture_output=True, text=True, check=True).stdout
    assert "evil" not in re.findall(r"^\s*(\w+)\s*->", canon, re.M)
    assert sorted(set(re.findall(r"^\s*([nc]\d+)\s*\[", canon, re.M))) == ["c1", "n0", "n1"]  # two principals, one claim box


# -- what a person reads in the picture ----------------------------------------------------------

TWO_CLAIMS = [
    claim(
        1, "alice:s1", tier="trusted", text="The parser tests need the zstd fixtures unpacked first, or they fail with a confusing FileNotFoundError.",
        corroborations=[witness("bob:s2", blind=True), witness("alice/helper:s4", counted=False, reason="author_domain")],
    ),
    claim(2, "bob:s2", tier="disputed", text="The lint step fails on python 3.13 images.", corroborations=[witness("alice:s1")], disputes=[witness("carol:s3")]),
]


def test_pictures_show_each_claims_tier_and_words_where_its_witnesses_point() -> None:
    """Edges used to say `#2` and nothing else: a person had to look the claim up elsewhere."""
    drawn = graph.build("agent alice", TWO_CLAIMS)
    dot = graph.to_dot(drawn)
    # Each claim is a box, coloured by its tier, with its words; every witness points at it, the author "wrote" it.
    fill, line = graph.TIER_COLOURS["trusted"]
    box = next(l for l in dot.splitlines() if l.strip().startswith("c1 ["))
    assert '"#1 [trusted]\\nThe parser tests need the zstd' in box and f'fillcolor="{fill}"' in box and f'color="{line}"' in box
    assert box.count("\\n") == graph.BOX_LINES and "\u2026" in box  # long text: cut, and it says so
    assert f'fillcolor="{graph.TIER_COLOURS["disputed"][0]}"' in next(l for l in dot.splitlines() if l.strip().startswith("c2 ["))
    ids = {n.principal: f"n{i}" for i, n in enumerate(drawn.nodes)}
    assert f'{ids["bob:s2"]} -> c1 [label="#1 blind, counted"' in dot
    assert f'{ids["alice:s1"]} -> c1 [label="wrote"' in dot and f'{ids["bob:s2"]} -> c2 [label="wrote"' in dot
    # The box sits in its author's domain.
    alice_cluster = dot.split('label="domain alice";')[1].split("}")[0]
    assert "c1 [" in alice_cluster and "c2 [" not in alice_cluster
    # Every line of a box fits its width.
    for ref in drawn.claims:
        assert all(len(text) <= graph.BOX_WIDTH for text in ref.box()[1:])


def test_mermaid_has_a_title_tier_colours_and_the_same_edge_colours_as_dot() -> None:
    drawn = graph.build("agent alice", TWO_CLAIMS)
    mermaid = graph.to_mermaid(drawn)
    lines = mermaid.splitlines()
    assert lines[:4] == ["---", 'title: "trust graph of agent alice"', "---", "flowchart LR"]
    assert any(l.strip().startswith('c1["#35;1 #91;trusted#93;<br/>The parser tests') for l in lines)
    for tier in ("trusted", "disputed"):
        fill, line = graph.TIER_COLOURS[tier]
        assert f"  classDef {tier} fill:{fill},stroke:{line},color:{line}" in lines
    assert "  class c1 trusted" in lines and "  class c2 disputed" in lines
    assert not any("classDef unverified" in l for l in lines)  # only the tiers drawn
    # Links are styled by their order: the witness edges first, then "wrote".
    links = [l for l in lines if "-->" in l or "-.->" in l or "--x" in l or "-.-x" in l or "==>" in l]
    styles = {int(i): l.split()[2] for l in lines if l.strip().startswith("linkStyle") for i in l.split()[1].split(",")}
    assert sorted(styles) == list(range(len(links)))
    colour_of = {"counted": graph.EDGE_COLOURS["counted"], "not counted": graph.EDGE_COLOURS["not counted"], "disputed": graph.EDGE_COLOURS["disputed"]}
    for i, link in enumerate(links):
        want = graph.EDGE_COLOURS["wrote"] if "wrote" in link else colour_of["disputed"] if "disputed" in link else colour_of["not counted"] if "not counted" in link else colour_of["counted"]
        assert styles[i] == f"stroke:{want},color:{want}", (link, styles[i])
    # The same colours as DOT's.
    dot = graph.to_dot(drawn)
    assert all(colour in dot for colour in graph.EDGE_COLOURS.values())


def test_pictures_are_the_same_whatever_order_the_claims_arrive_in() -> None:
    forward, backward = graph.build("x", TWO_CLAIMS), graph.build("x", list(reversed(TWO_CLAIMS)))
    for fmt in graph.FORMATS:
        assert graph.render(forward, fmt) == graph.render(backward, fmt), fmt


def test_text_groups_witnesses_under_each_claims_tier_and_words() -> None:
    text = graph.to_text(graph.build("agent alice", TWO_CLAIMS))
    section = text.split("who vouched for whom:\n")[1].splitlines()
    assert section[0] == "  #1 [trusted] The parser tests need the zstd fixtures unpacked first, or \u2026"
    assert section[1].startswith("    bob:s2") and "#1 blind, counted" in section[1]
    assert any(l.startswith("  #2 [disputed] The lint step fails on python 3.13 images.") for l in section)
    # One claim drawn: its line at the top says it all, no heading repeats it.
    one = graph.to_text(graph.build("claim 1", TWO_CLAIMS[:1]))
    assert "  #1 [trusted]" not in one.split("who vouched for whom:")[1]


# -- Graphviz ----------------------------------------------------------------------------------


def need_graphviz() -> str:
    """The ``dot`` program, or fail saying how to get it (never skip)."""
    try:
        return find_dot()
    except GraphvizError as exc:
        pytest.fail(f"this test needs Graphviz: {exc} (make test installs it when run as root with apt-get)")


def test_a_missing_graphviz_is_named_with_the_fix(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    with pytest.raises(GraphvizError, match="apt-get install graphviz"):
        find_dot(str(empty))
    # Control: a directory that holds an executable called dot is found.
    fake = empty / "dot"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    assert find_dot(str(empty)) == str(fake)
    with pytest.raises(GraphvizError, match="failed: exit 3, no SVG"):
        to_svg("digraph { a -> b }", dot=str(fake))


def test_real_graphviz_draws_svg() -> None:
    svg = to_svg(graph.to_dot(graph.build("claim 1", [claim(1, "alice:s1", corroborations=[witness("bob:s2", blind=True)])])), dot=need_graphviz())
    text = svg.decode()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "domain alice" in text and "#1 blind, counted" in text
    assert "#1 [unverified]" in text and "claim 1 text" in text and graph.TIER_COLOURS["unverified"][0] in text  # the claim's box


# -- against a real broker -------------------------------------------------------------------


@pytest.fixture(scope="module")
def vouched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, dict[str, int]]]:
    team = [{"name": "alice", "may_spawn": 1}, {"name": "bob"}, {"name": "carol"}, {"name": "dave"}]
    with Run(tmp_path_factory.mktemp("graph"), team) as run:
        alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
        first = alice.call("memory.remember", kind="discovery", text="The build uses ninja on linux hosts.")["id"]
        carol.call("memory.recall", query="ninja build linux")  # carol reads it first: her vouch is informed
        bob.call("memory.corroborate", id=first, evidence="Checked on my linux host: the build runs with ninja.")  # blind: never shown it
        vouch(carol, first)
        run.spawn_puppet("alice", "helper").call("memory.corroborate", id=first)  # the author's own family
        second = bob.call("memory.remember", kind="failure", text="The lint step fails on python 3.13 images.")["id"]
        alice.call("memory.dispute", id=second, reason="it passes on the 3.13 image here")
        lonely = carol.call("memory.remember", kind="pattern", text="Fixtures live beside the tests that use them.")["id"]
        yield run, {"first": first, "second": second, "lonely": lonely}


def test_graph_of_a_claim_shows_blind_informed_counted_and_the_authors_own_domain(vouched: tuple[Run, dict[str, int]]) -> None:
    run, ids = vouched
    done = run.cli("memory", "graph", str(ids["first"]), "--json")
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout)
    labels = {(e["source"].split(":")[0], e["label"]) for e in drawn["edges"]}
    n = ids["first"]
    assert labels == {
        ("bob", f"#{n} blind, counted"),
        ("carol", f"#{n} informed, counted"),
        ("alice/helper", f"#{n} informed, not counted: author's own domain"),
    }
    assert set(drawn["domains"]) == {"alice", "bob", "carol"}
    assert len(drawn["domains"]["alice"]) == 2  # the author and its child: one box
    text = run.cli("memory", "graph", str(n))
    assert text.returncode == 0 and "[alice]" in text.stdout and "blind, counted" in text.stdout


def test_graph_of_an_agent_takes_what_it_authored_and_what_it_witnessed(vouched: tuple[Run, dict[str, int]]) -> None:
    run, ids = vouched
    alice = json.loads(run.cli("memory", "graph", "--agent", "alice", "--json").stdout)
    assert [c["id"] for c in alice["claims"]] == [ids["first"], ids["second"]]  # authored one, disputed the other
    assert any(e["kind"] == "disputed" and e["source"].startswith("alice:") for e in alice["edges"])
    carol = json.loads(run.cli("memory", "graph", "--agent", "carol", "--json").stdout)
    assert [c["id"] for c in carol["claims"]] == [ids["first"], ids["lonely"]]
    everything = json.loads(run.cli("memory", "graph", "--json").stdout)
    assert [c["id"] for c in everything["claims"]] == [ids["first"], ids["second"]]  # a claim with no witness is left out


def test_graph_refuses_an_unknown_agent_and_two_selectors(vouched: tuple[Run, dict[str, int]]) -> None:
    run, ids = vouched
    unknown = run.cli("memory", "graph", "--agent", "zed")
    assert unknown.returncode == 1 and "no agent named 'zed' has run here" in unknown.stderr
    quiet = run.cli("memory", "graph", "--agent", "dave", "--json")  # control: dave ran and did nothing
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["claims"] == []
    both = run.cli("memory", "graph", str(ids["first"]), "--agent", "alice")
    assert both.returncode == 2 and "not both" in both.stderr
    session = run.cli("memory", "graph", "--agent", "alice:abc")
    assert session.returncode == 1 and "not AGENT:SESSION" in session.stderr
    fmt = run.cli("memory", "graph", "--format", "png")
    assert fmt.returncode == 2 and "text, dot, mermaid, svg" in fmt.stderr


def test_dot_and_mermaid_from_the_command(vouched: tuple[Run, dict[str, int]]) -> None:
    run, ids = vouched
    dot = run.cli("memory", "graph", str(ids["first"]), "--format", "dot")
    assert dot.returncode == 0 and dot.stdout.startswith("digraph trust {") and dot.stdout.count("subgraph cluster_") == 3
    assert "style=dashed" in dot.stdout and "style=solid" in dot.stdout
    mermaid = run.cli("memory", "graph", "--agent", "alice", "--format", "mermaid")
    assert mermaid.returncode == 0 and mermaid.stdout.startswith('---\ntitle: "trust graph of agent alice"\n---\nflowchart LR') and "--x|" in mermaid.stdout
    assert "classDef disputed" in mermaid.stdout and "linkStyle" in mermaid.stdout


def test_svg_without_graphviz_says_so_and_writes_nothing(vouched: tuple[Run, dict[str, int]], tmp_path: Path) -> None:
    run, ids = vouched
    bare = tmp_path / "bin"
    bare.mkdir()
    out = tmp_path / "graph.svg"
    missing = run.cli("memory", "graph", str(ids["first"]), "--format", "svg", "-o", str(out), env={"PATH": str(bare)})
    assert missing.returncode == 1 and missing.stdout == ""
    assert "needs Graphviz's `dot` program, which is not on PATH" in missing.stderr and "apt-get install graphviz" in missing.stderr
    assert not out.exists()
    # Control: with Graphviz on PATH the same command writes a real SVG.
    dot_dir = str(Path(need_graphviz()).parent)
    drawn = run.cli("memory", "graph", str(ids["first"]), "--format", "svg", "-o", str(out), env={"PATH": dot_dir + os.pathsep + os.environ.get("PATH", "")})
    assert drawn.returncode == 0, drawn.stderr
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "domain bob" in svg and "blind, counted" in svg
    assert shutil.which("dot") is not None  # the same machine, asked directly


def test_a_claims_escape_sequences_never_reach_the_operators_terminal() -> None:
    """An agent writes a claim that would retitle the operator's window and clear the screen."""
    drawn = graph.build("claim 1", [claim(1, "alice:s1", text="The build is fast\x1b]0;pwned\x07\x1b[2J on linux.")])
    for fmt in ("text", "dot", "mermaid"):
        out = graph.render(drawn, fmt)
        assert "\x1b" not in out and "\x07" not in out, fmt
    assert "The build is fast on linux." in graph.to_text(drawn)  # control: the words themselves stay
