"""The ``conclave dashboard`` command (mounted by the composition root)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

import typer

from broker.clikit import JsonOpt, RepoOpt, StateOpt, Target, die, emit, in_agent


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)


def dashboard(
    refresh: Annotated[float, typer.Option("--refresh", help="Seconds between reads of the broker (locks, mail, claims).", min=0.1, max=60)] = 1.0,
    keep: Annotated[int, typer.Option("--keep-lines", help="Lines of output kept per agent.", min=10, max=100_000)] = 1000,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """The operator's live view: agents and their output, locks and waiters, mail, claims with their trust graph.

    Keys: 1-4 switch tabs (Agents, Locks, Mail, Claims); p promote and x retire
    the selected claim; v revoke the selected agent; f force-release the
    selected lock; r reply in the selected thread; / search claims; q quits.
    Every action asks for confirmation.  With no broker running it shows the
    agents' output from the log files and waits for one.  With --json it
    prints one snapshot of what the panes hold and exits (the inbox is not
    marked read).
    """
    target = Target(json_out, repo, state_dir)
    if in_agent():
        die("the dashboard is the operator's view; inside an agent use conclave status, conclave msg inbox, conclave memory recall")
    if json_out:
        emit(target, snapshot(target))
        return
    from broker.dashboard.app import DashboardApp

    app = DashboardApp(target, refresh=refresh, keep=keep)
    app.run()
    if app.return_code:  # Textual printed the error; the exit status says it too
        raise typer.Exit(app.return_code)


def snapshot(target: Target) -> dict[str, Any]:
    """What the panes hold, read once (agents, locks, mail threads, claims), as JSON."""
    import attrs

    from broker.dashboard import model
    from broker.dashboard.link import BrokerLink, NoBroker, Refused
    from broker.dashboard.tail import LogTailer
    from broker.errors import ConclaveError

    paths = target.paths()
    tailer = LogTailer(paths.logs)
    tailer.discover()
    logs = dict(tailer.names)
    # Each log's lines are counted from its start, and its last line given (the panes show the output itself).
    counted = {key: tailer.count(key) for key in logs}
    link = BrokerLink(target)
    broker: dict[str, Any] = {"running": False, "state": str(paths.state)}
    replies: dict[str, Any] = {}
    try:
        for name, op, args in (
            ("agents", "agents", {}),
            ("board", "status.board", {}),
            ("locks", "lock.list", {}),
            ("sends", "memory.log", {"kind": "msg.send", "limit": 500}),
            ("claims", "memory.list", {"include_retired": True, "limit": 1000}),
        ):
            replies[name] = link.call_blocking(op, args)
        broker["running"] = True
    except NoBroker as exc:
        broker["message"] = str(exc)
    except (Refused, ConclaveError) as exc:
        die(f"the broker refused the dashboard: {getattr(exc, 'message', exc)}")
    finally:
        link.close()
    now = datetime.now(timezone.utc)
    rows = model.agent_rows(
        replies.get("agents"),
        replies.get("board"),
        replies.get("locks"),
        logs,
        {key: n for key, (n, _) in counted.items()},
        {key: last for key, (_, last) in counted.items()},
        now,
        dict(tailer.modified),
    )
    claims = replies.get("claims")
    return {
        "broker": broker,
        "logs": str(paths.logs),
        "agents": [{**attrs.asdict(r), "log": _str(tailer.path_of(r.key))} for r in rows],
        "locks": {
            "holdings": [dict(zip(("resource", "mode", "holder", "held_for", "token", "expires"), h)) for h in model.holding_rows(replies.get("locks"), now)],
            "waiting": [dict(zip(("position", "waiter", "resources", "mode", "waiting_for"), w)) for w in model.waiting_rows(replies.get("locks"), now)],
        }
        if broker["running"]
        else None,
        "mail": {
            "threads": [attrs.asdict(t) for t in model.thread_rows(replies.get("sends") or [])],
            "operator_unread": (replies.get("board") or {}).get("operator_unread", 0),
        }
        if broker["running"]
        else None,
        "claims": {"by_tier": model.tier_counts(claims), "claims": model.claim_rows(claims, tier=None, search="")} if claims is not None else None,
    }


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
