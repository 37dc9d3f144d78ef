"""What every ``conclave`` command shares: options, routing, output, errors.

Routing decides *how* a command reaches the store, never *who* it acts as:

1. inside an agent's process tree (``CONCLAVE_TICKET`` set) it connects
   with the agent's ticket;
2. otherwise it proves it is the operator with the operator key
   (``<state>/operator.key``, which no sandboxed agent can read) and, if a
   broker runs for the state directory, connects with it -- the broker also
   checks that the process does not descend from it or from an agent;
3. otherwise (no broker) an operator command opens the store itself, with
   the same proofs: the key, a lineage with no broker in it, and the lock on
   the database file.

Exit codes: 0 success, 1 the request was refused or failed, 2 bad usage,
3 no broker to talk to.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, NamedTuple, NoReturn, Optional, Sequence

import typer

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of a table.")]
RepoOpt = Annotated[
    Optional[Path], typer.Option("--repo", help="The repository (default: the git top level of the current directory).")
]
StateOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--state-dir",
        help="Where state lives (default: $CONCLAVE_STATE_DIR, else $XDG_STATE_HOME/conclave/<repo>-<hash>, outside the work tree).",
    ),
]

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NO_BROKER = 3


class Target(NamedTuple):
    """Where a command's requests go, from the common options.

    A named tuple, not an attrs class: every command makes one, and an agent's
    ``conclave whoami`` need not import attrs (about 25 ms of its start) for it.
    """

    json: bool = False
    repo: Path | None = None
    state_dir: Path | None = None

    def paths(self):  # type: ignore[no-untyped-def]
        from broker import paths

        try:
            return paths.resolve(self.repo, self.state_dir)
        except ValueError as exc:
            die(str(exc), EXIT_USAGE)


#: The error code a ``--json`` error object carries when the broker gave none, by exit code.
_EXIT_CODES = {EXIT_REFUSED: "refused", EXIT_USAGE: "usage", EXIT_NO_BROKER: "no_broker"}


def die(message: str, code: int = EXIT_REFUSED, *, error: str | None = None, fix: str | None = None, details: dict[str, Any] | None = None) -> NoReturn:
    """Say what went wrong on stderr and exit ``code``.

    A sentence for people; with ``--json`` on the command line, one JSON object
    instead, shaped as the wire's errors: ``{"error": {"code", "message", "fix"}}``
    -- ``error`` is the wire's code when the broker gave one, ``fix`` what to do
    (by default the last clause of the message, after its last "; ").
    """
    from broker.literal import visible

    if _json_requested():
        if error is not None:
            message = message.removesuffix(f" [{error}]")
        if fix is None and "; " in message:
            message, fix = message.rsplit("; ", 1)
        body = {"code": error or _EXIT_CODES.get(code, "failed"), "message": message, "fix": fix, "exit": code, **(details or {})}
        sys.stderr.write(json.dumps({"error": body}) + "\n")
        raise typer.Exit(code)
    # A refusal may quote what an agent wrote (a resource, a reason): literally.
    text = message if fix is None else f"{message}; {fix}"
    sys.stderr.write(f"conclave: {visible(text, keep_newlines=True)}\n")
    raise typer.Exit(code)


def _json_requested() -> bool:
    """Was ``--json`` given to this command (before any ``--`` that starts an agent's own command)?"""
    args = sys.argv[1:]
    if "--" in args:
        args = args[: args.index("--")]
    return "--json" in args


def ctrl_c_stops() -> None:
    """For a command that runs "until Ctrl-C" (a watch, a follow): SIGINT raises KeyboardInterrupt however
    the process was started.  One that inherits SIGINT ignored (a background job of a script) gets no
    handler from Python, and would wait for ever."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)


def in_agent() -> bool:
    return bool(os.environ.get("CONCLAVE_TICKET"))


def connect(target: Target, *, timeout: float | None = None):  # type: ignore[no-untyped-def]
    """An authenticated blocking client, or None when no broker runs (operator only)."""
    from broker.client import BlockingClient, BrokerUnavailable
    from broker.errors import ConclaveError
    from broker.paths import StateError

    try:
        if in_agent():
            try:
                return BlockingClient.for_agent(timeout=timeout)
            except BrokerUnavailable:
                die("the broker that started this agent is no longer running", EXIT_NO_BROKER)
        paths = target.paths()
        try:
            key = paths.operator_key()
        except StateError as exc:
            if not paths.state.exists() or paths.never_run():
                return None  # no state, or only a team accepted before any run: call_local says so
            die(str(exc), EXIT_REFUSED)
        try:
            return BlockingClient.for_operator(paths.socket(), operator_key=key, timeout=timeout)
        except BrokerUnavailable:
            return None
    except ConclaveError as exc:
        die(f"{exc.message} [{exc.code.value}]", error=exc.code.value)


def call(target: Target, op: str, args: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
    """Run one op through the broker, or in-process when none runs."""
    from broker.errors import ConclaveError

    client = connect(target, timeout=timeout)
    try:
        if client is None:
            return call_local(target, op, args or {})
        with client:
            return client.call(op, args or {})
    except ConclaveError as exc:
        die(f"{exc.message} [{exc.code.value}]", EXIT_NO_BROKER if exc.code.value == "unavailable" else EXIT_REFUSED, error=exc.code.value)


def export(target: Target, format_: str, *, op: str, field: str, title: str, markdown: Callable[[dict[str, Any]], str]) -> None:
    """The body of ``msg export`` and ``memory export``: every page of ``op`` on stdout, oldest first,
    as JSON lines, one ``--json`` document, or ``markdown`` for people."""
    if format_ not in ("jsonl", "markdown"):
        die(f"--format must be jsonl or markdown, not {format_!r}", EXIT_USAGE)
    pages = export_pages(target, op, field)
    if target.json:
        emit(target, [item for page in pages for item in page])
        return
    if format_ == "markdown":
        from store.events import now

        sys.stdout.write(f"# conclave {title} export\n\nExported {now()} from {target.paths().state}.\n")
    for page in pages:
        for item in page:
            sys.stdout.write(json.dumps(item, separators=(",", ":"), default=str) + "\n" if format_ == "jsonl" else markdown(item))
        sys.stdout.flush()


def export_pages(target: Target, op: str, field: str) -> Iterator[list[Any]]:
    """Every page of an export op (``after`` -> ``next``), one call each, until the last."""
    after = 0
    while True:
        page = call(target, op, {"after": after})
        yield page[field]
        if page["next"] is None:
            return
        after = page["next"]


def call_local(target: Target, op: str, args: dict[str, Any]) -> Any:
    """With no broker running, the operator's command opens the store itself."""
    import gc

    # As `conclave run` does: no garbage collection while every feature is imported (a tenth of the CPU).
    gc.disable()
    import trio

    from broker import composition
    from broker.core import open_core
    from broker.core import Call
    from broker.router import dispatch

    paths = target.paths()
    if not paths.database.exists() and not paths.state.exists():
        die(f"no conclave state at {paths.state}; run `conclave run` first, or pass --state-dir", EXIT_NO_BROKER)
    if paths.never_run():
        die(
            f"no broker is running on {paths.state} and none has run there yet (it holds only the team file(s) you accepted); "
            "start one with `conclave run --team TEAM.toml`",
            EXIT_NO_BROKER,
        )

    from broker.errors import ConclaveError
    from broker.paths import BrokerAlreadyRunning, StateError, broker_ancestor, state_lock

    # Only a person may open the store directly: a process that descends from
    # a running broker (an agent, whatever it did to its environment) never
    # may; the operator key proves the rest; and the lock on the database file
    # refuses while a broker holds it, whatever directory names it.
    try:
        broker = broker_ancestor(os.getpid())
        if broker is not None:
            die(f"this process descends from a running conclave broker (pid {broker}): agents act only through the broker", EXIT_REFUSED)
        paths.operator_key()
    except StateError as exc:
        die(str(exc), EXIT_REFUSED)

    features = composition.features()
    gc.freeze()
    gc.enable()

    async def run() -> Any:
        # The one op that may open a store older than this state directory has seen: accepting it is its purpose.
        accept = op == "store.accept_restore"
        async with open_core(paths, team=None, live=False, features=features, accept_restore=accept) as core:
            # Returned, not raised: raised inside open_core's nursery it would
            # arrive wrapped in an ExceptionGroup that `call` does not catch.
            try:
                return await dispatch(core, Call(core.registry.operator, core), op, args)
            except ConclaveError as exc:
                return exc

    try:
        with state_lock(paths, record_pid=False):
            result = trio.run(run)
    except BrokerAlreadyRunning as exc:
        die(f"{exc}, but its socket ({paths.socket()}) does not answer; refusing to open the store behind it", EXIT_NO_BROKER)
    except StateError as exc:
        die(str(exc), EXIT_REFUSED)
    if isinstance(result, ConclaveError):
        raise result
    return _jsonable(result)


def _jsonable(value: Any) -> Any:
    from broker.wire import unstructure

    return json.loads(json.dumps(unstructure(value), default=str))


def emit(target: Target, value: Any, human: Callable[[Any], None] | None = None) -> None:
    """Print ``value``: one JSON document with ``--json`` (or with no human form), else ``human(value)``."""
    if target.json or human is None:
        sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    else:
        human(value)


def piped() -> bool:
    """True when stdout is not a terminal (a pipe, a file, an agent's log)."""
    try:
        return not os.isatty(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return True


#: Width a console gets when stdout is not a terminal: wide enough that no
#: table ever wraps or cuts a principal, a resource or a reason.
PIPE_WIDTH = 100_000


def console(*, stderr: bool = False):  # type: ignore[no-untyped-def]
    """A rich console for the operator's views.

    On a terminal it is as wide as the terminal and tables fold long values
    onto more lines; through a pipe it is as wide as the longest line, so
    every value stays whole on its row (``grep`` still finds it) -- unless
    ``COLUMNS`` says how wide to be.
    """
    from rich.console import Console

    if piped() and not stderr and not os.environ.get("COLUMNS"):
        return Console(width=PIPE_WIDTH, highlight=False, emoji=False, markup=False, soft_wrap=False)
    return Console(stderr=stderr, highlight=False, emoji=False, markup=False)


def cell(value: Any):  # type: ignore[no-untyped-def]
    """A table cell shown literally: no markup, control characters spelled out."""
    from rich.text import Text

    from broker.literal import visible

    if isinstance(value, Text):
        return value
    return Text("" if value is None else visible(value))


#: A column whose values are all this short keeps them whole (they fold only if they must).
SHORT = 32


def cell_len(text: str) -> int:
    from rich.cells import cell_len as width

    return width(text)


def make_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, width: int | None = None):  # type: ignore[no-untyped-def]
    """A rich table whose every cell is literal text and folds rather than cuts.

    Given the ``width`` it will be printed at, columns whose values are all
    short (principals, times, modes, ids) keep them whole when that still
    leaves the long columns (text, details) room to fold into.
    """
    from rich.table import Table

    cells = [[cell(v) for v in r] for r in rows]
    longest = [max([cell_len(c), *(cell_len(r[i].plain) for r in cells if i < len(r))]) for i, c in enumerate(columns)]
    words = [max([*(cell_len(w) for w in c.split()), *(cell_len(w) for r in cells if i < len(r) for w in r[i].plain.split())], default=1) for i, c in enumerate(columns)]
    # What a column needs to fold without splitting words (at most its longest value).
    fold = [min(n, max(w, 10)) for n, w in zip(longest, words)]
    whole: set[int] = set()
    if width is not None:
        # The short columns, shortest first, keep their values whole while the
        # others can still fold without splitting words (each column has two
        # characters of padding; the borders take one more per column, plus one).
        budget = width - (len(columns) + 1) - sum(f + 2 for f in fold)
        for i in sorted((i for i, n in enumerate(longest) if n <= SHORT), key=lambda i: longest[i]):
            if longest[i] - fold[i] <= budget:
                whole.add(i)
                budget -= longest[i] - fold[i]
    t = Table(title=None if title is None else cell(title), show_lines=False)
    for i, c in enumerate(columns):
        # no_wrap: rich shrinks only the other columns to make the row fit.
        t.add_column(c, overflow="fold", no_wrap=i in whole)
    for r in cells:
        t.add_row(*r)
    return t


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table; every cell is drawn from data, so none is read as markup."""
    out = console()
    out.print(make_table(title, columns, rows, width=out.width))


def say(text: str) -> None:
    """Print one line literally (agent-written text inside it cannot style or move the terminal)."""
    from rich.text import Text

    from broker.literal import visible

    console().print(Text(visible(text)))


_SPACES = re.compile(r"[ \t\n]+")


def when(iso: Any) -> str:
    """An ISO time as a table shows it: ``2026-11-30 09:10:01`` (UTC; ``--json`` has the microseconds)."""
    if not iso:
        return ""
    text = str(iso)
    return f"{text[:10]} {text[11:19]}" if len(text) >= 19 and text[10] == "T" else text


def shorten(text: Any, width: int) -> str:
    """``text`` on one line, cut to ``width`` on a terminal; whole when piped."""
    flat = _SPACES.sub(" ", str(text)).strip()
    if piped() or len(flat) <= width:
        return flat
    return flat[: width - 1] + "\u2026"
