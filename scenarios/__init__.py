"""Scenarios: replayable attacks and workflows against a real broker.

``load`` parses and validates a file, ``run_scenario`` replays it, ``run_all``
runs many in parallel; ``scenarios/README.md`` documents the format.
"""

from scenarios.format import Scenario, ScenarioInvalid, load
from scenarios.runner import Outcome, run_scenario
from scenarios.suite import collect, known_ops, run_all, write_junit

__all__ = ["Outcome", "Scenario", "ScenarioInvalid", "collect", "known_ops", "load", "run_all", "run_scenario", "write_junit"]
