"""The team file: which agents to run, and what each may do.

```toml
[defaults]                          # optional: what every agent gets unless it says otherwise
timeout = "2h"                      # timeout, idle_timeout, max_tokens, max_cost_usd, log_cap

[run]                               # optional: limits for the whole run (conclave run --timeout ...)
max_cost_usd = 20.0

[[agent]]
name = "alice"                      # the stable agent name
command = ["bash", "agents/alice.sh"]
# optional: cwd, env = {..}, may_spawn = 2, restart = "never"|"on-failure",
#           max_restarts = 3, preset, prompt, model, sandbox, allow_read, allow_write,
#           timeout, idle_timeout, max_tokens, max_cost_usd, log_cap, max_processes = 512
```

Parsing is strict: an unknown key, a duplicate or reserved name, a missing
command, a command that cannot be found or a ``cwd`` that is not a
directory of the repository is an error naming the agent and the key,
raised before anything is spawned.  What a ``[[slot]]``, a
``[policy]`` or a preset means belongs to the package that uses it; the
composition root passes those checks in as :class:`TeamRules`.
"""

from __future__ import annotations

import os
import shlex
import tomllib
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Mapping, final

import attrs

from broker.limits import DEFAULT_LOG_CAP, LIMIT_KEYS, MIN_LOG_CAP, LimitError, Limits
from broker.spec import AgentSpec, Preset, SpecError, check_command, validate_name

RESTART_POLICIES: Final = ("never", "on-failure")
SANDBOX_LEVELS: Final = ("strict", "landlock", "off")
AGENT_KEYS: Final = frozenset(
    {
        "name", "command", "cwd", "env", "may_spawn", "restart", "max_restarts", "preset", "prompt", "description",
        "sandbox", "allow_read", "allow_write", "model", "log_cap", "max_processes", *LIMIT_KEYS,
    }
)
#: ``[defaults]``: what every agent gets unless its own entry says otherwise.
DEFAULT_KEYS: Final = frozenset({*LIMIT_KEYS, "log_cap"})
#: ``[run]``: the whole run's limits.
RUN_KEYS: Final = frozenset(LIMIT_KEYS)
#: Top-level tables other packages read (locks' slots, the trust policy, mail's budget), and the run's own.
TOP_LEVEL_KEYS: Final = frozenset({"agent", "slot", "policy", "memory", "mail", "store", "defaults", "run"})
#: Budgets only an agent whose binary reports usage can be held to.
BUDGET_KEYS: Final = ("max_tokens", "max_cost_usd")
#: ``[store]``: where the state lives when it is not the embedded SQLite file, and how often the running
#: broker verifies the whole store in the background (seconds; 0: never).
STORE_KEYS: Final = frozenset({"url", "verify_every"})
#: The background verify's default interval (``[store] verify_every``).
VERIFY_EVERY: Final = 600.0


class TeamError(SpecError):
    """The team file is wrong; the message names the agent and the key."""


@contextmanager
def _as_team_error() -> Iterator[None]:
    try:
        yield
    except SpecError as exc:
        raise TeamError(str(exc)) from None


@final
@attrs.frozen
class Team:
    agents: tuple[AgentSpec, ...]
    slots: tuple[dict[str, Any], ...] = ()
    policy: dict[str, Any] = attrs.Factory(dict)
    source: Path | None = None
    memory: dict[str, Any] = attrs.Factory(dict)
    #: The presets the file was checked against; the supervisor starts preset agents through them.
    presets: Mapping[str, Preset] = attrs.Factory(dict)
    #: ``[mail]``: the mail feature's budget (broker.mail.budget).
    mail: dict[str, Any] = attrs.Factory(dict)
    #: ``[store] url``: a PostgreSQL store several brokers share (None: the embedded SQLite file).
    store_url: str | None = None
    #: ``[run]``: the whole run's limits (``conclave run --timeout ...`` overrides them).
    run_limits: Limits = Limits()
    #: ``[store] verify_every``: seconds between the running broker's background verifies (0: never).
    verify_every: float = VERIFY_EVERY

    def spec(self, name: str) -> AgentSpec | None:
        return next((a for a in self.agents if a.name == name), None)


#: Checks a feature runs on the parsed team (its own tables); raise ValueError naming the fix.
TeamCheck = Callable[[Team, str], None]


@final
@attrs.frozen
class TeamRules:
    """What the features add to the team file, assembled by the composition root.

    ``checks`` validate the tables a feature reads (locks: ``[[slot]]``;
    memory: ``[policy]`` and ``[memory]``); ``presets`` are the launchers a
    ``preset = "..."`` entry may name.
    """

    checks: tuple[TeamCheck, ...] = ()
    presets: Mapping[str, Preset] = attrs.Factory(dict)


def load(path: Path, *, repo: Path, rules: TeamRules, check_commands: bool = True) -> Team:
    """Read and validate a team file.

    Raises:
        TeamError: naming the file, the agent and what to fix.
    """
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TeamError(f"team file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise TeamError(f"team file {path} is not valid TOML: {exc}") from None
    return parse(raw, repo=repo, rules=rules, source=path, check_commands=check_commands)


def parse(raw: dict[str, Any], *, repo: Path, rules: TeamRules, source: Path | None = None, check_commands: bool = True) -> Team:
    where = str(source) if source else "team"
    unknown = set(raw) - TOP_LEVEL_KEYS
    if unknown:
        raise TeamError(f"{where}: unknown top-level key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(TOP_LEVEL_KEYS))}")
    entries = raw.get("agent")
    if not isinstance(entries, list) or not entries:
        raise TeamError(f'{where}: no agents; add at least one [[agent]] table with name and command')
    defaults = _table(raw, "defaults", DEFAULT_KEYS, where)
    default_limits = _limits(defaults, f"{where}: [defaults]")
    default_cap = _log_cap(defaults["log_cap"], f"{where}: [defaults]") if "log_cap" in defaults else None
    run_limits = _limits(_table(raw, "run", RUN_KEYS, where), f"{where}: [run]")
    agents: list[AgentSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, start=1):
        spec = _parse_agent(entry, f"{where}: agent #{index}", repo, rules, check_commands)
        # [defaults] fill what the agent's own entry left out; a budget from them reaches only
        # agents whose binary reports usage (an agent's own budget must be one it can be held to).
        inherited = default_limits if _reports_usage(rules, spec) else attrs.evolve(default_limits, max_tokens=None, max_cost_usd=None)
        spec = attrs.evolve(spec, limits=spec.limits.over(inherited), log_cap=spec.log_cap or default_cap)
        if spec.name in seen:
            raise TeamError(f"{where}: agent name {spec.name!r} appears twice; names must be unique")
        seen.add(spec.name)
        agents.append(spec)
    slots = raw.get("slot", [])
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise TeamError(f"{where}: slot must be a list of [[slot]] tables")
    policy = raw.get("policy", {})
    if not isinstance(policy, dict):
        raise TeamError(f"{where}: policy must be a table ([policy])")
    memory = raw.get("memory", {})
    if not isinstance(memory, dict):
        raise TeamError(f"{where}: memory must be a table ([memory])")
    mail = raw.get("mail", {})
    if not isinstance(mail, dict):
        raise TeamError(f"{where}: mail must be a table ([mail])")
    team = Team(
        agents=tuple(agents), slots=tuple(slots), policy=policy, source=source, memory=memory, presets=rules.presets, mail=mail,
        store_url=_store_url(raw.get("store", {}), where), run_limits=run_limits,
        verify_every=_verify_every(raw.get("store", {}), where),
    )
    for check in rules.checks:
        try:
            check(team, where)
        except ValueError as exc:
            raise TeamError(str(exc)) from None
    return team


def url_carries_password(url: str) -> bool:
    """Whether a PostgreSQL URL names a password (``role:PASSWORD@`` or ``?password=``)."""
    try:
        parts = urllib.parse.urlsplit(url)
        return parts.password is not None or "password" in urllib.parse.parse_qs(parts.query)
    except ValueError:  # a malformed address: psycopg says what is wrong with it
        return False


def _store_url(store: Any, where: str) -> str | None:
    if not isinstance(store, dict):
        raise TeamError(f"{where}: store must be a table ([store])")
    unknown = set(store) - STORE_KEYS
    if unknown:
        raise TeamError(f"{where}: [store] has unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(STORE_KEYS))}")
    url = store.get("url")
    if url is None:
        return None
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        raise TeamError(
            f'{where}: [store] url must be a PostgreSQL URL, e.g. url = "postgresql://broker_laptop@db.example/conclave" '
            "(leave [store] out for the embedded SQLite store)"
        )
    if url_carries_password(url):
        # The team file lives in the work tree, which every agent's box reads.
        raise TeamError(
            f"{where}: [store] url carries a password, and the team file lies in the work tree every agent reads; "
            "name no password there: put it in <state>/pgpass, the broker's passfile (docs/DEPLOYMENT.md)"
        )
    return url


def _table(raw: dict[str, Any], name: str, keys: frozenset[str], where: str) -> dict[str, Any]:
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise TeamError(f"{where}: {name} must be a table ([{name}])")
    unknown = set(table) - keys
    if unknown:
        raise TeamError(f"{where}: [{name}] has unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(keys))}")
    return table


def _limits(raw: dict[str, Any], where: str) -> Limits:
    try:
        return Limits.parse(raw, where)
    except LimitError as exc:
        raise TeamError(str(exc)) from None


_SIZE: Final = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def _log_cap(value: Any, where: str) -> int:
    """``log_cap``: bytes (a whole number) or a size such as "64MiB", "512KiB", "1GiB"."""
    import re

    size: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", value)
        if m and m.group(2).lower() in _SIZE:
            size = int(m.group(1)) * _SIZE[m.group(2).lower()]
    if size is None or size < MIN_LOG_CAP:
        raise TeamError(
            f'{where}: log_cap must be a size of at least {MIN_LOG_CAP // 1024} KiB, e.g. log_cap = "64MiB" '
            f"(the default, {DEFAULT_LOG_CAP >> 20} MiB, when it is left out)"
        )
    return size


def _reports_usage(rules: TeamRules, spec: AgentSpec) -> bool:
    preset = rules.presets.get(spec.preset or "")
    return preset is not None and preset.decoder(spec) is not None


def _verify_every(store: dict[str, Any], where: str) -> float:
    value = store.get("verify_every", VERIFY_EVERY)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value == 0 or 1 <= value <= 86_400 * 7):
        raise TeamError(f"{where}: [store] verify_every must be seconds between background verifies, from 1 to 604800, or 0 for never (not {value!r})")
    return float(value)


def _allowed_paths(value: Any, key: str, repo: Path, where: str) -> tuple[str, ...]:
    """``allow_read`` / ``allow_write``: paths the agent's box adds (absolute, or relative to the repository)."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise TeamError(f'{where}: {key} must be a list of paths, e.g. {key} = ["/data/sets"]')
    return tuple(str((repo / os.path.expanduser(p)).resolve()) for p in value)


def _parse_agent(entry: Any, where: str, repo: Path, rules: TeamRules, check_commands: bool) -> AgentSpec:
    if not isinstance(entry, dict):
        raise TeamError(f"{where}: must be a table")
    with _as_team_error():
        name = validate_name(entry.get("name"), where)
    where = f"{where.rsplit(':', 1)[0]}: agent {name!r}"
    unknown = set(entry) - AGENT_KEYS
    if unknown:
        raise TeamError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(AGENT_KEYS))}")
    command = entry.get("command")
    if isinstance(command, str):
        # A string is split as a POSIX shell would split its words (no expansion, no pipes).
        try:
            command = shlex.split(command)
        except ValueError as exc:
            raise TeamError(
                f"{where}: command {command!r} cannot be split into words ({exc}); close the quote, or write it as a "
                'list: command = ["program", "arg", ...]'
            ) from None
    if not command and entry.get("preset") in (None, "command"):
        raise TeamError(f'{where}: missing command; add command = ["program", "arg", ...]')
    if command is not None and (not isinstance(command, list) or not all(isinstance(c, str) and c for c in command)):
        raise TeamError(f"{where}: command must be a list of non-empty strings")
    cwd = entry.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str):
            raise TeamError(f"{where}: cwd must be a string (a directory relative to the repository)")
        if not (repo / cwd).resolve().is_relative_to(repo.resolve()):
            raise TeamError(f"{where}: cwd {cwd!r} leaves the repository")
        if check_commands and not (repo / cwd).is_dir():
            raise TeamError(f"{where}: cwd {cwd!r} is not a directory in the repository ({repo / cwd}); create it or fix cwd")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TeamError(f"{where}: env must be a table of string values")
    if any(k.startswith("CONCLAVE_") for k in env):
        raise TeamError(f"{where}: env may not set CONCLAVE_* variables; the broker sets those")
    may_spawn = entry.get("may_spawn", 0)
    if not isinstance(may_spawn, int) or isinstance(may_spawn, bool) or not 0 <= may_spawn <= 64:
        raise TeamError(f"{where}: may_spawn must be a whole number from 0 to 64")
    restart = entry.get("restart", "never")
    if restart not in RESTART_POLICIES:
        raise TeamError(f"{where}: restart must be one of {', '.join(RESTART_POLICIES)}")
    max_restarts = entry.get("max_restarts", 3)
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or not 0 <= max_restarts <= 100:
        raise TeamError(f"{where}: max_restarts must be a whole number from 0 to 100")
    sandbox = entry.get("sandbox")
    if sandbox is not None and sandbox not in SANDBOX_LEVELS:
        raise TeamError(
            f'{where}: sandbox must be one of {", ".join(SANDBOX_LEVELS)} (or left out for the strongest this machine '
            f"offers; `conclave doctor` says which)"
        )
    max_processes = entry.get("max_processes")
    if max_processes is not None and (not isinstance(max_processes, int) or isinstance(max_processes, bool) or not 16 <= max_processes <= 1_000_000):
        raise TeamError(f"{where}: max_processes must be a whole number from 16 to 1000000 (its share of your processes; default 512)")
    allowed = {key: _allowed_paths(entry.get(key, []), key, repo, where) for key in ("allow_read", "allow_write")}
    for key in ("preset", "prompt", "model"):
        if key in entry and not isinstance(entry[key], str):
            raise TeamError(f"{where}: {key} must be a string")
    if "model" in entry and "preset" not in entry:
        raise TeamError(
            f'{where}: model is passed by a preset with its binary\'s own flag; add preset = "claude-code", "codex" or '
            '"aider" (or "command" with {model} in its command), or drop model'
        )
    limits = _limits(entry, where)
    log_cap = _log_cap(entry["log_cap"], where) if "log_cap" in entry else None
    if "prompt" in entry and "preset" not in entry:
        # Nothing would deliver it: a plain command gets no task.
        raise TeamError(
            f'{where}: prompt is the task for a preset agent; add preset = "claude-code", "codex" or "aider" '
            '(or "command" with {prompt} in its command), or drop prompt'
        )
    spec = AgentSpec(
        name=name,
        command=tuple(command or ()),
        cwd=cwd,
        env=dict(env),
        may_spawn=may_spawn,
        restart=restart,
        max_restarts=max_restarts,
        preset=entry.get("preset"),
        prompt=entry.get("prompt"),
        sandbox=sandbox,
        allow_read=allowed["allow_read"],
        allow_write=allowed["allow_write"],
        model=entry.get("model"),
        limits=limits,
        log_cap=log_cap,
        max_processes=max_processes,
    )
    budgets = [k for k in BUDGET_KEYS if k in entry]
    if budgets and not _reports_usage(rules, spec):
        raise TeamError(
            f"{where}: {' and '.join(budgets)} need an agent whose binary reports its usage (preset = \"claude-code\" or "
            f"\"codex\"); this one reports none, so the budget could never be enforced. Drop it, or bound the agent with timeout"
        )
    with _as_team_error():
        if spec.preset is not None:
            preset = rules.presets.get(spec.preset)
            if preset is None:
                raise SpecError(f"{where}: unknown preset {spec.preset!r}; choose one of {', '.join(rules.presets)}")
            try:
                preset.check(spec, repo / (cwd or "."), check_commands=check_commands)
            except SpecError as exc:
                raise SpecError(f"{where}: {exc}") from None
        elif check_commands and spec.command:
            check_command(spec.command, repo / (cwd or "."), where)
    return spec
