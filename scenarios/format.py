"""The scenario file format: parsing and static validation.

A scenario is a TOML file: who takes part, what each does step by step, and
what must be true at the end.  ``scenarios/README.md`` documents it with a
worked example.  Everything that can be checked before running -- unknown
keys, unknown ops and actions, names used before they are bound, agents that
do not exist -- is checked here, so a mistake in a scenario is reported as
*invalid* with its line, never as passed.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Final, final

import attrs

TIERS: Final = ("T1", "T2", "T3")
OPERATOR: Final = "operator"
#: Step actions other than a plain op (``op = "..."``).
ACTIONS: Final = frozenset(
    {"spawn", "exit", "kill", "restart", "steal-ticket", "drop-ticket", "replay-ticket", "raw", "sh", "cli", "edit-db", "sleep",
     "wait-exit", "sync", "broker-restart", "kill-during"}
)
#: Actions that present a ticket (or none) and attempt ``op`` with it.
TICKET_ACTIONS: Final = frozenset({"steal-ticket", "drop-ticket", "replay-ticket"})
#: Actions that take an ``op`` (and ``args``) to attempt.
OP_ACTIONS: Final = TICKET_ACTIONS | {"kill-during"}
STEP_KEYS: Final = frozenset(
    {
        "actor", "op", "action", "args", "bind", "expect", "expect_error", "expect_result", "expect_exit",
        "expect_output", "name", "code", "from", "line", "argv", "sql", "seconds", "note", "background", "kill", "policy",
    }
)
CHECK_KEYS: Final = frozenset(
    {"claim", "tier", "counted", "witnesses", "context", "recall", "actor", "contains", "excludes", "verify",
     "event", "subject", "count", "locks", "holder", "resources", "note", "inbox", "op", "args", "expect_result", "expect_error"}
)
AGENT_KEYS: Final = frozenset({"name", "may_spawn", "restart", "max_restarts", "command", "env", "sandbox"})
#: Names every scenario may use: ``${state}`` and ``${repo}`` (the run's directories) and
#: ``${pid.NAME}`` (an agent's process), for attacks that name what they go after.
BUILTIN_BINDINGS: Final = frozenset({"state", "repo", "pid"})
TOP_KEYS: Final = frozenset({"name", "description", "tier", "policy", "memory", "agents", "step", "check", "files", "slot", "expected_outcome"})
BINDING: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_]+)*)\}")


class ScenarioInvalid(ValueError):
    """A mistake in a scenario file; the message names the file, the line and the fix."""


@final
@attrs.frozen
class Step:
    index: int
    line: int
    actor: str
    op: str | None
    action: str | None
    raw: dict[str, Any]

    @property
    def label(self) -> str:
        what = self.op or self.action
        return f"step {self.index} (line {self.line}: {self.actor} {what})"


@final
@attrs.frozen
class Check:
    index: int
    line: int
    raw: dict[str, Any]

    @property
    def label(self) -> str:
        return f"check {self.index} (line {self.line})"


@final
@attrs.frozen
class Scenario:
    path: Path
    name: str
    description: str
    tier: str
    agents: tuple[dict[str, Any], ...]
    policy: dict[str, Any]
    memory: dict[str, Any]
    steps: tuple[Step, ...]
    checks: tuple[Check, ...]
    files: dict[str, str]
    slots: tuple[dict[str, Any], ...]


def _header_lines(text: str, header: str) -> list[int]:
    pattern = re.compile(rf"^\s*\[\[\s*{re.escape(header)}\s*\]\]\s*(#.*)?$")
    return [n for n, line in enumerate(text.splitlines(), start=1) if pattern.match(line)]


def load(path: Path, known_ops: frozenset[str]) -> Scenario:
    """Parse and validate one scenario file.

    Raises:
        ScenarioInvalid: naming the file, the line and what is wrong.
    """
    text = path.read_text()
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioInvalid(f"{path}: not valid TOML: {exc}") from None
    where = str(path)
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ScenarioInvalid(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(TOP_KEYS))}")
    for key in ("name", "description", "tier"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ScenarioInvalid(f"{where}: needs a {key} (a non-empty string)")
    if raw["tier"] not in TIERS:
        raise ScenarioInvalid(f"{where}: tier must be one of {', '.join(TIERS)} (see docs/THREAT_MODEL.md)")
    agents = raw.get("agents", [])
    if not isinstance(agents, list) or not agents:
        raise ScenarioInvalid(f"{where}: needs at least one [[agents]] table with a name")
    names: set[str] = set()
    for n, agent in enumerate(agents, start=1):
        if not isinstance(agent, dict) or not isinstance(agent.get("name"), str):
            raise ScenarioInvalid(f"{where}: agent #{n} needs a name")
        bad = set(agent) - AGENT_KEYS
        if bad:
            raise ScenarioInvalid(f"{where}: agent {agent['name']!r}: unknown key(s) {', '.join(sorted(bad))}")
        names.add(agent["name"])
    step_lines = _header_lines(text, "step")
    check_lines = _header_lines(text, "check")
    steps = []
    bound: set[str] = set(BUILTIN_BINDINGS)
    spawned: set[str] = set()
    for n, entry in enumerate(raw.get("step", []), start=1):
        line = step_lines[n - 1] if n - 1 < len(step_lines) else 0
        steps.append(_step(entry, n, line, where, known_ops, names | spawned, bound))
        if entry.get("action") == "spawn":
            spawned.add(f"{entry.get('actor')}/{entry.get('name')}")
        if "bind" in entry:
            bound.add(entry["bind"])
    checks = []
    for n, entry in enumerate(raw.get("check", []), start=1):
        line = check_lines[n - 1] if n - 1 < len(check_lines) else 0
        checks.append(_check(entry, n, line, where, known_ops, names | spawned, bound))
    policy, memory = raw.get("policy", {}), raw.get("memory", {})
    if not isinstance(policy, dict) or not isinstance(memory, dict):
        raise ScenarioInvalid(f"{where}: policy and memory must be tables")
    files = raw.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ScenarioInvalid(f"{where}: files must be a table of path = text")
    return Scenario(
        path=path,
        name=raw["name"],
        description=raw["description"].strip(),
        tier=raw["tier"],
        agents=tuple(agents),
        policy=policy,
        memory=memory,
        steps=tuple(steps),
        checks=tuple(checks),
        files=files,
        slots=tuple(raw.get("slot", [])),
    )


def _names_in(value: Any) -> set[str]:
    if isinstance(value, str):
        return {m.group(1) for m in BINDING.finditer(value)}
    if isinstance(value, dict):
        return set().union(*(_names_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_names_in(v) for v in value)) if value else set()
    return set()


def _table_with_keys(entry: Any, at: str, allowed: frozenset[str]) -> None:
    if not isinstance(entry, dict):
        raise ScenarioInvalid(f"{at}: must be a table")
    unknown = set(entry) - allowed
    if unknown:
        raise ScenarioInvalid(f"{at}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")


def _step(entry: Any, n: int, line: int, where: str, known_ops: frozenset[str], actors: set[str], bound: set[str]) -> Step:
    at = f"{where}:{line}: step {n}"
    _table_with_keys(entry, at, STEP_KEYS)
    actor = entry.get("actor", OPERATOR)
    if actor != OPERATOR and actor not in actors:
        raise ScenarioInvalid(f"{at}: actor {actor!r} is not an agent of this scenario (nor a child spawned earlier)")
    op, action = entry.get("op"), entry.get("action")
    if op is None and action is None:
        raise ScenarioInvalid(f"{at}: give op = \"...\" (a wire op) or action = \"...\"")
    if op is not None and action is not None and action not in OP_ACTIONS:
        raise ScenarioInvalid(f"{at}: give op or action, not both (only {', '.join(sorted(OP_ACTIONS))} take an op to attempt)")
    if op is not None and op not in known_ops:
        raise ScenarioInvalid(f"{at}: unknown op {op!r} (`conclave ops` lists them)")
    if action is not None and action not in ACTIONS:
        raise ScenarioInvalid(f"{at}: unknown action {action!r}; actions: {', '.join(sorted(ACTIONS))}")
    if action in ("steal-ticket", "replay-ticket") and entry.get("from") not in actors:
        raise ScenarioInvalid(f"{at}: {action} needs from = an agent of this scenario")
    if action == "spawn" and not isinstance(entry.get("name"), str):
        raise ScenarioInvalid(f"{at}: spawn needs name = \"child\"")
    if action == "broker-restart":
        if actor != OPERATOR:
            raise ScenarioInvalid(f"{at}: broker-restart is the operator's (leave actor out)")
        if not isinstance(entry.get("kill", False), bool) or not isinstance(entry.get("policy", {}), dict):
            raise ScenarioInvalid(f"{at}: broker-restart takes kill = true|false and policy = {{ quorum = N, require_blind = B }}")
    elif "kill" in entry or "policy" in entry:
        raise ScenarioInvalid(f"{at}: kill and policy belong to action = \"broker-restart\"")
    if action == "kill-during" and (actor == OPERATOR or op is None):
        raise ScenarioInvalid(f"{at}: kill-during needs an agent actor and op = \"...\" (the call cut short)")
    unbound = _names_in(entry) - bound
    if unbound:
        raise ScenarioInvalid(f"{at}: uses ${{{sorted(unbound)[0]}}} before any step binds it (bind = \"name\")")
    if "expect" in entry and entry["expect"] not in ("ok", "error"):
        raise ScenarioInvalid(f"{at}: expect must be \"ok\" or \"error\" (use expect_error = \"code\" for a specific code)")
    return Step(index=n, line=line, actor=actor, op=op if action is None else None, action=action, raw=entry)


def _check(entry: Any, n: int, line: int, where: str, known_ops: frozenset[str], actors: set[str], bound: set[str]) -> Check:
    at = f"{where}:{line}: check {n}"
    _table_with_keys(entry, at, CHECK_KEYS)
    kinds = [k for k in ("claim", "context", "recall", "verify", "event", "locks", "inbox", "op") if k in entry]
    if len(kinds) != 1:
        raise ScenarioInvalid(f"{at}: a check is about exactly one of claim, context, recall, verify, event, locks, inbox, op")
    if "op" in entry and entry["op"] not in known_ops:
        raise ScenarioInvalid(f"{at}: unknown op {entry['op']!r}")
    actor = entry.get("actor", OPERATOR)
    if actor != OPERATOR and actor not in actors:
        raise ScenarioInvalid(f"{at}: actor {actor!r} is not an agent of this scenario")
    unbound = _names_in(entry) - bound
    if unbound:
        raise ScenarioInvalid(f"{at}: uses ${{{sorted(unbound)[0]}}}, which no step binds")
    return Check(index=n, line=line, raw=entry)


def interpolate(value: Any, bindings: dict[str, Any]) -> Any:
    """Replace ``${name.field}`` with bound values; a lone reference keeps its type."""
    if isinstance(value, str):
        whole = BINDING.fullmatch(value)
        if whole:
            return _lookup(whole, bindings)
        return BINDING.sub(lambda m: str(_lookup(m, bindings)), value)
    if isinstance(value, dict):
        return {k: interpolate(v, bindings) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, bindings) for v in value]
    return value


def _lookup(match: re.Match[str], bindings: dict[str, Any]) -> Any:
    value = bindings[match.group(1)]
    for part in filter(None, match.group(2).split(".")):
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(f"${{{match.group(1)}{match.group(2)}}}: no field {part!r} in the bound value")
    return value
