"""Commands that connect real coding agents: ``conclave mcp``, ``conclave hook``, ``conclave agent-launch``.

All three act as the agent whose process tree they run in; none accepts an
identity on its command line.  ``--identity-file`` only supplies the
agent's own ticket to a helper its agent started with a scrubbed
environment (see ``agents.identity_file``); the broker still checks that
the caller descends from that agent.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from broker.clikit import EXIT_NO_BROKER, EXIT_REFUSED, EXIT_USAGE, JsonOpt, Target, die, emit, table

IdentityFileOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--identity-file",
        help="The agent's identity.json, used only when CONCLAVE_TICKET is not in the environment "
        "(agents that scrub their helpers' environment).",
    ),
]

hook_app = typer.Typer(
    name="hook",
    help="Hooks for coding agents: the edit lock check (PreToolUse) and mail on Stop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def mcp(
    identity_file: IdentityFileOpt = None,
    list_tools: Annotated[bool, typer.Option("--list-tools", help="Print the tool table and exit (no broker needed).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Serve conclave's agent operations as MCP tools on stdin/stdout, as the agent that started it."""
    if list_tools:
        from agents.mcp_server import describe_tools

        rows = lambda ts: [(t["name"], t["op"], ", ".join(t["input_schema"]["properties"])) for t in ts]  # noqa: E731
        emit(Target(json_out), describe_tools(), lambda ts: table("conclave MCP tools", ["tool", "op", "arguments"], rows(ts)))
        return
    import trio

    from broker.client import BrokerUnavailable, NoIdentityError
    from agents.identity_file import adopt_identity_file
    from agents.mcp_server import serve
    from broker.errors import ConclaveError

    try:
        adopt_identity_file(identity_file)
        trio.run(serve)
    except NoIdentityError as exc:
        die(f"mcp: {exc}. `conclave mcp` serves an agent that a conclave broker spawned; start it from that agent", EXIT_NO_BROKER)
    except BrokerUnavailable as exc:
        die(f"mcp: {exc}", EXIT_NO_BROKER)
    except ConclaveError as exc:
        die(f"mcp: the broker refused this process: {exc.message} [{exc.code.value}]", EXIT_REFUSED, error=exc.code.value)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@hook_app.command("pre-tool-use")
def pre_tool_use(identity_file: IdentityFileOpt = None) -> None:
    """PreToolUse hook (Claude Code, Codex): read the event on stdin; deny an edit of a path you hold no exclusive lock on.

    Always exits 0. Allowed: prints nothing. Denied: prints the agents' JSON deny
    with the reason. Anything that prevents a decision denies too. The presets run
    the same code faster as `python -I -m agents.hooks pre-tool-use`.
    """
    _hook("pre-tool-use", identity_file)


@hook_app.command("stop")
def stop(identity_file: IdentityFileOpt = None) -> None:
    """Stop hook (Claude Code, Codex): with unread mail, keep the agent going with it (fenced); else let it stop."""
    _hook("stop", identity_file)


def _hook(kind: str, identity_file: Path | None) -> None:
    from agents.hooks import answer, deny_output
    from agents.identity_file import adopt_identity_file
    from broker.client import NoIdentityError

    try:
        adopt_identity_file(identity_file)
    except NoIdentityError as exc:
        if kind == "pre-tool-use":
            sys.stdout.write(deny_output(f"conclave: cannot check locks, so edits are blocked: {exc}") + "\n")
        return
    out = answer(kind, sys.stdin.read)
    if out:
        sys.stdout.write(out + "\n")


def agent_launch(
    preset: Annotated[str, typer.Option("--preset", help="claude-code, codex, aider or command.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where this spawn's generated files go.")],
    command: Annotated[List[str], typer.Argument(help="The agent's binary and extra arguments, after --.")],
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="The task.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="The model, passed with the binary's own flag.")] = None,
) -> None:
    """Run by the supervisor for a preset agent: write its config, fetch its context, exec it."""
    from broker.client import BrokerUnavailable, NoIdentityError
    from agents.presets import PRESETS, LaunchPlan, launch
    from broker.errors import ConclaveError

    if preset not in PRESETS:
        die(f"agent-launch: unknown preset {preset!r}; choose one of {', '.join(PRESETS)}", EXIT_USAGE)
    if not command:
        die("agent-launch: no command to run after --", EXIT_USAGE)
    try:
        launch(LaunchPlan(preset=preset, directory=directory, command=tuple(command), prompt=prompt, model=model))
    except (NoIdentityError, BrokerUnavailable) as exc:
        die(f"agent-launch: {exc}", EXIT_NO_BROKER)
    except ConclaveError as exc:
        die(f"agent-launch: {exc.message} [{exc.code.value}]", error=exc.code.value)
    except OSError as exc:
        die(f"agent-launch: could not run {command[0]!r} for preset {preset!r}: {exc.strerror or exc}", 127)


def register(root_app: typer.Typer) -> None:
    """Add ``mcp``, ``hook`` and the hidden ``agent-launch`` to the root ``conclave`` command."""
    root_app.command("mcp")(mcp)
    root_app.add_typer(hook_app, name="hook")
    root_app.command(
        "agent-launch",
        hidden=True,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(agent_launch)

