"""``conclave scenario run PATH...``: replay scenarios, print a table, exit non-zero on any surprise."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from broker.clikit import EXIT_USAGE, JsonOpt, RepoOpt, StateOpt, Target, die, emit

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Replay attack and workflow scenarios against a real broker.")


@app.command("run")
def run_command(
    paths: Annotated[List[Path], typer.Argument(help="Scenario files, or directories to search for *.toml.")],
    junit: Annotated[Optional[Path], typer.Option("--junit", help="Also write a JUnit XML report here.")] = None,
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", help="Scenarios run at once (default: up to 4, by CPU count).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Run every scenario in its own scratch repository with a real broker and real agents."""
    import attrs
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from scenarios import collect, run_all, write_junit
    from scenarios.suite import verdict_ok

    target = Target(json_out, repo, state_dir)
    try:
        files = collect(paths)
    except FileNotFoundError as exc:
        die(str(exc), EXIT_USAGE)
    if not files:
        die("no scenario files found (*.toml)", EXIT_USAGE)
    console = Console(stderr=True)
    finished: list[object] = []

    def done(outcome: object) -> None:
        finished.append(outcome)
        progress.advance(task)

    # SIGTERM ends the run as Ctrl-C does: no more scenarios, every broker started stopped (run_all).
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with Progress(TextColumn("scenarios"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=json_out or not console.is_terminal) as progress:
            task = progress.add_task("run", total=len(files))
            outcomes = run_all(files, jobs=jobs, on_done=done)
    except KeyboardInterrupt as exc:
        how = "SIGTERM" if isinstance(exc, _Terminated) else "Ctrl-C"
        die(
            f"interrupted by {how} after {len(finished)} of {len(files)} scenario(s); the brokers it had started were stopped "
            "and no verdict is given; run it again to completion",
            EXIT_TERMINATED if how == "SIGTERM" else EXIT_INTERRUPTED,
            error="interrupted",
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if junit is not None:
        write_junit(outcomes, junit)
    emit(target, [attrs.asdict(o) for o in outcomes], _print)
    if not verdict_ok(outcomes):
        raise typer.Exit(1)


#: Exit codes of a run cut short, as a shell reports a process a signal ended.
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be, so both stop the run one way."""


def _interrupt(signum: int, frame: object) -> None:
    raise _Terminated


def _print(outcomes: list[dict]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="scenarios")
    for column in ("scenario", "tier", "verdict", "time"):
        table.add_column(column)
    colours = {"passed": "green", "failed": "red", "invalid": "yellow"}
    for o in outcomes:
        table.add_row(escape(o["name"]), o["tier"], f"[{colours[o['verdict']]}]{o['verdict']}[/]", f"{o['seconds']:.1f}s")
    console = Console()
    console.print(table)
    for o in outcomes:
        if o["verdict"] == "failed":
            console.print(f"[red]FAILED[/] {escape(o['name'])} ({escape(o['path'])}) at {escape(o['detail'] or '')}", highlight=False)
            console.print(f"  expected: {escape(o['expected'] or '')}\n  got:      {escape(o['got'] or '')}", highlight=False)
        elif o["verdict"] == "invalid":
            console.print(f"[yellow]INVALID[/] {escape(o['detail'] or '')}", highlight=False)
    passed = sum(o["verdict"] == "passed" for o in outcomes)
    console.print(f"{passed} passed, {len(outcomes) - passed} failed")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="scenario")
