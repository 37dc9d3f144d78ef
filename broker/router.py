"""Dispatch: the one place a request meets a principal.

:func:`dispatch` finds the op a package declared (``broker.optable``),
checks its access against the connection's principal, structures the
arguments with the one strict converter and runs the handler with a
:class:`~broker.core.Call`.  Handlers never see a request's raw dict.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import trio

from broker.core import BrokerCore, Call
from broker.errors import ConclaveError, ErrorCode
from broker.optable import Access
from broker.wire import IDENTITY_FIELDS, structure_args
from store.backend import StoreUnavailable
from store.events import ChainRefused

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
    try:
        return await spec.handler(call, args)
    except ChainRefused as exc:
        # The event log changed behind the broker's back (or its key is gone): nothing that
        # needs an event is done until a person has looked (`conclave memory verify`).
        raise ConclaveError(ErrorCode.UNAVAILABLE, f"the broker refuses changes: {exc}") from None
    except StoreUnavailable as exc:
        raise ConclaveError(ErrorCode.UNAVAILABLE, str(exc)) from None
