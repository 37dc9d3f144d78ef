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
    """,
]
SCHEMA = Schema(COMPONENT, MIGRATIONS)
