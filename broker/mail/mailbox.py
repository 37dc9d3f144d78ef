"""The mailbox store: messages, per-recipient deliveries, the search index.

Every function here is a *store job*: it takes the writer connection and runs
inside one transaction on the store owner's thread (``core.store.call``), so
a message, its deliveries, its index entry and its event land together or
not at all.  Who is acting is always a :class:`Principal` passed in by the op
handler; the mailbox it reads is derived from it (``principal.agent``, which
is ``operator`` for the operator) and never from an argument.

Visibility: an agent sees a message when it sent it (from any of its
sessions) or it was delivered to its mailbox.  The operator sees every
message (audit), but its *inbox* is only the operator mailbox.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Iterable, Sequence

import apsw
import attrs

from broker import runs
from broker.errors import ConclaveError, ErrorCode
from broker.identity import Principal
from broker.mail.message import TO_ALL, TO_OPERATOR, Delivery, Message
from broker.mail.projection import MESSAGES_TABLE, message_row
from store import dialect, events
from store.projection import UNKNOWN

log = logging.getLogger("conclave.mail")

#: The PostgreSQL notification channel that carries "mail landed in these mailboxes" between brokers.
MAIL_CHANNEL = "conclave_mail"

_COLUMNS = "m.id, m.thread, m.sender, m.sender_box, m.addressed, m.subject, m.body, m.at"
_VISIBLE = "(m.sender_box = :box OR EXISTS (SELECT 1 FROM mail_deliveries v WHERE v.message = m.id AND v.mailbox = :box))"


def mailbox_of(principal: Principal) -> str:
    """The mailbox a principal reads: its agent name (restarts share it), or ``operator``."""
    return principal.agent


@attrs.frozen
class Acknowledgement:
    acked: tuple[int, ...]
    already_acked: tuple[int, ...]


# -- sending -------------------------------------------------------------------


def post(
    conn: apsw.Connection,
    *,
    sender: Principal,
    to: str,
    live_boxes: Sequence[str],
    team_names: Iterable[str],
    thread: str | None,
    subject: str | None,
    body: str,
) -> Message:
    """Store a message and one delivery per recipient; append ``msg.send``.

    ``live_boxes`` are the mailboxes of live agents (for ``all``).

    A message to ``all`` when no other agent is alive is stored with no
    delivery (it is recorded that it was said, and that nobody heard it).

    Raises:
        ConclaveError: ``not_found`` for an unknown recipient or a thread the
            sender cannot see.
    """
    box = mailbox_of(sender)
    recipients = _resolve(conn, to, box, live_boxes, team_names)
    if thread is not None and not _thread_visible(conn, thread, sender):
        raise ConclaveError(ErrorCode.NOT_FOUND, f"msg.send: no thread {thread!r} that you can see; omit --thread to start one")
    at = events.now()
    (next_id,) = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM mail_messages").fetchone()
    thread = thread or f"t{next_id}"
    conn.execute(
        "INSERT INTO mail_messages(id, thread, sender, sender_box, addressed, subject, body, at) VALUES (?,?,?,?,?,?,?,?)",
        (next_id, thread, sender.key, box, to, subject, body, at),
    )
    conn.executemany("INSERT INTO mail_deliveries(mailbox, message) VALUES (?, ?)", [(r, next_id) for r in recipients])
    # Brokers on other hosts wake their waiters on these mailboxes when this commits (PostgreSQL).
    dialect.notify(conn, MAIL_CHANNEL, json.dumps(recipients))
    # The body stays out of the shared log: mail is private to its parties,
    # while the event log is everyone's audit trail.
    events.append(
        conn,
        "msg.send",
        actor=sender.key,
        subject=f"msg:{next_id}",
        payload={
            "id": next_id, "thread": thread, "to": to, "recipients": list(recipients), "bytes": len(body.encode()), "sender_box": box,
            "subject_sha256": None if subject is None else events.sha256(subject), "body_sha256": events.sha256(body),
        },
        at=at,
    )
    return Message(
        id=next_id,
        thread=thread,
        sender=sender.key,
        sender_agent=box,
        to=to,
        recipients=tuple(recipients),
        subject=subject,
        body=body,
        at=at,
        read=False if box in recipients else None,
        acked=False if box in recipients else None,
        deliveries=tuple(Delivery(r, None, None) for r in recipients),
    )


def _resolve(conn: apsw.Connection, to: str, own_box: str, live_boxes: Sequence[str], team_names: Iterable[str]) -> list[str]:
    if to == TO_OPERATOR:
        return [TO_OPERATOR]
    if to == TO_ALL:
        return sorted({b for b in live_boxes if b != own_box})
    known = to in set(team_names) or conn.execute(
        "SELECT 1 FROM principals WHERE agent = ? AND role = 'agent' LIMIT 1", (to,)
    ).fetchone()
    if not known:
        raise ConclaveError(
            ErrorCode.NOT_FOUND,
            f"msg.send: no agent named {to!r} is in this team or has run in it; "
            "send to a team agent, a child by its full name (parent/child), all, or operator",
        )
    return [to]


def _thread_visible(conn: apsw.Connection, thread: str, viewer: Principal) -> bool:
    if viewer.is_operator:
        sql, params = "SELECT 1 FROM mail_messages m WHERE m.thread = :thread LIMIT 1", {"thread": thread}
    else:
        sql = f"SELECT 1 FROM mail_messages m WHERE m.thread = :thread AND {_VISIBLE} LIMIT 1"
        params = {"thread": thread, "box": mailbox_of(viewer)}
    return conn.execute(sql, params).fetchone() is not None


# -- reading -------------------------------------------------------------------


def unread_count(conn: apsw.Connection, mailbox: str) -> int:
    (count,) = conn.execute(
        "SELECT COUNT(*) FROM mail_deliveries WHERE mailbox = ? AND read_at IS NULL AND archived_at IS NULL", (mailbox,)
    ).fetchone()
    return count


def unread_by_mailbox(conn: apsw.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT mailbox, COUNT(*) FROM mail_deliveries WHERE read_at IS NULL AND archived_at IS NULL GROUP BY mailbox"))


def take_inbox(conn: apsw.Connection, reader: Principal, *, unread_only: bool, include_acked: bool, limit: int) -> list[Message]:
    """The reader's own mailbox, oldest first; what it returns is now *read*.

    ``read`` on each message says whether it had been shown before this call.
    Appends ``msg.read`` when anything was shown for the first time.
    """
    box = mailbox_of(reader)
    where = ["d.mailbox = :box", "d.archived_at IS NULL"]
    if unread_only:
        where.append("d.read_at IS NULL")
    if not include_acked:
        where.append("d.acked_at IS NULL")
    rows = list(
        conn.execute(
            f"SELECT {_COLUMNS} FROM mail_deliveries d JOIN mail_messages m ON m.id = d.message "
            f"WHERE {' AND '.join(where)} ORDER BY m.id LIMIT :limit",
            {"box": box, "limit": limit},
        )
    )
    messages = _build(conn, rows, reader)
    fresh = [m.id for m in messages if not m.read]
    if fresh:
        at = events.now()
        conn.executemany(
            "UPDATE mail_deliveries SET read_at = ?, read_by = ? WHERE mailbox = ? AND message = ? AND read_at IS NULL",
            [(at, reader.key, box, i) for i in fresh],
        )
        events.append(conn, "msg.read", actor=reader.key, subject=box, payload={"ids": fresh}, at=at)
    return messages


def acknowledge(conn: apsw.Connection, reader: Principal, ids: Sequence[int]) -> Acknowledgement:
    """Mark messages in the reader's own mailbox acknowledged; all or nothing.

    Raises:
        ConclaveError: ``not_found`` for an id no message has, ``forbidden``
            for a message that is not in the reader's mailbox.  Nothing is
            acknowledged then.
    """
    box = mailbox_of(reader)
    wanted = list(dict.fromkeys(ids))
    marks = ",".join("?" * len(wanted))
    existing = {row[0] for row in conn.execute(f"SELECT id FROM mail_messages WHERE id IN ({marks})", wanted)}
    missing = [i for i in wanted if i not in existing]
    if missing:
        raise ConclaveError(ErrorCode.NOT_FOUND, f"msg.ack: no message with id {', '.join(map(str, missing))}; nothing was acknowledged")
    mine = dict(conn.execute(f"SELECT message, acked_at FROM mail_deliveries WHERE mailbox = ? AND message IN ({marks})", [box, *wanted]))
    foreign = [i for i in wanted if i not in mine]
    if foreign:
        raise ConclaveError(
            ErrorCode.FORBIDDEN,
            f"msg.ack: message {', '.join(map(str, foreign))} is not in your inbox ({box}); "
            "you can acknowledge only mail delivered to you; nothing was acknowledged",
        )
    fresh = [i for i in wanted if mine[i] is None]
    if fresh:
        at = events.now()
        # Acknowledging implies having read it.
        conn.executemany(
            "UPDATE mail_deliveries SET acked_at = ?, acked_by = ?, read_at = COALESCE(read_at, ?), "
            "read_by = COALESCE(read_by, ?) WHERE mailbox = ? AND message = ?",
            [(at, reader.key, at, reader.key, box, i) for i in fresh],
        )
        events.append(conn, "msg.ack", actor=reader.key, subject=box, payload={"ids": fresh}, at=at)
    return Acknowledgement(acked=tuple(fresh), already_acked=tuple(i for i in wanted if mine[i] is not None))


def archive(conn: apsw.Connection, operator: Principal, *, before: str, mailbox: str | None, dry_run: bool) -> dict[str, Any]:
    """Archive the deliveries of every message sent before ``before`` (an ISO time), in one
    mailbox or all; append ``msg.archive`` naming each one.  An archived delivery leaves its
    inbox, its unread count and the wake-ups; the message stays (threads, search, export).
    Nothing is deleted, and archiving twice changes nothing."""
    where, params = ["d.archived_at IS NULL", "m.at < :before"], {"before": before}
    if mailbox is not None:
        where.append("d.mailbox = :box")
        params["box"] = mailbox
    rows = [
        (str(box), int(mid))
        for box, mid in conn.execute(
            f"SELECT d.mailbox, d.message FROM mail_deliveries d JOIN mail_messages m ON m.id = d.message "
            f"WHERE {' AND '.join(where)} ORDER BY d.message, d.mailbox",
            params,
        )
    ]
    if rows and not dry_run:
        at = events.now()
        conn.executemany(
            "UPDATE mail_deliveries SET archived_at = ?, archived_by = ? WHERE mailbox = ? AND message = ? AND archived_at IS NULL",
            [(at, operator.key, box, mid) for box, mid in rows],
        )
        events.append(
            conn, "msg.archive", actor=operator.key, subject=mailbox or "all",
            payload={"before": before, "mailbox": mailbox, "deliveries": [[box, mid] for box, mid in rows]}, at=at,
        )  # fmt: skip
    unread = sum(1 for box, mid in rows if _unread(conn, box, mid))
    return {
        "archived": len(rows), "unread": unread, "messages": sorted({mid for _, mid in rows}), "mailboxes": sorted({box for box, _ in rows}),
        "before": before, "mailbox": mailbox, "dry_run": dry_run,
    }  # fmt: skip


def _unread(conn: apsw.Connection, box: str, message: int) -> bool:
    row = conn.execute("SELECT read_at FROM mail_deliveries WHERE mailbox = ? AND message = ?", (box, message)).fetchone()
    return row is not None and row[0] is None


def read_thread(conn: apsw.Connection, viewer: Principal, thread: str, limit: int) -> list[Message]:
    """The thread's messages the viewer may see, oldest first (every one for the operator).

    Raises:
        ConclaveError: ``not_found`` when the thread does not exist or holds
            nothing the viewer may see (the two are indistinguishable, so a
            thread id reveals nothing to an outsider).
    """
    where, params = _visibility(viewer)
    rows = list(
        conn.execute(
            f"SELECT {_COLUMNS} FROM mail_messages m WHERE m.thread = :thread AND {where} ORDER BY m.id LIMIT :limit",
            {**params, "thread": thread, "limit": limit},
        )
    )
    if not rows:
        raise ConclaveError(ErrorCode.NOT_FOUND, f"msg.thread: no thread {thread!r} that you can see")
    return _build(conn, rows, viewer)


def search(conn: apsw.Connection, viewer: Principal, query: str, limit: int) -> list[Message]:
    """Messages the viewer may see that match every word of ``query``, best first.

    Words are quoted before they reach FTS5, so a query is always words to
    find, never FTS5 syntax (no column filters, no syntax errors).

    Raises:
        ConclaveError: ``invalid_args`` when the query has no words.
    """
    words = re.findall(r"\w+", query)
    if not words:
        raise ConclaveError(ErrorCode.INVALID_ARGS, "msg.search: the query has no words to search for")
    where, params = _visibility(viewer)
    if dialect.is_postgresql(conn):
        # Every word must match, as in FTS5's implicit AND; \w+ words carry no tsquery syntax.
        sql = (
            f"SELECT {_COLUMNS} FROM mail_messages m, to_tsquery('english', :match) q "
            f"WHERE m.search @@ q AND {where} ORDER BY ts_rank(m.search, q, 1) DESC, m.id DESC LIMIT :limit"
        )
        match = " & ".join(words)
    else:
        sql = (
            f"SELECT {_COLUMNS} FROM mail_fts f JOIN mail_messages m ON m.id = f.rowid "
            f"WHERE mail_fts MATCH :match AND {where} ORDER BY bm25(mail_fts), m.id DESC LIMIT :limit"
        )
        match = " ".join(f'"{w}"' for w in words)
    rows = list(conn.execute(sql, {**params, "match": match, "limit": limit}))
    return _build(conn, rows, viewer)


def export_page(conn: apsw.Connection, viewer: Principal, *, after: int, limit: int) -> list[Message]:
    """Every message with an id above ``after``, oldest first, with every delivery (the operator's audit)."""
    rows = list(conn.execute(f"SELECT {_COLUMNS} FROM mail_messages m WHERE m.id > ? ORDER BY m.id LIMIT ?", (after, limit)))
    return _build(conn, rows, viewer)


def _visibility(viewer: Principal) -> tuple[str, dict[str, Any]]:
    if viewer.is_operator:
        return "1 = 1", {}
    return _VISIBLE, {"box": mailbox_of(viewer)}


def vouched(conn: apsw.Connection, rows: Sequence[tuple[Any, ...]], viewer: Principal) -> list[tuple[Any, ...]]:
    """The rows of ``_COLUMNS`` whose ``msg.send`` event (its hash checked) says the same; the viewer must be a party.

    Who sent a message and to whom is what an agent acts on ("the operator
    says..."), so it is read from the keyed event, never from the row alone:
    a row slipped in "from the operator", or a sender, mailbox, subject or
    body changed behind the broker's back, is withheld -- logged, and named by
    ``conclave memory verify`` -- instead of shown.
    """
    if not rows:
        return []
    subjects = [f"msg:{r[0]}" for r in rows]
    sent = {e.payload.get("id"): e for e in events.checked(conn, f"kind = 'msg.send' AND subject IN ({','.join('?' * len(subjects))})", subjects)}
    box = mailbox_of(viewer)
    shared = dialect.is_postgresql(conn)
    out = []
    for row in rows:
        mid, thread, sender, sender_box, addressed, subject, body, at = row
        event = sent.get(mid)
        problem = None
        if event is None:
            problem = "has no msg.send event: it was inserted behind the broker's back"
        else:
            told = message_row(event, shared)
            found = {"thread": thread, "sender": sender, "sender_box": sender_box, "addressed": addressed, "subject": subject, "body": body, "at": at}
            for column, want in told.items():
                if want is UNKNOWN:
                    continue
                if column in MESSAGES_TABLE.digests:
                    same = (found[column] is None) if want is None else (found[column] is not None and events.sha256(found[column]) == want)
                else:
                    same = found[column] == want
                if not same:
                    problem = f"column {column} differs from its msg.send event {event.seq}"
                    break
            parties = {told["sender_box"], *event.payload.get("recipients", ())}
            if problem is None and not viewer.is_operator and box not in parties:
                problem = f"is delivered to {box} by a row, but its msg.send event {event.seq} never sent it there"
        if problem is not None:
            log.error("message %s withheld from %s: it %s", mid, viewer.key, problem)
            continue
        out.append(row)
    return out


def _build(conn: apsw.Connection, rows: Sequence[tuple[Any, ...]], viewer: Principal) -> list[Message]:
    """Messages from rows of ``_COLUMNS`` (those their events vouch for), with the viewer's read/acked state."""
    rows = vouched(conn, rows, viewer)
    if not rows:
        return []
    ids = [r[0] for r in rows]
    marks = ",".join("?" * len(ids))
    copies: dict[int, list[Delivery]] = {i: [] for i in ids}
    for message, mailbox, read_at, acked_at, archived_at in conn.execute(
        f"SELECT message, mailbox, read_at, acked_at, archived_at FROM mail_deliveries WHERE message IN ({marks}) ORDER BY mailbox", ids
    ):
        copies[message].append(Delivery(mailbox, read_at, acked_at, archived_at))
    box = mailbox_of(viewer)
    starts = runs.starts(conn)
    current = len(starts) or None
    out = []
    for mid, thread, sender, sender_box, addressed, subject, body, at in rows:
        own = next((d for d in copies[mid] if d.mailbox == box), None)
        audit = viewer.is_operator or sender_box == box
        sent_in = runs.run_at(starts, at)
        out.append(
            Message(
                id=mid,
                thread=thread,
                sender=sender,
                sender_agent=sender_box,
                to=addressed,
                recipients=tuple(d.mailbox for d in copies[mid]),
                subject=subject,
                body=body,
                at=at,
                read=None if own is None else own.read_at is not None,
                acked=None if own is None else own.acked_at is not None,
                # Everyone's copy for the sender and the operator; the viewer's own copy for a recipient.
                deliveries=tuple(copies[mid]) if audit else tuple(d for d in copies[mid] if d.mailbox == box),
                run=sent_in,
                earlier_run=sent_in is not None and current is not None and sent_in < current,
            )
        )
    return out
