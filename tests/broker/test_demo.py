"""`conclave demo` tells the whole story, and the story is true."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_demo_promotes_by_independent_witnesses_refuses_the_sybil_and_serialises_commits():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    out = subprocess.run([sys.executable, "-m", "broker.cli", "demo", "--json"], capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr
    story = json.loads(out.stdout)
    assert all(a["exit_code"] == 0 for a in story["run"]["agents"])
    claim = story["claim"]["claim"] if "claim" in story["claim"] else story["claim"]
    assert claim["tier"] == "trusted"
    verdicts = {c["principal"].split(":")[0]: (c["counted"], c["reason_not_counted"]) for c in claim["corroborations"]}
    # The sybil: alice's child vouched, and it did not count.
    assert verdicts["alice/echo"] == (False, "author_domain")
    assert verdicts["bob"][0] is True and verdicts["carol"][0] is True
    # Six commits from two agents in parallel, plus the scratch repository's first one.
    authors = [line.split(":")[0] for line in story["commits"]]
    assert sorted(authors) == ["alice"] * 3 + ["bob"] * 3 + ["demo"]
    # The trail names alice's child as part of her domain's activity.
    assert any(entry["principal"].startswith("alice/echo:") for entry in story["trail"])


def test_the_human_demo_fits_80_columns_and_ends_with_what_next():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    out = subprocess.run([sys.executable, "-m", "broker.cli", "demo"], capture_output=True, text=True, env={**env, "COLUMNS": "80"}, timeout=180)
    assert out.returncode == 0, out.stderr
    wide = [line for line in out.stdout.splitlines() if len(line) > 80]
    assert wide == [], wide
    tail = out.stdout[out.stdout.index("what next") :]
    assert "conclave init" in tail and "conclave run --team team.toml" in tail and "conclave demo --keep" in tail
    assert "NOT counted" in out.stdout and "[TRUSTED]" in out.stdout
