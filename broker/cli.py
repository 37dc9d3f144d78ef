"""The ``conclave`` command: the root app, and the broker's own commands.

Each package owns its commands (``memory/cli.py``, ``locks/cli.py``,
``broker/mail/cli.py``, ...); the composition root (``broker.composition``)
mounts them.  Heavy imports (trio,
apsw, cattrs) happen inside commands, so an agent's ``conclave whoami`` stays
cheap.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from broker.clikit import EXIT_USAGE, JsonOpt, RepoOpt, StateOpt, Target, call, cell, console, ctrl_c_stops, die, emit, say, table
from broker.literal import visible

app = typer.Typer(
    name="conclave",
    help="Run many AI agents on one git repository with unforgeable identities, locks, and a shared memory "
    "that trusts only independent witnesses.  Shell completion: conclave --install-completion.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            sys.stdout.write(f"conclave {version('conclave')}\n")
        except PackageNotFoundError:
            sys.stdout.write("conclave (not installed as a package; run from a source tree)\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    _show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print conclave's version and exit.")
    ] = False,
) -> None:
    """The root: --version, and typer's shell completion (--install-completion, --show-completion)."""


@app.command()
def run(
    team: Annotated[
        Optional[Path], typer.Option("--team", help="The team file (TOML) naming the agents to run [default: team.toml in the repository].")
    ] = None,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
    grace: Annotated[float, typer.Option("--grace", help="Seconds between SIGTERM and SIGKILL at shutdown.")] = 5.0,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Show only the first line and the summary, not the agents' output and the run's events.")
    ] = False,
    accept_team: Annotated[
        bool,
        typer.Option("--accept-team", help="Accept the team file's trust-relevant changes since you last ran it (they are shown), and run."),
    ] = False,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help='Stop the whole run after this long (seconds, or "90m", "8h").')] = None,
    idle_timeout: Annotated[
        Optional[str], typer.Option("--idle-timeout", help="Stop the run when no agent has printed or called the broker for this long.")
    ] = None,
    max_cost_usd: Annotated[Optional[float], typer.Option("--max-cost-usd", help="Stop the run once its agents report spending more.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", help="Stop the run once its agents report using more tokens.")] = None,
    no_preflight: Annotated[
        bool, typer.Option("--no-preflight", help="Skip the checks of binaries, keys and model endpoints before the first agent starts.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Start the broker on the repository, spawn the team, run until every agent exits (or Ctrl-C).

    Before the first agent starts, every preset agent is checked (its
    binary and version, its key, its model endpoint: `conclave team check
    --online` runs the same checks).  Each agent's output is shown as it
    comes, prefixed with its name and session, with spawns, exits,
    restarts, long lock waits, usage and mail to you (--quiet or --json:
    none of it; `conclave logs -f` shows it from another terminal).  Exit
    codes: 0 every agent exited 0; 1 an agent failed (nonzero exit, killed,
    timed out, over budget, gave up after restarts, could not start); 2 bad
    usage (team file, not a git repository, a preflight problem, its
    trust-relevant settings changed since you last ran it -- shown, with how
    to accept them); 4 could
    not start (another broker runs here); 5 stopped by `conclave stop`; 6
    the run's own timeout, idle timeout or budget stopped it; 129 SIGHUP
    (the terminal closed); 130 Ctrl-C; 131 SIGQUIT; 143 SIGTERM.  Each of
    those signals stops the run like Ctrl-C: every agent stopped, the
    summary printed (and kept in the run journal), the guard hooks removed.
    """
    import gc
    import logging

    # A broker's start imports every feature (trio, the ops' attrs classes, the store): tens of
    # thousands of objects that live as long as it does, none of them garbage.  The collector
    # would walk them over and over meanwhile (a tenth of the start's CPU); it is off until the
    # broker runs, and they are then frozen out of its later passes (docs/BENCHMARKS.md).
    gc.disable()

    import trio

    from broker import composition
    from broker.main import EXIT_NOT_STARTED, BrokerAlreadyRunning, ProbeTaken, run_broker
    from broker.paths import StateError
    from broker.sandbox import box as sandbox_box
    from broker.sandbox import machine as sandbox_machine
    from broker.scaffold import TEAM_FILE

    # Before conclave runs git at all: no PATH entry a box could fill (the work tree, found without git).
    around = Path(repo if repo is not None else os.getcwd()).resolve()
    os.environ["PATH"], dropped = sandbox_box.safe_search_path(
        os.environ.get("PATH", ""),
        [str(p) for p in (around, *around.parents) if p == around or (p / ".git").exists()],
        keep=sandbox_box.installation(),
    )
    target = Target(json_out, repo, state_dir)
    paths = target.paths()
    if paths.repo == Path("/"):
        die("refusing to run on / ; pass --repo DIR (a git repository)", EXIT_USAGE)
    if team is None:
        team = paths.repo / TEAM_FILE
        if not team.exists():
            _require_git(paths.repo, repo)
            die(f"no team file: conclave run reads {team} unless --team names one; `conclave init` writes a starter", EXIT_USAGE)
    team_spec = _load_team(team, paths)
    _require_git(paths.repo, repo)
    from broker.sandbox import gitlayout

    try:
        layout = gitlayout.check(paths.repo)
    except gitlayout.GitLayoutError as exc:
        die(f"conclave run: {exc}", EXIT_USAGE)
    machine = sandbox_machine.probe()
    try:
        chosen = sandbox_box.levels(((a.name, a.sandbox) for a in team_spec.agents), machine, state_in_work_tree=paths.inside_work_tree())
        if any(level != "off" for level in chosen.values()):
            sandbox_box.check_state_dir(paths.state)
        for agent in team_spec.agents:
            if chosen[agent.name] != "off":
                sandbox_box.check_grants(
                    agent.name, repo=paths.repo, state=paths.state, allow_read=agent.allow_read, allow_write=agent.allow_write
                )
        boxed = [a for a in team_spec.agents if chosen[a.name] != "off"]
        sandbox_box.check_repointable(paths.repo, {a.name: a.allow_write for a in boxed}, {a.name: a.allow_read for a in boxed})
    except ValueError as exc:
        die(str(exc), EXIT_USAGE)
    _trust_team(target, team, team_spec, accept=accept_team)
    # The broker runs git by name, and its agents inherit its PATH: no entry a box could fill.
    writable = [str(paths.repo), *(p for a in team_spec.agents if chosen[a.name] != "off" for p in a.allow_write)]
    os.environ["PATH"], more = sandbox_box.safe_search_path(os.environ.get("PATH", ""), writable, keep=sandbox_box.installation())
    dropped += more
    run_limits = _run_limits(team_spec.run_limits, timeout, idle_timeout, max_cost_usd, max_tokens)
    if not no_preflight:
        _preflight(team_spec, json_out)
    paths.ensure()
    logging.basicConfig(filename=paths.logs / "broker.log", level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    watch = not (quiet or json_out)
    if not json_out:
        if not watch:
            say(f"conclave: broker for {paths.repo} (state {paths.state}); {len(team_spec.agents)} agent(s); Ctrl-C stops")
        for name, level in chosen.items():
            words = f"NO SANDBOX: {sandbox_machine.OFF_WORDS}" if level == "off" else sandbox_box.DESCRIPTIONS[level]
            line = f"  {name}: sandbox {level} -- {words}"
            if level == "off":
                console().print(cell(line), style="bold red")
            else:
                say(line)
            if level != "off" and machine.weaker(level):
                console().print(cell(f"    {name}'s leftovers: {machine.leftovers(level)}"), style="bold yellow")
        if dropped:
            say(f"  PATH without {', '.join(repr(d) for d in dropped)}: agents can write there (the broker and every agent would run what they put there)")
    sys.stdout.flush()
    import time

    from broker import unreviewed
    from store.events import ChainRefused

    started_ns = time.time_ns()
    gc.freeze()
    gc.enable()
    try:
        summary = trio.run(
            lambda: run_broker(
                paths, team_spec, features=composition.features(), machine=machine, grace=grace,
                terminal=sys.stdout.fileno() if watch else None, colour=watch and _colour(), limits=run_limits,
                layout=layout, unboxed="off" in chosen.values(),
            )
        )  # fmt: skip
    except (BrokerAlreadyRunning, StateError, ProbeTaken) as exc:
        die(str(exc), EXIT_NOT_STARTED)
    except BaseExceptionGroup as group:
        # The store would not append the broker's first event: its chain key is gone, or replaced.
        refused = group.subgroup(ChainRefused)
        if refused is None:
            raise
        while isinstance(refused, BaseExceptionGroup):
            refused = refused.exceptions[0]
        die(f"the broker will not run: {refused}; `conclave memory verify` says more", EXIT_NOT_STARTED)
    # The reader went away (`conclave run | head`), or the terminal closed (SIGHUP): nothing to
    # print to, and the run's own outcome is still the exit code (rich would exit 1 on the broken
    # pipe, Python 120 on a failed flush).  The summary is in the run journal either way.
    shown = {**_summary_json(summary), "unreviewed": unreviewed.changed_since(paths.repo, started_ns)}
    try:
        if not _reader_gone(sys.stdout.fileno()):
            emit(target, shown, _print_summary)
        sys.stdout.flush()
    except OSError:
        _nothing_to_print_to()
    raise typer.Exit(summary.exit_code)


def _run_limits(team: Any, timeout: str | None, idle: str | None, cost: float | None, tokens: int | None) -> Any:
    """The run's limits: the team file's ``[run]``, with the command line's flags over it."""
    from broker.limits import LimitError, Limits

    given = {k: v for k, v in (("timeout", timeout), ("idle_timeout", idle), ("max_cost_usd", cost), ("max_tokens", tokens)) if v is not None}
    try:
        return Limits.parse(given, "conclave run").over(team)
    except LimitError as exc:
        die(str(exc).replace("idle_timeout", "--idle-timeout").replace("timeout =", "--timeout"), EXIT_USAGE)


def _preflight(team: Any, json_out: bool, *, online: bool = True) -> Any:
    """Check every preset agent's binary, key and endpoint; exit 2 naming each problem, say each warning."""
    from broker import preflight
    from broker.supervisor import agent_environment

    report = preflight.check(team.agents, team.presets, agent_environment)
    for warning in report.warnings:
        if not json_out:
            sys.stderr.write(f"conclave: preflight: warning: {warning.line()}\n")
    if report.problems:
        count = len(report.problems)
        head = f"preflight found {count} problem(s); no agent was started"
        fix = "fix each, then run again (`conclave team check --online` checks without starting anything)"
        if json_out:
            die(head, EXIT_USAGE, error="preflight", fix=fix,
                details={"problems": [f.as_dict() for f in report.problems], "warnings": [f.as_dict() for f in report.warnings]})  # fmt: skip
        from broker.literal import visible

        lines = "".join(f"preflight: {visible(f.line())}\n" for f in report.problems)
        sys.stderr.write(f"conclave: {head}; {fix}:\n{lines}")
        raise typer.Exit(EXIT_USAGE)
    return report


def _nothing_to_print_to() -> None:
    """Point stdout and stderr at /dev/null: the terminal is gone, and a last flush must not fail."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


def _trust_team(target: Target, file: Path, team_spec: Any, *, accept: bool) -> None:
    """Run a team file only as the operator last accepted it: a first run records it; a trust-relevant
    change is shown and refused (exit 2) unless ``accept`` (``--accept-team``) accepts it here."""
    from broker import team_trust
    from store.events import now

    paths = target.paths()
    verdict = team_trust.judge(team_spec, file, paths.state)
    if verdict.changes and not accept:
        how = f"`conclave team accept {file}` accepts them (or `conclave run --accept-team`)"
        if target.json:
            sys.stdout.write(json.dumps({"refused": "team_changed", "team": str(file), "changes": [c.to_json() for c in verdict.changes], "accept": how}) + "\n")
        else:
            say(f"{file} changed since you last ran it here; its trust-relevant settings now differ:")
            for change in verdict.changes:
                say(f"  {change.describe()}")
        die(f"{file}: {len(verdict.changes)} trust-relevant change(s) since you last ran it (listed above); read them, then {how}", EXIT_USAGE)
    if verdict.first or verdict.changes:
        if verdict.changes:
            _refuse_inside_an_agent("accept a team file's changes")
        team_trust.accept(team_spec, file, paths.state, at=now())
        if verdict.changes and not target.json:
            say(f"accepted {len(verdict.changes)} change(s) to {file}:")
            for change in verdict.changes:
                say(f"  {change.describe()}")


def _refuse_inside_an_agent(what: str) -> None:
    """Only a person does ``what``: a process that descends from a running broker (an agent) never may."""
    from broker.paths import StateError, broker_ancestor

    try:
        broker = broker_ancestor(os.getpid())
    except StateError as exc:
        die(str(exc))
    if broker is not None:
        die(f"this process descends from a running conclave broker (pid {broker}): an agent cannot {what}; the operator does, from their own terminal")


def _reader_gone(fd: int) -> bool:
    """Is ``fd`` a pipe whose reading end is closed (poll says POLLERR)?"""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _require_git(repo: Path, given: Path | None) -> None:
    """Refuse a directory that is not a git work tree, naming the fix."""
    from broker.paths import git_toplevel

    if repo == Path("/"):
        die("refusing to run on / ; pass --repo DIR (a git repository)", EXIT_USAGE)
    if git_toplevel(repo) is None:
        where = f"--repo {given}" if given is not None else f"the current directory ({repo})"
        die(
            f"{where} is not inside a git repository; conclave runs agents on one git repository. "
            f"Fix: run `git init` there (and commit something), or pass --repo DIR naming a repository",
            EXIT_USAGE,
        )


def _colour() -> bool:
    return os.isatty(sys.stdout.fileno()) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _summary_json(summary: Any) -> dict[str, Any]:
    import attrs

    return {
        "run": summary.run,
        "started_at": summary.started_at,
        "ended_at": summary.ended_at,
        "stopped_by": summary.stopped_by,
        "exit_code": summary.exit_code,
        "failed": [f"{o.agent}:{o.session}" for o in summary.failed],
        "agents": [attrs.asdict(o) for o in summary.outcomes],
        "git": [attrs.asdict(n) for n in summary.git],
        "usage": summary.usage,
    }


def _print_summary(summary: dict[str, Any]) -> None:
    rows = [(f"{o['agent']}:{o['session']}", o["parent"] or "-", _outcome_words(o), _usage_words(o.get("usage")), Path(o["log"]).name) for o in summary["agents"]]
    table(f"run {summary['run']} summary", ["principal", "parent", "status", "usage", "log"], rows)
    # What happened during the run comes first; how it ended is the last line.
    for o in summary["agents"]:
        if o.get("leftovers"):
            say(f"{o['agent']}:{o['session']} left {o['leftovers']} process(es) behind; killed at its exit")
    for note in summary.get("git", []):
        # Paths and messages in a note are agents' words: shown literally.
        say(visible(f"git: {note['principal']}: {note['text']}"))
    from broker.unreviewed import describe

    for line in describe(summary.get("unreviewed", [])):
        say(line)
    if summary.get("usage"):
        say(f"usage reported by the agents: {_usage_words(summary['usage'])}")
    how = f"stopped by {summary['stopped_by']}" if summary["stopped_by"] else "every agent has exited"
    failed = f"; {len(summary['failed'])} failed: {', '.join(summary['failed'])}" if summary["failed"] else ""
    say(f"{how}{failed}; exit code {summary['exit_code']}")


def _usage_words(usage: dict[str, Any] | None) -> str:
    if not usage:
        return "-"
    cost = f", ${usage['cost_usd']:.4f}" if usage.get("cost_usd") is not None else ""
    return f"{usage['tokens']:,} tokens{cost}"


def _outcome_words(o: dict[str, Any]) -> str:
    from broker.supervisor import AgentOutcome

    return AgentOutcome(**o).describe() + (" [FAILED]" if o["failed"] else "")


@app.command()
def logs(
    agent: Annotated[
        Optional[str], typer.Argument(help="Only this agent (and its children), or one principal AGENT:SESSION.")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep showing new output until the run ends (waits for a run to start).")] = False,
    run_number: Annotated[Optional[int], typer.Option("--run", help="Which run (conclave agents numbers them; default: the latest).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """The agents' output and the run's events, as `conclave run` shows them, from another terminal.

    Reads the files under the state directory's logs/ (each principal's
    output, and the run journal run-N.jsonl); a principal's output is shown
    just before its exit.  With --json: one list, or with -f one JSON
    object per line.
    """
    import time

    from broker.clikit import EXIT_NO_BROKER
    from broker.runlog import Renderer, RunReader, journals

    target = Target(json_out, repo, state_dir)
    paths = target.paths()
    if follow:
        ctrl_c_stops()
    found = journals(paths.logs)
    if run_number is None and not found:
        if not follow:
            die(f"no run has been recorded in {paths.logs} yet (conclave run --team TEAM.toml starts one; -f waits for it)", EXIT_NO_BROKER)
        if not json_out:
            say(f"waiting for a run to start on {paths.state}; Ctrl-C stops")
        try:
            while not found:
                time.sleep(0.2)
                found = journals(paths.logs)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
    if run_number is None and follow and _run_over(paths, max(found)):
        # Started before a run: follow the run that starts next, not the one that has ended.
        latest = max(found)
        if not json_out:
            say(f"run {latest} has ended (conclave logs --run {latest} shows it); waiting for the next run to start on {paths.state}; Ctrl-C stops")
        try:
            while max(found) <= latest:
                time.sleep(0.2)
                found = journals(paths.logs)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
    if run_number is None:
        run_number = max(found)
    elif run_number not in found:
        known = ", ".join(map(str, sorted(found))) or "none"
        die(f"no journal for run {run_number} in {paths.logs} (runs recorded: {known}; conclave gc may have pruned it)", EXIT_USAGE)
    reader = RunReader(paths.logs, run_number, agent=agent)
    renderer = Renderer(colour=not json_out and _colour())
    entries = reader.poll(final=not follow)
    if agent is not None and not follow and not any(_agent_named(agent, name) for name in reader.seen):
        names = ", ".join(sorted(n for n in reader.seen if "/" not in n)) or "none"
        die(f"no agent named {agent} in run {run_number} (its agents: {names}; --run N picks another run)", EXIT_USAGE)
    if json_out and not follow:
        emit(target, [_log_entry(e) for e in entries])
        return
    try:
        _show_log_entries(entries, renderer, json_out)
        while follow and not reader.ended:
            time.sleep(0.1)
            _show_log_entries(reader.poll(), renderer, json_out)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    finally:
        reader.close()


def _run_over(paths: Any, run: int) -> bool:
    """Has run ``run`` ended: its journal says so, or no broker holds the store any more (it was killed)?"""
    from broker.paths import lock_holder
    from broker.runlog import journal_path, read_journal

    notices, _ = read_journal(journal_path(paths.logs, run))
    return any(n.kind == "end" for n in notices) or lock_holder(paths.database) is None


def _agent_named(wanted: str, name: str) -> bool:
    base = wanted.partition(":")[0]
    return name == base or name.startswith(base + "/")


def _log_entry(entry: tuple[str, Any]) -> dict[str, Any]:
    import attrs

    who, what = entry
    if who == "notice":
        return {"type": "notice", **attrs.asdict(what)}
    return {"type": "output", "principal": who, "text": what.text, **({"cut": True} if what.cut else {})}


def _show_log_entries(entries: list[tuple[str, Any]], renderer: Any, json_out: bool) -> None:
    import json

    if json_out:
        out = "".join(json.dumps(_log_entry(e), separators=(",", ":")) + "\n" for e in entries)
    else:
        out = "".join(renderer.notice(what) if who == "notice" else renderer.output(who, what.text, cut=what.cut) for who, what in entries)
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()


team_app = typer.Typer(no_args_is_help=True, add_completion=False, help="Team files: check one without running it; accept its changes.")
app.add_typer(team_app, name="team")


def _load_team(file: Path, paths: Any) -> Any:
    """The team file, checked as `conclave run` checks it; exit 2 naming what to fix."""
    from broker import composition
    from broker.team import TeamError, load

    try:
        return load(file, repo=paths.repo, rules=composition.team_rules())
    except TeamError as exc:
        die(str(exc), EXIT_USAGE)


@team_app.command("accept")
def team_accept(
    file: Annotated[Path, typer.Argument(help="The team file (TOML).")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Accept a team file's trust-relevant settings as they are now, showing what changed since you last ran it.

    `conclave run` refuses a team file whose boxes, commands, environment,
    policy or store changed since the operator last ran or accepted it here.
    Exit 0 when accepted, 2 when the file is not valid.
    """
    from broker import team_trust
    from store.events import now

    target = Target(json_out, repo, state_dir)
    paths = target.paths()
    team_spec = _load_team(file, paths)
    _refuse_inside_an_agent("accept a team file's settings")
    verdict = team_trust.judge(team_spec, file, paths.state)
    team_trust.accept(team_spec, file, paths.state, at=now())
    report = {"team": str(file), "state": str(paths.state), "first": verdict.first, "changes": [c.to_json() for c in verdict.changes]}

    def human(r: dict[str, Any]) -> None:
        if verdict.first:
            say(f"accepted {file} as it is (it had not been run here)")
        elif not verdict.changes:
            say(f"{file} has no trust-relevant change since you last accepted it")
        else:
            say(f"accepted {len(verdict.changes)} change(s) to {file}:")
            for change in verdict.changes:
                say(f"  {change.describe()}")

    emit(target, report, human)


@team_app.command("check")
def team_check(
    file: Annotated[Path, typer.Argument(help="The team file (TOML).")],
    online: Annotated[
        bool, typer.Option("--online", help="Also run `conclave run`'s preflight: each preset agent's binary version, key and model endpoint.")
    ] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Validate a team file as `conclave run` would (names, commands, cwd, presets, slots, policy, limits); run nothing.

    With --online, also the checks `conclave run` makes before the first
    agent starts: binaries and their versions, keys, model endpoints.  Exit
    0 when it is valid (warnings are said), 2 with what to fix when it is not.
    """
    from broker.paths import git_toplevel

    target = Target(json_out, repo, state_dir)
    paths = target.paths()
    team_spec = _load_team(file, paths)
    checked = _preflight(team_spec, json_out) if online else None
    report = {
        "ok": True,
        "file": str(file),
        "repo": str(paths.repo),
        "repo_is_git": git_toplevel(paths.repo) is not None,
        "agents": [
            {"name": a.name, "command": list(a.command), "preset": a.preset, "cwd": a.cwd, "restart": a.restart,
             "max_restarts": a.max_restarts, "may_spawn": a.may_spawn, "env": sorted(a.env), "model": a.model,
             "limits": a.limits.as_dict(), "log_cap": a.log_cap}
            for a in team_spec.agents
        ],
        "run_limits": team_spec.run_limits.as_dict(),
        "slots": list(team_spec.slots),
        "policy": team_spec.policy,
        "memory": team_spec.memory,
        "preflight": checked.as_dict() if checked is not None else None,
    }  # fmt: skip

    def human(r: dict[str, Any]) -> None:
        import shlex

        table(f"{r['file']}: {len(r['agents'])} agent(s)", ["agent", "runs", "cwd", "restart", "may spawn"], [
            (a["name"], f"preset {a['preset']}" if a["preset"] else shlex.join(a["command"]), a["cwd"] or ".",
             a["restart"] + (f" (up to {a['max_restarts']})" if a["restart"] == "on-failure" else ""), a["may_spawn"])
            for a in r["agents"]
        ])  # fmt: skip
        if r["slots"]:
            say("slots: " + ", ".join(f"slot://{x.get('name')}" for x in r["slots"]))
        if r["policy"]:
            say("policy: " + ", ".join(f"{k} = {v}" for k, v in r["policy"].items()))
        limited = [(a["name"], ", ".join(f"{k} = {v}" for k, v in a["limits"].items())) for a in r["agents"] if a["limits"]]
        for name, text in limited:
            say(f"limits: {name}: {text}")
        if r["run_limits"]:
            say("run limits: " + ", ".join(f"{k} = {v}" for k, v in r["run_limits"].items()))
        if r["preflight"] is not None:
            for name, seen in r["preflight"]["agents"].items():
                say(f"preflight: {name}: " + ", ".join(f"{k} {v}" for k, v in seen.items() if v is not None))
            say(f"preflight: every check passed in {r['preflight']['seconds']:.1f} s" + (f" ({len(r['preflight']['warnings'])} warning(s) above)" if r["preflight"]["warnings"] else ""))
        say(f"ok: {r['file']} is valid for {r['repo']}")
        if not r["repo_is_git"]:
            say(f"note: {r['repo']} is not a git repository; conclave run will refuse it until you run `git init` there")

    emit(target, report, human)


@app.command()
def init(
    force: Annotated[bool, typer.Option("--force", help="Overwrite team.toml and agents/example.sh if they exist.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Write a commented sample team file (team.toml) and agent script (agents/example.sh) into the repository."""
    from broker import scaffold

    target = Target(json_out, repo, state_dir)
    paths = target.paths()
    _require_git(paths.repo, repo)
    try:
        written = scaffold.write(paths.repo, force=force)
    except scaffold.ScaffoldError as exc:
        die(str(exc), EXIT_USAGE)

    def human(r: dict[str, Any]) -> None:
        for p in r["written"]:
            say(f"wrote {p}")
        say("next: read team.toml, then `conclave team check team.toml` and `conclave run`")

    emit(target, {"written": [str(p) for p in written], "team": str(written[0])}, human)


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
    run_number: Annotated[Optional[int], typer.Option("--run", help="Only run N (runs are numbered from 1 on this state directory).")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Also runs that conclave gc pruned.")] = False,
) -> None:
    """Every principal the broker has issued, grouped by run: spawn tree, pids, live or ended, exit codes."""
    target = Target(json_out, repo, state_dir)
    args: dict[str, Any] = {"live_only": live, "include_pruned": all_runs}
    if run_number is not None:
        args["run"] = run_number
    rows = call(target, "agents", args)

    def human(rows: list[dict[str, Any]]) -> None:
        from rich.tree import Tree

        from broker.clikit import cell, console
        from broker.supervisor import exit_words

        if not rows:
            say("no principals" + (" alive" if live else "") + (f" in run {run_number}" if run_number is not None else ""))
            return
        by_run: dict[Any, list[dict[str, Any]]] = {}
        for r in rows:
            by_run.setdefault(r.get("run"), []).append(r)
        out = console()
        for run, members in by_run.items():
            alive = sum(1 for r in members if r["live"])
            label = f"run {run}" + (" (pruned: logs removed)" if members[0].get("pruned") else "") + f"  started {members[0]['started_at'][:19]}"
            tree = Tree(cell(label + (f"  {alive} live" if alive else "")))
            nodes: dict[str | None, Any] = {None: tree}
            for r in members:
                state = "live" if r["live"] else ("revoked, " if r["revoked_at"] else "") + f"ended, {exit_words(r['exit_code'])}"
                parent_node = nodes.get(r["parent"], tree)
                nodes[r["principal"]] = parent_node.add(cell(f"{r['principal']}  pid {r['pid']}  [{state}]  domain {r['domain']}"))
            out.print(tree)

    emit(target, rows, human)


@app.command()
def gc(
    keep: Annotated[int, typer.Option("--keep", help="Keep the newest N runs (the live run is always kept).", min=0)] = 3,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Prune old runs: delete their log files (agent output and run journals) and hide them from `conclave agents`.

    Nothing in the database is deleted: the principals stay (claims, witnesses
    and `memory verify` refer to them), the event log keeps everything and
    records the prune (broker.gc) with every file removed.
    """
    target = Target(json_out, repo, state_dir)
    report = call(target, "broker.gc", {"keep": keep, "dry_run": dry_run})

    def human(r: dict[str, Any]) -> None:
        if not r["runs"]:
            say(f"nothing to prune: runs kept {', '.join(map(str, r['kept'])) or 'none'} (--keep {keep})")
            return
        verb = "would remove" if r["dry_run"] else "removed"
        runs = ", ".join(map(str, r["runs"]))
        say(f"{verb} {len(r['files'])} log file(s), {r['bytes'] / 1e6:.1f} MB, of run(s) {runs}; kept run(s) {', '.join(map(str, r['kept'])) or 'none'}")
        for problem in r["not_removed"]:
            say(f"  not removed: {problem}")
        if not r["dry_run"]:
            say("the database keeps every principal and event; conclave agents --all still lists the pruned runs")

    emit(target, report, human)


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
def doctor(json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """What this machine offers an agent's sandbox (Landlock ABI, user namespaces, cgroups) and what that means per threat;
    which embedder the memory uses, and whether it works here."""
    import attrs

    from broker import composition
    from broker.sandbox import machine as sandbox_machine

    found = sandbox_machine.probe()
    database = Target(json_out, repo, state_dir).paths().database
    report = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in attrs.asdict(found).items()},
        "strongest": found.strongest,
        "levels": {level: found.offers(level) or "available" for level in sandbox_machine.LEVELS},
        "threats": found.threats(),
        "features": {f.name: f.doctor(database) for f in composition.features() if f.doctor is not None},
    }

    def human(r: dict[str, Any]) -> None:
        abi = r["landlock_abi"]
        say(f"Landlock: {f'ABI {abi}' if abi else 'not available'}")
        say(f"user namespaces: {'yes' if found.user_namespaces else 'no (' + str(found.user_namespaces_error) + ')'}")
        say(f"PID namespaces: {'yes' if found.pid_namespaces else 'no (' + str(found.pid_namespaces_error) + ')'}")
        say(
            f"cgroup v2 for leftovers: {r['cgroup'] or 'not delegated to this user (systemd-run --user --scope -p Delegate=yes conclave run ... gives one)'}"
        )
        for level in sandbox_machine.LEVELS:
            if level != "off" and found.offers(level) is None and found.weaker(level):
                console().print(cell(f"{level}: {found.leftovers(level)}"), style="bold yellow")
        console().print(cell(f"off: {sandbox_machine.OFF_WORDS}"), style="bold red")
        line = f"default sandbox: {r['strongest']}" + ("" if r["strongest"] != "off" else " (agents are not contained)")
        console().print(cell(line), style="bold red" if r["strongest"] == "off" else "bold")
        table("what each level means here", ["threat", "holds"], list(r["threats"].items()))
        for name, part in r["features"].items():
            say(f"{name}: {part['summary']}")

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

    words = sys.argv[1:]
    completing = any(name.endswith("_COMPLETE") for name in os.environ)  # typer's shell completion walks the whole tree
    command = words[0] if words and not completing else None
    composition.mount(app, command)
    (app if command is None else pruned(app, words))()


def pruned(root: typer.Typer, words: list[str]) -> typer.Typer:
    """``root`` with only the command ``words`` start with (and in a group, only the subcommand that
    follows it), when they name one: typer builds every command's parameters each time a process starts
    (a quarter of a second for all of conclave's), and a process runs one.  Anything else -- an option
    first, a word nobody owns, a group's own --help -- keeps the whole level, so listings, errors and
    suggestions are typer's own.  ``root`` and its groups are left as they were (copies are pruned)."""
    import copy

    from typer.main import get_command_name

    def named(info: Any) -> str | None:
        return info.name or (get_command_name(info.callback.__name__) if info.callback else None)

    word, rest = (words[0], words[1:]) if words else ("-", [])
    if word.startswith("-"):
        return root
    commands = [c for c in root.registered_commands if named(c) == word]
    groups = [g for g in root.registered_groups if (g.name or g.typer_instance.info.name) == word]
    if len(commands) + len(groups) != 1:
        return root
    kept = copy.copy(root)
    kept.registered_commands = commands
    kept.registered_groups = [copy.copy(g) for g in groups]
    for group in kept.registered_groups:
        group.typer_instance = pruned(group.typer_instance, rest[:1])
    return kept


if __name__ == "__main__":
    main()
