"""Wire ops of the mail package: ``msg.*`` and ``status.*``.

The sender of a message and the reader of an inbox are the connection's
principal (``call.principal``); no argument names either.  A request that
tries (``from``, ``sender``, ``agent``, ``as``, ...) is refused by the wire
layer with ``identity_field`` before it reaches a handler, and any other
unknown field with ``invalid_args``.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import attrs
import trio

from broker.core import Call, Feature
from broker.errors import ConclaveError, ErrorCode
from broker.mail import mailbox, schema
from broker.mail.board import Board, StatusLine, read_board, set_status
from broker.mail.budget import check_team
from broker.mail.projection import MailLog
from broker.mail.message import MAX_ACK, MAX_WAIT, TO_ALL, TO_OPERATOR, Message, check_body, check_limit, check_line
from broker.mail.service import EXTENSION, Mail, MailStatistics
from broker.optable import Access, OpTable
from broker.output import view_of
from broker.router import wait_while_connected
from store import dialect, events

if TYPE_CHECKING:
    from broker.core import BrokerCore

OPS = OpTable()


@attrs.frozen
class SendArgs:
    to: str
    body: str
    thread: str | None = None
    subject: str | None = None


@attrs.frozen
class InboxArgs:
    unread: bool = False
    wait: float | None = None
    limit: int | None = None
    include_acked: bool = False


@attrs.frozen
class AckArgs:
    ids: list[int]


@attrs.frozen
class ThreadArgs:
    thread: str
    limit: int | None = None


@attrs.frozen
class SearchArgs:
    query: str
    limit: int | None = None


@attrs.frozen
class StatusArgs:
    text: str


@attrs.frozen
class NoArgs:
    pass


async def start(core: BrokerCore, nursery: trio.Nursery) -> None:
    mail = Mail(core)
    await nursery.start(mail.notifier.run)
    core.extensions[EXTENSION] = mail
    backend = core.store.backend
    if core.live and dialect.of(backend) == dialect.POSTGRESQL:
        # Mail sent through another host's broker: its commit notifies every broker on the server.
        from store.postgres import listen

        def heard(payload: str) -> None:
            try:
                boxes = json.loads(payload)
            except ValueError:
                return
            if isinstance(boxes, list):
                mail.notifier.ring(str(b) for b in boxes)

        # After a lost session, rings sent meanwhile went unheard: every waiter looks again.
        await nursery.start(functools.partial(listen, backend.url, mailbox.MAIL_CHANNEL, heard, missed=mail.notifier.ring_everyone))  # type: ignore[attr-defined]


@OPS.op("msg.send", SendArgs)
async def send(call: Call, args: SendArgs) -> Message:
    """Send mail from this connection's principal to an agent, all, or operator."""
    body = check_body(args.body)
    subject = None if args.subject is None else check_line(args.subject, "msg.send: the subject") or None
    core, mail = call.core, Mail.of(call.core)
    live_boxes = [a.principal.agent for a in core.registry.live()]
    team_names = [a.name for a in core.team.agents] if core.team is not None else []
    if not call.principal.is_operator:
        # Charged before the store job, refused or not: a flood of sends that fail later costs the store nothing either.
        own = mailbox.mailbox_of(call.principal)
        deliveries = len({b for b in live_boxes if b != own}) if args.to == TO_ALL else 1
        size = len(body.encode()) + len((subject or "").encode())
        mail.budget.charge(call.principal.domain, deliveries=max(1, deliveries), size=size)
    message = await mail.job(
        lambda conn: mailbox.post(
            conn,
            sender=call.principal,
            to=args.to,
            live_boxes=live_boxes,
            team_names=team_names,
            thread=args.thread,
            subject=subject,
            body=body,
        )
    )
    mail.notifier.ring(message.recipients)
    view = view_of(core)
    if view is not None and TO_OPERATOR in message.recipients:
        view.mail(message.sender, message.id, message.thread, message.subject, message.body)
    return message


@OPS.op("msg.inbox", InboxArgs)
async def inbox(call: Call, args: InboxArgs) -> list[Message]:
    """Your own inbox, oldest first; with wait, block until unread mail arrives."""
    limit = check_limit(args.limit, "msg.inbox")
    core, mail = call.core, Mail.of(call.core)
    box = mailbox.mailbox_of(call.principal)
    if args.wait is not None and not 0 <= args.wait <= MAX_WAIT:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"msg.inbox: wait must be between 0 and {MAX_WAIT:g} seconds, not {args.wait:g}")
    if args.wait:
        if not core.live:
            raise ConclaveError(ErrorCode.UNAVAILABLE, "msg.inbox: no broker is running, so no mail can arrive while you wait")
        deadline = trio.current_time() + args.wait
        while True:
            # Subscribe before looking, so mail committed after the look still rings.  A ring with
            # nothing unread (every waiter is rung after a lost listening session) waits on.
            with mail.notifier.doorbell(box) as arrived:
                left = deadline - trio.current_time()
                if left <= 0 or await mail.job(lambda conn: mailbox.unread_count(conn, box)):
                    break
                if not await wait_while_connected(arrived, left, call.peer_gone):
                    # Listing now would mark mail read for a client that will never see it.
                    raise ConclaveError(ErrorCode.UNAVAILABLE, "msg.inbox: the client hung up while waiting; nothing was read")
    return await mail.job(
        lambda conn: mailbox.take_inbox(conn, call.principal, unread_only=args.unread, include_acked=args.include_acked, limit=limit)
    )


@attrs.frozen
class ArchiveArgs:
    before_run: int | None = None
    older_than: float | None = None
    mailbox: str | None = None
    dry_run: bool = False


@OPS.op("msg.archive", ArchiveArgs, access=Access.OPERATOR)
async def archive(call: Call, args: ArchiveArgs) -> dict[str, Any]:
    """Archive old mail: by default every delivery from before the run now going (with no broker: all
    of it); ``before_run`` N: mail sent before run N started; ``older_than``: sent that many seconds
    ago or more.  It leaves inboxes and unread counts; nothing is deleted."""
    from datetime import datetime, timedelta, timezone

    from broker import runs

    if args.older_than is not None and not 0 <= args.older_than <= 10 * 365 * 86400:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"msg.archive: older_than must be a number of seconds from 0 up, not {args.older_than:g}")
    live = call.core.live

    def job(conn):  # type: ignore[no-untyped-def]
        started = runs.starts(conn)
        if args.before_run is not None:
            if not 1 <= args.before_run <= len(started):
                known = f"1 to {len(started)}" if started else "none yet"
                raise ConclaveError(ErrorCode.NOT_FOUND, f"msg.archive: no run {args.before_run} on this state directory (runs: {known})")
            before = started[args.before_run - 1]
        else:
            before = started[-1] if live and started else events.now()
        if args.older_than is not None:
            cutoff = (datetime.now(timezone.utc) - timedelta(seconds=args.older_than)).isoformat()
            before = min(before, cutoff)
        return mailbox.archive(conn, call.principal, before=before, mailbox=args.mailbox, dry_run=args.dry_run)

    return await Mail.of(call.core).job(job)


@OPS.op("msg.ack", AckArgs)
async def ack(call: Call, args: AckArgs) -> mailbox.Acknowledgement:
    """Acknowledge messages in your own inbox (all or nothing)."""
    if not args.ids:
        raise ConclaveError(ErrorCode.INVALID_ARGS, "msg.ack: name at least one message id")
    if len(args.ids) > MAX_ACK:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"msg.ack: at most {MAX_ACK} ids at once")
    return await Mail.of(call.core).job(lambda conn: mailbox.acknowledge(conn, call.principal, args.ids))


@OPS.op("msg.thread", ThreadArgs)
async def thread(call: Call, args: ThreadArgs) -> list[Message]:
    """A thread's messages you sent or received (the operator: every one, for audit)."""
    limit = check_limit(args.limit, "msg.thread")
    return await Mail.of(call.core).job(lambda conn: mailbox.read_thread(conn, call.principal, args.thread, limit))


@OPS.op("msg.search", SearchArgs)
async def search(call: Call, args: SearchArgs) -> list[Message]:
    """Full-text search over mail you sent or received (the operator: all mail)."""
    limit = check_limit(args.limit, "msg.search")
    return await Mail.of(call.core).job(lambda conn: mailbox.search(conn, call.principal, args.query, limit))


@OPS.op("status.set", StatusArgs, access=Access.AGENT)
async def status_set(call: Call, args: StatusArgs) -> StatusLine:
    """Say what this agent is doing now (an empty text clears it)."""
    text = check_line(args.text, "status.set: the status")
    return await Mail.of(call.core).job(lambda conn: set_status(conn, call.principal, text))


@OPS.op("status.board", NoArgs)
async def status_board(call: Call, _args: NoArgs) -> Board:
    """Every live agent: status line, since when, locks held, unread mail."""
    return await read_board(call.core, Mail.of(call.core).job)


#: About how many bytes of message text one page of ``msg.export`` carries.
EXPORT_BYTES = 256 * 1024


@attrs.frozen
class ExportArgs:
    after: int = 0
    limit: int = 200


@OPS.op("msg.export", ExportArgs, access=Access.OPERATOR)
async def export(call: Call, args: ExportArgs) -> dict[str, Any]:
    """One page of all mail with every delivery, oldest first; pass ``next`` as ``after`` for the next page."""
    limit = check_limit(args.limit, "msg.export")
    found = await Mail.of(call.core).job(lambda conn: mailbox.export_page(conn, call.principal, after=args.after, limit=limit + 1))
    page, size = [], 0
    for m in found[:limit]:
        if size >= EXPORT_BYTES:
            break  # a reply stays well under the wire's line limit
        size += len(json.dumps(m.body)) + len(json.dumps(m.subject))
        page.append(m)
    more = len(page) < len(found)
    return {"messages": page, "next": page[-1].id if more and page else None}


@OPS.op("mail.stats", NoArgs, access=Access.OPERATOR)
async def stats(call: Call, _args: NoArgs) -> MailStatistics:
    """Callers waiting on their inbox, rings, wake-ups, and mail's store jobs."""
    return Mail.of(call.core).statistics()


FEATURE = Feature("mail", OPS, schema=schema.SCHEMA, start=start, check_team=check_team, projector=MailLog)
