"""The mail schema: messages, their deliveries, the search index, status lines.

A message is written once and never changes (triggers refuse UPDATE and
DELETE); what changes is each recipient's *delivery*: when it was first shown
(read) and when it was acknowledged.  ``mail_fts`` indexes subject and body
and is filled by a trigger, so the index is written in the same transaction
as the message.  A mailbox is an agent name (``alice``, ``alice/kid``) or
``operator``: an agent's restarts share it, its children have their own.

Numbered migrations, appended, never edited.
"""

from __future__ import annotations

from store.schema import Schema

COMPONENT = "mail"
MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS mail_messages (
        id          INTEGER PRIMARY KEY,
        thread      TEXT NOT NULL,          -- 't<id of the first message>'
        sender      TEXT NOT NULL,          -- principal key agent:session, from the connection
        sender_box  TEXT NOT NULL,          -- the sender's mailbox: its agent name, or 'operator'
        addressed   TEXT NOT NULL,          -- as addressed: an agent name, 'all' or 'operator'
        subject     TEXT,
        body        TEXT NOT NULL,
        at          TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS mail_by_thread ON mail_messages(thread, id);
    CREATE INDEX IF NOT EXISTS mail_by_sender_box ON mail_messages(sender_box, id);
    CREATE TRIGGER IF NOT EXISTS mail_messages_no_update BEFORE UPDATE ON mail_messages
        BEGIN SELECT RAISE(ABORT, 'a message never changes once sent'); END;
    CREATE TRIGGER IF NOT EXISTS mail_messages_no_delete BEFORE DELETE ON mail_messages
        BEGIN SELECT RAISE(ABORT, 'mail is never deleted'); END;

    CREATE TABLE IF NOT EXISTS mail_deliveries (
        mailbox     TEXT NOT NULL,
        message     INTEGER NOT NULL REFERENCES mail_messages(id),
        read_at     TEXT,                   -- first shown to the mailbox by `msg inbox`
        read_by     TEXT,                   -- the principal it was shown to
        acked_at    TEXT,
        acked_by    TEXT,
        PRIMARY KEY (mailbox, message)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS mail_deliveries_by_message ON mail_deliveries(message);
    CREATE INDEX IF NOT EXISTS mail_unread ON mail_deliveries(mailbox) WHERE read_at IS NULL;
    CREATE TRIGGER IF NOT EXISTS mail_deliveries_no_delete BEFORE DELETE ON mail_deliveries
        BEGIN SELECT RAISE(ABORT, 'mail is never deleted'); END;

    CREATE VIRTUAL TABLE IF NOT EXISTS mail_fts USING fts5(
        subject, body, content='mail_messages', content_rowid='id', tokenize='porter unicode61'
    );
    CREATE TRIGGER IF NOT EXISTS mail_fts_insert AFTER INSERT ON mail_messages BEGIN
        INSERT INTO mail_fts(rowid, subject, body) VALUES (new.id, new.subject, new.body);
    END;

    CREATE TABLE IF NOT EXISTS status_lines (
        agent       TEXT NOT NULL,
        session     TEXT NOT NULL,
        text        TEXT NOT NULL,
        since       TEXT NOT NULL,
        PRIMARY KEY (agent, session)
    ) WITHOUT ROWID;
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS)
