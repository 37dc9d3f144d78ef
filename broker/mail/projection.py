"""The mail's tables rebuilt from the keyed log: messages, deliveries, status lines.

A message's row is written with its ``msg.send`` event, which names the
sender (the connection's principal), its mailbox, the recipients and -- the
body being private to its parties -- only the SHA-256 of the subject and
body.  Deliveries follow from the recipients, ``msg.read`` and ``msg.ack``;
a status line from the last ``status.set``.  ``mailbox.checked_messages``
holds the messages an agent is about to be shown against the same events,
so a row slipped in "from the operator" is never shown as the operator's.
"""

from __future__ import annotations

from typing import Any, Final, Iterable, final

import apsw

from store import dialect
from store.events import Event
from store.projection import UNKNOWN, Projection, Row, Table, Unrebuilt

MESSAGES_TABLE: Final = Table("mail_messages", ("id",), ("thread", "sender", "sender_box", "addressed", "subject", "body", "at"),
                              noun="message", digests=("subject", "body"))
DELIVERIES_TABLE: Final = Table("mail_deliveries", ("mailbox", "message"), ("read_at", "read_by", "acked_at", "acked_by"), noun="delivery")
STATUS_TABLE: Final = Table("status_lines", ("agent", "session"), ("text", "since"), noun="status line")


def message_row(event: Event, shared: bool) -> dict[str, Any]:
    """What one ``msg.send`` event says its message row holds (UNKNOWN where an older event does not say).

    An older event does not name the sender's mailbox: it is the sender's
    agent name, as ``mailbox.mailbox_of`` makes it (``shared``: the store's
    principal keys begin with ``HOST/``).
    """
    p = event.payload
    box = p["sender_box"] if "sender_box" in p else principal_parts(event.actor, shared)[0]
    return {
        "thread": p.get("thread"), "sender": event.actor, "sender_box": box, "addressed": p.get("to"),
        "subject": p["subject_sha256"] if "subject_sha256" in p else UNKNOWN,  # digests (MESSAGES_TABLE.digests)
        "body": p["body_sha256"] if "body_sha256" in p else UNKNOWN,
        "at": event.at,
    }


def principal_parts(key: str, shared: bool) -> tuple[str, str]:
    """``(agent, session)`` of a principal key (a shared store's keys begin with ``HOST/``)."""
    agent, _, session = key.rpartition(":")
    if shared and "/" in agent:
        agent = agent.split("/", 1)[1]
    return agent, session


@final
class MailLog:
    kinds = frozenset({"msg.send", "msg.read", "msg.ack", "status.set"})

    def __init__(self) -> None:
        self._messages: dict[tuple[Any, ...], Row] = {}
        self._deliveries: dict[tuple[Any, ...], Row] = {}
        self._status: dict[str, tuple[int, str, str]] = {}
        self._shared = False

    def prepare(self, conn: apsw.Connection) -> None:
        self._shared = dialect.is_postgresql(conn)

    def feed(self, event: Event) -> None:
        p = event.payload
        if event.kind == "msg.send":
            self._messages[(p["id"],)] = Row(event.seq, message_row(event, self._shared))
            for box in p.get("recipients", ()):
                self._deliveries[(box, p["id"])] = Row(event.seq, {"read_at": None, "read_by": None, "acked_at": None, "acked_by": None})
        elif event.kind in ("msg.read", "msg.ack"):
            for message in p.get("ids", ()):
                row = self._deliveries.get((event.subject, message))
                if row is None:
                    continue
                v = row.values
                if event.kind == "msg.ack":
                    v["acked_at"], v["acked_by"] = event.at, event.actor
                if v["read_at"] is None:  # acknowledging implies having read it
                    v["read_at"], v["read_by"] = event.at, event.actor
        elif event.kind == "status.set":
            self._status[event.actor] = (event.seq, p.get("text", ""), event.at)

    def projections(self, conn: apsw.Connection) -> Iterable[Projection]:
        yield Projection(MESSAGES_TABLE, self._messages)
        yield Projection(DELIVERIES_TABLE, self._deliveries)
        status = {principal_parts(k, self._shared): Row(seq, {"text": text, "since": at}) for k, (seq, text, at) in self._status.items()}
        yield Projection(STATUS_TABLE, status)

    def unrebuilt(self) -> list[Unrebuilt]:
        return []
