"""What a message is, and what a sender may put in one.

A :class:`Message` is text from a named sender: the principal that sent it
comes from the connection, never from the message.  The checks here run
before anything is written, so a refused message leaves no trace but the
error.  Subjects and status lines are shown *outside* the fence that holds a
body, so they must be one line without control characters -- otherwise a
subject could close the fence and print a forged ``from: operator`` header.
Bodies may have newlines and tabs, but no other control characters (a
terminal escape in a body could rewrite what the operator sees).  What text
is acceptable at all is defined once, in ``broker.wire`` (every string of
every request passes it before a handler runs); the checks here apply that
definition again and add mail's own: one line, a size.
"""

from __future__ import annotations

from typing import Final, final

import attrs

from broker.errors import ConclaveError, ErrorCode
from broker.wire import check_text

#: The largest body, in bytes of UTF-8.  Mail is for coordination ("I'm taking
#: the storage module"); logs and patches belong in the repository.
MAX_BODY_BYTES: Final = 16 * 1024
#: The longest subject or status line, in characters.
MAX_LINE_CHARS: Final = 200
#: The most messages one `msg.inbox`, `msg.search` or `msg.thread` returns.
MAX_LIMIT: Final = 1000
#: The longest `inbox --wait`, in seconds.
MAX_WAIT: Final = 3600.0
#: The most ids one `msg.ack` takes.
MAX_ACK: Final = 1000

#: Recipients that are not agent names.
TO_ALL: Final = "all"
TO_OPERATOR: Final = "operator"


@final
@attrs.frozen
class Delivery:
    """One recipient's copy of a message: when it was first shown and acknowledged."""

    mailbox: str
    read_at: str | None
    acked_at: str | None
    archived_at: str | None = None


@final
@attrs.frozen
class Message:
    """A message as one viewer sees it.

    ``read`` and ``acked`` describe the *viewer's* copy (None when the viewer
    is not a recipient, e.g. the sender); ``read`` is whether it had been
    shown before this listing.  ``run`` is the run it was sent in;
    ``earlier_run`` marks mail from before the current run, so an agent does
    not take a stale request for a new one.  ``deliveries`` is everyone's copy
    for the sender and the operator, and only the viewer's own for anyone else
    (always a list: a script reads one shape).
    """

    id: int
    thread: str
    sender: str
    sender_agent: str
    to: str
    recipients: tuple[str, ...]
    subject: str | None
    body: str
    at: str
    read: bool | None = None
    acked: bool | None = None
    deliveries: tuple[Delivery, ...] = ()
    #: The run it was sent in (``conclave agents`` numbers them), and whether that was before the
    #: run now going (or, with no broker, the last one): mail persists between runs, marked.
    run: int | None = None
    earlier_run: bool = False

    @property
    def from_operator(self) -> bool:
        return self.sender_agent == TO_OPERATOR


def check_body(body: str) -> str:
    """The body as it will be stored.

    Raises:
        ConclaveError: ``invalid_args`` for an empty body or a control
            character, ``too_large`` past :data:`MAX_BODY_BYTES`.
    """
    if not body.strip():
        raise ConclaveError(ErrorCode.INVALID_ARGS, "msg.send: the body is empty; say something")
    check_text("msg.send: the body", body)
    size = len(body.encode("utf-8"))
    if size > MAX_BODY_BYTES:
        raise ConclaveError(
            ErrorCode.TOO_LARGE,
            f"msg.send: the body is {size} bytes; the limit is {MAX_BODY_BYTES} bytes of UTF-8 "
            "(put long text in a file in the repository and send its path)",
        )
    return body


def check_line(text: str, what: str) -> str:
    """A subject or status line: one line, printable, at most :data:`MAX_LINE_CHARS`.

    Raises:
        ConclaveError: ``invalid_args`` naming what was wrong.
    """
    if len(text) > MAX_LINE_CHARS:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{what} is {len(text)} characters; at most {MAX_LINE_CHARS}")
    check_text(what, text, one_line=True)
    return text.strip()


def check_limit(limit: int | None, op: str) -> int:
    if limit is None:
        return MAX_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: limit must be between 1 and {MAX_LIMIT}, not {limit}")
    return limit
