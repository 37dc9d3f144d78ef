"""The mail schema: messages, their deliveries, the search index, status lines.

A message is written once and never changes (triggers refuse UPDATE and
DELETE); what changes is each recipient's *delivery*: when it was first shown
(read), when it was acknowledged, and when the operator archived it.  ``mail_fts`` indexes subject and body
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
    # 2: the operator archives old mail (`conclave msg archive`): an archived delivery leaves
    # its mailbox's inbox, unread count and wake-ups; the message stays, in threads and search.
    """
    ALTER TABLE mail_deliveries ADD COLUMN archived_at TEXT;
    ALTER TABLE mail_deliveries ADD COLUMN archived_by TEXT;
    """,
]

#: The same on PostgreSQL: search is a stored ``tsvector`` with a GIN index; a
#: broker's role sends only as its own host's principals, delivers only the
#: messages it sent, and marks a delivery read or acknowledged only in the
#: name of its own host's principals.  A mailbox (an agent name) is shared by
#: that agent's namesakes on every host: mail to ``alice`` reaches the role.
POSTGRESQL: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS mail_messages (
        id          BIGINT PRIMARY KEY,
        thread      TEXT NOT NULL,
        sender      TEXT NOT NULL,
        sender_box  TEXT NOT NULL,
        addressed   TEXT NOT NULL,
        subject     TEXT,
        body        TEXT NOT NULL,
        at          TEXT NOT NULL,
        search      tsvector GENERATED ALWAYS AS (to_tsvector('english', coalesce(subject, '') || ' ' || body)) STORED
    );
    CREATE INDEX IF NOT EXISTS mail_by_thread ON mail_messages(thread, id);
    CREATE INDEX IF NOT EXISTS mail_by_sender_box ON mail_messages(sender_box, id);
    CREATE INDEX IF NOT EXISTS mail_search ON mail_messages USING gin (search);
    CREATE TRIGGER mail_messages_never_change BEFORE UPDATE OR DELETE ON mail_messages
        FOR EACH ROW EXECUTE FUNCTION conclave_refuse_change('a message never changes once sent, and mail is never deleted');

    CREATE TABLE IF NOT EXISTS mail_deliveries (
        mailbox     TEXT NOT NULL,
        message     BIGINT NOT NULL REFERENCES mail_messages(id),
        read_at     TEXT,
        read_by     TEXT,
        acked_at    TEXT,
        acked_by    TEXT,
        PRIMARY KEY (mailbox, message)
    );
    CREATE INDEX IF NOT EXISTS mail_deliveries_by_message ON mail_deliveries(message);
    CREATE INDEX IF NOT EXISTS mail_unread ON mail_deliveries(mailbox) WHERE read_at IS NULL;
    CREATE TRIGGER mail_deliveries_never_deleted BEFORE DELETE ON mail_deliveries
        FOR EACH ROW EXECUTE FUNCTION conclave_refuse_change('mail is never deleted');
    CREATE TRIGGER mail_deliveries_owned_changes BEFORE UPDATE ON mail_deliveries
        FOR EACH ROW EXECUTE FUNCTION conclave_owned_changes('read_by', 'acked_by');

    CREATE TABLE IF NOT EXISTS status_lines (
        host        TEXT NOT NULL DEFAULT conclave_host(),
        agent       TEXT NOT NULL,
        session     TEXT NOT NULL,
        text        TEXT NOT NULL,
        since       TEXT NOT NULL,
        PRIMARY KEY (agent, session)
    );

    ALTER TABLE mail_messages ENABLE ROW LEVEL SECURITY;
    CREATE POLICY mail_messages_read ON mail_messages FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY mail_messages_sender ON mail_messages FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(sender));
    GRANT SELECT, INSERT ON mail_messages TO conclave_broker;

    ALTER TABLE mail_deliveries ENABLE ROW LEVEL SECURITY;
    CREATE POLICY mail_deliveries_read ON mail_deliveries FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY mail_deliveries_sender ON mail_deliveries FOR INSERT TO conclave_broker
        WITH CHECK (EXISTS (SELECT 1 FROM mail_messages m WHERE m.id = message AND conclave_owns(m.sender)));
    CREATE POLICY mail_deliveries_reader ON mail_deliveries FOR UPDATE TO conclave_broker USING (true) WITH CHECK (true);
    GRANT SELECT, INSERT ON mail_deliveries TO conclave_broker;
    GRANT UPDATE (read_at, read_by, acked_at, acked_by) ON mail_deliveries TO conclave_broker;

    ALTER TABLE status_lines ENABLE ROW LEVEL SECURITY;
    CREATE POLICY status_lines_read ON status_lines FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY status_lines_own ON status_lines FOR INSERT TO conclave_broker WITH CHECK (host = conclave_host());
    CREATE POLICY status_lines_update ON status_lines FOR UPDATE TO conclave_broker
        USING (host = conclave_host()) WITH CHECK (host = conclave_host());
    GRANT SELECT, INSERT ON status_lines TO conclave_broker;
    GRANT UPDATE (text, since) ON status_lines TO conclave_broker;
    """,
    """
    ALTER TABLE mail_deliveries ADD COLUMN IF NOT EXISTS archived_at TEXT;
    ALTER TABLE mail_deliveries ADD COLUMN IF NOT EXISTS archived_by TEXT;
    GRANT UPDATE (archived_at, archived_by) ON mail_deliveries TO conclave_broker;
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS, postgresql=POSTGRESQL)
