"""Commands that connect real coding agents: ``conclave mcp``, ``conclave hook``, ``conclave agent-launch``.

All three act as the agent whose process tree they run in; none accepts an
identity on its command line.  ``--identity-file`` only supplies the
agent's own ticket to a helper its agent started with a scrubbed
environment (see ``agents.identity_file``); the broker still checks that
the caller descends from that agent.
"""

from __future__ import annotations

import json
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
    help="Enforcement hooks for coding agents (Claude Code's PreToolUse).",
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
        die(f"mcp: the broker refused this process: {exc.message} [{exc.code.value}]", EXIT_REFUSED)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@hook_app.command("pre-tool-use")
def pre_tool_use(identity_file: IdentityFileOpt = None) -> None:
    """Claude Code PreToolUse hook: read the event on stdin; block Edit/Write on paths without your exclusive lock.

    Exit 0 lets the tool call go ahead; exit 2 blocks it, with the reason on stderr.
    Anything that prevents a decision blocks too.
    """
    from agents.hooks import EXIT_BLOCK, Verdict, pre_tool_use as decide

    try:
        verdict = _decide(decide, identity_file)
    except Exception as exc:  # an enforcement hook that crashes must not let the edit through
        verdict = Verdict(False, f"conclave hook failed ({type(exc).__name__}: {exc}); the edit stays blocked")
    if not verdict.allow:
        sys.stderr.write(verdict.reason + "\n")
        raise typer.Exit(EXIT_BLOCK)


def _decide(decide, identity_file: Path | None):  # type: ignore[no-untyped-def]
    from broker.client import BlockingClient, BrokerUnavailable, NoIdentityError
    from agents.hooks import Verdict, concerns_edits
    from agents.identity_file import adopt_identity_file
    from broker import paths
    from broker.errors import ConclaveError

    raw = sys.stdin.read()
    try:
        event = json.loads(raw)
    except ValueError:
        return Verdict(False, "conclave: the PreToolUse event on stdin is not JSON; refusing to guess")
    if not concerns_edits(event):
        return Verdict(True)  # not a file edit: no lock to check, no broker to ask
    try:
        adopt_identity_file(identity_file)
        client = BlockingClient.for_agent(timeout=30)
    except (NoIdentityError, BrokerUnavailable, ConclaveError) as exc:
        message = exc.message if isinstance(exc, ConclaveError) else str(exc)
        return Verdict(False, f"conclave: cannot check locks, so edits are blocked: {message}")
    with client:
        where = paths.resolve()
        return decide(event, repo=where.repo, state=where.state, agent=client.identity["agent"], ask=client.call)


def agent_launch(
    preset: Annotated[str, typer.Option("--preset", help="claude-code, codex, aider or command.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where this spawn's generated files go.")],
    command: Annotated[List[str], typer.Argument(help="The agent's binary and extra arguments, after --.")],
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="The task.")] = None,
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
        launch(LaunchPlan(preset=preset, directory=directory, command=tuple(command), prompt=prompt))
    except (NoIdentityError, BrokerUnavailable) as exc:
        die(f"agent-launch: {exc}", EXIT_NO_BROKER)
    except ConclaveError as exc:
        die(f"agent-launch: {exc.message} [{exc.code.value}]")
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

