"""A fuzzing example as a scenario file (scenarios/README.md), ready to commit.

The driver records every step it takes with what the *model* says must
happen (``expect_error``, ``expect_result``); the failing step or check is
where the broker disagreed.  Ids the broker hands out (claims, messages,
sessions) are bound by the step that made them and referred to by name, so
the file replays on a fresh broker.
"""

from __future__ import annotations

import json
from typing import Any

from agents.harness import toml_value


class ScenarioLog:
    """The steps of one example, in the catalogue's format."""

    def __init__(self, agents: list[dict[str, Any]], policy: dict[str, Any], memory: dict[str, Any] | None = None) -> None:
        self.agents = agents
        self.policy = dict(policy)
        self.memory = dict(memory or {})  # the team file's [memory] the fuzzer's brokers ran with
        self.steps: list[dict[str, Any]] = []
        self.checks: list[dict[str, Any]] = []
        self.claims: dict[int, str] = {}
        self.messages: dict[int, str] = {}
        self.identities: dict[str, str] = {}  # principal key -> binding of its identity
        self._names = 0

    # -- names ----------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def claim(self, claim_id: int) -> Any:
        """How a step names a claim: its binding, or the bare id of a claim made before this example."""
        name = self.claims.get(claim_id)
        return f"${{{name}.id}}" if name else claim_id

    def bind_claim(self, claim_id: int) -> str:
        self.claims[claim_id] = self._name("c")
        return self.claims[claim_id]

    def message(self, message_id: int, field: str = "id") -> Any:
        name = self.messages.get(message_id)
        return f"${{{name}.{field}}}" if name else message_id

    def bind_message(self, message_id: int) -> str:
        self.messages[message_id] = self._name("m")
        return self.messages[message_id]

    def principal(self, key: str) -> str:
        """A principal's key as the scenario spells it (bound when the session started)."""
        name = self.identities.get(key)
        return f"${{{name}.agent}}:${{{name}.session}}" if name else key

    def bind_identity(self, key: str) -> str:
        self.identities[key] = self._name("who")
        return self.identities[key]

    # -- steps ----------------------------------------------------------------

    def step(self, **entry: Any) -> dict[str, Any]:
        entry = {k: v for k, v in entry.items() if v is not None}
        self.steps.append(entry)
        return entry

    def expect(self, entry: dict[str, Any], errors: frozenset[str] | None, fields: dict[str, Any] | None = None) -> None:
        if errors:
            if len(errors) == 1:
                entry["expect_error"] = next(iter(errors))
            else:
                entry["expect"] = "error"
        elif fields:
            kept = {k: v for k, v in fields.items() if v is not None}  # TOML has no null: a None field is left unchecked
            if kept:
                entry["expect_result"] = kept

    def check(self, **entry: Any) -> None:
        self.checks.append({k: v for k, v in entry.items() if v is not None})

    # -- the file -------------------------------------------------------------

    def render(self, *, name: str, description: str, failing: str | None = None) -> str:
        lines = [f"name = {json.dumps(name)}", 'tier = "T1"', f'description = """\n{description.strip()}\n"""']
        if failing:
            lines.append(f"# the fuzzer's finding: {failing}")
        lines.append("")
        if self.policy:
            lines.append("[policy]")
            lines += [f"{k} = {toml_value(v)}" for k, v in self.policy.items()]
            lines.append("")
        if self.memory:
            lines.append("[memory]")
            lines += [f"{k} = {toml_value(v)}" for k, v in self.memory.items()]
            lines.append("")
        for agent in self.agents:
            lines.append("[[agents]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in agent.items()]
            lines.append("")
        body = json.dumps([s for s in self.steps if not s.get("_optional")] + self.checks)
        for step in self.steps:
            if step.get("_optional") and f"${{{step.get('bind')}." not in body:
                continue  # an identity bound at the start that no step refers to
            lines.append("[[step]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in step.items() if not k.startswith("_")]
            lines.append("")
        for check in self.checks:
            lines.append("[[check]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in check.items()]
            lines.append("")
        return "\n".join(lines)
