"""Ops and their dispatch: the one place a request meets a principal.

Each package declares its ops in an :class:`OpTable` (``memory/ops.py``,
``locks/ops.py``, ...).  A handler receives a :class:`Call` -- the acting
principal, taken from the connection, and the broker core -- plus its
structured arguments.  Handlers never see a request's raw dict, and no
argument class has a field naming an identity.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar, final

import attrs
import trio

from broker.errors import ConclaveError, ErrorCode
from broker.identity import Principal
from broker.wire import IDENTITY_FIELDS, structure_args

if TYPE_CHECKING:
    from broker.core import BrokerCore

log = logging.getLogger("conclave.router")
A = TypeVar("A")


class Access(enum.Enum):
    ANY = "any"
    AGENT = "agent"  # needs an agent principal (it authors, vouches or holds)
    OPERATOR = "operator"  # a person's decision: promote, retire, revoke, force-release


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


async def wait_while_connected(event: trio.Event, seconds: float, peer_gone: Callable[[], Awaitable[None]] | None) -> bool:
    """Wait up to ``seconds`` for ``event``; False when the client hung up first.

    A handler that blocks (a lock wait, ``inbox --wait``) uses this so that a
    client that gave up is noticed at once: nothing is granted to it, and
    nothing is marked read for it.
    """
    gone = False
    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            if peer_gone is not None:

                async def watch() -> None:
                    nonlocal gone
                    await peer_gone()
                    gone = True
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
            await event.wait()
            nursery.cancel_scope.cancel()
    return not gone


Handler = Callable[[Call, Any], Awaitable[Any]]


@final
@attrs.frozen
class OpSpec:
    name: str
    args: type
    handler: Handler
    access: Access
    summary: str


@final
class OpTable:
    """A package's ops.  Decorate handlers with :meth:`op`."""

    def __init__(self) -> None:
        self.ops: dict[str, OpSpec] = {}

    def op(self, name: str, args: type[A], *, access: Access = Access.ANY) -> Callable[[Callable[[Call, A], Awaitable[Any]]], Callable[[Call, A], Awaitable[Any]]]:
        fields = {f.name for f in attrs.fields(args)}
        clash = fields & IDENTITY_FIELDS
        if clash:
            raise TypeError(f"op {name}: argument fields {sorted(clash)} name an identity; identity comes from the connection")

        def register(fn: Callable[[Call, A], Awaitable[Any]]) -> Callable[[Call, A], Awaitable[Any]]:
            if name in self.ops:
                raise TypeError(f"op {name} is registered twice")
            self.ops[name] = OpSpec(name, args, fn, access, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
            return fn

        return register


def describe_ops(specs: Iterable[OpSpec]) -> list[dict[str, Any]]:
    """Each op's name, access, argument names and summary (what `conclave ops` prints)."""
    return [
        {"op": s.name, "access": s.access.value, "args": [f.name for f in attrs.fields(s.args)], "summary": s.summary}
        for s in sorted(specs, key=lambda s: s.name)
    ]


async def dispatch(core: BrokerCore, call: Call, op: str, raw_args: dict[str, Any]) -> Any:
    """Check access, structure the arguments and run the handler.

    Raises:
        ConclaveError: for every refusal; anything else is a bug, reported as
            ``internal`` by the caller.
    """
    spec = core.ops.get(op)
    if spec is None:
        raise ConclaveError(ErrorCode.UNKNOWN_OP, f"unknown op {op!r}; `conclave ops` lists them")
    if spec.access is Access.OPERATOR and not call.principal.is_operator:
        raise ConclaveError(
            ErrorCode.FORBIDDEN,
            f"{op} is for the operator only (a person at the terminal); agent {call.principal.agent} may not",
        )
    if spec.access is Access.AGENT and call.principal.is_operator:
        raise ConclaveError(ErrorCode.FORBIDDEN, f"{op} acts as an agent; run it inside an agent's process tree")
    try:
        args = structure_args(op, raw_args, spec.args)
    except ConclaveError as exc:
        if exc.code is ErrorCode.IDENTITY_FIELD:
            await core.record_identity_refusal(call.principal, op, sorted(k for k in raw_args if k in IDENTITY_FIELDS))
        raise
    return await spec.handler(call, args)
