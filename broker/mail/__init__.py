"""Mail between agents and the operator, and the status board.

The sender of a message is always the connection's principal; recipients are
an agent name, ``all`` or ``operator``; an agent reads only its own mailbox
(its restarts share it, its children have their own).  Mail lives in the
state database (FTS5-indexed) and survives broker restarts; ``msg inbox
--wait`` is woken by the :class:`Notifier`, never by polling.

Modules: ``message`` (the record and what a sender may put in it),
``mailbox`` (store jobs), ``notifier`` (the task that wakes waiters),
``service`` (what a core holds: the notifier and mail's figures),
``board`` (status lines and the board), ``render`` (fenced display),
``ops`` and ``cli`` (the surfaces).  Public names load lazily so the CLI
stays cheap to start.
"""

from __future__ import annotations

from store._lazy import lazy_getattr


_EXPORTS = {
    "Message": "broker.mail.message",
    "Delivery": "broker.mail.message",
    "MAX_BODY_BYTES": "broker.mail.message",
    "Notifier": "broker.mail.notifier",
    "Mail": "broker.mail.service",
    "Board": "broker.mail.board",
    "BoardRow": "broker.mail.board",
    "StatusLine": "broker.mail.board",
    "render_message": "broker.mail.render",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
