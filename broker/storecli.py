"""``conclave store``: the database owner's commands for a PostgreSQL store several brokers share,
and ``accept-restore`` for any store whose older copy was put back on purpose.

These run as the *owner* of the database (a URL with the owner's role), never
as a broker: they create conclave's tables, policies and the
``conclave_broker`` group (``init``), and give each host's broker a role of
its own under the host name the operator chooses (``add-broker``).  A broker
then connects with its own role (``[store] url`` or ``CONCLAVE_STORE_URL``)
and learns its host from the registration.  See docs/DEPLOYMENT.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence

import typer

from broker.clikit import EXIT_USAGE, JsonOpt, RepoOpt, StateOpt, Target, call, die, emit, say, table
from broker.team import url_carries_password

app = typer.Typer(no_args_is_help=True, help="A PostgreSQL store shared by several brokers: set up by its owner.")

UrlOpt = Annotated[
    Optional[str],
    typer.Option("--url", help="The database, as its owner: postgresql://OWNER@SERVER/DB, without a password (it would be readable in ps; use ~/.pgpass, PGPASSWORD or $CONCLAVE_STORE_URL). Default: $CONCLAVE_STORE_URL."),
]


def _url(url: str | None) -> str:
    chosen = url or os.environ.get("CONCLAVE_STORE_URL")
    if not chosen:
        die("name the database with --url postgresql://OWNER@SERVER/DB (or set CONCLAVE_STORE_URL)", EXIT_USAGE)
    if not chosen.startswith(("postgresql://", "postgres://")):
        die(f"--url must be a PostgreSQL URL (postgresql://...), not {chosen.split(':', 1)[0]}", EXIT_USAGE)
    if url is not None and url_carries_password(url):
        # A command line is world-readable (/proc/PID/cmdline, ps): the owner's password would be every user's.
        die(
            "--url carries a password, and a command line can be read by every user of this machine (ps, /proc); "
            "nothing was done.  Give the URL without it and let PostgreSQL find the password in ~/.pgpass or "
            "PGPASSWORD, or put the whole URL in CONCLAVE_STORE_URL",
            EXIT_USAGE,
        )
    return chosen


def _run(fn: Any) -> Any:
    from store.postgres import StoreError

    try:
        return fn()
    except StoreError as exc:
        die(str(exc))


@app.command("init")
def init(url: UrlOpt = None, json_: JsonOpt = False) -> None:
    """Create (or bring up to date) conclave's tables, row policies and broker group, as the database owner."""
    from store import postgres

    target_url = _url(url)
    total = _run(lambda: postgres.init(target_url, _schemas()))
    emit(Target(json=json_), {"database": postgres.redact(target_url), "migrations": total},
         lambda v: say(f"{v['database']}: conclave's schema is up to date ({v['migrations']} migrations)"))


@app.command("add-broker")
def add_broker(
    host: Annotated[str, typer.Argument(help="The host's name, as principals will carry it (HOST/agent:session): a-z, 0-9, dashes.")],
    role: Annotated[Optional[str], typer.Option("--role", help="The broker's database role (default: conclave_HOST).")] = None,
    password_file: Annotated[
        Optional[Path], typer.Option("--password-file", help="Set the role's password from this file (for password authentication).")
    ] = None,
    url: UrlOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Give HOST's broker a database role of its own; it may write only in the name of HOST's principals."""
    from store import postgres

    password = password_file.read_text().strip() if password_file is not None else None
    chosen = role or f"conclave_{host.replace('-', '_')}"
    done = _run(lambda: postgres.add_broker(_url(url), host, role=chosen, password=password))
    emit(Target(json=json_), done, lambda v: say(f"host {v['host']}: broker role {v['role']}" + (" (created)" if v["created_role"] else "")))


@app.command("brokers")
def brokers(url: UrlOpt = None, json_: JsonOpt = False) -> None:
    """Every registered broker: its host and role."""
    from store import postgres

    rows = _run(lambda: postgres.brokers(_url(url)))
    emit(Target(json=json_), rows, lambda v: table("Brokers", ["host", "role", "added"], [[r["host"], r["role"], r["added_at"]] for r in v]))


#: Every feature's schema, handed in by the composition root (this floor may not import it).
_schemas: Callable[[], Sequence[Any]] = list


@app.command("accept-restore")
def accept_restore(json_: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Accept, on purpose, a database older than this state directory has seen (put back from a backup).

    A broker refuses to start on a store whose event log ends before the
    head this state directory recorded (chain-high-water): that is what an
    older copy put back looks like, with or without its anchor.  If you did
    that yourself, stop the broker and run this: it records the decision in
    the log (``store.restore_accepted``) and sets the record to the database's
    head.  Nothing else is changed.
    """
    target = Target(json_, repo, state_dir)
    result = call(target, "store.accept_restore")

    def human(r: dict[str, Any]) -> None:
        if r["accepted"]:
            say(f"accepted: {r['accepted']}")
            say(f"the high-water record now names head {r['head']}; the acceptance is event store.restore_accepted in the log")
        elif r["refusing"]:
            say(f"not accepted: the store refuses for another reason: {r['refusing']}")
        else:
            say(f"nothing to accept: the database is not older than this state directory has seen (head {r['head']})")

    emit(target, result, human)
    if result["refusing"]:
        die(f"store accept-restore: the store still refuses: {result['refusing']}")


def register(root_app: typer.Typer, schemas: Callable[[], Sequence[Any]]) -> None:
    global _schemas
    _schemas = schemas
    root_app.add_typer(app, name="store")
