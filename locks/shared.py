"""Named resources and slots across hosts: PostgreSQL advisory locks held by each broker's session.

When several brokers share a PostgreSQL store, ``name://`` resources and
``[[slot]]`` units mean the same thing on every host, so a grant needs the
whole team's agreement, not one broker's.  Paths, globs and ``git`` stay per
host: each host has its own checkout and its own index.

Picture each broker as a tenant holding keys on a shared key ring at the
front desk (the database server).  Before its own lock table grants a
cross-host resource, the broker takes the matching advisory lock on its
*lease connection* -- one PostgreSQL session it keeps for its whole life --
with ``pg_try_advisory_lock`` (exclusive) or ``pg_try_advisory_lock_shared``.
Advisory locks belong to the session, stack within it, and never conflict
with the same session: so every local holder and waiter of a resource keeps
one stacked hold, local FIFO order and deadlock refusal stay the lock
table's, and another host waits until the last local hold is given back.
A slot of capacity *n* is *n* advisory keys; a unit is any one of them.

When the broker dies -- killed, crashed, its host gone -- its session ends
and PostgreSQL drops every advisory lock it held: nothing to clean up,
nothing another broker must trust.  (A host that vanishes without closing
its TCP connection is noticed after the server's TCP keepalive; see
docs/DEPLOYMENT.md.)

When the *session* ends and the broker lives on -- the server restarted,
an administrator ended the backend, the connection broke -- the server has
dropped the holds while this broker's agents still hold their grants.  The
broker watches the lease connection's socket (it turns readable when the
server says goodbye or the connection closes) and, the moment it is gone,
takes back every grant and fails every wait that stood on it
(``LockTable.lose``: ``lock.lost`` events, the waits answered
``unavailable``), then connects a new session.  Each hold carries the
session it was taken on, so nothing of the old one is given back on the
new one.  Until the broker noticed, the other hosts could already take the
resource: the window is the time the goodbye takes to arrive, and fencing
tokens still tell the two holders apart.

Tokens: a cross-host resource's fencing token is ``nextval`` of one
sequence, drawn after the advisory lock is taken, so each holder's token is
larger than every earlier holder's on any host.  Tokens are monotonic per
resource (what fencing needs); path tokens still come from the host's own
reserved block.

What is not covered: deadlock refusal across hosts.  A wait for a resource
another host holds is a poll (woken early by ``NOTIFY conclave_locks`` when
any broker gives a hold back), not an edge in any wait-for graph, so a cycle
that runs through two hosts is not refused at once: it ends when one of the
waits times out.  Cycles within one host are still refused at once.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import select
from typing import Any, Awaitable, Callable, Final, Sequence, final

import attrs
import trio

from broker.errors import ConclaveError, ErrorCode
from broker.router import wait_while_connected
from locks.resources import GIT, Kind, Resource

log = logging.getLogger("conclave.locks")

#: The notification channel a broker rings when it gives a cross-host hold back.
CHANNEL: Final = "conclave_locks"
#: Longest a waiter sleeps between tries when no notification comes (a dead broker sends none).
POLL: Final = 0.25
#: Seconds a statement on the lease may take before the server gives it up (the session is then renewed).
STATEMENT_TIMEOUT: Final = 10.0
#: Longest the lease watcher goes without looking at the session.
LEASE_CHECK: Final = 1.0
RENEWED: Final = ("this broker ended its session with the store's server, because a lock call on it failed and what "
                  "it held could not be known; the server dropped its cross-host holds with it")
LOST: Final = "this broker's session with the store's server ended, and the server dropped its cross-host holds with it"


def crosses_hosts(resource: Resource) -> bool:
    """``name://`` resources and slots are the team's; paths, globs and ``git`` are the host's."""
    return resource.kind is Kind.SLOT or (resource.kind is Kind.NAMED and resource.key != GIT)


def advisory_key(text: str) -> int:
    """A signed 64-bit advisory lock key for ``text`` (the same on every host)."""
    return int.from_bytes(hashlib.sha256(b"conclave lock\0" + text.encode()).digest()[:8], "big", signed=True)


@final
@attrs.frozen
class Hold:
    """One advisory lock this broker's session holds for one local grant."""

    resource: str
    key: int
    shared: bool
    #: The lease session it was taken on (:attr:`SharedLocks.session`): a hold dies with its session.
    session: int


@final
@attrs.frozen
class Taken:
    """The outcome of one try: every hold (and its token), or who holds what is wanted."""

    holds: tuple[Hold, ...]
    tokens: dict[str, int]
    blocked: tuple[str, ...] = ()
    session: int = 0

    @property
    def ok(self) -> bool:
        return not self.blocked


@final
class SharedLocks:
    """This broker's lease connection and the cross-host holds it keeps (see the module docstring).

    Start :meth:`run` in the broker's nursery; :meth:`take` tries a request's
    cross-host resources all at once; :meth:`bind` remembers which hold went
    to which grant, and the lock table's release hook (:meth:`released`)
    gives holds back, in order, on the lease connection's thread.
    """

    def __init__(self, url: str, host: str, *, statement_timeout: float = STATEMENT_TIMEOUT) -> None:
        self.url = url
        self.host = host
        self.statement_timeout = statement_timeout
        self._raw: Any = None
        #: Which lease session this is (1 for the first; one more after every reconnect).
        self.session = 0
        #: Told the ``(holder, resource)`` grants and waits whose holds died with a lost session
        #: (``LockTable.lose``; set by ``locks.ops.start``).
        self.on_lost: Callable[[set[tuple[str, str]], str], Any] | None = None
        #: Sessions lost so far.
        self.lost_sessions = 0
        #: Set on the lease thread when what the session holds is unknown (a lock call failed): it must be ended.
        self._suspect = False
        #: The lease watcher's current wait (cancelled to make it look now).
        self._watching: trio.CancelScope | None = None
        self._limiter = trio.CapacityLimiter(1)
        #: The holds each (holder, resource) keeps, one per grant (a list: a grant may be bound before an
        #: earlier one of the same holder and resource is released).
        self._bound: dict[tuple[str, str], list[Hold]] = {}
        self._send, self._receive = trio.open_memory_channel[tuple[Hold, ...]](math.inf)
        self._changed = trio.Event()
        #: Slot unit keys this session holds (touched only on the lease connection's thread).
        self._units: set[int] = set()
        #: Batches of holds queued to give back, and how many the lease connection has released.
        self._queued = 0
        self._done = 0
        self._progress = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from store.postgres import listen

        self._raw = await trio.to_thread.run_sync(self._connect, limiter=self._limiter)
        self.session = 1
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(listen, self.url, CHANNEL, self._heard, missed=functools.partial(self._heard, "")))
                nursery.start_soon(self._watch_lease)
                task_status.started()
                async for holds in self._receive:
                    await trio.to_thread.run_sync(self._unlock, holds, limiter=self._limiter)
                    self._poke_if_suspect()
                    self._done += 1
                    self._progress.set()
                    self._progress = trio.Event()
        finally:
            with trio.CancelScope(shield=True):
                raw, self._raw = self._raw, None
                if raw is not None:
                    # Closing the session gives back every advisory lock it still held.
                    await trio.to_thread.run_sync(raw.close, limiter=self._limiter)

    # -- the lease session ------------------------------------------------------------

    def alive(self, taken: Taken) -> bool:
        """Are ``taken``'s holds still on the server (taken on the session this broker has now)?"""
        return taken.session == self.session and self._raw is not None

    async def _watch_lease(self) -> None:
        """Notice the lease session ending (see the module docstring); then take back what stood on it and reconnect.

        Woken when the socket turns readable, and at least every
        :data:`LEASE_CHECK` seconds: libpq closes the socket itself when it
        meets the end in the middle of a query, and a closed descriptor never
        turns readable.
        """
        while True:
            raw = self._raw
            with trio.move_on_after(LEASE_CHECK) as self._watching:
                try:
                    await trio.lowlevel.wait_readable(raw.pgconn.socket)
                except Exception:  # noqa: BLE001 -- closed, reused or unreadable: the check below decides
                    await trio.sleep(0)
            if await trio.to_thread.run_sync(self._still_there, limiter=self._limiter):
                continue
            await self._lose_session()

    def _still_there(self) -> bool:
        """(Lease thread.)  Is the session still there, and may it go on (see ``store.postgres.session_gone``)?

        What a query of this broker's own made readable is read by then (it
        held the limiter); what is left is the server's goodbye, its close, or
        a notice.
        """
        from store.postgres import session_gone

        return not self._suspect and not session_gone(self._raw)

    async def _lose_session(self) -> None:
        """Every hold of the session is gone: forget them, take back their grants and waits, connect anew."""
        from store.backend import pauses
        from store.postgres import StoreError

        # On the event loop, where grants are bound: none can slip between the look and the clearing.
        lost = set(self._bound)
        self._bound.clear()
        raw, self._raw = self._raw, None
        why = RENEWED if self._suspect else LOST
        await trio.to_thread.run_sync(self._end_session, raw, limiter=self._limiter)
        self.lost_sessions += 1
        log.error("%s (session %d): taking back %d cross-host grant(s) and wait(s)", why, self.session, len(lost))
        if self.on_lost is not None:
            self.on_lost(lost, f"{why}: the lock is lost (another host may hold it now)")
        for pause in pauses():
            try:
                await trio.to_thread.run_sync(self._new_session, limiter=self._limiter)
            except StoreError as exc:
                log.warning("cannot reconnect the lock lease to the store's server yet: %s", str(exc).strip())
                await trio.sleep(pause)
                continue
            log.warning("the lock lease is back (session %d)", self.session)
            self._changed.set()  # waiters try again at once
            return

    def _end_session(self, raw: Any) -> None:
        """(Lease thread.)  Close the session: the server drops every hold it still had."""
        try:
            raw.close()
        except Exception:  # noqa: BLE001 -- a dead session may fail even to close; it is gone either way
            pass
        self._units.clear()
        self._suspect = False

    def _new_session(self) -> None:
        """(Lease thread, so no take runs half on the old session and half on the new.)"""
        raw = self._connect()
        self.session += 1
        self._raw = raw

    def _connect(self) -> Any:
        """A lease session whose statements give up after :attr:`statement_timeout` seconds: a stalled
        server fails the call, which ends the session (what it holds is unknown), rather than stalling
        every release for ever."""
        import psycopg

        from store.postgres import StoreError, connect

        raw = connect(self.url)
        try:
            raw.execute(f"SET statement_timeout = {int(self.statement_timeout * 1000)}")
        except psycopg.Error as exc:  # the new session died at once: as if it could not be made (tried again)
            raw.close()
            raise StoreError(f"the new lock lease session failed at once: {str(exc).strip()}") from None
        return raw

    def _heard(self, _payload: str) -> None:
        self._changed.set()

    async def changed(self, timeout: float, peer_gone: Callable[[], Awaitable[None]] | None = None) -> bool:
        """Return when any broker gives a hold back, or after ``timeout`` seconds (at most :data:`POLL`);
        False when the waiting client hung up first."""
        event = self._changed = trio.Event() if self._changed.is_set() else self._changed
        return await wait_while_connected(event, max(0.0, min(timeout, POLL)), peer_gone)

    # -- taking ---------------------------------------------------------------------

    async def take(self, resources: Sequence[Resource], *, shared: bool, capacity: dict[str, int]) -> Taken:
        """Try every cross-host resource of one request; all or none (never waits)."""
        try:
            return await trio.to_thread.run_sync(self._try, tuple(resources), shared, dict(capacity), limiter=self._limiter)
        finally:
            self._poke_if_suspect()

    def _poke_if_suspect(self) -> None:
        """The lease thread found the session's state unknown: have the watcher end it now, not at its next look."""
        if self._suspect and self._watching is not None:
            self._watching.cancel()

    def _try(self, resources: tuple[Resource, ...], shared: bool, capacity: dict[str, int]) -> Taken:
        import psycopg

        raw = self._raw
        if raw is None or self._suspect:
            raise ConclaveError(ErrorCode.UNAVAILABLE, f"{LOST}; it is reconnecting: cross-host locks cannot be taken until it is back (try again)")
        holds: list[Hold] = []
        try:
            return self._try_on(raw, resources, shared, capacity, holds)
        except psycopg.Error as exc:
            # Ended, or cancelled under the request: a cancelled lock call may have taken its lock all
            # the same, so what this session holds is unknown.  End it (the server then drops all it
            # held, and the watcher takes back the grants that stood on it) rather than guess.
            self._suspect = True
            raise ConclaveError(ErrorCode.UNAVAILABLE, f"taking a cross-host lock failed on the store's server ({str(exc).strip()}); "
                                "nothing was taken, and this broker renews its lease session (try again)") from None

    def _try_on(self, raw: Any, resources: tuple[Resource, ...], shared: bool, capacity: dict[str, int], holds: list[Hold]) -> Taken:
        session = self.session
        blocked: list[str] = []
        for r in resources:
            if r.kind is Kind.SLOT:
                hold = None
                for unit in range(capacity[r.key]):
                    key = advisory_key(f"{r.key}#{unit}")
                    # A session never conflicts with itself: each local holder needs a unit of its own.
                    if key not in self._units and raw.execute("SELECT pg_try_advisory_lock($1)", (key,)).fetchone()[0]:
                        self._units.add(key)
                        hold = Hold(r.key, key, False, session)
                        holds.append(hold)
                        break
                if hold is None:
                    blocked.append(f"{r.key}: every unit is held ({self._holders(raw, [advisory_key(f'{r.key}#{u}') for u in range(capacity[r.key])])})")
                    break
                continue
            key = advisory_key(r.key)
            verb = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
            if raw.execute(f"SELECT {verb}($1)", (key,)).fetchone()[0]:
                holds.append(Hold(r.key, key, shared, session))
            else:
                blocked.append(f"{r.key}: held {self._holders(raw, [key])}")
                break
        if blocked:
            self._unlock(tuple(holds), notify=False)
            return Taken((), {}, tuple(blocked), session)
        tokens = {}
        for hold in holds:
            tokens[hold.resource] = int(raw.execute("SELECT nextval('lock_tokens')").fetchone()[0])
        return Taken(tuple(holds), tokens, (), session)

    def _holders(self, raw: Any, keys: list[int]) -> str:
        """Which hosts' brokers hold these advisory keys (from pg_locks and the broker registrations)."""
        halves = [((k >> 32) & 0xFFFFFFFF, k & 0xFFFFFFFF) for k in keys]
        rows = raw.execute(
            "SELECT DISTINCT coalesce(b.host, a.usename::text) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid LEFT JOIN conclave_brokers b ON b.role = a.usename "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND (l.classid::bigint, l.objid::bigint) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))",
            ([c for c, _ in halves], [o for _, o in halves]),
        ).fetchall()
        hosts = sorted(r[0] for r in rows if r[0] is not None)
        return "on host " + ", ".join(hosts) if hosts else "on another host"

    # -- giving back -----------------------------------------------------------------

    def bind(self, holder: str, taken: Taken) -> None:
        """Remember that ``holder``'s grant of each resource keeps its hold.

        Called before the local table grants: a grant released the moment it is
        made (its agent ended, a TTL, a force-release) finds its hold here.
        """
        for hold in taken.holds:
            self._bound.setdefault((holder, hold.resource), []).append(hold)

    def unbind(self, holder: str, taken: Taken) -> None:
        """The local grant did not happen: give back the holds :meth:`bind` kept for it."""
        back = []
        for hold in taken.holds:
            kept = self._bound.get((holder, hold.resource), [])
            if hold in kept:
                kept.remove(hold)
                back.append(hold)
            if not kept:
                self._bound.pop((holder, hold.resource), None)
        self.give_back(back)

    def give_back(self, holds: Sequence[Hold]) -> None:
        """Release holds no grant kept (the local acquire failed); never blocks."""
        if holds:
            self._queued += 1
            self._send.send_nowait(tuple(holds))

    async def settled(self) -> None:
        """Return once every hold given back so far is released on the server.

        ``lock.release`` answers only after this: an agent told "it is free"
        by a released peer finds it free on every host, not a moment later.
        """
        target = self._queued
        while self._done < target:
            await self._progress.wait()

    def released(self, holdings: Sequence[Any]) -> None:
        """The lock table's release hook: give back the holds of these grants."""
        holds = []
        for g in holdings:
            kept = self._bound.get((g.holder, g.resource.key))
            if kept:
                holds.append(kept.pop())
                if not kept:
                    del self._bound[(g.holder, g.resource.key)]
        self.give_back(holds)

    def _unlock(self, holds: tuple[Hold, ...], *, notify: bool = True) -> None:
        import psycopg

        raw = self._raw
        # A hold of a session that ended went with it (and its key may be held again on this one).
        holds = tuple(hold for hold in holds if hold.session == self.session)
        if raw is None or not holds:
            return
        try:
            for hold in holds:
                verb = "pg_advisory_unlock_shared" if hold.shared else "pg_advisory_unlock"
                raw.execute(f"SELECT {verb}($1)", (hold.key,))
                self._units.discard(hold.key)
            if notify:
                raw.execute("SELECT pg_notify($1, $2)", (CHANNEL, holds[0].resource))
        except psycopg.Error as exc:
            # Not retried: a cancelled unlock may have unlocked all the same, and holds stack, so a
            # second try could give back another grant's hold.  What the session holds is unknown:
            # end it (the server drops every hold of it; the watcher takes back the grants on it).
            log.warning("giving back a cross-host hold failed (%s); the lease session will be renewed", str(exc).strip())
            self._suspect = True
