"""What each preset's binary needs before it can work: its version, its key, its model endpoint.

``conclave run`` (and ``conclave team check --online``) asks every preset
agent for a :class:`broker.spec.Probe` and runs them all at once
(``broker.preflight``).  This module knows the binaries:

* **Claude Code** reads its key from ``ANTHROPIC_API_KEY``,
  ``CLAUDE_CODE_OAUTH_TOKEN`` (``claude setup-token``) or
  ``ANTHROPIC_AUTH_TOKEN``, and talks to ``ANTHROPIC_BASE_URL``, else
  ``https://api.anthropic.com``.  With ``CLAUDE_CODE_USE_BEDROCK``,
  ``..._VERTEX`` or ``..._FOUNDRY`` set it uses the cloud's own credentials
  and endpoint, which are not checked.
* **Codex** uses the model provider its ``-c`` overrides name
  (``model_provider``, ``model_providers.<id>``), else the built-in
  ``openai``: ``CODEX_API_KEY`` or ``OPENAI_API_KEY``, at ``OPENAI_BASE_URL``,
  else ``https://api.openai.com/v1``; a custom provider's ``base_url`` and
  ``env_key``; the local ``ollama`` and ``lmstudio`` providers need no key.
* **aider** has too many providers to guess: only its version is read.

Each agent has a configuration directory of its own (docs/AGENTS.md), so a
login made at the person's terminal never reaches it: the fix is always the
environment of ``conclave run``.
"""

from __future__ import annotations

import shutil
import tomllib
from typing import TYPE_CHECKING, Any, Final

from broker.spec import Probe

if TYPE_CHECKING:
    from broker.spec import AgentSpec

#: The versions the project tested each binary with: ``(lowest, below)`` (docs/AGENTS.md).
TESTED: Final = {"claude-code": ("2.1.332", "2.2.0"), "codex": ("0.171.0", "0.172.0")}
BINARIES: Final = {"claude-code": "claude", "codex": "codex", "aider": "aider"}
CLAUDE_ENDPOINT: Final = "https://api.anthropic.com"
CLAUDE_KEYS: Final = (("ANTHROPIC_API_KEY",), ("CLAUDE_CODE_OAUTH_TOKEN",), ("ANTHROPIC_AUTH_TOKEN",))
CLAUDE_CLOUDS: Final = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")
OPENAI_ENDPOINT: Final = "https://api.openai.com/v1"
#: Codex's built-in providers that run on this machine and need no key.
CODEX_LOCAL: Final = {"ollama": "http://localhost:11434/v1", "lmstudio": "http://localhost:1234/v1"}
ENVIRONMENT_FIX: Final = (
    "in the environment of the shell that runs `conclave run` (agents inherit it; a login at your own terminal "
    "does not reach them: each agent has its own configuration directory)"
)


def probe(preset: str, spec: AgentSpec, environ: dict[str, str]) -> Probe | None:
    """The checks for one preset agent, in the environment it will get; None for ``command``."""
    if preset not in BINARIES:
        return None
    argv = list(spec.command) or [BINARIES[preset]]
    binary = argv[0]
    found = binary if "/" in binary else shutil.which(binary, path=environ.get("PATH")) or binary
    tested = TESTED.get(preset)
    if preset == "claude-code":
        return _claude(found, tested, environ)
    if preset == "codex":
        return _codex(found, tested, argv[1:], environ)
    return Probe(binary=found, version_argv=(found, "--version"), tested=None)


def _claude(binary: str, tested: tuple[str, str] | None, environ: dict[str, str]) -> Probe:
    cloud = [name for name in CLAUDE_CLOUDS if environ.get(name, "").strip() not in ("", "0", "false")]
    if cloud:
        return Probe(binary=binary, version_argv=(binary, "--version"), tested=tested, endpoint_from=f"{cloud[0]} is set: the cloud's own credentials and endpoint (not checked)")
    base = environ.get("ANTHROPIC_BASE_URL", "").strip()
    return Probe(
        binary=binary,
        version_argv=(binary, "--version"),
        tested=tested,
        credentials=CLAUDE_KEYS,
        credentials_fix=f"export ANTHROPIC_API_KEY=... (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`) {ENVIRONMENT_FIX}",
        endpoint=base or CLAUDE_ENDPOINT,
        endpoint_from="ANTHROPIC_BASE_URL" if base else "Claude Code's default",
    )


def _codex(binary: str, tested: tuple[str, str] | None, extra: list[str], environ: dict[str, str]) -> Probe:
    config, oss = codex_overrides(extra)
    provider = str(config.get("model_provider") or ((config.get("oss_provider") or "ollama") if oss else "openai"))
    custom = config.get("model_providers", {}).get(provider) if isinstance(config.get("model_providers"), dict) else None
    common = {"binary": binary, "version_argv": (binary, "--version"), "tested": tested}
    if isinstance(custom, dict):
        env_key = custom.get("env_key")
        keys = ((str(env_key),),) if env_key else ()
        return Probe(
            **common,  # type: ignore[arg-type]
            credentials=keys,
            credentials_fix=f"export {env_key}=... {ENVIRONMENT_FIX}" if env_key else "",
            endpoint=str(custom.get("base_url") or OPENAI_ENDPOINT),
            endpoint_from=f"model_providers.{provider}.base_url in the agent's command" if custom.get("base_url") else "Codex's default",
        )
    if provider in CODEX_LOCAL:
        return Probe(**common, endpoint=CODEX_LOCAL[provider], endpoint_from=f"Codex's built-in {provider} provider")  # type: ignore[arg-type]
    base = environ.get("OPENAI_BASE_URL", "").strip()
    return Probe(
        **common,  # type: ignore[arg-type]
        credentials=(("CODEX_API_KEY",), ("OPENAI_API_KEY",)),
        credentials_fix=f"export CODEX_API_KEY=... (or OPENAI_API_KEY) {ENVIRONMENT_FIX}",
        endpoint=base or OPENAI_ENDPOINT,
        endpoint_from="OPENAI_BASE_URL" if base else "Codex's default",
    )


def codex_overrides(args: list[str]) -> tuple[dict[str, Any], bool]:
    """The ``-c key=value`` overrides among a Codex command's arguments, as one nested table
    (values read as TOML, or as plain strings where they are not, as Codex reads them); and
    whether ``--oss`` was given."""
    table: dict[str, Any] = {}
    oss = "--oss" in args
    pairs: list[str] = []
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            pairs.append(args[i + 1])
        elif arg.startswith("--config="):
            pairs.append(arg.split("=", 1)[1])
        elif arg == "--local-provider" and i + 1 < len(args):
            table["oss_provider"] = args[i + 1]
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            continue
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = table
        *path, last = [part.strip().strip('"') for part in key.split(".")]
        for part in path:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        node[last] = value
    return table, oss
