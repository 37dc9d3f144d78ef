"""The broker's own ops: whoami, agents, spawn, ping, stats, stop, gc."""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from broker.errors import ConclaveError, ErrorCode
from broker import runs, schema
from broker.core import Call, Feature
from broker.optable import Access, OpTable, describe_ops
from broker.projection import BrokerLog
from broker.server import whoami as whoami_of

OPS = OpTable()


@attrs.frozen
class NoArgs:
    pass


@attrs.frozen
class SpawnArgs:
    name: str
    command: list[str]


@attrs.frozen
class AgentsArgs:
    live_only: bool = False
    run: int | None = None
    include_pruned: bool = False


@attrs.frozen
class GcArgs:
    keep: int = 3
    dry_run: bool = False


@OPS.op("whoami", NoArgs)
async def whoami(call: Call, _args: NoArgs) -> dict[str, Any]:
    """Who this connection is: agent, session, parent."""
    return whoami_of(call.principal)


@OPS.op("ping", NoArgs)
async def ping(call: Call, _args: NoArgs) -> dict[str, Any]:
    """Do nothing; the baseline for round-trip measurements."""
    return {}


@OPS.op("ops", NoArgs)
async def list_ops(call: Call, _args: NoArgs) -> list[dict[str, Any]]:
    """Every op, its access and its arguments."""
    return describe_ops(call.core.ops.values())


@OPS.op("agents", AgentsArgs)
async def agents(call: Call, args: AgentsArgs) -> list[dict[str, Any]]:
    """Every principal ever issued (or only live ones, or one run's), with its spawn tree and run."""
    live = {a.principal.key for a in call.core.registry.live()}

    def read(conn):  # type: ignore[no-untyped-def]
        found = runs.read_runs(conn)
        rows = list(
            conn.execute(
                # `key` is the principal as the registry knows it: HOST/AGENT:SESSION on a shared store.
                "SELECT key, agent, session, role, domain, parent, pid, command, started_at, ended_at, exit_code, revoked_at "
                "FROM principals ORDER BY started_at"
            )
        )
        # What each principal's binary last reported using (agent.usage; the exit event repeats it).
        usage = {subject: json.loads(payload) for subject, payload in conn.execute("SELECT subject, payload FROM events WHERE kind = 'agent.usage' ORDER BY seq")}
        return found, rows, usage

    found, rows, usage = await call.core.store.call(read)
    if args.run is not None and not any(r.number == args.run for r in found):
        known = f"1 to {len(found)}" if found else "none yet"
        raise ConclaveError(ErrorCode.NOT_FOUND, f"agents: no run {args.run} on this state directory (runs: {known})")
    pruned = {r.number for r in found if r.pruned}
    out = []
    for key, agent, session, role, domain, parent, pid, command, started, ended, code, revoked in rows:
        run = runs.run_of(found, started)
        if args.live_only and key not in live:
            continue
        if args.run is not None and run != args.run:
            continue
        if run in pruned and not args.include_pruned and args.run is None:
            continue
        out.append(
            {
                "principal": key,
                "agent": agent,
                "session": session,
                "role": role,
                "domain": domain,
                "parent": parent,
                "pid": pid,
                "command": json.loads(command),
                "started_at": started,
                "ended_at": ended,
                "exit_code": code,
                "revoked_at": revoked,
                "live": key in live,
                "run": run,
                "pruned": run in pruned,
                "usage": usage.get(key),
            }
        )
    return out


@OPS.op("broker.gc", GcArgs, access=Access.OPERATOR)
async def gc(call: Call, args: GcArgs) -> dict[str, Any]:
    """Prune old runs: delete their log files, keep every database row (see broker.runs)."""
    if not 0 <= args.keep <= 100_000:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"broker.gc: keep must be from 0 to 100000, not {args.keep}")
    logs = call.core.paths.logs

    def plan(conn):  # type: ignore[no-untyped-def]
        report = runs.plan_prune(conn, logs, keep=args.keep, live=call.core.live)
        if report["runs"] and not args.dry_run:
            runs.record_prune(conn, report, actor=call.principal.key, keep=args.keep)
        return report

    report = await call.core.store.call(plan)
    failed = [] if args.dry_run else await trio.to_thread.run_sync(runs.remove_files, logs, report["files"])
    return {**report, "dry_run": args.dry_run, "not_removed": failed}


@OPS.op("spawn", SpawnArgs, access=Access.AGENT)
async def spawn(call: Call, args: SpawnArgs) -> dict[str, Any]:
    """Spawn a child of the calling agent (within its team file quota)."""
    if call.core.supervisor is None:
        raise ConclaveError(ErrorCode.UNAVAILABLE, "no broker is running agents here")
    child = await call.core.supervisor.spawn_child(call.principal, args.name, args.command)
    live = call.core.registry.get(child.key)
    return {**whoami_of(child), "pid": live.pid if live else None, "live": live is not None}


@OPS.op("broker.stats", NoArgs, access=Access.OPERATOR)
async def stats(call: Call, _args: NoArgs) -> dict[str, Any]:
    """The broker's own figures (live agents, store batches)."""
    return attrs.asdict(call.core.statistics())


@OPS.op("store.accept_restore", NoArgs, access=Access.OPERATOR)
async def accept_restore(call: Call, _args: NoArgs) -> dict[str, Any]:
    """Accept, on purpose, a database older than this state directory's high-water record (a restore from a backup).

    Only with no broker running: the command opens the store itself, records
    a ``store.restore_accepted`` event naming what was found, and sets the
    high-water record to the database's head.  A live broker never accepts.
    """
    if call.core.live:
        raise ConclaveError(ErrorCode.CONFLICT, "store.accept_restore: stop the broker first (`conclave stop`); a running broker never accepts an older store")
    store = call.core.store
    return {"accepted": store.accepted, "head": store.head and str(store.head), "refusing": store.refusing}


@OPS.op("broker.stop", NoArgs, access=Access.OPERATOR)
async def stop(call: Call, _args: NoArgs) -> dict[str, Any]:
    """Stop the broker: terminate every agent and exit."""
    stopper = call.core.extensions.get("stop")
    if stopper is None:
        raise ConclaveError(ErrorCode.UNAVAILABLE, "no broker is running")
    stopper()
    return {"stopping": True}


FEATURE = Feature("broker", OPS, schema=schema.SCHEMA, projector=BrokerLog)
