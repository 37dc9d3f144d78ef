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
    #: Its share of the uid's processes (broker.sandbox.share); None: the default, cut to fit a finite ulimit.
    max_processes: int | None = None


@final
@attrs.frozen
class SandboxNeeds:
    """What a preset's binary needs inside the agent's sandbox beyond what every agent gets.

    Every agent may already read the system, toolchains and ``$HOME`` (less
    the private state) and write its work tree, its own temporary space and
    its own per-agent directory.  Paths are absolute (``~`` is expanded by
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
