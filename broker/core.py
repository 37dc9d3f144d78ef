"""The broker core: the services one run shares, and how they start.

The same core serves a running broker (``conclave run``) and, with no broker
running, an operator command that opens the store itself.  Packages plug in
through a module that exposes ``OPS`` (an :class:`~broker.router.OpTable`)
and optionally ``async def start(core, nursery)`` to start the task that owns
their state (the lock table, the mail notifier, ...).
"""

from __future__ import annotations

import importlib
import itertools
import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Final, final

import attrs
import trio

from broker.identity import PeerCredentials, Principal
from broker.paths import StatePaths
from broker.registry import PrincipalRegistry
from broker.router import OpSpec
from broker.team import Team
from store import events
from store.owner import StoreOwner

if TYPE_CHECKING:
    from broker.supervisor import Supervisor

#: Modules that contribute ops, in order.
PLUGINS: Final = ("broker.ops_core", "memory.ops", "locks.ops", "broker.mail.ops")

EndedListener = Callable[[Principal], Awaitable[None]]
ConnectionListener = Callable[[int, Principal], Awaitable[None]]


@final
@attrs.frozen
class CoreStatistics:
    live_agents: int
    connections: int
    store_jobs: int
    store_batches: int


@final
class BrokerCore:
    """Everything an op handler may reach: the store, the registry, the team.

    ``live`` is True inside a running broker and False for the in-process
    core an operator command opens when no broker runs (no agents exist
    then, and nothing is held).
    """

    def __init__(self, paths: StatePaths, *, uid: int, broker_pid: int, team: Team | None, live: bool) -> None:
        self.paths = paths
        self.team = team
        self.live = live
        self.store = StoreOwner(paths.database)
        self.registry = PrincipalRegistry(uid=uid, broker_pid=broker_pid)
        self.ops: dict[str, OpSpec] = {}
        self.extensions: dict[str, Any] = {}
        self.supervisor: Supervisor | None = None
        self._ended: list[EndedListener] = []
        self._closed: list[ConnectionListener] = []
        self._settlers: list[Callable[[], Awaitable[None]]] = []
        self._connection_ids = itertools.count(1)
        self.started_at = events.now()

    # -- hooks other packages register --------------------------------------

    def on_principal_ended(self, listener: EndedListener) -> None:
        self._ended.append(listener)

    def on_connection_closed(self, listener: ConnectionListener) -> None:
        self._closed.append(listener)

    def on_settle_events(self, settler: Callable[[], Awaitable[None]]) -> None:
        """Register a write-behind queue of events (the lock journal) to flush before the log is read."""
        self._settlers.append(settler)

    async def settle_events(self) -> None:
        """Return once every event decided so far is in the event log (readers call this first)."""
        for settler in self._settlers:
            await settler()

    async def principal_ended(self, principal: Principal) -> None:
        for listener in self._ended:
            await listener(principal)

    async def connection_closed(self, connection: int, principal: Principal) -> None:
        for listener in self._closed:
            await listener(connection, principal)

    def next_connection_id(self) -> int:
        return next(self._connection_ids)

    # -- events ---------------------------------------------------------------

    async def record(self, kind: str, *, actor: str, subject: str | None = None, payload: dict[str, Any] | None = None) -> None:
        """Append one event on its own (for changes that touch no other table)."""
        await self.store.call(lambda conn: events.append(conn, kind, actor=actor, subject=subject, payload=payload))

    async def record_identity_refusal(self, principal: Principal, op: str, fields: list[str]) -> None:
        await self.record("wire.identity_field_refused", actor=principal.key, subject=op, payload={"fields": fields})

    def record_auth_refusal_soon(self, nursery: trio.Nursery) -> Callable[[str, PeerCredentials, str], None]:
        """A sync callback for the registry that logs a refused login in the background."""

        def note(reason: str, peer: PeerCredentials, _message: str) -> None:
            nursery.start_soon(self._record_refusal, reason, peer)

        return note

    async def _record_refusal(self, reason: str, peer: PeerCredentials) -> None:
        await self.record("auth.refused", actor=events.BROKER_ACTOR, payload={"reason": reason, "pid": peer.pid, "uid": peer.uid})

    def statistics(self) -> CoreStatistics:
        store = self.store.statistics()
        reg = self.registry.statistics()
        return CoreStatistics(reg.live, reg.connections, store.jobs, store.batches)


@asynccontextmanager
async def open_core(paths: StatePaths, *, team: Team | None, live: bool, broker_pid: int | None = None) -> AsyncIterator[BrokerCore]:
    """Start the store owner and every plugin's owner task; yield the core."""
    paths.ensure()
    core = BrokerCore(paths, uid=os.getuid(), broker_pid=broker_pid or os.getpid(), team=team, live=live)
    async with trio.open_nursery() as nursery:
        await nursery.start(core.store.run)
        core.registry.on_refusal = core.record_auth_refusal_soon(nursery)
        for name in PLUGINS:
            module = importlib.import_module(name)
            for op, spec in module.OPS.ops.items():
                if op in core.ops:
                    raise TypeError(f"op {op} is defined by two plugins")
                core.ops[op] = spec
            start = getattr(module, "start", None)
            if start is not None:
                await start(core, nursery)
        try:
            yield core
        finally:
            nursery.cancel_scope.cancel()
