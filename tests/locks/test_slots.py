"""[[slot]] tables in the team file: validated before anything is spawned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.harness import make_repo
from broker.composition import team_rules
from broker.team import TeamError, parse
from locks.slots import SlotSpec, parse_slots
from tests.conclave_run import conclave_run

AGENT = {"agent": [{"name": "alice", "command": ["true"]}]}


def test_a_declared_slot_is_read_with_its_defaults(tmp_path: Path) -> None:
    team = parse({**AGENT, "slot": [{"name": "llm-api", "capacity": 8}, {"name": "gpu", "capacity": 1, "min_interval_ms": 250}]}, repo=tmp_path, rules=team_rules())
    assert parse_slots(team.slots) == (SlotSpec("llm-api", 8, 0), SlotSpec("gpu", 1, 250))


@pytest.mark.parametrize(
    "slot, words",
    [
        ({"capacity": 2}, "name None"),
        ({"name": "9lives", "capacity": 2}, "must start with a letter"),
        ({"name": "llm"}, "capacity must be a whole number"),
        ({"name": "llm", "capacity": 0}, "capacity must be a whole number"),
        ({"name": "llm", "capacity": True}, "capacity must be a whole number"),
        ({"name": "llm", "capacity": 2.5}, "capacity must be a whole number"),
        ({"name": "llm", "capacity": 2, "min_interval_ms": -1}, "min_interval_ms"),
        ({"name": "llm", "capacity": 2, "rate": 3}, "unknown key(s) rate"),
    ],
)
def test_a_bad_slot_is_refused_naming_the_slot_and_the_key(tmp_path: Path, slot: dict, words: str) -> None:
    with pytest.raises(TeamError) as info:
        parse({**AGENT, "slot": [slot]}, repo=tmp_path, rules=team_rules())
    assert words in str(info.value)


def test_a_slot_declared_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TeamError, match="declared twice"):
        parse({**AGENT, "slot": [{"name": "x", "capacity": 1}, {"name": "x", "capacity": 2}]}, repo=tmp_path, rules=team_rules())


def test_conclave_run_refuses_a_bad_slot_before_spawning_anyone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    marker = tmp_path / "spawned"
    team = tmp_path / "team.toml"
    team.write_text(f'[[agent]]\nname = "alice"\ncommand = ["touch", "{marker}"]\n\n[[slot]]\nname = "llm"\ncapacity = -3\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    out = conclave_run("--team", str(team), "--repo", str(repo), "--state-dir", str(tmp_path / "state"), env=env)
    assert out.returncode == 2 and "slot 'llm': capacity must be a whole number" in out.stderr
    assert not marker.exists()
