"""The memory schema: claims and their editions, witnesses, exposures, the indexes.

Readable SQL, numbered migrations, appended and never edited
(``store.database`` applies them and keeps ``PRAGMA user_version``).

The shape, in one breath: a **claim** row is one *edition*; revising a claim
inserts a new row in the same ``lineage`` and points the old one at it with
``superseded_by``.  Text never changes in place.  **Corroborations** and
**disputes** record who vouched or refuted (the connection's principal and
its trust domain); ``counted`` and ``reason_not_counted`` are the trust
policy's latest verdict on each row, rewritten whenever the claim's standing
is recomputed.  **Promotions** are the operator's overrides.  **Exposures**
say which principal was shown which claim, and how, so a corroboration can
be judged blind or informed.  ``tier`` on the claim is the computed standing
(``memory.policy`` decides it; ``memory.standing`` writes it) and is kept in
the same transaction as every row it depends on.

Two FTS5 indexes with external content over views: ``claims_fts`` holds
every *live* claim (not retired, not superseded) and serves ``recall``;
``trusted_fts`` holds only trusted claims and serves the default
``context``, so the push path never reads the postings of claims it would
not inject.  ``verify`` checks both against their views.
"""

from __future__ import annotations

from store.schema import Schema

COMPONENT = "memory"

MIGRATIONS: list[str] = [
    # 1: claims, witnesses, promotions, exposures.
    """
    CREATE TABLE IF NOT EXISTS claims (
        id              INTEGER PRIMARY KEY,
        lineage         INTEGER NOT NULL,          -- id of the first edition
        edition         INTEGER NOT NULL,          -- 1, 2, ... within the lineage
        supersedes      INTEGER REFERENCES claims(id),
        superseded_by   INTEGER REFERENCES claims(id),
        kind            TEXT NOT NULL CHECK (kind IN ('discovery', 'solution', 'pattern', 'workflow', 'failure')),
        scope           TEXT NOT NULL CHECK (scope IN ('repo', 'general')),
        text            TEXT NOT NULL,             -- never updated
        text_key        TEXT NOT NULL,             -- hash of the sorted words: finds twins and exact duplicates
        evidence        TEXT,
        author          TEXT NOT NULL,             -- agent:session, from the connection
        author_domain   TEXT NOT NULL,             -- the author's trust domain
        tier            TEXT NOT NULL CHECK (tier IN ('unverified', 'trusted', 'disputed', 'superseded', 'retired')),
        created_at      TEXT NOT NULL,
        last_used_at    TEXT,                      -- last time it was vouched for (shown: see exposures)
        retired_at      TEXT,
        retired_by      TEXT,
        retired_reason  TEXT
    );
    -- Few indexes on purpose: each one is another page every remember dirties.
    -- Author and kind lookups are the operator's (trail, list, groom) and scan.
    CREATE INDEX IF NOT EXISTS claims_by_lineage ON claims(lineage);
    CREATE INDEX IF NOT EXISTS claims_by_text_key ON claims(text_key);
    CREATE INDEX IF NOT EXISTS claims_by_tier ON claims(tier);

    CREATE TABLE IF NOT EXISTS corroborations (
        id                  INTEGER PRIMARY KEY,
        claim               INTEGER NOT NULL REFERENCES claims(id),
        principal           TEXT NOT NULL,         -- agent:session of the witness, from its connection
        domain              TEXT NOT NULL,         -- the witness's trust domain at write time
        at                  TEXT NOT NULL,
        evidence            TEXT,
        blind               INTEGER NOT NULL CHECK (blind IN (0, 1)),
        counted             INTEGER NOT NULL CHECK (counted IN (0, 1)),
        reason_not_counted  TEXT
    );
    CREATE INDEX IF NOT EXISTS corroborations_by_claim ON corroborations(claim);
    CREATE INDEX IF NOT EXISTS corroborations_by_principal ON corroborations(principal);

    CREATE TABLE IF NOT EXISTS disputes (
        id                  INTEGER PRIMARY KEY,
        claim               INTEGER NOT NULL REFERENCES claims(id),
        principal           TEXT NOT NULL,
        domain              TEXT NOT NULL,
        at                  TEXT NOT NULL,
        reason              TEXT NOT NULL,
        counted             INTEGER NOT NULL CHECK (counted IN (0, 1)),
        reason_not_counted  TEXT
    );
    CREATE INDEX IF NOT EXISTS disputes_by_claim ON disputes(claim);
    CREATE INDEX IF NOT EXISTS disputes_by_principal ON disputes(principal);

    CREATE TABLE IF NOT EXISTS promotions (
        id      INTEGER PRIMARY KEY,
        claim   INTEGER NOT NULL REFERENCES claims(id),
        at      TEXT NOT NULL,
        by      TEXT NOT NULL,                     -- the operator principal
        reason  TEXT
    );
    CREATE INDEX IF NOT EXISTS promotions_by_claim ON promotions(claim);

    CREATE TABLE IF NOT EXISTS exposures (
        id          INTEGER PRIMARY KEY,
        claim       INTEGER NOT NULL,
        lineage     INTEGER NOT NULL,
        principal   TEXT NOT NULL,
        domain      TEXT NOT NULL,
        via         TEXT NOT NULL CHECK (via IN ('recall', 'context', 'show')),
        at          TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS exposures_by_domain_lineage ON exposures(domain, lineage);
    CREATE INDEX IF NOT EXISTS exposures_by_claim ON exposures(claim);

    CREATE TABLE IF NOT EXISTS memory_settings (
        key     TEXT PRIMARY KEY,
        value   TEXT NOT NULL                      -- JSON
    );

    CREATE TABLE IF NOT EXISTS groom_runs (
        id          INTEGER PRIMARY KEY,
        at          TEXT NOT NULL,
        actor       TEXT NOT NULL,
        high_water  INTEGER NOT NULL,              -- largest claim id the run looked at
        summary     TEXT NOT NULL                  -- JSON counts
    );
    """,
    # 2: the search indexes (external content over views of the live and trusted claims).
    """
    CREATE VIEW IF NOT EXISTS claims_live AS
        SELECT id, text FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed');
    CREATE VIEW IF NOT EXISTS claims_trusted AS
        SELECT id, text FROM claims WHERE tier = 'trusted';
    CREATE VIRTUAL TABLE IF NOT EXISTS claims_fts USING fts5(
        text, content='claims_live', content_rowid='id', tokenize='porter unicode61'
    );
    CREATE VIRTUAL TABLE IF NOT EXISTS trusted_fts USING fts5(
        text, content='claims_trusted', content_rowid='id', tokenize='porter unicode61'
    );
    """,
    # 3: exposures are read back per claim by time (groom's decay); claims no longer carry
    # a per-read timestamp, so a recall writes only its exposure rows.
    """
    CREATE INDEX IF NOT EXISTS exposures_by_claim_at ON exposures(claim, at);
    DROP INDEX IF EXISTS exposures_by_claim;
    """,    # 4: meaning.  Vectors per claim edition and model (memory.vectors); what kind of witness
    # a corroboration is (blind, informed, unread -- a vouch by id for text never shown) and
    # how well its evidence matched the claim; links between a claim and the later claim
    # that restated it (an independent rediscovery, or an informed near-duplicate).
    """
    CREATE TABLE IF NOT EXISTS claim_vectors (
        seq     INTEGER PRIMARY KEY,
        claim   INTEGER NOT NULL REFERENCES claims(id),
        model   TEXT NOT NULL,
        vector  BLOB NOT NULL,                     -- float32 scale + int8 components (memory.vectors.encode)
        at      TEXT NOT NULL,
        UNIQUE (claim, model)
    );
    ALTER TABLE corroborations ADD COLUMN witness TEXT CHECK (witness IN ('blind', 'informed', 'unread'));
    ALTER TABLE corroborations ADD COLUMN similarity REAL;  -- the evidence's (or restatement's) cosine to the claim
    ALTER TABLE corroborations ADD COLUMN restatement INTEGER REFERENCES claims(id);  -- a rediscovery: the claim that restated it
    CREATE TABLE IF NOT EXISTS claim_links (
        id          INTEGER PRIMARY KEY,
        claim       INTEGER NOT NULL REFERENCES claims(id),   -- the later claim, retired as a restatement
        restates    INTEGER NOT NULL REFERENCES claims(id),   -- the claim it restates
        kind        TEXT NOT NULL CHECK (kind IN ('rediscovery', 'restatement')),
        similarity  REAL NOT NULL,
        at          TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS claim_links_by_restates ON claim_links(restates);
    CREATE INDEX IF NOT EXISTS claim_links_by_claim ON claim_links(claim);
    """,
    # 5: links between claims that people and agents draw (memory.links): typed, authored, one hop.
    # Each end is kept as the claim named and as its lineage, so a link follows the live edition.
    """
    CREATE TABLE IF NOT EXISTS claim_relations (
        id              INTEGER PRIMARY KEY,
        source          INTEGER NOT NULL REFERENCES claims(id),
        target          INTEGER NOT NULL REFERENCES claims(id),
        source_lineage  INTEGER NOT NULL,
        target_lineage  INTEGER NOT NULL,
        kind            TEXT NOT NULL CHECK (kind IN ('relates-to', 'depends-on', 'supersedes')),
        why             TEXT,
        author          TEXT NOT NULL,             -- agent:session (or the operator), from the connection
        author_domain   TEXT NOT NULL,
        at              TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS claim_relations_by_source ON claim_relations(source_lineage);
    CREATE INDEX IF NOT EXISTS claim_relations_by_target ON claim_relations(target_lineage);
    """,
    # 6: private pools.  A claim kept by an agent for itself names that agent; NULL is shared.
    """
    ALTER TABLE claims ADD COLUMN private_to TEXT;
    CREATE INDEX IF NOT EXISTS claims_private ON claims(private_to) WHERE private_to IS NOT NULL;
    """,
]

#: The same tables on PostgreSQL (``store.postgres``).  Search is a stored
#: ``tsvector`` column with two partial GIN indexes (every live claim; the
#: trusted ones), so a claim's index membership follows its tier with no
#: bookkeeping.  Row-level security: a broker's role reads everything and
#: writes a row only in the name of its own host's principals
#: (``conclave_owns``); columns that are never rewritten (a claim's text,
#: author, kind) get no UPDATE privilege at all, and a trigger refuses an
#: update that would put another host's principal into ``retired_by``.
POSTGRESQL: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS claims (
        id              BIGINT PRIMARY KEY,
        lineage         BIGINT NOT NULL,
        edition         INTEGER NOT NULL,
        supersedes      BIGINT REFERENCES claims(id),
        superseded_by   BIGINT REFERENCES claims(id),
        kind            TEXT NOT NULL CHECK (kind IN ('discovery', 'solution', 'pattern', 'workflow', 'failure')),
        scope           TEXT NOT NULL CHECK (scope IN ('repo', 'general')),
        text            TEXT NOT NULL,
        text_key        TEXT NOT NULL,
        evidence        TEXT,
        author          TEXT NOT NULL,             -- host/agent:session, from the connection
        author_domain   TEXT NOT NULL,
        tier            TEXT NOT NULL CHECK (tier IN ('unverified', 'trusted', 'disputed', 'superseded', 'retired')),
        created_at      TEXT NOT NULL,
        last_used_at    TEXT,
        retired_at      TEXT,
        retired_by      TEXT,
        retired_reason  TEXT,
        search          tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
    );
    CREATE INDEX IF NOT EXISTS claims_by_lineage ON claims(lineage);
    CREATE INDEX IF NOT EXISTS claims_by_text_key ON claims(text_key);
    CREATE INDEX IF NOT EXISTS claims_by_tier ON claims(tier);
    CREATE INDEX IF NOT EXISTS claims_live_search ON claims USING gin (search) WHERE tier IN ('unverified', 'trusted', 'disputed');
    CREATE INDEX IF NOT EXISTS claims_trusted_search ON claims USING gin (search) WHERE tier = 'trusted';

    CREATE TABLE IF NOT EXISTS corroborations (
        id                  BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        claim               BIGINT NOT NULL REFERENCES claims(id),
        principal           TEXT NOT NULL,
        domain              TEXT NOT NULL,
        at                  TEXT NOT NULL,
        evidence            TEXT,
        blind               INTEGER NOT NULL CHECK (blind IN (0, 1)),
        counted             INTEGER NOT NULL CHECK (counted IN (0, 1)),
        reason_not_counted  TEXT
    );
    CREATE INDEX IF NOT EXISTS corroborations_by_claim ON corroborations(claim);
    CREATE INDEX IF NOT EXISTS corroborations_by_principal ON corroborations(principal);

    CREATE TABLE IF NOT EXISTS disputes (
        id                  BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        claim               BIGINT NOT NULL REFERENCES claims(id),
        principal           TEXT NOT NULL,
        domain              TEXT NOT NULL,
        at                  TEXT NOT NULL,
        reason              TEXT NOT NULL,
        counted             INTEGER NOT NULL CHECK (counted IN (0, 1)),
        reason_not_counted  TEXT
    );
    CREATE INDEX IF NOT EXISTS disputes_by_claim ON disputes(claim);
    CREATE INDEX IF NOT EXISTS disputes_by_principal ON disputes(principal);

    CREATE TABLE IF NOT EXISTS promotions (
        id      BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        claim   BIGINT NOT NULL REFERENCES claims(id),
        at      TEXT NOT NULL,
        by      TEXT NOT NULL,
        reason  TEXT
    );
    CREATE INDEX IF NOT EXISTS promotions_by_claim ON promotions(claim);

    CREATE TABLE IF NOT EXISTS exposures (
        id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        claim       BIGINT NOT NULL,
        lineage     BIGINT NOT NULL,
        principal   TEXT NOT NULL,
        domain      TEXT NOT NULL,
        via         TEXT NOT NULL CHECK (via IN ('recall', 'context', 'show')),
        at          TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS exposures_by_domain_lineage ON exposures(domain, lineage);
    CREATE INDEX IF NOT EXISTS exposures_by_claim_at ON exposures(claim, at);

    CREATE TABLE IF NOT EXISTS memory_settings (
        key     TEXT PRIMARY KEY,
        value   TEXT NOT NULL
    );

    CREATE TABLE IF NOT EXISTS groom_runs (
        id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        at          TEXT NOT NULL,
        actor       TEXT NOT NULL,
        high_water  BIGINT NOT NULL,
        summary     TEXT NOT NULL
    );

    -- Who may write what: every broker reads everything; rows carry their principal.
    ALTER TABLE claims ENABLE ROW LEVEL SECURITY;
    CREATE POLICY claims_read ON claims FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY claims_author ON claims FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(author));
    CREATE POLICY claims_standing ON claims FOR UPDATE TO conclave_broker USING (true) WITH CHECK (true);
    CREATE TRIGGER claims_owned_changes BEFORE UPDATE ON claims
        FOR EACH ROW EXECUTE FUNCTION conclave_owned_changes('retired_by');
    GRANT SELECT, INSERT ON claims TO conclave_broker;
    GRANT UPDATE (superseded_by, tier, last_used_at, retired_at, retired_by, retired_reason) ON claims TO conclave_broker;

    ALTER TABLE corroborations ENABLE ROW LEVEL SECURITY;
    CREATE POLICY corroborations_read ON corroborations FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY corroborations_witness ON corroborations FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(principal));
    CREATE POLICY corroborations_verdict ON corroborations FOR UPDATE TO conclave_broker USING (true) WITH CHECK (true);
    GRANT SELECT, INSERT ON corroborations TO conclave_broker;
    GRANT UPDATE (counted, reason_not_counted) ON corroborations TO conclave_broker;

    ALTER TABLE disputes ENABLE ROW LEVEL SECURITY;
    CREATE POLICY disputes_read ON disputes FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY disputes_witness ON disputes FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(principal));
    CREATE POLICY disputes_verdict ON disputes FOR UPDATE TO conclave_broker USING (true) WITH CHECK (true);
    GRANT SELECT, INSERT ON disputes TO conclave_broker;
    GRANT UPDATE (counted, reason_not_counted) ON disputes TO conclave_broker;

    ALTER TABLE promotions ENABLE ROW LEVEL SECURITY;
    CREATE POLICY promotions_read ON promotions FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY promotions_operator ON promotions FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(by));
    GRANT SELECT, INSERT ON promotions TO conclave_broker;

    ALTER TABLE exposures ENABLE ROW LEVEL SECURITY;
    CREATE POLICY exposures_read ON exposures FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY exposures_viewer ON exposures FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(principal));
    GRANT SELECT, INSERT ON exposures TO conclave_broker;

    ALTER TABLE groom_runs ENABLE ROW LEVEL SECURITY;
    CREATE POLICY groom_runs_read ON groom_runs FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY groom_runs_actor ON groom_runs FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(actor));
    GRANT SELECT, INSERT ON groom_runs TO conclave_broker;

    -- One trust policy for the whole team: any broker's operator may change it (logged).
    GRANT SELECT, INSERT, UPDATE ON memory_settings TO conclave_broker;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO conclave_broker;
    """,
    """
    CREATE TABLE IF NOT EXISTS claim_vectors (
        seq     BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        claim   BIGINT NOT NULL REFERENCES claims(id),
        model   TEXT NOT NULL,
        vector  BYTEA NOT NULL,
        at      TEXT NOT NULL,
        UNIQUE (claim, model)
    );
    ALTER TABLE corroborations ADD COLUMN IF NOT EXISTS witness TEXT CHECK (witness IN ('blind', 'informed', 'unread'));
    ALTER TABLE corroborations ADD COLUMN IF NOT EXISTS similarity DOUBLE PRECISION;
    ALTER TABLE corroborations ADD COLUMN IF NOT EXISTS restatement BIGINT REFERENCES claims(id);
    CREATE TABLE IF NOT EXISTS claim_links (
        id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        claim       BIGINT NOT NULL REFERENCES claims(id),
        restates    BIGINT NOT NULL REFERENCES claims(id),
        kind        TEXT NOT NULL CHECK (kind IN ('rediscovery', 'restatement')),
        similarity  DOUBLE PRECISION NOT NULL,
        at          TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS claim_links_by_restates ON claim_links(restates);
    CREATE INDEX IF NOT EXISTS claim_links_by_claim ON claim_links(claim);

    -- A vector (derived, checked against its memory.embed event) and a link are written by
    -- the broker of the claim's author: the one that embeds its own host's claims.
    ALTER TABLE claim_vectors ENABLE ROW LEVEL SECURITY;
    CREATE POLICY claim_vectors_read ON claim_vectors FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY claim_vectors_write ON claim_vectors FOR INSERT TO conclave_broker
        WITH CHECK (EXISTS (SELECT 1 FROM claims c WHERE c.id = claim AND conclave_owns(c.author)));
    GRANT SELECT, INSERT ON claim_vectors TO conclave_broker;
    ALTER TABLE claim_links ENABLE ROW LEVEL SECURITY;
    CREATE POLICY claim_links_read ON claim_links FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY claim_links_write ON claim_links FOR INSERT TO conclave_broker
        WITH CHECK (EXISTS (SELECT 1 FROM claims c WHERE c.id = claim AND conclave_owns(c.author)));
    GRANT SELECT, INSERT ON claim_links TO conclave_broker;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO conclave_broker;
    """,
    """
    CREATE TABLE IF NOT EXISTS claim_relations (
        id              BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        source          BIGINT NOT NULL REFERENCES claims(id),
        target          BIGINT NOT NULL REFERENCES claims(id),
        source_lineage  BIGINT NOT NULL,
        target_lineage  BIGINT NOT NULL,
        kind            TEXT NOT NULL CHECK (kind IN ('relates-to', 'depends-on', 'supersedes')),
        why             TEXT,
        author          TEXT NOT NULL,
        author_domain   TEXT NOT NULL,
        at              TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS claim_relations_by_source ON claim_relations(source_lineage);
    CREATE INDEX IF NOT EXISTS claim_relations_by_target ON claim_relations(target_lineage);
    ALTER TABLE claim_relations ENABLE ROW LEVEL SECURITY;
    CREATE POLICY claim_relations_read ON claim_relations FOR SELECT TO conclave_broker USING (true);
    CREATE POLICY claim_relations_author ON claim_relations FOR INSERT TO conclave_broker WITH CHECK (conclave_owns(author));
    GRANT SELECT, INSERT ON claim_relations TO conclave_broker;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO conclave_broker;
    """,
    """
    ALTER TABLE claims ADD COLUMN IF NOT EXISTS private_to TEXT;
    CREATE INDEX IF NOT EXISTS claims_private ON claims(private_to) WHERE private_to IS NOT NULL;
    GRANT UPDATE (private_to) ON claims TO conclave_broker;
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS, postgresql=POSTGRESQL)
