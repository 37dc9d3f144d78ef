"""The wait-for graph: who waits for whom, and whether a new wait closes a cycle.

Nodes are principals.  A waiting principal has an edge to every principal
that holds something its request conflicts with, and to every principal
queued *ahead* of it for something it conflicts with (FIFO makes it wait for
them too).  A grant, release, expiry or timeout only removes edges, and
later waiters never make earlier ones wait, so a cycle can only appear when a
new wait is added: the table asks :func:`find_cycle` then, and refuses the
wait with ``deadlock`` instead of letting it hang.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Sequence, final

import attrs


@final
@attrs.frozen
class Edge:
    """``waiter`` wants ``wanted`` and must wait for ``holder``, who holds (or queues for) ``held``."""

    waiter: str
    wanted: str
    holder: str
    held: str
    queued: bool = False

    def describe(self) -> str:
        verb = "is queued ahead for" if self.queued else "holds"
        return f"{self.waiter} wants {self.wanted}, which {self.holder} {verb} ({self.held})"


def find_cycle(requester: str, first: Sequence[Edge], edges_of: Callable[[str], Sequence[Edge]]) -> list[Edge] | None:
    """The shortest cycle back to ``requester`` if it waited along ``first``, else None.

    ``edges_of(key)`` gives the edges of a principal that is already waiting
    (none for one that is not).
    """
    reached_by: dict[str, Edge] = {}
    queue = deque(first)
    while queue:
        edge = queue.popleft()
        node = edge.holder
        if node == requester:
            cycle = [edge]
            while cycle[-1].waiter != requester:
                cycle.append(reached_by[cycle[-1].waiter])
            cycle.reverse()
            return cycle
        if node in reached_by:
            continue
        reached_by[node] = edge
        queue.extend(edges_of(node))
    return None


def describe_cycle(cycle: Sequence[Edge]) -> str:
    return "; ".join(e.describe() for e in cycle)
