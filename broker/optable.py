"""Op tables: how a package declares the ops it serves.

Each package declares its ops in an :class:`OpTable` (``memory/ops.py``,
``locks/ops.py``, ...) and hands it to the broker inside its
:class:`~broker.core.Feature`.  A handler receives a
:class:`~broker.core.Call` -- the acting principal, taken from the
connection, and the broker core -- plus its structured arguments; no
argument class may have a field naming an identity.
"""

from __future__ import annotations

import enum
from typing import Any, Awaitable, Callable, Iterable, TypeVar, final

import attrs

from broker.wire import IDENTITY_FIELDS

A = TypeVar("A")
C = TypeVar("C")


class Access(enum.Enum):
    ANY = "any"
    AGENT = "agent"  # needs an agent principal (it authors, vouches or holds)
    OPERATOR = "operator"  # a person's decision: promote, retire, revoke, force-release


#: ``async def handler(call, args)``; ``call`` is a :class:`broker.core.Call`.
Handler = Callable[[Any, Any], Awaitable[Any]]


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

    def op(self, name: str, args: type[A], *, access: Access = Access.ANY) -> Callable[[Callable[[C, A], Awaitable[Any]]], Callable[[C, A], Awaitable[Any]]]:
        fields = {f.name for f in attrs.fields(args)}
        clash = fields & IDENTITY_FIELDS
        if clash:
            raise TypeError(f"op {name}: argument fields {sorted(clash)} name an identity; identity comes from the connection")

        def register(fn: Callable[[C, A], Awaitable[Any]]) -> Callable[[C, A], Awaitable[Any]]:
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
