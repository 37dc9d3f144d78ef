"""``conclave lock ...`` and ``conclave exec``: locks from a shell.

Inside an agent's process tree these act as the agent (its ticket); from a
person's terminal they act as the operator, who may list, read the log and
force-release, but holds no locks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from broker.clikit import EXIT_REFUSED, EXIT_USAGE, JsonOpt, RepoOpt, StateOpt, Target, call, die, emit, say, table
from broker.literal import visible

app = typer.Typer(no_args_is_help=True, add_completion=False)

PathsArg = Annotated[List[str], typer.Argument(help="Paths, globs (quote them), git, slot://NAME or any scheme://name.")]
WaitOpt = Annotated[
    Optional[float], typer.Option("--wait", help="Wait up to SECONDS in line (FIFO); without it, fail at once naming the holders.")
]
TtlOpt = Annotated[Optional[float], typer.Option("--ttl", help="Release by itself after SECONDS unless renewed (a backstop).")]
SharedOpt = Annotated[bool, typer.Option("--shared", help="Shared (read) locks instead of exclusive (write) ones.")]


def _time(iso: str | None) -> str:
    return iso[11:23] if iso else "-"


def _grants_table(title: str, rows: list[dict[str, Any]]) -> None:
    table(title, ["resource", "mode", "token", "since", "expires"], [(g["resource"], g["mode"], g["token"], _time(g["since"]), _time(g["expires_at"])) for g in rows])


@app.command()
def acquire(
    paths: PathsArg,
    shared: SharedOpt = False,
    wait: WaitOpt = None,
    ttl: TtlOpt = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Lock every PATH at once, or none (held by this agent until released or it exits)."""
    from locks.exec import acquire_args

    target = Target(json_out, repo, state_dir)
    result = call(target, "lock.acquire", acquire_args(paths, shared=shared, wait=wait, ttl=ttl))
    emit(target, result, lambda r: _grants_table("granted", r["grants"]))


@app.command()
def release(
    paths: PathsArg,
    force: Annotated[bool, typer.Option("--force", help="Operator only: take it from whoever holds it.")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (required with --force; logged).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Release locks this agent holds (all or none), or, with --force, any holder's (operator)."""
    target = Target(json_out, repo, state_dir)
    if force:
        if not reason or not reason.strip():
            die("--force needs --reason R (it is logged with the release)", EXIT_USAGE)
        released: list[dict[str, Any]] = []
        for path in paths:
            released += call(target, "lock.force_release", {"resource": path, "reason": reason})["released"]
        result: dict[str, Any] = {"released": released, "reason": reason}
    else:
        if reason is not None:
            die("--reason goes with --force", EXIT_USAGE)
        result = call(target, "lock.release", {"resources": list(paths)})
    emit(target, result, lambda r: say("released " + ", ".join(h["resource"] + (f" (from {h['holder']})" if "holder" in h else "") for h in r["released"])))


@app.command()
def renew(
    paths: PathsArg,
    ttl: Annotated[float, typer.Option("--ttl", help="Seconds from now until they expire.")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Push the expiry of locks this agent holds to --ttl seconds from now."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "lock.renew", {"resources": list(paths), "ttl": ttl})
    emit(target, result, lambda r: _grants_table("renewed", r["renewed"]))


@app.command("list")
def list_locks(
    mine: Annotated[bool, typer.Option("--mine", help="Only this agent's locks and waits.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Every lock held, the wait line in order, and the slots."""
    target = Target(json_out, repo, state_dir)
    snap = call(target, "lock.list", {"mine": mine} if mine else {})
    emit(target, snap, print_locks)


def print_locks(s: dict[str, Any]) -> None:
    """The lock table as the operator reads it (every name literally: agents chose them)."""
    if not s["holdings"] and not s["waiting"]:
        say("no locks are held")
    if s["holdings"]:
        rows = [(h["resource"], h["mode"], h["holder"], _time(h["since"]), h["token"], h["scope"], _time(h["expires_at"])) for h in s["holdings"]]
        table("held", ["resource", "mode", "holder", "since", "token", "scope", "expires"], rows)
    if s["waiting"]:
        rows = [(w["position"], " ".join(w["resources"]), w["mode"], w["waiter"], _time(w["since"])) for w in s["waiting"]]
        table("waiting", ["#", "resources", "mode", "waiter", "since"], rows)
    if s["slots"]:
        table("slots", ["slot", "held", "capacity", "min interval"], [(f"slot://{x['name']}", x["held"], x["capacity"], f"{x['min_interval_ms']} ms") for x in s["slots"]])


@app.command()
def log(
    limit: Annotated[Optional[int], typer.Option("--limit", help="Only the newest N events (default 200).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only events at or after this ISO time.")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Who held what, when: every grant, wait, refusal, release, force-release and expiry."""
    target = Target(json_out, repo, state_dir)
    args: dict[str, Any] = {}
    if limit is not None:
        args["limit"] = limit
    if since is not None:
        args["since"] = since
    emit(target, call(target, "lock.log", args), print_lock_log)


def print_lock_log(rows: list[dict[str, Any]]) -> None:
    """Lock events as the operator reads them (resources and reasons literally)."""
    table("lock log", ["#", "at", "event", "actor", "subject", "detail"], [(e["seq"], _time(e["at"]), e["kind"], e["actor"], e["subject"], _detail(e["payload"])) for e in rows])


def _detail(payload: dict[str, Any]) -> str:
    keys = ("mode", "tokens", "waited", "reason", "holder", "missing", "ttl")
    return " ".join(f"{k}={payload[k]}" for k in keys if payload.get(k) not in (None, [], ""))


@app.command("check-commit")
def check_commit(
    paths: Annotated[Optional[List[str]], typer.Argument(help="Repo-relative paths to check.")] = None,
    staged: Annotated[bool, typer.Option("--staged", help="Check what `git diff --cached` would commit (the hook does).")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Exit 0 if this agent may commit these paths (holds git and covering exclusive locks); else list what is missing."""
    target = Target(json_out, repo, state_dir)
    if staged == bool(paths):
        die("give either PATHS or --staged", EXIT_USAGE)
    if staged:
        paths = _staged_paths(target.paths().repo)
    todo = list(paths or [])
    report: dict[str, Any] = {}
    for start in range(0, max(len(todo), 1), CHECK_BATCH):
        part = call(target, "lock.check_commit", {"paths": todo[start : start + CHECK_BATCH]})
        if not report:
            report = part
        else:
            known = {m["resource"] for m in report["missing"]}
            report["missing"] += [m for m in part["missing"] if m["resource"] not in known]
            report["allowed"] = report["allowed"] and part["allowed"]
            report["checked"] += part["checked"]
    if target.json:
        emit(target, report)
    elif not report["allowed"]:
        lines = [f"conclave: commit refused: {report['principal']} lacks these locks:"]
        for m in report["missing"]:
            held = f"; held by {', '.join(m['held_by'])}" if m["held_by"] else ""
            lines.append(f"  {m['resource']}  ({m['why']}{held})")
        names = " ".join(m["resource"] for m in report["missing"])
        lines.append(f"take them first: conclave exec --lock ... -- git commit ..., or conclave lock acquire {names}")
        # Resource names and holders are agents' words: shown literally.
        sys.stderr.write("\n".join(visible(line) for line in lines) + "\n")
    if not report["allowed"]:
        raise typer.Exit(EXIT_REFUSED)


#: Staged paths sent to the broker per request (a request line is at most 1 MiB).
CHECK_BATCH = 2000


def _staged_paths(repo: Path) -> list[str]:
    """Every path the next commit in ``repo`` changes (a rename counts as both names): its own
    ``.git`` named explicitly, never found by walking up from a directory in the tree."""
    from broker.sandbox import gitrun

    done = gitrun.run(repo / ".git", repo, ["diff", "--cached", "--name-only", "-z", "--no-renames"], check=False)
    if done.returncode != 0:
        die(f"git diff --cached failed in {repo}: {done.stderr.decode(errors='replace').strip()}")
    return [os.fsdecode(p) for p in done.stdout.split(b"\0") if p]


def exec_command(
    command: Annotated[List[str], typer.Argument(help="The command to run, after --.")],
    lock: Annotated[List[str], typer.Option("--lock", help="A resource to hold while the command runs (repeat it).")],
    shared: SharedOpt = False,
    wait: WaitOpt = None,
    ttl: TtlOpt = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Hold locks for one command: acquire, run, release (even when it fails or is killed); exit with its code."""
    from locks.exec import run_locked

    target = Target(json_out, repo, state_dir)
    raise typer.Exit(run_locked(target, lock, command, shared=shared, wait=wait, ttl=ttl))


def register(root_app: typer.Typer) -> None:
    """Add the top-level ``conclave exec``."""
    root_app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(exec_command)
