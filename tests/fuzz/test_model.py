"""The fuzzer's reference model: independent of what it checks, and true to the docs on the cases they spell out.

The model (tests/fuzz/model.py) states the trust, lock and mail rules again
from docs/MEMORY.md, docs/LOCKS.md and docs/MESSAGING.md.  If it imported the
code it checks, a bug there would agree with itself; the first test holds
it to importing nothing of conclave (and shows the check catches an import
that would).  The rest pin the model to the docs' own examples, so a
mistake in the model is found here rather than reported as the broker's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fuzz.model import Memory, Policy, Registry

MODEL = Path(__file__).with_name("model.py")
CONCLAVE = {"store", "broker", "memory", "locks", "agents", "scenarios", "tests"}


def conclave_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if isinstance(node, ast.ImportFrom) and node.level:
            names = ["." + (node.module or "")]  # a relative import reaches into tests/fuzz: as bad
        found += [n for n in names if n.split(".")[0] in CONCLAVE or n.startswith(".")]
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("__import__", "import_module"):
            found.append("a dynamic import")
    return found


def test_the_model_imports_nothing_it_checks() -> None:
    source = MODEL.read_text()
    assert conclave_imports(source) == []
    # The control: the same check names each way the model could reach the code it checks.
    for line in ("from memory.policy import tally", "import locks.table", "from . import driver", "importlib.import_module('broker.wire')"):
        assert conclave_imports(source + "\n" + line + "\n"), line


def team(registry: Registry, *names: str) -> dict[str, object]:
    out = {}
    for n, name in enumerate(names):
        registry.add_team(name, "local", may_spawn=2, max_restarts=3)
        out[name] = registry.issue(f"{name}:{n:012x}", name, "local", None)
    return out


def test_the_trust_rules_as_the_docs_state_them() -> None:
    registry = Registry()
    p = team(registry, "alice", "bob", "carol", "dave")
    kid = registry.issue("alice/k1:00000000000a", "alice/k1", "local", p["alice"].key)
    memory = Memory(Policy(quorum=2))
    claim = memory.remember(p["alice"], 1, kind="discovery", scope="repo", text="t", tag="x")
    # A vouch by id from a domain never shown the claim is unread: recorded, never counted; with evidence that
    # says what the claim says it is blind and counts (the control).
    assert memory.expect_witness(p["dave"], 1, dispute=False).fields["reason_not_counted"] == "unread"
    assert memory.expect_witness(p["dave"], 1, dispute=False, evidence_matches=False).fields["reason_not_counted"] == "unread"
    assert memory.expect_witness(p["dave"], 1, dispute=False, evidence_matches=True).fields == {
        "tier": "unverified", "counted": True, "reason_not_counted": None, "blind": True}
    memory.shown(p["bob"], [1])
    memory.shown(p["carol"], [1])
    # The author's own domain (her child included) never counts ...
    for who in (p["alice"], kid):
        assert memory.expect_witness(who, 1, dispute=False).fields["reason_not_counted"] == "author_domain"
        memory.witness(who, 1, dispute=False)
    assert memory.tier(1) == "unverified"
    # ... a domain counts once ...
    memory.witness(p["bob"], 1, dispute=False)
    assert memory.expect_witness(p["bob"], 1, dispute=False).fields == {
        "tier": "unverified", "counted": False, "reason_not_counted": "domain_already_counted", "blind": False}
    memory.witness(p["bob"], 1, dispute=False)
    assert memory.tier(1) == "unverified"
    # ... and the quorum is distinct domains other than the author's: the positive control.
    assert memory.expect_witness(p["carol"], 1, dispute=False).fields["tier"] == "trusted"
    memory.witness(p["carol"], 1, dispute=False)
    assert memory.tier(1) == "trusted"
    # A revision is a new unverified edition with no witnesses; the old edition is superseded.
    assert memory.expect_revise(p["bob"], 1).errors == {"forbidden"}
    revised = memory.revise(p["alice"], 1, 2, text="t2")
    assert (memory.tier(2), revised.corroborations, memory.tier(1)) == ("unverified", [], "superseded")
    # A revoked witness stops counting.
    memory.shown(p["bob"], [2])
    memory.shown(p["carol"], [2])
    memory.witness(p["bob"], 2, dispute=False)
    memory.witness(p["carol"], 2, dispute=False)
    assert memory.tier(2) == "trusted"
    memory.revoke(p["carol"].key)
    assert memory.tier(2) == "unverified"
    assert claim.author_domain == "alice"


def test_require_blind_needs_a_witness_whose_domain_was_never_shown_the_claim() -> None:
    registry = Registry()
    p = team(registry, "alice", "bob", "carol")
    memory = Memory(Policy(quorum=2, require_blind=True))
    memory.remember(p["alice"], 1, kind="discovery", scope="repo", text="t", tag="x")
    memory.shown(p["bob"], [1])
    memory.shown(p["carol"], [1])
    memory.witness(p["bob"], 1, dispute=False)
    memory.witness(p["carol"], 1, dispute=False)
    assert memory.tier(1) == "unverified"  # two informed domains: not enough with require_blind
    memory.remember(p["alice"], 3, kind="discovery", scope="repo", text="u", tag="y")
    memory.shown(p["bob"], [3])
    memory.witness(p["bob"], 3, dispute=False)
    assert memory.expect_witness(p["carol"], 3, dispute=False, evidence_matches=True).fields["blind"] is True
    memory.witness(p["carol"], 3, dispute=False, evidence_matches=True)
    assert memory.tier(3) == "trusted"  # the control: carol was never shown claim 3
