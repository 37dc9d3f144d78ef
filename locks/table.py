"""The lock table: who holds what, who waits for what, and in which order.

Parallel agents on one checkout collide on the same files and on git's index.
:class:`LockTable` is the one place that decides: a principal asks for
several resources at once and gets all of them or none.  Shared locks share,
exclusive locks exclude, and overlapping paths and globs count as the same
thing (:mod:`locks.resources`).  Think of a librarian with a ledger: a
reader may wait in line (FIFO, so a writer is never starved by a stream of
readers) or leave at once with the names of whoever holds the books; a line
that would go round in a circle is refused at the desk (``deadlock``), never
left to stand there.

The table lives on the broker's event loop, like the principal registry:
every method that changes it is synchronous, so each decision is atomic with
respect to every other task (trio switches only at an await).  Only a wait
awaits, on its own :class:`trio.Event`.  :meth:`LockTable.run` is the owner
task for time: it expires TTLs, wakes slot waiters when a rate allows, and
writes the history through the :class:`~locks.journal.Journal`.

Ownership is the principal, never a process or a name in a request: any
process in an agent's tree acts for it; a child agent is a different
principal and can neither release nor reuse its parent's locks.  Everything a
principal holds is released when it ends, and ``connection``-scoped locks
(``conclave exec --lock``) also when their connection closes.
"""

from __future__ import annotations

import enum
import math
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Final, Iterable, Sequence, final

import attrs
import trio

from broker.errors import ConclaveError, ErrorCode
from broker.identity import Principal
from broker.router import wait_while_connected
from locks.fencing import FencingTokens
from locks.journal import Journal
from locks.resources import GIT, Kind, Normalizer, Resource, covers, overlaps
from locks.slots import SlotSpec
from locks.waitfor import Edge, describe_cycle, find_cycle
from store import events

#: Longest a single acquire may wait, and longest TTL, in seconds.
MAX_WAIT: Final = 3600.0
MAX_TTL: Final = 7 * 24 * 3600.0
#: Most resources in one request.
MAX_RESOURCES: Final = 256


class Mode(str, enum.Enum):
    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    UNIT = "unit"  # one unit of a counting slot


class Scope(str, enum.Enum):
    AGENT = "agent"  # until released, or the principal ends
    CONNECTION = "connection"  # also released when the requesting connection closes


@attrs.define(eq=False)
class Holding:
    resource: Resource
    mode: Mode
    owner: Principal
    token: int
    since: str
    scope: Scope
    connection: int | None
    expires_at: float | None = None  # trio clock
    expires_iso: str | None = None

    @property
    def holder(self) -> str:
        return self.owner.key

    def as_grant(self) -> dict[str, Any]:
        """What the holder is told: the resource, its mode, its token and times."""
        # _value_ is the member's plain attribute (.value goes through a descriptor); this is every grant's reply.
        return {"resource": self.resource.key, "mode": self.mode._value_, "token": self.token, "since": self.since, "expires_at": self.expires_iso}

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource.key,
            "kind": self.resource.kind.value,
            "mode": self.mode.value,
            "holder": self.holder,
            "since": self.since,
            "token": self.token,
            "scope": self.scope.value,
            "expires_at": self.expires_iso,
        }


@attrs.define(eq=False)
class Request:
    """One checked acquire (see :meth:`LockTable.request`); never changed afterwards."""

    owner: Principal
    resources: tuple[Resource, ...]
    mode: Mode
    ttl: float | None
    scope: Scope
    connection: int | None
    keys: list[str]  # the resources' keys, in request order
    holder: str  # owner.key
    #: Tokens decided elsewhere, by resource key: a resource shared across hosts takes its
    #: token from the store's sequence when its broker takes it (locks.shared).
    tokens: dict[str, int] | None = None


@attrs.define(eq=False)
class Waiter:
    request: Request
    since: str
    clock: float
    event: trio.Event = attrs.Factory(trio.Event)
    granted: list[Holding] | None = None
    failure: str | None = None  # "ended", "hangup", "lost"
    #: Why, for a failure the waiter cannot tell itself (a lost hold).
    why: str = ""
    done: bool = False


@final
@attrs.frozen
class Blocker:
    """Why a request cannot be granted now: one conflicting holder, waiter, or rate limit."""

    wanted: str
    other: str
    holder: str | None
    mode: str
    since: str | None
    token: int | None = None
    queued: bool = False
    ready_in: float | None = None
    counting: bool = False  # a slot with room for more than one: any holder may free it

    def describe(self) -> str:
        if self.holder is None:
            return f"{self.wanted}: the next grant is allowed in {self.ready_in * 1000:.0f} ms (the slot's min_interval_ms)"
        alias = "" if self.other == self.wanted else f" as {self.other}"
        if self.queued:
            return f"{self.wanted}: {self.holder} is queued ahead of you for {self.mode} {self.other} (since {self.since})"
        token = f", token {self.token}" if self.token is not None else ""
        return f"{self.wanted}: held {self.mode}{alias} by {self.holder} since {self.since}{token}"


@final
@attrs.frozen
class LockStatistics:
    holdings: int
    holders: int
    waiting: int
    granted: int
    released: int
    refused: int
    deadlocks: int
    timeouts: int
    expired: int
    forced: int
    last_token: int
    #: Holdings released because the hold behind them on the store's server was lost (``lock.lost``).
    lost: int = 0


@attrs.define
class _SlotState:
    spec: SlotSpec
    last_grant: float | None = None

    def ready_in(self, now: float) -> float:
        if self.last_grant is None or not self.spec.min_interval_ms:
            return 0.0
        return max(0.0, self.last_grant + self.spec.min_interval - now)


def _describe(blockers: Sequence[Blocker]) -> str:
    seen: list[str] = []
    for b in blockers:
        text = b.describe()
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


@final
class LockTable:
    """Every lock and every wait of one broker run.  See the module docstring.

    ``is_live(key)`` says whether a principal may still be granted anything
    (the registry's view); without it every principal counts as live.
    """

    def __init__(
        self,
        repo: Any,
        journal: Journal,
        *,
        slots: Iterable[SlotSpec] = (),
        is_live: Callable[[str], bool] | None = None,
    ) -> None:
        self.normalizer = Normalizer(repo)
        self.journal = journal
        self.fencing = FencingTokens()
        self._is_live = is_live or (lambda _key: True)
        self._slots = {s.name: _SlotState(s) for s in slots}
        self._by_key: dict[str, list[Holding]] = {}
        # Filesystem holdings, indexed so that a path meets only what can overlap it:
        # holdings of the same literal name (or alias), and every glob.
        self._literal: dict[str, list[Holding]] = {}
        self._globs: set[Holding] = set()
        self._by_owner: dict[str, dict[str, Holding]] = {}
        self._queue: list[Waiter] = []
        self._expiring: set[Holding] = set()
        self._wakeup = trio.Event()
        self._counts = dict.fromkeys(("granted", "released", "refused", "deadlocks", "timeouts", "expired", "forced", "lost"), 0)
        #: Told of every release, whatever its cause (locks.shared gives the host's hold back).
        self.on_release: Callable[[Sequence[Holding]], None] | None = None

    # -- the owner task -------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the history, expire TTLs and wake rate-limited slot waiters, until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.journal.run)
            task_status.started()
            while True:
                with trio.move_on_at(self._next_deadline()):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                self._expire_due(trio.current_time())
                self._grant_waiting()

    def _wake(self) -> None:
        self._wakeup.set()

    def _next_deadline(self) -> float:
        deadline = min((h.expires_at for h in self._expiring if h.expires_at is not None), default=math.inf)
        now = trio.current_time()
        for w in self._queue:
            for r in w.request.resources:
                if r.kind is Kind.SLOT:
                    wait = self._slots[r.slot_name].ready_in(now)
                    if wait > 0:
                        deadline = min(deadline, now + wait)
        return deadline

    # -- acquiring -------------------------------------------------------------

    def request(
        self,
        owner: Principal,
        resources: Sequence[Resource],
        *,
        mode: Mode = Mode.EXCLUSIVE,
        ttl: float | None = None,
        scope: Scope = Scope.AGENT,
        connection: int | None = None,
    ) -> Request:
        """Check a request against the rules that do not depend on others.

        Raises:
            ConclaveError: ``invalid_args`` (empty, too many, listed twice, a
                connection scope without a connection), ``not_found`` (an
                undeclared slot), ``conflict`` (already held or awaited by
                this principal), ``revoked`` (the principal has ended).
        """
        if owner.is_operator:
            raise ConclaveError(ErrorCode.FORBIDDEN, "the operator does not hold locks; locks belong to agents")
        if not resources:
            raise ConclaveError(ErrorCode.INVALID_ARGS, "name at least one resource to lock")
        if len(resources) > MAX_RESOURCES:
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"at most {MAX_RESOURCES} resources in one request")
        if ttl is not None and not (0 < ttl <= MAX_TTL):
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"ttl must be more than 0 and at most {MAX_TTL:.0f} seconds")
        if scope is Scope.CONNECTION and connection is None:
            raise ConclaveError(ErrorCode.INVALID_ARGS, "scope connection needs a connection to the broker")
        holder = owner.key
        if not self._is_live(holder):
            raise ConclaveError(ErrorCode.REVOKED, f"{holder} has ended; it can hold nothing")
        keys = [r.key for r in resources]
        if len(set(keys)) < len(keys):
            twice = sorted({k for k in keys if keys.count(k) > 1})
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"{', '.join(twice)} is listed twice in one request")
        for r in resources:
            if r.kind is Kind.SLOT and r.slot_name not in self._slots:
                declared = ", ".join(sorted(self._slots)) or "none"
                raise ConclaveError(
                    ErrorCode.NOT_FOUND,
                    f"no slot named {r.slot_name!r} (declared: {declared}); add a [[slot]] table with name and capacity to the team file",
                )
        self._refuse_twice(holder, keys)
        return Request(owner, tuple(resources), mode, ttl, scope, connection, keys, holder)

    def recheck(self, request: Request) -> None:
        """Before granting a request checked earlier (a cross-host request waits on the server in between):
        does its holder still neither hold nor wait for any of it?  Another connection of the same
        principal may have asked meanwhile.

        Raises:
            ConclaveError: ``conflict``, as :meth:`request` would.
        """
        self._refuse_twice(request.holder, request.keys)

    def _refuse_twice(self, holder: str, keys: Sequence[str]) -> None:
        mine = self._by_owner.get(holder, _NOTHING)
        for key in keys:
            held = mine.get(key)
            if held is not None:
                raise ConclaveError(
                    ErrorCode.CONFLICT,
                    f"you already hold {key} ({held.mode.value}, token {held.token}, since {held.since}); "
                    "release it first or leave it out of this request",
                )
        for w in self._queue:
            if w.request.holder == holder:
                twice = set(keys).intersection(w.request.keys)
                if twice:
                    raise ConclaveError(
                        ErrorCode.CONFLICT,
                        f"you are already waiting for {', '.join(sorted(twice))} in another request (since {w.since})",
                    )

    def acquire_nowait(self, request: Request) -> list[Holding]:
        """Grant now or refuse; never wait.

        Raises:
            ConclaveError: ``locked``, naming each conflicting holder (or the
                waiter ahead) and since when.
        """
        blockers = self._blockers(request, self._queue)
        if blockers:
            self._counts["refused"] += 1
            self.journal.add(
                "lock.refuse",
                actor=request.holder,
                subject=_subject(request.keys),
                payload={"resources": request.keys, "mode": request.mode.value, "blockers": [attrs.asdict(b) for b in blockers]},
            )
            raise ConclaveError(ErrorCode.LOCKED, f"not granted (nothing was taken): {_describe(blockers)}")
        return self._grant(request, waited=None)

    async def acquire(
        self,
        request: Request,
        *,
        wait: float | None = None,
        peer_gone: Callable[[], Awaitable[None]] | None = None,
    ) -> list[Holding]:
        """Grant every resource of ``request`` at once, waiting up to ``wait`` seconds in FIFO order.

        ``wait=None`` fails fast.  ``peer_gone`` (from the connection) ends a
        wait whose client hung up, so a ghost never holds a place in line.

        Raises:
            ConclaveError: ``locked`` (fail fast), ``deadlock`` (the wait
                would close a cycle; nothing is queued), ``timeout``,
                ``revoked`` (the principal ended while waiting).
        """
        if wait is None:
            return self.acquire_nowait(request)
        if not (0 <= wait <= MAX_WAIT) or math.isnan(wait):
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"wait must be from 0 to {MAX_WAIT:.0f} seconds (omit it to fail fast)")
        blockers = self._blockers(request, self._queue)
        if not blockers:
            return self._grant(request, waited=None)
        if wait == 0:
            return self.acquire_nowait(request)
        cycle = find_cycle(request.holder, self._edges(request, blockers), self._edges_from())
        if cycle is not None:
            self._counts["deadlocks"] += 1
            self.journal.add(
                "lock.deadlock",
                actor=request.holder,
                subject=_subject(request.keys),
                payload={"resources": request.keys, "cycle": [attrs.asdict(e) for e in cycle]},
            )
            raise ConclaveError(ErrorCode.DEADLOCK, f"refused: waiting would deadlock: {describe_cycle(cycle)}")
        waiter = Waiter(request, since=events.now(), clock=trio.current_time())
        self._queue.append(waiter)
        self.journal.add(
            "lock.wait",
            actor=request.holder,
            subject=_subject(request.keys),
            payload={"resources": request.keys, "mode": request.mode.value, "wait": wait, "blockers": [attrs.asdict(b) for b in blockers]},
        )
        self._wake()
        try:
            await self._wait(waiter, wait, peer_gone)
        except BaseException:
            self._abandon(waiter, "cancelled")
            raise
        if waiter.granted is not None:
            waiter.done = True
            return waiter.granted
        failure = waiter.failure
        remaining = self._blockers(request, self._queue[: self._queue.index(waiter)] if waiter in self._queue else [])
        self._abandon(waiter, failure or "timeout")
        if failure == "ended":
            raise ConclaveError(ErrorCode.REVOKED, f"{request.holder} ended while waiting for {', '.join(request.keys)}")
        if failure == "hangup":
            raise ConclaveError(ErrorCode.UNAVAILABLE, "the client hung up while waiting")
        if failure == "lost":
            raise ConclaveError(ErrorCode.UNAVAILABLE, f"{waiter.why}; nothing was taken (try again)")
        self._counts["timeouts"] += 1
        raise ConclaveError(
            ErrorCode.TIMEOUT, f"waited {wait:g} s and was not granted (nothing was taken): {_describe(remaining) or 'still queued'}"
        )

    async def _wait(self, waiter: Waiter, wait: float, peer_gone: Callable[[], Awaitable[None]] | None) -> None:
        if not await wait_while_connected(waiter.event, wait, peer_gone):
            waiter.failure = waiter.failure or "hangup"

    def _abandon(self, waiter: Waiter, why: str) -> None:
        """A wait ends without delivering: leave the line, or give back an undelivered grant."""
        if waiter.done:
            return
        waiter.done = True
        if waiter.granted is not None:
            self._release(waiter.granted, actor=events.BROKER_ACTOR, reason=f"undelivered ({why})")
            return
        if waiter in self._queue:
            self._queue.remove(waiter)
        self.journal.add(
            "lock.timeout" if why == "timeout" else "lock.cancel",
            actor=waiter.request.holder,
            subject=_subject(waiter.request.keys),
            payload={"resources": waiter.request.keys, "reason": why, "waited": round(trio.current_time() - waiter.clock, 6)},
        )
        # Leaving the line may let those behind go first.
        self._grant_waiting()

    # -- conflicts ---------------------------------------------------------------

    def _blockers(self, request: Request, ahead: Iterable[Waiter], *, first: bool = False) -> list[Blocker]:
        owner = request.holder
        shared = request.mode is Mode.SHARED
        out: list[Blocker] = []
        ahead = [w for w in ahead if w.request.holder != owner] if ahead else ()
        now: float | None = None
        for r in request.resources:
            if r.kind is Kind.SLOT:
                state = self._slots[r.slot_name]
                holders = self._by_key.get(r.key, [])
                counting = state.spec.capacity > 1
                if len(holders) >= state.spec.capacity:
                    out += [Blocker(r.key, r.key, h.holder, h.mode.value, h.since, h.token, counting=counting) for h in holders]
                else:
                    now = trio.current_time() if now is None else now
                    ready_in = state.ready_in(now)
                    if ready_in > 0:
                        out.append(Blocker(r.key, r.key, None, "unit", None, ready_in=ready_in))
                # Whoever is ahead in line must go first: a certain dependency, even for a counting slot.
                for w in ahead:
                    if r.key in w.request.keys:
                        out.append(Blocker(r.key, r.key, w.request.holder, "unit", w.since, queued=True))
            else:
                for h in self._candidates(r):
                    if h.holder != owner and not (shared and h.mode is Mode.SHARED) and overlaps(r, h.resource):
                        out.append(Blocker(r.key, h.resource.key, h.holder, h.mode.value, h.since, h.token))
                for w in ahead:
                    if shared and w.request.mode is Mode.SHARED:
                        continue
                    for other in w.request.resources:
                        if other.kind is not Kind.SLOT and overlaps(r, other):
                            out.append(Blocker(r.key, other.key, w.request.holder, w.request.mode.value, w.since, queued=True))
            if first and out:
                return out
        return out

    def _candidates(self, r: Resource) -> Iterable[Holding]:
        """Holdings that may overlap ``r`` (the caller still asks :func:`overlaps`)."""
        if not r.is_filesystem:
            return self._by_key.get(r.key, ())
        if r.kind is Kind.GLOB:
            return [h for hs in self._literal.values() for h in hs] + list(self._globs)
        if not r.aliases and not self._globs:
            return self._literal.get(r.key, ())
        same = [h for p in r.patterns for h in self._literal.get(p, ())]
        return same + list(self._globs) if self._globs else same

    def _index(self, h: Holding, add: bool) -> None:
        r = h.resource
        if r.kind is Kind.PATH and not r.aliases:  # the common case, by itself
            same = self._literal.get(r.key)
            if add:
                if same is None:
                    self._literal[r.key] = [h]
                else:
                    same.append(h)
            elif same is not None and h in same:
                if len(same) == 1:
                    del self._literal[r.key]
                else:
                    same.remove(h)
            return
        if r.kind is Kind.GLOB:
            (self._globs.add if add else self._globs.discard)(h)
        elif r.kind is Kind.PATH:
            for p in r.patterns:
                if add:
                    self._literal.setdefault(p, []).append(h)
                else:
                    same = self._literal.get(p, [])
                    if h in same:
                        same.remove(h)
                        if not same:
                            del self._literal[p]

    def _edges(self, request: Request, blockers: Sequence[Blocker]) -> list[Edge]:
        # A slot with room for several holders waits for *any* of them: no single
        # edge is a certain dependency, so such waits stay out of the graph.
        return [
            Edge(request.holder, b.wanted, b.holder, b.other, b.queued)
            for b in blockers
            if b.holder is not None and not b.counting
        ]

    def _edges_from(self) -> Callable[[str], list[Edge]]:
        """Edges of the waiting principals (for one deadlock search)."""
        positions: dict[str, list[int]] = {}
        for i, w in enumerate(self._queue):
            positions.setdefault(w.request.holder, []).append(i)

        def edges_of(key: str) -> list[Edge]:
            out: list[Edge] = []
            for i in positions.get(key, ()):
                w = self._queue[i]
                out += self._edges(w.request, self._blockers(w.request, self._queue[:i]))
            return out

        return edges_of

    # -- granting and releasing ---------------------------------------------------

    def _grant(self, request: Request, *, waited: float | None) -> list[Holding]:
        since = events.now()
        ttl, owner, holder, mode, scope, connection = request.ttl, request.owner, request.holder, request.mode, request.scope, request.connection
        expires_at = trio.current_time() + ttl if ttl else None
        expires_iso = _iso_after(ttl) if ttl else None
        mine = self._by_owner.get(holder)
        if mine is None:
            mine = self._by_owner[holder] = {}
        granted: list[Holding] = []
        tokens: list[int] = []
        units = 0
        fixed = request.tokens
        for r in request.resources:
            slot = r.kind is Kind.SLOT
            token = fixed.get(r.key) if fixed is not None else None
            if token is None:
                token = self.fencing.issue(self.journal)
            h = Holding(r, Mode.UNIT if slot else mode, owner, token, since, scope, connection, expires_at, expires_iso)
            same = self._by_key.get(r.key)
            if same is None:
                self._by_key[r.key] = [h]
            else:
                same.append(h)
            self._index(h, add=True)
            mine[r.key] = h
            granted.append(h)
            tokens.append(token)
            if slot:
                units += 1
                self._slots[r.slot_name].last_grant = trio.current_time()
            if expires_at is not None:
                self._expiring.add(h)
        self._counts["granted"] += 1
        keys = request.keys
        # _value_ is the member's plain attribute (.value goes through a descriptor).
        payload = {"resources": keys, "mode": (Mode.UNIT if units == len(granted) else mode)._value_, "tokens": tokens, "scope": scope._value_}
        if waited is not None:
            payload["waited"] = round(waited, 6)
        if ttl:
            payload["ttl"] = ttl
        self.journal.add("lock.grant", actor=holder, subject=keys[0] if len(keys) == 1 else _subject(keys), payload=payload, at=since)
        if expires_at is not None:
            self._wake()
        return granted

    def _grant_waiting(self) -> None:
        """One FIFO pass: grant every waiter with nothing (and no one ahead) in its way."""
        if not self._queue:
            return
        ahead: list[Waiter] = []
        now = trio.current_time()
        for w in list(self._queue):
            if not self._is_live(w.request.holder):
                self._queue.remove(w)
                w.failure = "ended"
                w.event.set()
                continue
            if self._blockers(w.request, ahead, first=True):
                ahead.append(w)
                continue
            self._queue.remove(w)
            w.granted = self._grant(w.request, waited=now - w.clock)
            w.event.set()

    def _release(self, holdings: Sequence[Holding], *, actor: str, reason: str, kind: str = "lock.release") -> None:
        by_owner: dict[str, list[Holding]] = {}
        for h in holdings:
            key, holder = h.resource.key, h.holder
            same = self._by_key.get(key)
            if same is not None and h in same:
                if len(same) == 1:
                    del self._by_key[key]
                else:
                    same.remove(h)
                self._index(h, add=False)
            mine = self._by_owner.get(holder)
            if mine is not None and mine.get(key) is h:
                if len(mine) == 1:
                    del self._by_owner[holder]
                else:
                    del mine[key]
            if h.expires_at is not None:
                self._expiring.discard(h)
            hs = by_owner.get(holder)
            if hs is None:
                by_owner[holder] = [h]
            else:
                hs.append(h)
        if self.on_release is not None:
            self.on_release(holdings)
        for owner, hs in by_owner.items():
            self._counts["released"] += 1
            keys = [h.resource.key for h in hs]
            payload = {"holder": owner, "resources": keys, "tokens": [h.token for h in hs], "reason": reason}
            self.journal.add(kind, actor=actor, subject=keys[0] if len(keys) == 1 else _subject(keys), payload=payload)
        if self._queue:
            self._grant_waiting()

    def _held_by(self, owner: Principal, resources: Sequence[Resource], verb: str) -> list[Holding]:
        """The owner's holdings of exactly these resources, or a refusal naming the first problem."""
        mine = self._by_owner.get(owner.key, {})
        out: list[Holding] = []
        for r in resources:
            h = mine.get(r.key)
            if h is not None:
                if h in out:
                    raise ConclaveError(ErrorCode.INVALID_ARGS, f"{r.key} is listed twice in one request; nothing was changed")
                out.append(h)
                continue
            others = self._by_key.get(r.key, [])
            if others:
                names = ", ".join(sorted({o.holder for o in others}))
                raise ConclaveError(
                    ErrorCode.FORBIDDEN,
                    f"cannot {verb} {r.key}: it is held by {names}, not by you ({owner.key}); only its holder may "
                    "(the operator may force-release it); nothing was changed",
                )
            held = ", ".join(sorted(mine)[:10]) or "nothing"
            raise ConclaveError(ErrorCode.NOT_FOUND, f"cannot {verb} {r.key}: you do not hold it (you hold: {held}); nothing was changed")
        return out

    def release(self, owner: Principal, resources: Sequence[Resource]) -> list[Holding]:
        """Release resources the owner holds, all or none.

        Raises:
            ConclaveError: ``forbidden`` (held by someone else), ``not_found``
                (held by no one of that name); nothing changes then.
        """
        return self.release_held(owner, self._held_by(owner, resources, "release"))

    def release_held(self, owner: Principal, holdings: list[Holding]) -> list[Holding]:
        """Release ``holdings``, which the caller took from :meth:`held_by` for ``owner``."""
        self._release(holdings, actor=owner.key, reason="released")
        return holdings

    def renew(self, owner: Principal, resources: Sequence[Resource], ttl: float) -> list[Holding]:
        """Push the expiry of held resources to ``ttl`` seconds from now.

        Raises:
            ConclaveError: as :meth:`release`, or ``invalid_args`` for a bad ttl.
        """
        if not (0 < ttl <= MAX_TTL):
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"ttl must be more than 0 and at most {MAX_TTL:.0f} seconds")
        holdings = self._held_by(owner, resources, "renew")
        expires_at, expires_iso = trio.current_time() + ttl, _iso_after(ttl)
        for h in holdings:
            h.expires_at, h.expires_iso = expires_at, expires_iso
            self._expiring.add(h)
        self.journal.add(
            "lock.renew",
            actor=owner.key,
            subject=_subject([h.resource.key for h in holdings]),
            payload={"resources": [h.resource.key for h in holdings], "ttl": ttl, "expires_at": expires_iso},
        )
        self._wake()
        return holdings

    def force_release(self, operator: Principal, resource: Resource, reason: str) -> list[Holding]:
        """The operator takes a resource away from every holder, with a reason (logged).

        Raises:
            ConclaveError: ``forbidden`` unless the operator, ``invalid_args``
                without a reason, ``not_found`` when nobody holds it.
        """
        if not operator.is_operator:
            raise ConclaveError(ErrorCode.FORBIDDEN, "only the operator may force-release a lock")
        if not reason.strip():
            raise ConclaveError(ErrorCode.INVALID_ARGS, "a force-release needs a reason (--reason)")
        holdings = list(self._by_key.get(resource.key, []))
        if not holdings:
            near = sorted({h.resource.key for hs in self._by_key.values() for h in hs if overlaps(resource, h.resource)})
            hint = f"; overlapping locks: {', '.join(near)}" if near else ""
            raise ConclaveError(ErrorCode.NOT_FOUND, f"nobody holds {resource.key}{hint}")
        self._counts["forced"] += 1
        self._release(holdings, actor=operator.key, reason=reason.strip(), kind="lock.force_release")
        return holdings

    def lose(self, pairs: set[tuple[str, str]], reason: str) -> list[Holding]:
        """The holds behind these ``(holder, resource key)`` pairs are gone (``locks.shared``: the broker's
        session with the store's server ended): fail their waits and release their holdings as ``lock.lost``."""
        for w in [w for w in self._queue if any((w.request.holder, r.key) in pairs for r in w.request.resources)]:
            self._queue.remove(w)
            w.failure, w.why = "lost", reason
            w.event.set()
        holdings = [h for hs in self._by_key.values() for h in hs if (h.holder, h.resource.key) in pairs]
        if holdings:
            self._counts["lost"] += len(holdings)
            self._release(holdings, actor=events.BROKER_ACTOR, reason=reason, kind="lock.lost")
        else:
            self._grant_waiting()
        return holdings

    def end_principal(self, key: str) -> list[Holding]:
        """Release everything ``key`` holds and drop its waits (its process has exited)."""
        for w in [w for w in self._queue if w.request.holder == key]:
            self._queue.remove(w)
            w.failure = "ended"
            w.event.set()
        holdings = list(self._by_owner.get(key, {}).values())
        if holdings:
            self._release(holdings, actor=events.BROKER_ACTOR, reason="the agent's process exited")
        else:
            self._grant_waiting()
        return holdings

    def close_connection(self, connection: int, key: str) -> list[Holding]:
        """Release the connection-scoped locks taken on ``connection``."""
        holdings = [
            h for h in self._by_owner.get(key, {}).values() if h.scope is Scope.CONNECTION and h.connection == connection
        ]
        if holdings:
            self._release(holdings, actor=events.BROKER_ACTOR, reason="its connection closed")
        return holdings

    def _expire_due(self, now: float) -> None:
        due = [h for h in self._expiring if h.expires_at is not None and h.expires_at <= now]
        if due:
            self._counts["expired"] += len(due)
            self._release(due, actor=events.BROKER_ACTOR, reason="ttl expired", kind="lock.expire")

    # -- the commit guard -----------------------------------------------------------

    def check_commit(self, principal: Principal, staged: Sequence[tuple[str, Resource]]) -> dict[str, Any]:
        """Whether ``principal`` may commit these staged paths: the ``git`` lock and an
        exclusive lock covering each path.  The operator is never blocked."""
        if principal.is_operator:
            return {"allowed": True, "principal": principal.key, "operator": True, "missing": [], "checked": len(staged)}
        mine = self._by_owner.get(principal.key, {})
        missing: list[dict[str, Any]] = []
        git = mine.get(GIT)
        if git is None or git.mode is not Mode.EXCLUSIVE:
            holders = sorted({h.holder for h in self._by_key.get(GIT, [])})
            why = "held shared; a commit needs it exclusive" if git is not None else "not held by you"
            missing.append({"resource": GIT, "kind": "named", "why": why, "held_by": holders})
        missing += self.uncovered(principal, staged)
        allowed = not missing
        self.journal.add(
            "lock.commit_allowed" if allowed else "lock.commit_refused",
            actor=principal.key,
            payload={"paths": [raw for raw, _ in staged][:200], "missing": [m["resource"] for m in missing][:200]},
        )
        return {"allowed": allowed, "principal": principal.key, "operator": False, "missing": missing, "checked": len(staged)}

    def uncovered(self, principal: Principal, staged: Sequence[tuple[str, Resource]]) -> list[dict[str, Any]]:
        """The paths no exclusive lock of ``principal`` covers, each with whoever holds it (nothing is logged)."""
        mine = self._by_owner.get(principal.key, {})
        exclusive = [h for h in mine.values() if h.mode is Mode.EXCLUSIVE and h.resource.is_filesystem]
        missing: list[dict[str, Any]] = []
        for raw, path in staged:
            if any(covers(h.resource, path) for h in exclusive):
                continue
            holders = sorted({h.holder for h in self._candidates(path) if h.holder != principal.key and overlaps(path, h.resource)})
            missing.append({"resource": raw, "kind": "path", "why": "no exclusive lock of yours covers it", "held_by": holders})
        return missing

    # -- looking ----------------------------------------------------------------------

    def slot_capacity(self, name: str) -> int:
        return self._slots[name].spec.capacity

    def held_by(self, key: str) -> dict[str, Holding]:
        """What one principal holds, by resource key (a read-only view)."""
        return self._by_owner.get(key, {})

    def holdings(self) -> dict[str, list[dict[str, Any]]]:
        """principal key -> what it holds: ``[{"resource", "mode", "since", "token"}]``."""
        return {
            key: [{"resource": h.resource.key, "mode": h.mode.value, "since": h.since, "token": h.token} for h in held.values()]
            for key, held in self._by_owner.items()
        }

    def waiting(self) -> list[dict[str, Any]]:
        """The wait line in order: ``[{"position", "waiter", "resources", "mode", "since", "blocked_by"}]``
        (``blocked_by``: the principals holding, or queued ahead for, what it waits for)."""
        line = list(self._queue)
        out = []
        for i, w in enumerate(line):
            blockers = self._blockers(w.request, line[:i])
            holders = sorted({b.holder for b in blockers if b.holder is not None})
            out.append({"position": i + 1, "waiter": w.request.holder, "resources": w.request.keys, "mode": w.request.mode.value,
                        "since": w.since, "blocked_by": holders})  # fmt: skip
        return out

    def snapshot(self) -> dict[str, Any]:
        """Everything held, everything waiting (in line order), and the slots."""
        held = sorted((h for hs in self._by_key.values() for h in hs), key=lambda h: h.token)
        return {
            "holdings": [h.as_dict() for h in held],
            "waiting": self.waiting(),
            "slots": [
                {
                    "name": name,
                    "capacity": s.spec.capacity,
                    "min_interval_ms": s.spec.min_interval_ms,
                    "held": len(self._by_key.get(f"slot://{name}", [])),
                }
                for name, s in sorted(self._slots.items())
            ],
        }

    def statistics(self) -> LockStatistics:
        return LockStatistics(
            holdings=sum(len(hs) for hs in self._by_key.values()),
            holders=len(self._by_owner),
            waiting=len(self._queue),
            last_token=self.fencing.last_issued,
            **self._counts,
        )


#: An empty mapping to look things up in (never written to).
_NOTHING: Final[dict[str, Holding]] = {}


def _subject(keys: Sequence[str]) -> str:
    return keys[0] if len(keys) == 1 else " ".join(keys)[:500]


def _iso_after(seconds: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")
