"""The floors: which package may import which, held by parsing every import.

```
  5  the composition root   broker.composition (names every feature)
  4  scenarios               the scenario runner and its catalogue
  3  agents                  presets, MCP server, hooks, puppets, harness
  2  features                memory | locks | broker.mail (never each other)
  1  broker                  wire, identity, registry, supervisor, server, core, CLI kit
  0  store                   owner, database, event log, backends
```

A module may import its own floor and the floors below.  The features sit
side by side and never import each other.  One exception, by design: the
entry points that run the assembled product ask the composition root for
the features -- the root CLI (``broker.cli``, and ``broker.clikit`` for a
command run with no broker, so it runs the same core as the broker), the
scenario suite (which checks a file's ops against every feature's) and the
process ``verify`` walks the store in (``memory.walk_child``: every feature's
projector), and the scenario runner's broker zygote (``scenarios.zygote``:
it imports what ``conclave run`` imports, every feature, before forking brokers).
Imports inside functions and under ``TYPE_CHECKING`` count like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "broker", "memory", "locks", "agents", "scenarios")
COMPOSITION = "broker.composition"
CALLS_THE_ROOT = frozenset({"broker.cli", "broker.clikit", "scenarios.suite", "scenarios.zygote", "memory.walk_child"})
FEATURES = ("memory", "locks", "broker.mail")


def unit(module: str) -> str | None:
    """The floor unit a module belongs to (None: not conclave's)."""
    if module == COMPOSITION or module.startswith(COMPOSITION + "."):
        return "root"
    for feature in FEATURES:
        if module == feature or module.startswith(feature + "."):
            return feature
    top = module.split(".")[0]
    return top if top in PACKAGES else None


FLOOR = {"store": 0, "broker": 1, "memory": 2, "locks": 2, "broker.mail": 2, "agents": 3, "scenarios": 4, "root": 5}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (absolute names)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # `from memory import events` may name a submodule.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    """conclave module -> the conclave modules (or packages) it imports."""
    edges: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            edges[module_name(path)] = {m for m in imports_of(path) if unit(m) is not None}
    return edges


def violations(edges: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(edges.items()):
        here = unit(module)
        assert here is not None
        for target in sorted(targets):
            there = unit(target)
            assert there is not None
            if there == here:
                continue
            if there == "root" and module in CALLS_THE_ROOT:
                continue
            if FLOOR[there] > FLOOR[here]:
                out.append(f"{module} (floor {FLOOR[here]}, {here}) imports {target} (floor {FLOOR[there]}, {there})")
            elif FLOOR[there] == FLOOR[here]:
                out.append(f"{module} ({here}) imports {target}: features do not import each other")
    return out


def cycles(edges: dict[str, set[str]], members: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module among ``members`` (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def targets(m: str) -> set[str]:
        # `from broker import paths` names the submodule; `import broker` alone names the package.
        return {t for t in edges.get(m, ()) if t in members and t != m}

    def visit(m: str) -> None:
        index[m] = low[m] = counter[0]
        counter[0] += 1
        stack.append(m)
        on_stack.add(m)
        for t in targets(m):
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in on_stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == m:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in sorted(members):
        if m not in index:
            visit(m)
    return found


def test_no_package_imports_a_floor_above_it() -> None:
    assert violations(graph()) == []


def test_the_rule_catches_a_broker_module_importing_a_feature() -> None:
    """Positive control: the same check on a graph with one bad edge added names it."""
    edges = graph()
    edges["broker.supervisor"] = edges["broker.supervisor"] | {"agents.presets"}
    edges["memory.claims"] = edges["memory.claims"] | {"locks.table"}
    edges["store.owner"] = edges["store.owner"] | {"broker.errors"}
    found = violations(edges)
    assert any("broker.supervisor" in v and "agents.presets" in v for v in found)
    assert any("memory.claims" in v and "features do not import each other" in v for v in found)
    assert any("store.owner" in v and "broker.errors" in v for v in found)
    assert len(found) == 3


def test_the_broker_reaches_features_only_through_the_composition_root() -> None:
    edges = graph()
    leaks = [
        (m, t)
        for m, ts in edges.items()
        if unit(m) == "broker"
        for t in ts
        if unit(t) in ("memory", "locks", "broker.mail", "agents", "scenarios")
    ]
    assert leaks == []
    root = edges[COMPOSITION]
    assert {"memory.ops", "locks.ops", "broker.mail.ops", "agents.presets"} <= root  # control: the root does wire them


def test_no_import_circles_below_the_composition_root() -> None:
    edges = graph()
    members = {m for m in edges if unit(m) != "root"}
    # The entry points' calls into the root are the sanctioned edges upward; without them, nothing may loop.
    pruned = {m: {t for t in ts if unit(t) != "root"} for m, ts in edges.items()}
    assert cycles(pruned, members) == []


def test_the_cycle_finder_finds_the_circles_this_repository_once_had() -> None:
    """Positive control: core <-> router <-> supervisor, and team <-> presets, as they were."""
    edges = {m: set(ts) for m, ts in graph().items()}
    edges["broker.router"].add("broker.core")
    edges["broker.core"].add("broker.router")
    edges["broker.core"].add("broker.supervisor")
    edges["broker.supervisor"].add("broker.core")
    edges["broker.team"].add("agents.presets")
    edges["agents.presets"].add("broker.team")
    found = cycles(edges, set(edges))
    assert ["broker.core", "broker.router", "broker.supervisor"] in [sorted(set(c) & {"broker.core", "broker.router", "broker.supervisor"}) for c in found]
    assert any({"broker.team", "agents.presets"} <= set(c) for c in found)


def test_the_dashboard_is_a_wire_client_on_the_broker_floor() -> None:
    """The operator's terminal UI reaches memory, locks and mail only through the wire."""
    edges = graph()
    dashboard = {m: ts for m, ts in edges.items() if m.startswith("broker.dashboard")}
    assert {"broker.dashboard.app", "broker.dashboard.link", "broker.dashboard.tail"} <= set(dashboard)
    assert all(unit(m) == "broker" for m in dashboard)
    assert [(m, t) for m, ts in dashboard.items() for t in ts if unit(t) not in ("broker", "store")] == []
    # Control: rendering the graph with memory's own code would be caught.
    edges["broker.dashboard.app"] = edges["broker.dashboard.app"] | {"memory.graph"}
    assert any("broker.dashboard.app" in v and "memory.graph" in v for v in violations(edges))
