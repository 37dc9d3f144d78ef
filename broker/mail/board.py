"""The status board: every live agent, what it says it is doing, what it holds.

An agent sets its status line (``conclave status set TEXT``); the line
belongs to that principal -- a restarted agent starts with none, since it
cannot know what its previous life was doing.  The board joins the live
principals (from the registry), their status lines and unread counts (from
the store) and the locks they hold and wait for (from the lock table, when
one is plugged in as ``core.extensions["locks"]``).  It is the operator's one
screen view of a running team.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Awaitable, Callable, final

import apsw
import attrs

from broker.identity import OPERATOR_NAME, Principal
from broker.mail.mailbox import unread_by_mailbox
from store import events

if TYPE_CHECKING:
    from broker.core import BrokerCore


@final
@attrs.frozen
class HeldLock:
    resource: str
    mode: str
    since: str | None
    token: int | None


@final
@attrs.frozen
class Waiting:
    """A lock request in the wait line: its place, what it wants, since when."""

    position: int
    resources: tuple[str, ...]
    mode: str
    since: str | None


@final
@attrs.frozen
class BoardRow:
    agent: str
    session: str
    principal: str
    parent: str | None
    pid: int | None
    started_at: str
    status: str | None
    since: str | None
    locks: tuple[HeldLock, ...]
    unread: int
    waiting: tuple[Waiting, ...] = ()


@final
@attrs.frozen
class Board:
    """The board at one instant.  ``locks_tracked`` is False when no lock table runs."""

    at: str
    agents: tuple[BoardRow, ...]
    operator_unread: int
    locks_tracked: bool


@final
@attrs.frozen
class StatusLine:
    principal: str
    status: str
    since: str


def set_status(conn: apsw.Connection, principal: Principal, text: str) -> StatusLine:
    """Replace the principal's status line (empty clears it); append ``status.set``."""
    at = events.now()
    conn.execute(
        "INSERT INTO status_lines(agent, session, text, since) VALUES (?,?,?,?) "
        "ON CONFLICT(agent, session) DO UPDATE SET text = excluded.text, since = excluded.since",
        (principal.agent, principal.session, text, at),
    )
    # Status lines are public on the board, so the text goes into the log:
    # "what was alice doing at 10:03" is exactly what an audit asks.
    events.append(conn, "status.set", actor=principal.key, subject=principal.key, payload={"text": text}, at=at)
    return StatusLine(principal.key, text, at)


def _snapshot(conn: apsw.Connection) -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, int]]:
    lines = {(agent, session): (text, since) for agent, session, text, since in conn.execute("SELECT agent, session, text, since FROM status_lines")}
    return lines, unread_by_mailbox(conn)


async def read_board(core: BrokerCore, job: Callable[[Callable[[apsw.Connection], Any]], Awaitable[Any]]) -> Board:
    """Assemble the board from the registry, the store (through ``job``) and the lock table."""
    lines, unread = await job(_snapshot)
    held, tracked = await _holdings(core)
    waits = _waits(core)
    rows = []
    for live in sorted(core.registry.live(), key=lambda a: (a.principal.agent, a.started_at)):
        p = live.principal
        text, since = lines.get((p.agent, p.session), (None, None))
        rows.append(
            BoardRow(
                agent=p.agent,
                session=p.session,
                principal=p.key,
                parent=p.parent,
                pid=live.pid,
                started_at=live.started_at,
                status=text or None,
                since=since,
                locks=held.get(p.key, ()),
                unread=unread.get(p.agent, 0),
                waiting=waits.get(p.key, ()),
            )
        )
    return Board(at=events.now(), agents=tuple(rows), operator_unread=unread.get(OPERATOR_NAME, 0), locks_tracked=tracked)


async def _holdings(core: BrokerCore) -> tuple[dict[str, tuple[HeldLock, ...]], bool]:
    """Locks held per principal key, from the lock table if one is plugged in."""
    table = core.extensions.get("locks")
    if table is None or not hasattr(table, "holdings"):
        return {}, False
    raw: Any = table.holdings()
    if inspect.isawaitable(raw):
        raw = await raw
    return {key: tuple(_held(h) for h in held) for key, held in raw.items()}, True


def _held(entry: Any) -> HeldLock:
    get = entry.get if isinstance(entry, dict) else lambda name: getattr(entry, name, None)
    return HeldLock(resource=str(get("resource")), mode=str(get("mode")), since=get("since"), token=get("token"))


def _waits(core: BrokerCore) -> dict[str, tuple[Waiting, ...]]:
    """Lock requests in the wait line per principal key (empty when no lock table runs)."""
    table = core.extensions.get("locks")
    waiting = getattr(table, "waiting", None)
    if waiting is None:
        return {}
    out: dict[str, list[Waiting]] = {}
    for w in waiting():
        out.setdefault(w["waiter"], []).append(Waiting(w["position"], tuple(w["resources"]), w["mode"], w["since"]))
    return {key: tuple(ws) for key, ws in out.items()}
