"""The fuzzer's findings: a defence switched off is found, shrunk, and written as a scenario that replays as a failure.

The broken rule is one of scenarios/_defences.toml's one-line patches,
applied to a copy of the tree (the real one is never touched) whose own
interpreter runs the fuzzer, its brokers and its agents.  What comes out
must be a scenario file in the catalogue's format that fails on the broken
copy at the step that shows the hole, and passes on the real tree (the
control: the file asks only for what the rules say).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents.harness import source_venv
from scenarios.defences import catalogue, copy_tree, switch_off

DEFENCE = "identity fields refused on the wire"
#: Tried in turn until one finds the hole (the campaign stops there); seed 2 finds it in a few seconds today,
#: the others are there for when the draws change.  Shrinking for 12 s already leaves two steps.
SEEDS = (2, 3, 1)
SHRINK_SECONDS = 25


def scenario_run(python: Path, tree: Path, scenario: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    done = subprocess.run([str(python), "-I", "-m", "broker.cli", "scenario", "run", str(scenario), "--json", "-j", "1"],
                          capture_output=True, text=True, cwd=tree, env=env, timeout=600)
    [outcome] = json.loads(done.stdout)
    return outcome


def test_a_defence_switched_off_comes_out_as_a_minimal_failing_scenario(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    copy_tree(tree)
    python = source_venv(tmp_path, tree)
    defence = {d["name"]: d for d in catalogue()}[DEFENCE]
    target = tree / defence["file"]
    target.write_text(switch_off(defence, target.read_text()))  # the wire no longer refuses identity fields

    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")} | {"TMPDIR": str(tmp_path)}
    out = tmp_path / "findings"
    argv = [str(python), "-I", "-m", "tests.fuzz.campaign", "--seconds", "0", "--shrink-seconds", str(SHRINK_SECONDS),
            "--out", str(out), "--json", *[a for s in SEEDS for a in ("--seed", str(s))]]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tree, env=env, timeout=1200)
    assert done.returncode == 1, f"the fuzzer did not find the switched-off defence:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    finding = report["finding"]
    assert finding["invariant"] == "3-identity", finding
    scenario = Path(finding["path"])
    text = scenario.read_text()
    assert text in done.stdout, "the scenario is printed as well as saved"
    steps = text.count("[[step]]")
    # Shrunk: one forged field is the whole attack; what the shrinker could not take out in its time is a step or two.
    assert 1 <= steps <= 4, f"not shrunk ({steps} steps):\n{text}"
    assert '\\"author\\"' in text or '"author"' in text or "identity_field" in text, text

    # On the broken copy the file fails where the forged field is accepted ...
    broken = scenario_run(python, tree, scenario)
    assert broken["verdict"] == "failed", broken
    assert "identity_field" in broken["expected"], broken
    # ... and on the real tree the same file passes: it asks only for what the rules say.
    real = scenario_run(Path(sys.executable), Path(__file__).resolve().parents[2], scenario)
    assert real["verdict"] == "passed", real
