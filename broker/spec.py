"""What the broker knows about an agent it may start, and how presets plug in.

An :class:`AgentSpec` is one ``[[agent]]`` of the team file once parsed (a
child from ``conclave spawn`` gets one derived from its parent's).  A
:class:`Preset` knows how to start a real coding agent with conclave wired
in; the agents package implements them and the composition root hands them
to the team parser, so the broker never imports the agents package.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, final

import attrs

from broker.identity import RESERVED_NAMES
from broker.limits import Limits, Usage

if TYPE_CHECKING:
    from broker.identity import Principal
    from broker.paths import StatePaths

NAME_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


class SpecError(ValueError):
    """An agent's spec cannot be used; the message names what to fix."""


@final
@attrs.frozen
class AgentSpec:
    """One agent the broker may spawn.  Children get a spec derived from their parent's."""

    name: str
    command: tuple[str, ...]
    cwd: str | None = None
    env: dict[str, str] = attrs.Factory(dict)
    may_spawn: int = 0
    restart: str = "never"
    max_restarts: int = 3
    preset: str | None = None
    prompt: str | None = None
    #: "strict" | "landlock" | "off"; None: the strongest this machine offers (broker.sandbox).
    sandbox: str | None = None
    #: More paths the agent's box lets it read, or read and write (absolute).
    allow_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    #: The model a preset agent asks for (each preset passes it with its binary's own flag).
    model: str | None = None
    #: Time and cost budgets (``timeout``, ``idle_timeout``, ``max_tokens``, ``max_cost_usd``).
    limits: Limits = Limits()
    #: Bytes of output kept in each of its logs (None: broker.capture.DEFAULT_LOG_CAP).
    log_cap: int | None = None
    #: Its share of the uid's processes (broker.sandbox.share); None: the default, cut to fit a finite ulimit.
    max_processes: int | None = None


class OutputDecoder(Protocol):
    """Reads a binary's structured stdout (Claude Code's stream-json, Codex's ``--json``).

    The broker hands it each line the binary printed; it answers with the
    lines a person should read instead (in the log and the run view), and
    keeps :attr:`usage` -- what the process has used so far, as the binary
    reported it -- up to date.
    """

    usage: Usage

    def feed(self, line: bytes) -> list[str]:
        """The readable lines for one line of the stream (a line that is not the stream's is passed through)."""
        ...


@final
@attrs.frozen
class Probe:
    """What the broker checks before a preset agent starts (``conclave run``'s preflight).

    ``version_argv`` prints the binary's version; ``tested`` is the range of
    versions the project tested (``(lowest, below)``, compared as numbers).
    ``credentials``: alternatives, each a tuple of variables that must all
    be set (one alternative is enough); ``endpoint``: the model API's base
    URL the binary will use, and where that was read from.
    """

    binary: str
    version_argv: tuple[str, ...] = ()
    tested: tuple[str, str] | None = None
    credentials: tuple[tuple[str, ...], ...] = ()
    credentials_fix: str = ""
    endpoint: str | None = None
    endpoint_from: str = ""


@final
@attrs.frozen
class SandboxNeeds:
    """What a preset's binary needs inside the agent's sandbox beyond what every agent gets.

    Every agent may already read the system and the toolchains the grants
    table names (``broker.sandbox.grants``; of ``$HOME`` only those) and
    write its work tree, its own temporary space and its own per-agent
    directory.  Paths are absolute (``~`` is expanded by
    the broker); missing ones are skipped.  A directory another agent or
    the person also uses is a channel between them (a hook written into a
    shared ``~/.claude`` runs in every Claude Code): prefer per-agent
    directories (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``) and grant shared ones
    read-only.
    """

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()


class Preset(Protocol):
    """How to start one kind of coding agent (Claude Code, Codex, ...) with conclave wired in."""

    name: str

    def check(self, spec: AgentSpec, cwd: Path, *, check_commands: bool) -> None:
        """Refuse, at team load, an entry that cannot start.

        Raises:
            SpecError: what is missing and how to fix it (without the file's location).
        """
        ...

    def command(self, spec: AgentSpec, paths: StatePaths, principal: Principal) -> list[str]:
        """The command the supervisor runs for this agent (writes nothing)."""
        ...

    def sandbox_needs(self, spec: AgentSpec) -> SandboxNeeds:
        """Extra paths the binary reads or writes inside the agent's sandbox."""
        ...

    def decoder(self, spec: AgentSpec) -> OutputDecoder | None:
        """How to read the binary's structured stdout, or None when it prints text."""
        ...

    def probe(self, spec: AgentSpec, environ: dict[str, str]) -> Probe | None:
        """What to check before the agent starts, in the environment it will get (None: nothing)."""
        ...


def validate_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError(
            f"{where}: name {name!r} must start with a letter and use only letters, digits, '.', '_' or '-' (64 at most)"
        )
    if name.lower() in RESERVED_NAMES:
        raise SpecError(f"{where}: name {name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))}); choose another")
    return name


def check_command(command: tuple[str, ...] | list[str], cwd: Path, where: str) -> None:
    program = command[0]
    if os.sep in program:
        target = (cwd / program) if not os.path.isabs(program) else Path(program)
        if not (target.is_file() and os.access(target, os.X_OK)):
            raise SpecError(f"{where}: command {program!r} is not an executable file (looked in {cwd})")
    elif shutil.which(program) is None:
        raise SpecError(f"{where}: command {program!r} was not found on PATH")
