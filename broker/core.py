"""The broker core: the services one run shares, and how they start.

The same core serves a running broker (``conclave run``) and, with no broker
running, an operator command that opens the store itself.  Packages plug in
as a :class:`Feature`: their ops (an :class:`~broker.optable.OpTable`),
their tables (a :class:`~store.schema.Schema`), and optionally ``async def
start(core, nursery)`` to start the task that owns their state (the lock
table, the mail notifier, ...).  Which features a run has is decided in one
place, the composition root (``broker.composition``).
"""

from __future__ import annotations

from pathlib import Path

import hashlib
import itertools
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol, Sequence, final

import apsw
import attrs
import trio

from broker.identity import PeerCredentials, Principal
from broker.limits import Activity
from broker.operator_probe import OperatorProbe, box_probe_in_force
from broker.optable import OpSpec, OpTable
from broker.paths import ENV_STORE_URL, StatePaths, StateError
from broker.registry import PrincipalRegistry
from broker.team import Team, TeamCheck
from store import dialect, events
from store.backend import Backend, SqliteBackend
from store.owner import ChainFiles, StoreOwner
from store.projection import Projector
from store.schema import Schema

EndedListener = Callable[[Principal], Awaitable[None]]
ConnectionListener = Callable[[int, Principal], Awaitable[None]]


@final
@attrs.frozen
class Feature:
    """A package plugged into the broker: its ops, tables, owner task and team-file tables.

    Each feature declares one (``memory.ops.FEATURE``, ``locks.ops.FEATURE``,
    ...); the composition root lists them, and :func:`open_core` applies
    their schemas and starts them in that order.
    """

    name: str
    ops: OpTable
    schema: Schema | None = None
    start: Callable[[BrokerCore, trio.Nursery], Awaitable[None]] | None = None
    #: Validates the team-file tables this feature reads; raises ValueError naming the fix.
    check_team: TeamCheck | None = None
    #: Makes a fresh rebuild of this feature's tables from the keyed log (``store.projection``):
    #: ``conclave memory verify`` compares every row it says with the database.
    projector: Callable[[], Projector] | None = None
    #: What ``conclave doctor`` reports for this feature: given the state database (which may not
    #: exist), a dict with ``summary`` (one line) and any details.
    doctor: Callable[[Path], dict[str, Any]] | None = None


class AgentSupervisor(Protocol):
    """What ops may ask of the process that runs the agents (``broker.supervisor``)."""

    async def spawn_child(self, parent: Principal, name: str, command: list[str]) -> Principal: ...

    async def revoke(self, principal: Principal) -> bool: ...


@final
@attrs.frozen
class CoreStatistics:
    live_agents: int
    connections: int
    store_jobs: int
    store_batches: int
    #: The event log's head as the store owner last committed it, ``"SEQ:HASH"``.
    chain_head: str | None
    #: Why the store refuses to append events (the log changed behind its back); None while all is well.
    chain_refusing: str | None
    #: Acknowledged events that could not be written (each also a ``broker.error`` event when possible).
    lost_events: int
    #: This broker's host on a store several brokers share (None on one machine).
    host: str | None = None
    #: Events the other brokers of a shared store appended, each verified by this one (0 on one machine).
    chain_verified_others: int = 0
    #: On a server: batches of nothing but replayable jobs run whole, those of them run again job by job
    #: after the server refused something, and round trips on the writer connection (all 0 on SQLite).
    store_whole_batches: int = 0
    store_replayed_batches: int = 0
    store_round_trips: int = 0
    #: Times the writer connected again after its session with the server ended (0 on SQLite).
    store_reconnects: int = 0


@final
@attrs.frozen
class Call:
    """One request in flight: who is asking (from the connection) and the core.

    ``connection`` identifies the connection for resources scoped to it
    (``conclave exec --lock`` locks); it is None for in-process calls.
    ``peer_gone`` returns once the client has hung up; a handler that blocks
    (a lock wait) races it so a client that gave up never leaves a ghost.
    """

    principal: Principal
    core: BrokerCore
    connection: int | None = None
    peer_gone: Callable[[], Awaitable[None]] | None = None


@final
class BrokerCore:
    """Everything an op handler may reach: the store, the registry, the team.

    ``live`` is True inside a running broker and False for the in-process
    core an operator command opens when no broker runs (no agents exist
    then, and nothing is held).
    """

    def __init__(
        self,
        paths: StatePaths,
        *,
        uid: int,
        broker_pid: int,
        team: Team | None,
        live: bool,
        schemas: Sequence[Schema],
        backend: Backend | None = None,
        host: str | None = None,
        accept_restore: bool = False,
    ) -> None:
        self.paths = paths
        self.team = team
        self.live = live
        #: This broker's host name when several brokers share a PostgreSQL store (None on one machine).
        self.host = host
        self.store = StoreOwner(
            backend or SqliteBackend(paths.database), schemas,
            chain=ChainFiles(paths.chain_key, paths.chain_anchor, paths.chain_high_water), accept_restore=accept_restore,
        )
        self.registry = PrincipalRegistry(
            uid=uid, broker_pid=broker_pid, operator_key=paths.operator_key(), box_probe=box_probe_in_force(), host=host
        )
        #: The abstract socket of the operator's probe (a live broker's; ``broker.operator_probe``).
        self.operator_probe: OperatorProbe | None = None
        self.ops: dict[str, OpSpec] = {}
        self.extensions: dict[str, Any] = {}
        self.supervisor: AgentSupervisor | None = None
        #: When each trust domain last printed or called (the idle timers read it).
        self.activity = Activity()
        self._ended: list[EndedListener] = []
        self._closed: list[ConnectionListener] = []
        self._settlers: list[Callable[[], Awaitable[None]]] = []
        #: One maker per feature that projects tables (``Feature.projector``), by feature name, in the features' order.
        self.projectors: dict[str, Callable[[], Projector]] = {}
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
        payload = {"reason": reason, "pid": peer.pid, "uid": peer.uid}
        await self.store.persist(lambda conn: events.append(conn, "auth.refused", actor=events.BROKER_ACTOR, payload=payload), what="a refused login")

    def statistics(self) -> CoreStatistics:
        store = self.store.statistics()
        reg = self.registry.statistics()
        return CoreStatistics(
            reg.live, reg.connections, store.jobs, store.batches, store.head, store.refusing, store.lost_events, self.host, store.verified_others,
            store.whole_batches, store.replayed_batches, store.round_trips, store.reconnects,
        )


def store_backend(paths: StatePaths, team: Team | None) -> Backend:
    """Where this run's state lives: the PostgreSQL store named by ``CONCLAVE_STORE_URL``, the team
    file's ``[store] url`` or the URL a broker recorded in the state directory; else the SQLite file."""
    url = os.environ.get(ENV_STORE_URL) or (team.store_url if team is not None else None) or paths.store_url()
    if url is None:
        return SqliteBackend(paths.database)
    from store.postgres import PostgresBackend

    return PostgresBackend(with_passfile(url, paths.pg_passfile))


def with_passfile(url: str, passfile: Path) -> str:
    """``url`` reading its password from ``passfile`` (libpq's ``passfile``) when that file exists and the
    URL names no passfile of its own: the broker's password lives in its state directory, which no box
    reads (docs/DEPLOYMENT.md), not in ``~/.pgpass`` or a team file."""
    from urllib.parse import parse_qs, quote, urlsplit

    if not passfile.is_file() or "passfile" in parse_qs(urlsplit(url).query):
        return url
    return f"{url}{'&' if urlsplit(url).query else '?'}passfile={quote(str(passfile), safe='/')}"


def _check_operator_key(backend: Backend, digest: str, paths: StatePaths) -> None:
    if dialect.of(backend) == dialect.SQLITE and not paths.database.exists():
        return
    conn = backend.open_reader()
    try:
        row = conn.execute("SELECT digest FROM store_keys WHERE name = 'operator'").fetchone()
    except apsw.SQLError:
        row = None  # a store from before keys were recorded (or a new one): bound on open
    finally:
        conn.close()
    if row is not None and row[0] != digest:
        raise StateError(
            f"the database {backend.describe()} answers to another operator key than {paths.operator_key_file}; "
            "use the state directory it belongs to"
        )


def _bind_operator_key(conn: apsw.Connection, digest: str) -> None:
    if conn.execute("SELECT 1 FROM store_keys WHERE name = 'operator'").fetchone() is None:
        at = events.now()
        conn.execute("INSERT INTO store_keys(name, digest, at) VALUES ('operator', ?, ?)", (digest, at))
        events.append(conn, "broker.operator_key_bound", actor=events.BROKER_ACTOR, payload={"sha256_prefix": digest[:12], "sha256": digest}, at=at)


@asynccontextmanager
async def open_core(
    paths: StatePaths, *, team: Team | None, live: bool, features: Sequence[Feature], broker_pid: int | None = None,
    accept_restore: bool = False,
) -> AsyncIterator[BrokerCore]:
    """Start the store owner and every feature's owner task; yield the core.

    ``accept_restore``: the operator's ``conclave store accept-restore`` --
    a database older than this state directory's high-water record is
    accepted (and the decision recorded in the log) instead of refused.

    Raises:
        StateError: the database answers to another operator key than this
            state directory's (a directory that only links to it).
    """
    paths.ensure()
    schemas = [f.schema for f in features if f.schema is not None]
    backend = store_backend(paths, team)
    host = None
    if dialect.of(backend) == dialect.POSTGRESQL:
        host = await trio.to_thread.run_sync(backend.identify)  # type: ignore[attr-defined]
        if live:
            paths.record_store_url(backend.url)  # type: ignore[attr-defined]
    core = BrokerCore(
        paths, uid=os.getuid(), broker_pid=broker_pid or os.getpid(), team=team, live=live, schemas=schemas, backend=backend, host=host,
        accept_restore=accept_restore,
    )
    digest = hashlib.sha256(paths.operator_key().encode()).hexdigest()
    await trio.to_thread.run_sync(_check_operator_key, core.store.backend, digest, paths)
    async with trio.open_nursery() as nursery:
        await nursery.start(core.store.run)
        await core.store.call(lambda conn: _bind_operator_key(conn, digest))
        core.registry.on_refusal = core.record_auth_refusal_soon(nursery)
        for feature in features:
            for op, spec in feature.ops.ops.items():
                if op in core.ops:
                    raise TypeError(f"op {op} is defined by two features")
                core.ops[op] = spec
            if feature.projector is not None:
                core.projectors[feature.name] = feature.projector
            if feature.start is not None:
                await feature.start(core, nursery)
        try:
            yield core
        finally:
            nursery.cancel_scope.cancel()
