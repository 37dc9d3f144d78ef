"""The notifier: the one task that wakes ``inbox --wait`` callers when mail lands.

A waiting caller does not poll.  It hands the notifier a fresh
:class:`trio.Event` for its mailbox (:meth:`Notifier.subscribe`), *then*
checks the store for unread mail, and only if there is none waits on the
event.  After a message is committed the sender's handler rings the
recipients' mailboxes (:meth:`Notifier.ring`).  Subscriptions and rings
travel to the owner task over one FIFO channel, so the check-then-wait
cannot miss a message: a message committed before the check is seen by it,
and a ring sent after the check is processed after the subscription.

Think of a doorbell per mailbox: the owner task holds the list of who is
waiting at each door, and a ring wakes everyone there at once.
"""

from __future__ import annotations

import math
from contextlib import contextmanager, suppress
from typing import Iterable, Iterator, final

import attrs
import trio


@attrs.frozen
class _Subscribe:
    mailbox: str
    event: trio.Event


@attrs.frozen
class _Unsubscribe:
    mailbox: str
    event: trio.Event


@attrs.frozen
class _Ring:
    #: None: every mailbox.
    mailboxes: tuple[str, ...] | None


@final
@attrs.frozen
class NotifierStatistics:
    waiting: int
    rings: int
    wakeups: int


@final
class Notifier:
    """Wakes waiters on a mailbox when mail is delivered to it.

    Start :meth:`run` in a nursery (``await nursery.start(notifier.run)``);
    it owns the table of waiters.  ``subscribe``, ``unsubscribe`` and
    ``ring`` never block: they post to the owner's channel.
    """

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[_Subscribe | _Unsubscribe | _Ring](math.inf)
        self._waiting: dict[str, set[trio.Event]] = {}
        self._rings = 0
        self._wakeups = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with self._receive:
            async for notice in self._receive:
                if isinstance(notice, _Subscribe):
                    self._waiting.setdefault(notice.mailbox, set()).add(notice.event)
                elif isinstance(notice, _Unsubscribe):
                    door = self._waiting.get(notice.mailbox)
                    if door is not None:
                        door.discard(notice.event)
                        if not door:
                            del self._waiting[notice.mailbox]
                else:
                    self._rings += 1
                    for mailbox in list(self._waiting) if notice.mailboxes is None else notice.mailboxes:
                        for event in self._waiting.pop(mailbox, ()):
                            event.set()
                            self._wakeups += 1

    def subscribe(self, mailbox: str) -> trio.Event:
        """An event that is set at the next ring of ``mailbox``."""
        event = trio.Event()
        self._send.send_nowait(_Subscribe(mailbox, event))
        return event

    def unsubscribe(self, mailbox: str, event: trio.Event) -> None:
        # At shutdown the owner may be gone already; then nobody is waiting.
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(_Unsubscribe(mailbox, event))

    @contextmanager
    def doorbell(self, mailbox: str) -> Iterator[trio.Event]:
        """Subscribe for the duration of a ``with`` block."""
        event = self.subscribe(mailbox)
        try:
            yield event
        finally:
            self.unsubscribe(mailbox, event)

    def ring(self, mailboxes: Iterable[str]) -> None:
        """Wake everyone waiting on these mailboxes (call after the commit)."""
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(_Ring(tuple(mailboxes)))

    def ring_everyone(self) -> None:
        """Wake every waiter (rings may have been missed: each looks at its mailbox again)."""
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(_Ring(None))

    def statistics(self) -> NotifierStatistics:
        return NotifierStatistics(
            waiting=sum(len(d) for d in self._waiting.values()),
            rings=self._rings,
            wakeups=self._wakeups,
        )
