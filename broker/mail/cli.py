"""``conclave msg ...`` and ``conclave status ...``.

Inside an agent's process tree these act as that agent (the broker reads who
is asking from the connection); at a person's terminal they act as the
operator.  No command takes a sender or a mailbox to read: there is nothing
to forge.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, List, Optional

import typer

from broker import clikit
from broker.clikit import JsonOpt, RepoOpt, StateOpt, Target, call, cell, console, ctrl_c_stops, die, emit, make_table, say

app = typer.Typer(no_args_is_help=True, add_completion=False)
status_app = typer.Typer(
    add_completion=False,
    invoke_without_command=True,
    help="The team at a glance: `conclave status` shows the board, `conclave status set TEXT` says what you are doing.",
)


def register(root_app: typer.Typer) -> None:
    """Mount ``conclave status`` as a top-level command group."""
    root_app.add_typer(status_app, name="status")


def _given(**args: Any) -> dict[str, Any]:
    """The arguments the user gave (None means: leave it to the op's default)."""
    return {k: v for k, v in args.items() if v is not None}


def _show_messages(target: Target, op: str, args: dict[str, Any], empty: str) -> None:
    from broker.mail.render import render_messages

    messages = call(target, op, args)
    # Plain text on purpose: rich would interpret markup inside a message body.
    emit(target, messages, lambda ms: sys.stdout.write(render_messages(ms, empty) + "\n"))


# -- msg -----------------------------------------------------------------------


@app.command()
def send(
    body: Annotated[str, typer.Argument(help="The message text; '-' reads it from stdin.")],
    to: Annotated[str, typer.Option("--to", help="An agent name (a child by parent/child), all, or operator.")],
    thread: Annotated[Optional[str], typer.Option("--thread", help="Reply in this thread (from a message's `thread`).")] = None,
    subject: Annotated[Optional[str], typer.Option("--subject", help="A one-line subject.")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Send mail as yourself (the sender is always who the broker says you are)."""
    from broker.errors import ConclaveError
    from broker.mail.message import check_body, check_line

    target = Target(json_out, repo, state_dir)
    text = sys.stdin.read() if body == "-" else body
    try:
        # The op's own checks, here too: a body past the wire's 1 MiB line limit never reaches the
        # op, and its refusal must read the same inside an agent as at a terminal.
        check_body(text)
        if subject is not None:
            check_line(subject, "msg.send: the subject")
    except ConclaveError as exc:
        die(f"{exc.message} [{exc.code.value}]", error=exc.code.value)
    message = call(target, "msg.send", _given(to=to, body=text, thread=thread, subject=subject))

    def human(m: dict[str, Any]) -> None:
        if m["recipients"]:
            say(f"sent message {m['id']} (thread {m['thread']}) to {', '.join(m['recipients'])}")
        else:
            say(f"message {m['id']} (thread {m['thread']}) to all was recorded, but no one received it: no other agent is alive")

    emit(target, message, human)


@app.command()
def inbox(
    unread: Annotated[bool, typer.Option("--unread", help="Only mail not shown before.")] = False,
    wait: Annotated[
        Optional[float], typer.Option("--wait", help="Block up to SECONDS until unread mail arrives (woken by the broker, no polling).")
    ] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most N messages (the oldest first).")] = None,
    all_mail: Annotated[bool, typer.Option("--all", help="Include acknowledged mail.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Your own inbox, oldest first (the operator's inbox at a person's terminal)."""
    target = Target(json_out, repo, state_dir)
    _show_messages(target, "msg.inbox", _given(unread=unread, include_acked=all_mail, wait=wait, limit=limit), "no mail")


@app.command()
def ack(
    ids: Annotated[List[int], typer.Argument(help="Message ids from your inbox.")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Acknowledge messages in your inbox (all or nothing)."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "msg.ack", {"ids": list(ids)})

    def human(r: dict[str, Any]) -> None:
        done = ", ".join(map(str, r["acked"])) or "nothing new"
        again = f" (already acknowledged: {', '.join(map(str, r['already_acked']))})" if r["already_acked"] else ""
        say(f"acknowledged {done}{again}")

    emit(target, result, human)


@app.command()
def archive(
    before_run: Annotated[Optional[int], typer.Option("--before-run", help="Mail sent before run N started (conclave agents numbers runs).")] = None,
    older_than: Annotated[Optional[str], typer.Option("--older-than", help='Mail sent this long ago or more ("2d", "12h", "90m", seconds).')] = None,
    mailbox: Annotated[Optional[str], typer.Option("--mailbox", help="Only this mailbox (an agent name, or operator).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be archived; change nothing.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Archive old mail (operator): it leaves the inboxes and unread counts, so no agent acts on a stale request.

    By default: every delivery from before the run now going -- with no
    broker running, all mail so far, so the next run starts with empty
    inboxes.  Nothing is deleted: archived mail stays in `msg thread`, `msg
    search` and `msg export`, and the event log records what was archived.
    """
    from broker.limits import LimitError, parse_duration

    target = Target(json_out, repo, state_dir)
    seconds = None
    if older_than is not None:
        try:
            seconds = parse_duration(_days(older_than), "--older-than")
        except LimitError as exc:
            die(str(exc), clikit.EXIT_USAGE)
    result = call(target, "msg.archive", _given(before_run=before_run, older_than=seconds, mailbox=mailbox, dry_run=dry_run or None))

    def human(r: dict[str, Any]) -> None:
        verb = "would archive" if r["dry_run"] else "archived"
        if not r["archived"]:
            say(f"nothing to archive: no delivery of mail sent before {r['before']} is left in {r['mailbox'] or 'any mailbox'}")
            return
        say(f"{verb} {r['archived']} delivery(ies) of {len(r['messages'])} message(s) sent before {r['before']} "
            f"({r['unread']} unread) in {', '.join(r['mailboxes'])}; the messages stay in msg thread, search and export")  # fmt: skip

    emit(target, result, human)


def _days(text: str) -> Any:
    """``2d`` as seconds (a day is what mail's age is most often counted in); anything else as given."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*d\s*", text)
    return float(m.group(1)) * 86400 if m else text


@app.command()
def thread(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="A thread id, e.g. t12.")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """A thread's messages you sent or received (the operator sees every one)."""
    target = Target(json_out, repo, state_dir)
    _show_messages(target, "msg.thread", {"thread": thread_id}, "no messages")


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to find in subjects and bodies (all of them).")],
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most N messages.")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Search mail you sent or received (the operator searches all mail)."""
    target = Target(json_out, repo, state_dir)
    _show_messages(target, "msg.search", _given(query=query, limit=limit), "nothing matches")


@app.command()
def export(
    format_: Annotated[str, typer.Option("--format", help="jsonl (one message per line) or markdown (for people).")] = "jsonl",
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """All mail, oldest first, with every delivery (read, acknowledged), on stdout (operator only; nothing is marked read)."""
    clikit.export(Target(json_out, repo, state_dir), format_, op="msg.export", field="messages", title="mail", markdown=_message_markdown)


def _delivery(d: dict[str, Any]) -> str:
    state = f"acknowledged {d['acked_at']}" if d.get("acked_at") else (f"read {d['read_at']}" if d.get("read_at") else "unread")
    return f"{d['mailbox']} {state}"


def _message_markdown(m: dict[str, Any]) -> str:
    from broker.literal import code_block, code_span

    lines = [
        "",
        f"## Message {m['id']} (thread {code_span(m['thread'])}), {m['at']}",
        "",
        f"- from: {code_span(m['sender'])}" + (" (the operator)" if m["sender_agent"] == "operator" else ""),
        f"- to: {code_span(m['to'])}",
        "- deliveries: " + (", ".join(_delivery(d) for d in m["deliveries"] or []) or "none (no one received it)"),
    ]
    if m.get("subject"):
        lines.append(f"- subject: {code_span(m['subject'])}")
    lines += ["", code_block(m["body"])]
    return "\n".join(lines) + "\n"


# -- status ----------------------------------------------------------------------


@status_app.callback()
def board(
    ctx: typer.Context,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Refresh until Ctrl-C or the broker stops; started before a run, it waits for the broker."),
    ] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes with --watch.")] = 2.0,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Every live agent: status line, since when, locks held and waited for, unread mail."""
    if ctx.invoked_subcommand is not None:
        return
    target = Target(json_out, repo, state_dir)
    if not watch:
        emit(target, call(target, "status.board"), print_board)
        return
    ctrl_c_stops()
    try:
        _watch(target, max(interval, 0.2))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@status_app.command("set")
def set_status(
    text: Annotated[str, typer.Argument(help="What you are doing now, one line ('' clears it).")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Say what this agent is doing now (shown on the board)."""
    target = Target(json_out, repo, state_dir)
    line = call(target, "status.set", {"text": text})
    emit(target, line, lambda s: say(f"status of {s['principal']}: {s['status'] or '(cleared)'}"))


def _watch(target: Target, interval: float) -> None:
    """Refresh the board every ``interval`` seconds over one connection.

    With no broker yet it waits for one (``status --watch`` may be started
    before ``conclave run``); when the broker stops it says so and returns.
    """
    import time

    client = _connect_once_keyed(target)
    if client is None:
        if not target.json:
            say(f"waiting for a broker on {target.paths().state} (start one with conclave run --team TEAM.toml); Ctrl-C stops")
        while client is None:
            time.sleep(interval)
            client = _connect_once_keyed(target)
    with client:
        if target.json:
            # One JSON document per line, one line per refresh.
            while (value := _board_or_none(client)) is not None:
                sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")
                sys.stdout.flush()
                time.sleep(interval)
            return
        from rich.live import Live

        value = _board_or_none(client)
        if value is None:
            say("the broker stopped")
            return
        with Live(_board_renderable(value), auto_refresh=False, console=console()) as live:
            while True:
                time.sleep(interval)
                value = _board_or_none(client)
                if value is None:
                    break
                live.update(_board_renderable(value), refresh=True)
        say("the broker stopped; the run is over")


def _connect_once_keyed(target: Target) -> Any:
    """``connect``, after giving a broker that is starting the moment between making its state
    directory and writing its operator key (``StatePaths.ensure``): a watch that looked in that
    moment was refused as if no key would ever come.  A directory that has no key 5 s on is refused
    as before (an agent's box hides the key).

    None (no broker yet) is decided here, on the look that found no state directory, or one that
    holds only what ``conclave team accept`` wrote (``StatePaths.never_run``): ``connect`` looks for
    the key first and for the directory after, so a broker that made its directory between its two
    looks had the watch refused."""
    import time

    from broker.clikit import connect, in_agent

    paths = target.paths()
    deadline = time.monotonic() + 5
    while not in_agent() and not paths.operator_key_file.exists() and time.monotonic() < deadline:
        if not paths.state.is_dir() or paths.never_run():
            return None
        time.sleep(0.05)
    return connect(target)


def _board_or_none(client: Any) -> dict[str, Any] | None:
    """The board, or None once the broker has gone (it closed the connection)."""
    from broker.errors import ConclaveError, ErrorCode

    try:
        board: dict[str, Any] = client.call("status.board")
        return board
    except ConclaveError as exc:
        if exc.code is ErrorCode.UNAVAILABLE:
            return None
        die(f"{exc.message} [{exc.code.value}]", error=exc.code.value)
    except OSError:
        return None


def print_board(value: dict[str, Any]) -> None:
    console().print(_board_renderable(value))


def _waits(row: dict[str, Any]) -> str:
    return ", ".join(f"{' '.join(w['resources'])} ({w['mode']}, #{w['position']} since {(w['since'] or '')[11:19]})" for w in row.get("waiting", []))


def _board_renderable(value: dict[str, Any]) -> Any:
    from rich.console import Group

    rows = []
    for row in value["agents"]:
        locks = ", ".join(f"{h['resource']} ({h['mode']})" for h in row["locks"]) if value["locks_tracked"] else "-"
        rows.append((
            row["agent"],
            row["session"],
            row["status"] or "",
            row["since"][11:19] if row["since"] else "",
            locks or "none",
            (_waits(row) or "-") if value["locks_tracked"] else "-",
            row["unread"],
        ))  # fmt: skip
    # Every cell is literal text: an agent's status line is shown as written, never as markup.
    grid = make_table(f"conclave status  {value['at'][11:19]} UTC", ("agent", "session", "status", "since", "locks", "waiting for", "unread"), rows)
    notes = [f"operator inbox: {value['operator_unread']} unread"]
    if not value["agents"]:
        notes.insert(0, "no live agents")
    if not value["locks_tracked"]:
        notes.append("locks: no lock table in this broker")
    return Group(grid, cell("; ".join(notes)))
