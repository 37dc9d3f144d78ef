"""The principal registry: who is alive, which ticket is whose, and who is asking.

Owned by the broker's event loop.  Its methods never await, so every change
is atomic with respect to the other tasks (trio switches tasks only at an
await); the supervisor issues and ends principals, connection actors
authenticate against it.  The database copy of each principal is written by
the supervisor through the store owner.
"""

from __future__ import annotations

import os
from typing import Callable, NoReturn, final

import attrs
import trio

from broker import paths
from broker.errors import ConclaveError, ErrorCode
from broker.identity import (
    OPERATOR_NAME,
    PeerCredentials,
    Principal,
    Role,
    Ticket,
    ancestry,
    lineage,
    digests_match,
    new_session_id,
    no_new_privs,
    ticket_digest,
    user_namespace,
)
from broker.operator_probe import ProbeSeen
from broker.spec import AgentSpec


@attrs.define(eq=False)
class LiveAgent:
    """A principal whose process is running."""

    principal: Principal
    spec: AgentSpec
    ticket_digest: str
    pid: int | None = None
    started_at: str = ""
    connections: set[trio.CancelScope] = attrs.Factory(set)
    #: Set once the process exists; a child may connect before that.
    ready: trio.Event = attrs.Factory(trio.Event)


@final
@attrs.frozen
class RegistryStatistics:
    live: int
    issued: int
    revoked_tickets: int
    connections: int


def operator_principal(uid: int, host: str | None = None) -> Principal:
    """The person at the terminal, named by the kernel uid that started the broker (and its host, if any)."""
    return Principal(agent=OPERATOR_NAME, session=f"uid{uid}", role=Role.OPERATOR, domain=OPERATOR_NAME, host=host)


@final
class PrincipalRegistry:
    """Issues principals and tickets, and decides who a connecting process is.

    ``authenticate`` is the whole identity check of DESIGN.md: a ticket must
    belong to a live agent *and* the peer must be that agent's process or a
    descendant.  The operator must prove it with the operator key, and even
    with the key a process that descends from the broker (every agent, and
    every orphan an agent left, since the broker is a child subreaper) or
    from a live agent is refused: the key may have been read by an
    unsandboxed agent, its lineage cannot be forged.  Nor may a process
    inside any conclave box or agent tree, of any broker, use the key
    (:meth:`_boxed`): the kernel says so, whatever the process knows.

    ``box_probe``: every box on this kernel is scoped on abstract sockets
    (Landlock ABI 6+), so the operator must pass the probe
    (``broker.operator_probe``); without scopes ``NoNewPrivs`` decides.
    """

    def __init__(self, *, uid: int, broker_pid: int, operator_key: str, box_probe: bool, host: str | None = None) -> None:
        if not operator_key:
            raise ValueError("the registry needs the operator key; there is no default operator")
        self.uid = uid
        self.broker_pid = broker_pid
        self._operator_digest = ticket_digest(operator_key)
        #: The broker's host name in a multi-host store (None on one machine): every principal carries it.
        self.host = host
        self.operator = operator_principal(uid, host)
        self._live: dict[str, LiveAgent] = {}  # by principal key
        self._by_digest: dict[str, str] = {}
        self._revoked: set[str] = set()
        self._issued = 0
        self.on_refusal: Callable[[str, PeerCredentials, str], None] | None = None
        self.box_probe = box_probe
        self._user_namespace = user_namespace(os.getpid())

    # -- issuing -------------------------------------------------------------

    def issue(self, spec: AgentSpec, *, parent: Principal | None, agent_name: str | None = None) -> tuple[LiveAgent, Ticket]:
        """Mint a fresh session and ticket for ``spec`` (or a child of ``parent``)."""
        name = agent_name or spec.name
        domain = parent.domain if parent is not None else spec.name
        session = new_session_id()
        principal = Principal(
            agent=name,
            session=session,
            role=Role.AGENT,
            domain=domain,
            parent=parent.key if parent is not None else None,
            host=self.host,
        )
        while principal.key in self._live:
            principal = attrs.evolve(principal, session=new_session_id())
        ticket = Ticket.mint()
        live = LiveAgent(principal=principal, spec=spec, ticket_digest=ticket.digest)
        self._live[principal.key] = live
        self._by_digest[ticket.digest] = principal.key
        self._issued += 1
        return live, ticket

    def started(self, principal: Principal, pid: int, at: str) -> None:
        live = self._live[principal.key]
        live.pid = pid
        live.started_at = at
        live.ready.set()

    def pending(self, secret: str) -> LiveAgent | None:
        """The live agent a ticket belongs to, whether or not its process is up yet."""
        key = self._by_digest.get(ticket_digest(secret))
        return self._live.get(key) if key else None

    def end(self, principal: Principal) -> LiveAgent | None:
        """Revoke: the ticket stops working and every connection is closed."""
        live = self._live.pop(principal.key, None)
        if live is None:
            return None
        self._by_digest.pop(live.ticket_digest, None)
        self._revoked.add(live.ticket_digest)
        for scope in live.connections:
            scope.cancel()
        live.connections.clear()
        return live

    # -- looking up ----------------------------------------------------------

    def live(self) -> list[LiveAgent]:
        return list(self._live.values())

    def get(self, key: str) -> LiveAgent | None:
        return self._live.get(key)

    def domain_population(self, domain: str) -> int:
        """Live principals in a trust domain that were spawned by an agent (children)."""
        return sum(1 for a in self._live.values() if a.principal.domain == domain and a.principal.parent is not None)

    def agent_owning(self, pid: int) -> LiveAgent | None:
        """The live agent whose process tree contains ``pid``, if any."""
        by_pid = {a.pid: a for a in self._live.values() if a.pid is not None}
        for ancestor in ancestry(pid):
            if ancestor in by_pid:
                return by_pid[ancestor]
        return None

    def statistics(self) -> RegistryStatistics:
        return RegistryStatistics(
            live=len(self._live),
            issued=self._issued,
            revoked_tickets=len(self._revoked),
            connections=sum(len(a.connections) for a in self._live.values()),
        )

    # -- authenticating ------------------------------------------------------

    def authenticate(
        self, peer: PeerCredentials, *, ticket: str | None, operator_key: str | None, probe: ProbeSeen | None = None
    ) -> Principal:
        """Decide who the peer is from its one proof and its lineage.

        ``probe`` is who said the token the operator's ``hello`` named on the
        broker's abstract socket (``broker.operator_probe``), if anyone did.

        Raises:
            ConclaveError: ``auth_failed`` (wrong uid, no proof or both, a
                wrong operator key, unknown ticket, ticket used outside its
                agent's tree, agent process pretending to be the operator, the
                key from inside a box or another broker's tree) or ``revoked``
                (ticket of an exited agent).
        """
        if peer.uid != self.uid:
            self._refuse("wrong_uid", peer, f"uid {peer.uid} is not the broker's uid {self.uid}")
        chain = lineage(peer.pid)
        # Fail closed: a process that connected and exited (or whose ancestry
        # cannot be read) would otherwise look like one in nobody's tree.
        if chain is None or not peer.still_there():
            self._refuse(
                "peer_gone",
                peer,
                f"the process that opened this connection (pid {peer.pid}) is gone or its ancestry cannot be read; "
                "connect from the process that will use the connection",
            )
        if (ticket is None) == (operator_key is None):
            self._refuse(
                "no_proof",
                peer,
                "hello needs exactly one proof: an agent's ticket, or the operator key (the operator's `conclave` "
                "reads it from the state directory's operator.key; agents present CONCLAVE_TICKET)",
            )
        if operator_key is not None:
            if not digests_match(ticket_digest(operator_key), self._operator_digest):
                self._refuse(
                    "bad_operator_key",
                    peer,
                    "that is not this broker's operator key; run conclave as the person who started the broker "
                    "(with the same --state-dir)",
                )
            owner = self.agent_owning(peer.pid)
            if owner is not None:
                self._refuse(
                    "operator_from_agent",
                    peer,
                    f"this process runs inside agent {owner.principal.agent}'s process tree, so it cannot act as "
                    "the operator; agents present their ticket (CONCLAVE_TICKET)",
                )
            if self.broker_pid in chain[1:]:
                self._refuse(
                    "operator_from_broker_child",
                    peer,
                    "this process descends from the broker (an agent's orphan), so it cannot act as the operator",
                )
            reasons = self._boxed(peer, chain, probe)
            if reasons:
                self._refuse(
                    "operator_from_box",
                    peer,
                    f"the operator key is accepted only from outside every conclave box and agent tree, and this process "
                    f"(pid {peer.pid}) is inside one: {'; '.join(reasons)}. Run operator commands from your own terminal",
                )
            return self.operator
        assert ticket is not None
        digest = ticket_digest(ticket)
        key = self._by_digest.get(digest)
        if key is None:
            if any(digests_match(digest, r) for r in self._revoked):
                raise ConclaveError(ErrorCode.REVOKED, "this ticket belonged to an agent that has exited; it no longer works")
            self._refuse("bad_ticket", peer, "the ticket is not one this broker issued")
        live = self._live[key]
        if live.pid is None or live.pid not in chain:
            self._refuse(
                "ticket_outside_tree",
                peer,
                f"the ticket belongs to agent {live.principal.agent}, but the connecting process (pid {peer.pid}) "
                "is not that agent's process or one of its descendants",
            )
        return live.principal

    def _boxed(self, peer: PeerCredentials, chain: list[int], probe: ProbeSeen | None) -> list[str]:
        """Why the kernel places ``peer`` inside some conclave box or agent tree (empty: it does not)."""
        reasons = []
        theirs = user_namespace(peer.pid)
        if theirs is None or theirs != self._user_namespace:
            reasons.append(f"its user namespace ({theirs or 'unreadable'}) is not the broker's ({self._user_namespace}), as in a strict box")
        if self.box_probe:
            same = probe is not None and probe.pid == peer.pid and probe.uid == peer.uid and probe.started == peer.started
            if not same:
                reasons.append(
                    "it did not reach the broker's abstract socket, which no process in a Landlock domain scoped on abstract "
                    "sockets (every conclave box) can" + ("" if probe is None else f" (pid {probe.pid} did, not this one)")
                )
        elif no_new_privs(peer.pid) is not False:
            reasons.append("it runs with NoNewPrivs, as every conclave box does (this kernel's Landlock has no scopes: ABI < 6)")
        holder = paths.broker_among(chain[1:])
        if holder is not None:
            reasons.append(f"it descends from pid {holder}, which holds a conclave database: a broker, whose agents it belongs to")
        return reasons

    def attach(self, principal: Principal, scope: trio.CancelScope) -> None:
        """Tie a connection's lifetime to its principal (cancelled on revoke)."""
        live = self._live.get(principal.key)
        if live is not None:
            live.connections.add(scope)
        elif not principal.is_operator:
            scope.cancel()

    def detach(self, principal: Principal, scope: trio.CancelScope) -> None:
        live = self._live.get(principal.key)
        if live is not None:
            live.connections.discard(scope)

    def _refuse(self, reason: str, peer: PeerCredentials, message: str) -> NoReturn:
        if self.on_refusal is not None:
            self.on_refusal(reason, peer, message)
        raise ConclaveError(ErrorCode.AUTH_FAILED, message)

