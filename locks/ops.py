"""The lock ops on the wire, and the owner task that starts with the broker.

``start`` puts the :class:`~locks.table.LockTable` in
``core.extensions["locks"]`` (the status board reads ``holdings()`` and
``statistics()`` from it), releases an agent's locks when its process exits,
releases ``connection``-scoped locks when their connection closes, and --
in a running broker -- installs the git guard for the run.

Slots are folded into the lock ops: ``lock.acquire`` of ``slot://NAME``
takes one unit; ``slot.acquire`` / ``slot.release`` are shorthands for it.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Final, Literal

import attrs
import trio

from broker.core import Call, Feature
from broker.errors import ConclaveError, ErrorCode
from broker.optable import Access, OpTable
from broker.team import Team
from locks import guard, schema
from locks.journal import Journal
from locks.projection import LocksLog
from locks.shared import LOST, SharedLocks, crosses_hosts
from locks.resources import Kind, Resource, ResourceError
from locks.slots import parse_slots
from locks.table import LockTable, Mode, Request, Scope
from store import dialect, events

log = logging.getLogger("conclave.locks")
OPS = OpTable()
MAX_LOG: int = 10_000
#: Most paths one edit check names (an apply_patch may touch several files).
MAX_EDIT_PATHS: Final = 200
SCOPES: Final = {s.value: s for s in Scope}


@attrs.frozen
class AcquireArgs:
    resources: list[str]
    shared: bool = False
    wait: float | None = None
    ttl: float | None = None
    scope: Literal["agent", "connection"] = "agent"


@attrs.frozen
class ResourcesArgs:
    resources: list[str]


@attrs.frozen
class RenewArgs:
    resources: list[str]
    ttl: float


@attrs.frozen
class ForceArgs:
    resource: str
    reason: str


@attrs.frozen
class ListArgs:
    mine: bool = False


@attrs.frozen
class LogArgs:
    limit: int | None = None
    since: str | None = None


@attrs.frozen
class CheckArgs:
    paths: list[str]


@attrs.frozen
class EditArgs:
    tool: str
    paths: list[str]
    subagent: str | None = None


@attrs.frozen
class SlotArgs:
    name: str
    wait: float | None = None


@attrs.frozen
class SlotReleaseArgs:
    name: str


def table_of(call: Call) -> LockTable:
    table = call.core.extensions.get("locks")
    if table is None:
        raise ConclaveError(ErrorCode.UNAVAILABLE, "the lock table is not running")
    return table


def _resources(table: LockTable, texts: list[str]) -> list[Resource]:
    out = []
    for text in texts:
        try:
            out.append(table.normalizer.resource(text))
        except ResourceError as exc:
            raise ConclaveError(ErrorCode.INVALID_ARGS, str(exc)) from None
    return out


def _held(table: LockTable, call: Call, texts: list[str]) -> list[Resource]:
    """Resources to release or renew: what the caller holds under that name, found by
    spelling alone; anything else gets the full check (and its specific error)."""
    mine = table.held_by(call.principal.key)
    out = []
    for text in texts:
        held = mine.get(text)  # most often the very key it was granted under
        if held is None:
            key = table.normalizer.lexical(text)
            held = mine.get(key) if key is not None else None
        out.append(held.resource if held is not None else _resources(table, [text])[0])
    return out


def _number(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{name} must be a finite number of seconds")


def _grants(holdings: list[Any]) -> dict[str, Any]:
    return {"grants": [h.as_grant() for h in holdings]}


def _request(call: Call, table: LockTable, texts: list[str], *, shared: bool, wait: float | None, ttl: float | None, scope: str) -> Request:
    if wait is not None or ttl is not None:
        _number("wait", wait)
        _number("ttl", ttl)
        if wait is not None and wait < 0:
            raise ConclaveError(ErrorCode.INVALID_ARGS, "wait must not be negative (omit it to fail fast)")
    return table.request(
        call.principal,
        _resources(table, texts),
        mode=Mode.SHARED if shared else Mode.EXCLUSIVE,
        ttl=ttl,
        scope=SCOPES[scope],
        connection=call.connection,
    )


@OPS.op("lock.acquire", AcquireArgs, access=Access.AGENT)
async def acquire(call: Call, args: AcquireArgs) -> dict[str, Any]:
    """Take every resource at once or none; wait FIFO up to `wait` seconds, or fail fast."""
    table = table_of(call)
    request = _request(call, table, args.resources, shared=args.shared, wait=args.wait, ttl=args.ttl, scope=args.scope)
    across: SharedLocks | None = call.core.extensions.get("shared_locks")
    if across is not None and any(crosses_hosts(r) for r in request.resources):
        return _grants(await _acquire_across_hosts(call, table, across, request, args.wait))
    if args.wait is None:  # fail fast: no wait, so no trip through the scheduler
        return _grants(table.acquire_nowait(request))
    return _grants(await table.acquire(request, wait=args.wait, peer_gone=call.peer_gone))


async def _acquire_across_hosts(call: Call, table: LockTable, across: SharedLocks, request: Request, wait: float | None) -> list[Any]:
    """Take the request's cross-host resources on this broker's lease (waiting for other hosts), then grant locally.

    The local table still decides between this host's agents (FIFO, deadlock
    refusal, slots' local count); the hold on the server is taken first and
    given back if the local grant fails, so another host never sees a
    resource free while a local agent waits for it.
    """
    cross = [r for r in request.resources if crosses_hosts(r)]
    capacity = {r.key: table.slot_capacity(r.slot_name) for r in cross if r.kind is Kind.SLOT}
    deadline = trio.current_time() + (wait or 0.0)
    announced = False
    while True:
        taken = await across.take(cross, shared=request.mode is Mode.SHARED, capacity=capacity)
        if taken.ok and across.alive(taken):
            break
        if taken.ok:
            continue  # the session it was taken on ended meanwhile: take it again on the next one
        left = deadline - trio.current_time()
        if wait is None or left <= 0:
            table.journal.add(
                "lock.refuse", actor=request.holder, subject=" ".join(request.keys)[:500],
                payload={"resources": request.keys, "mode": request.mode.value, "across_hosts": list(taken.blocked)},
            )
            verb = "not granted" if wait is None else f"waited {wait:g} s and was not granted"
            raise ConclaveError(ErrorCode.LOCKED if wait is None else ErrorCode.TIMEOUT, f"{verb} (nothing was taken): {'; '.join(taken.blocked)}")
        if not announced:
            announced = True
            table.journal.add(
                "lock.wait", actor=request.holder, subject=" ".join(request.keys)[:500],
                payload={"resources": request.keys, "mode": request.mode.value, "wait": wait, "across_hosts": list(taken.blocked)},
            )
        if not await across.changed(left, call.peer_gone):
            raise ConclaveError(ErrorCode.TIMEOUT, "the client hung up while waiting; nothing was taken")
    try:
        table.recheck(request)  # the holder's other connection may have taken or joined the line for it meanwhile
    except ConclaveError:
        across.give_back(taken.holds)
        raise
    request.tokens = taken.tokens
    across.bind(request.holder, taken)  # before the grant: a release racing it finds the holds
    try:
        if wait is None:
            granted = table.acquire_nowait(request)
        else:
            granted = await table.acquire(request, wait=max(0.0, deadline - trio.current_time()), peer_gone=call.peer_gone)
    except BaseException:
        across.unbind(request.holder, taken)
        raise
    if not across.alive(taken):
        # The session ended while the grant was on its way: it stood on nothing (all or none).
        table.lose({(request.holder, h.resource.key) for h in granted}, LOST)
        raise ConclaveError(ErrorCode.UNAVAILABLE, f"{LOST} while this request was granted; nothing was taken (try again)")
    return granted


@OPS.op("lock.release", ResourcesArgs, access=Access.AGENT)
async def release(call: Call, args: ResourcesArgs) -> dict[str, Any]:
    """Release resources this principal holds (all or none)."""
    table = table_of(call)
    texts = args.resources
    mine = table.held_by(call.principal.key)
    found = [mine.get(text) for text in texts]  # most often each is the very key it was granted under
    if None in found or len(set(texts)) < len(texts):
        released = table.release(call.principal, _held(table, call, texts))
    else:
        released = table.release_held(call.principal, found)  # type: ignore[arg-type]
    across: SharedLocks | None = call.core.extensions.get("shared_locks")
    if across is not None and any(crosses_hosts(h.resource) for h in released):
        await across.settled()  # given back on the server before the agent hears it is released
    return {"released": [h.as_grant() for h in released]}


@OPS.op("lock.renew", RenewArgs, access=Access.AGENT)
async def renew(call: Call, args: RenewArgs) -> dict[str, Any]:
    """Push held resources' expiry to `ttl` seconds from now."""
    table = table_of(call)
    _number("ttl", args.ttl)
    return {"renewed": [h.as_grant() for h in table.renew(call.principal, _held(table, call, args.resources), args.ttl)]}


@OPS.op("lock.list", ListArgs)
async def list_locks(call: Call, args: ListArgs) -> dict[str, Any]:
    """Everything held, the wait line in order, and the slots."""
    snap = table_of(call).snapshot()
    if args.mine:
        key = call.principal.key
        snap["holdings"] = [h for h in snap["holdings"] if h["holder"] == key]
        snap["waiting"] = [w for w in snap["waiting"] if w["waiter"] == key]
    return snap


@OPS.op("lock.force_release", ForceArgs, access=Access.OPERATOR)
async def force_release(call: Call, args: ForceArgs) -> dict[str, Any]:
    """Take a resource from every holder, with a reason (operator only; logged)."""
    table = table_of(call)
    try:
        (resource,) = _resources(table, [args.resource])
    except ConclaveError:
        # What can no longer be granted (a file that has since become a hard link) can still be taken back.
        key = table.normalizer.lexical(args.resource)
        held = next((h for h in table.snapshot()["holdings"] if h["resource"] == key), None) if key is not None else None
        if held is None:
            raise
        resource = Resource(key, Kind(held["kind"]))
    return {"released": [h.as_dict() for h in table.force_release(call.principal, resource, args.reason)], "reason": args.reason.strip()}


@OPS.op("lock.log", LogArgs)
async def lock_log(call: Call, args: LogArgs) -> list[dict[str, Any]]:
    """Lock history from the event log (grants, waits, refusals, releases, expiries), oldest first."""
    if args.limit is not None and not 1 <= args.limit <= MAX_LOG:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"limit must be from 1 to {MAX_LOG}")
    table = call.core.extensions.get("locks")
    if table is not None:
        await table.journal.flush()
    rows = await call.core.store.call(lambda conn: events.read(conn, kind_prefix="lock", since=args.since, limit=args.limit or 200))
    return [attrs.asdict(e) for e in rows]


@OPS.op("lock.check_commit", CheckArgs)
async def check_commit(call: Call, args: CheckArgs) -> dict[str, Any]:
    """What the calling agent lacks to commit these staged paths (the pre-commit guard asks)."""
    table = table_of(call)
    staged: list[tuple[str, Resource]] = []
    unlockable: list[dict[str, Any]] = []
    for text in args.paths:
        try:
            staged.append((text, table.normalizer.path(text)))
        except ResourceError as exc:
            unlockable.append({"resource": text, "kind": "path", "why": str(exc), "held_by": []})
    report = table.check_commit(call.principal, staged)
    if unlockable and not report["operator"]:
        report = {**report, "allowed": False, "missing": report["missing"] + unlockable}
    return report


@OPS.op("lock.check_edit", EditArgs, access=Access.AGENT)
async def check_edit(call: Call, args: EditArgs) -> dict[str, Any]:
    """Whether the calling agent may edit these paths with this tool now (the edit hooks ask).

    An edit needs an exclusive lock covering each path, and no git lock.  Logged as
    ``lock.edit_allowed`` or ``lock.edit_refused`` with the tool, the paths, what is
    missing and, for an edit by one of the agent's own sub-agents, which one.
    """
    table = table_of(call)
    if not 1 <= len(args.paths) <= MAX_EDIT_PATHS:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"lock.check_edit: name from 1 to {MAX_EDIT_PATHS} paths")
    checked: list[tuple[str, Resource]] = []
    missing: list[dict[str, Any]] = []
    for text in args.paths:
        try:
            checked.append((text, table.normalizer.path(text)))
        except ResourceError as exc:
            missing.append({"resource": text, "kind": "path", "why": str(exc), "held_by": []})
    missing += table.uncovered(call.principal, checked)
    allowed = not missing
    payload: dict[str, Any] = {"tool": args.tool[:100], "paths": args.paths, "missing": [m["resource"] for m in missing]}
    if args.subagent:
        payload["subagent"] = args.subagent[:200]
    table.journal.add("lock.edit_allowed" if allowed else "lock.edit_refused", actor=call.principal.key, payload=payload)
    return {"allowed": allowed, "principal": call.principal.key, "missing": missing, "checked": len(checked)}


@OPS.op("slot.acquire", SlotArgs, access=Access.AGENT)
async def slot_acquire(call: Call, args: SlotArgs) -> dict[str, Any]:
    """Take one unit of a team-file slot (the same as lock.acquire of slot://NAME)."""
    return await acquire(call, AcquireArgs([f"slot://{args.name}"], wait=args.wait))


@OPS.op("slot.release", SlotReleaseArgs, access=Access.AGENT)
async def slot_release(call: Call, args: SlotReleaseArgs) -> dict[str, Any]:
    """Give a slot unit back (the same as lock.release of slot://NAME)."""
    return await release(call, ResourcesArgs([f"slot://{args.name}"]))


async def start(core: Any, nursery: trio.Nursery) -> None:
    """Start the lock table's owner task; in a live broker also the git guard."""
    slots = parse_slots(core.team.slots if core.team is not None else ())
    registry = core.registry
    table = LockTable(
        core.paths.repo,
        Journal(core.store),
        slots=slots,
        is_live=(lambda key: registry.get(key) is not None) if core.live else None,
    )
    if core.live:
        await table.fencing.load(core.store)
    core.extensions["locks"] = table
    await nursery.start(table.run)
    backend = core.store.backend
    if core.live and dialect.of(backend) == dialect.POSTGRESQL and core.host is not None:
        across = SharedLocks(backend.url, core.host)  # type: ignore[attr-defined]
        await nursery.start(across.run)
        table.on_release = across.released
        across.on_lost = table.lose
        core.extensions["shared_locks"] = across

    async def principal_ended(principal: Any) -> None:
        table.end_principal(principal.key)
        await table.journal.flush()

    async def connection_closed(connection: int, principal: Any) -> None:
        if not principal.is_operator:
            table.close_connection(connection, principal.key)

    core.on_principal_ended(principal_ended)
    core.on_settle_events(table.journal.flush)
    core.on_connection_closed(connection_closed)
    if core.live:
        await nursery.start(_keep_guard, core, table)


async def _keep_guard(core: Any, table: LockTable, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Install the pre-commit guard for the life of the broker; remove it when the broker stops."""
    try:
        installed = guard.install(core.paths.repo, core.paths.state)
    except guard.GuardError as exc:
        log.warning("the git guard is not installed: %s", exc)
        table.journal.add("lock.guard_skipped", actor=events.BROKER_ACTOR, payload={"reason": str(exc)})
        task_status.started()
        return
    table.journal.add(
        "lock.guard_installed",
        actor=events.BROKER_ACTOR,
        subject=str(installed.hook),
        payload={"chained": str(installed.chained) if installed.chained else None},
    )
    task_status.started()
    try:
        await trio.sleep_forever()
    finally:
        # The store is closing too, so removal goes to the broker log, not the event log.
        removed = guard.uninstall(installed)
        log.info("git guard %s from %s", "removed" if removed else "left in place", installed.hook)


def check_team(team: Team, where: str) -> None:
    """The team file's ``[[slot]]`` tables."""
    parse_slots(team.slots, where)


FEATURE = Feature("locks", OPS, schema=schema.SCHEMA, start=start, check_team=check_team, projector=LocksLog)
