"""The ``conclave`` command: the root app, and the broker's own commands.

Each package owns its commands (``memory/cli.py``, ``locks/cli.py``,
``broker/mail/cli.py``, ...); the composition root (``broker.composition``)
mounts them.  Heavy imports (trio,
apsw, cattrs) happen inside commands, so an agent's ``conclave whoami`` stays
cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List

import typer

from broker.clikit import EXIT_USAGE, JsonOpt, RepoOpt, StateOpt, Target, call, die, emit, say, table

app = typer.Typer(
    name="conclave",
    help="Run many AI agents on one git repository with unforgeable identities, locks, and a shared memory "
    "that trusts only independent witnesses.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def run(
    team: Annotated[Path, typer.Option("--team", help="The team file (TOML) naming the agents to run.")],
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
    grace: Annotated[float, typer.Option("--grace", help="Seconds between SIGTERM and SIGKILL at shutdown.")] = 5.0,
    json_out: JsonOpt = False,
) -> None:
    """Start the broker on the repository, spawn the team, run until every agent exits (or Ctrl-C)."""
    import logging

    import trio

    from broker import composition
    from broker.main import BrokerAlreadyRunning, run_broker
    from rich.markup import escape

    from broker.paths import StateError
    from broker.sandbox import box as sandbox_box
    from broker.sandbox import machine as sandbox_machine
    from broker.team import TeamError, load

    target = Target(json_out, repo, state_dir)
    paths = target.paths()
    if paths.repo == Path("/"):
        die("refusing to run on / ; pass --repo", EXIT_USAGE)
    try:
        team_spec = load(team, repo=paths.repo, rules=composition.team_rules())
    except TeamError as exc:
        die(str(exc), EXIT_USAGE)
    machine = sandbox_machine.probe()
    try:
        chosen = sandbox_box.levels(((a.name, a.sandbox) for a in team_spec.agents), machine, state_in_work_tree=paths.inside_work_tree())
        for agent in team_spec.agents:
            sandbox_box.check_allowances(agent.name, (*agent.allow_read, *agent.allow_write), paths.state)
    except ValueError as exc:
        die(str(exc), EXIT_USAGE)
    paths.ensure()
    logging.basicConfig(filename=paths.logs / "broker.log", level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not json_out:
        say(f"conclave: broker for {paths.repo} (state {paths.state}); {len(team_spec.agents)} agent(s); Ctrl-C stops")
        for name, level in chosen.items():
            line = f"  {escape(name)}: sandbox {level} -- {sandbox_box.DESCRIPTIONS[level]}"
            say(f"[bold red]{line}[/]" if level == "off" else line)
    try:
        summary = trio.run(lambda: run_broker(paths, team_spec, features=composition.features(), machine=machine, grace=grace))
    except (BrokerAlreadyRunning, StateError) as exc:
        die(str(exc))
    emit(target, _summary_json(summary), _print_summary)


def _summary_json(summary: Any) -> dict[str, Any]:
    import attrs

    return {
        "started_at": summary.started_at,
        "ended_at": summary.ended_at,
        "stopped_by": summary.stopped_by,
        "agents": [attrs.asdict(o) for o in summary.outcomes],
    }


def _print_summary(summary: dict[str, Any]) -> None:
    rows = [
        (f"{o['agent']}:{o['session']}", o["parent"] or "-", o["exit_code"], o["error"] or "", Path(o["log"]).name)
        for o in summary["agents"]
    ]
    table("run summary", ["principal", "parent", "exit", "error", "log"], rows)
    say(f"stopped by {summary['stopped_by']}" if summary["stopped_by"] else "every agent has exited")


@app.command()
def whoami(json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Who this process acts as: {agent, session, parent}, as the broker issued it."""
    target = Target(json_out, repo, state_dir)
    me = call(target, "whoami")
    emit(target, me, lambda m: say(f"{m['agent']}:{m['session']} (parent {m['parent'] or 'the broker'}, domain {m['domain']})"))


@app.command()
def agents(
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
    live: Annotated[bool, typer.Option("--live", help="Only principals whose process runs now.")] = False,
) -> None:
    """Every principal the broker has issued: spawn tree, pids, live or ended, exit codes."""
    target = Target(json_out, repo, state_dir)
    rows = call(target, "agents", {"live_only": live})

    def human(rows: list[dict[str, Any]]) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.tree import Tree

        tree = Tree("broker")
        nodes: dict[str | None, Any] = {None: tree}
        for r in rows:
            state = "live" if r["live"] else f"ended, exit {r['exit_code']}"
            parent_node = nodes.get(r["parent"], tree)
            nodes[r["principal"]] = parent_node.add(escape(f"{r['principal']}  pid {r['pid']}  [{state}]  domain {r['domain']}"))
        Console().print(tree)

    emit(target, rows, human)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def spawn(
    name: Annotated[str, typer.Option("--name", help="The child's name; it becomes PARENT/NAME.")],
    command: Annotated[List[str], typer.Argument(help="The command to run, after --.")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Ask the broker to spawn a child of this agent (only where the team file's may_spawn allows)."""
    target = Target(json_out, repo, state_dir)
    child = call(target, "spawn", {"name": name, "command": list(command)})
    emit(target, child, lambda c: say(f"spawned {c['agent']}:{c['session']} (pid {c['pid']})"))


@app.command()
def stop(json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Stop the running broker (operator only): agents are terminated, then it exits."""
    target = Target(json_out, repo, state_dir)
    from broker.clikit import EXIT_NO_BROKER, connect

    client = connect(target)
    if client is None:
        die("no broker is running for this state directory", EXIT_NO_BROKER)
    emit(target, call(target, "broker.stop"), lambda r: say("broker stopping"))


@app.command()
def ops(json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """List every wire op with its access and arguments (for people writing clients)."""
    from broker.clikit import connect

    target = Target(json_out, repo, state_dir)
    client = connect(target)
    if client is None:
        rows = _static_ops()  # no broker: the ops this installation defines
    else:
        with client:
            rows = client.call("ops")
    emit(target, rows, lambda rs: table("ops", ["op", "access", "args", "summary"], [(r["op"], r["access"], ", ".join(r["args"]), r["summary"]) for r in rs]))


def _static_ops() -> list[dict[str, Any]]:
    from broker import composition
    from broker.optable import describe_ops

    return describe_ops(spec for feature in composition.features() for spec in feature.ops.ops.values())


@app.command()
def doctor(json_out: JsonOpt = False) -> None:
    """What this machine offers an agent's sandbox (Landlock ABI, user namespaces, cgroups) and what that means per threat."""
    import attrs

    from broker.sandbox import machine as sandbox_machine

    found = sandbox_machine.probe()
    report = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in attrs.asdict(found).items()},
        "strongest": found.strongest,
        "levels": {level: found.offers(level) or "available" for level in sandbox_machine.LEVELS},
        "threats": found.threats(),
    }

    def human(r: dict[str, Any]) -> None:
        abi = r["landlock_abi"]
        say(f"Landlock: {f'ABI {abi}' if abi else 'not available'}")
        say(f"user namespaces: {'yes' if found.user_namespaces else 'no (' + str(found.user_namespaces_error) + ')'}")
        say(f"cgroup v2 for leftovers: {r['cgroup'] or 'not delegated to this user (the subreaper sweep is used)'}")
        say(f"default sandbox: [bold]{r['strongest']}[/]" + ("" if r["strongest"] != "off" else " [bold red](agents are not contained)[/]"))
        table("what each level means here", ["threat", "holds"], list(r["threats"].items()))

    emit(Target(json_out), report, human)


@app.command()
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Keep the scratch repository and print where it is.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run a scripted team on a scratch repository and show the whole story."""
    from broker.demo import run_demo

    code = run_demo(keep=keep, json_out=json_out)
    raise typer.Exit(code)


def main() -> None:
    from broker import composition

    composition.mount(app)
    app()


if __name__ == "__main__":
    main()
