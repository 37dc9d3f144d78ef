"""A compromised broker cannot write in another host's name: row-level security, as attacks.

Each test logs in with the beta broker's own role -- the power a broker (or
anything that stole its database password) has -- and tries to forge rows
for alpha's principals, straight in SQL, past every check conclave's code
makes.  Each forgery is paired with the same statement in beta's own name,
which must succeed (the control: the refusal is the policy, not a typo).
"""

from __future__ import annotations

from typing import Any, Iterator

import psycopg
import pytest

from broker import composition
from memory import authoring
from memory.policy import TrustPolicy
from broker.identity import Principal, Role
from store import events
from store.chainkey import ChainKey
from store.postgres import PostgresBackend, PgConnection

ALPHA_ALICE = "alpha/alice:0123456789ab"
BETA_CAROL = "beta/carol:ba9876543210"


@pytest.fixture
def hosts(pg_cluster: Any) -> Iterator[dict[str, PgConnection]]:
    """Writer connections for alpha's and beta's brokers, and one claim alice wrote on alpha."""
    database = pg_cluster.database()
    conns = {}
    key = ChainKey.generate()  # one key for the team, as every broker of a shared store holds it
    for host in ("alpha", "beta"):
        backend = PostgresBackend(pg_cluster.broker_url(database, host), migrate=False)
        backend.identify()
        conns[host] = backend.open_writer(composition.schemas())
        events.key_chain(conns[host], key)
    alice = Principal(agent="alice", session="0123456789ab", role=Role.AGENT, domain="alice", host="alpha")
    with conns["alpha"]:
        authoring.remember(conns["alpha"], TrustPolicy(), alice, kind="discovery", scope="repo", text="The cache key includes the compiler version.", evidence=None)
    yield conns
    for conn in conns.values():
        conn.close()


def refused(conn: PgConnection, sql: str, params: Any = None) -> str:
    """Run ``sql`` in its own transaction; return PostgreSQL's refusal (the test fails if it was allowed)."""
    with pytest.raises(psycopg.Error) as caught:
        with conn:
            conn.execute(sql, params)
    return str(caught.value)


def allowed(conn: PgConnection, sql: str, params: Any = None) -> None:
    with conn:
        conn.execute(sql, params)


CORROBORATE = "INSERT INTO corroborations(claim, principal, domain, at, blind, counted) VALUES (1, ?, ?, '2026-01-01', 1, 1)"


def test_beta_cannot_forge_alphas_corroboration(hosts: dict[str, PgConnection]) -> None:
    beta = hosts["beta"]
    assert "row-level security" in refused(beta, CORROBORATE, ("alpha/bob:aaaaaaaaaaaa", "bob"))
    allowed(beta, CORROBORATE, (BETA_CAROL, "carol"))  # control: in its own host's name it may
    rows = hosts["alpha"].execute("SELECT principal FROM corroborations").fetchall()
    assert rows == [(BETA_CAROL,)]


def test_beta_cannot_author_dispute_promote_or_expose_as_alpha(hosts: dict[str, PgConnection]) -> None:
    beta = hosts["beta"]
    for sql, forged, own in (
        (
            "INSERT INTO claims(id, lineage, edition, kind, scope, text, text_key, author, author_domain, tier, created_at) "
            "VALUES (?, ?, 1, 'discovery', 'repo', 'x', 'k', ?, 'alice', 'trusted', 'now')",
            (50, 50, ALPHA_ALICE), (51, 51, BETA_CAROL),
        ),
        ("INSERT INTO disputes(claim, principal, domain, at, reason, counted) VALUES (1, ?, 'x', 'now', 'no', 1)", (ALPHA_ALICE,), (BETA_CAROL,)),
        ("INSERT INTO promotions(claim, at, by) VALUES (1, 'now', ?)", ("alpha/operator:uid0",), ("beta/operator:uid0",)),
        ("INSERT INTO exposures(claim, lineage, principal, domain, via, at) VALUES (1, 1, ?, 'alice', 'recall', 'now')", (ALPHA_ALICE,), (BETA_CAROL,)),
        ("INSERT INTO mail_messages(id, thread, sender, sender_box, addressed, body, at) VALUES (?, 't1', ?, 'alice', 'bob', 'hi', 'now')",
         (1, ALPHA_ALICE), (2, BETA_CAROL)),
    ):
        assert "row-level security" in refused(beta, sql, forged), sql
        allowed(beta, sql, own)


def test_beta_cannot_write_alphas_events_or_rewrite_history(hosts: dict[str, PgConnection]) -> None:
    beta, alpha = hosts["beta"], hosts["alpha"]
    event = "INSERT INTO events(seq, at, kind, actor, payload, prev_hash, hash) VALUES (?, 'now', 'memory.promote', ?, '{}', 'x', 'y')"
    assert "row-level security" in refused(beta, event, (1000, "alpha/broker"))
    allowed(beta, event, (1001, "beta/broker"))
    # No broker role may change or delete history, its own included.
    assert "permission denied" in refused(beta, "UPDATE events SET payload = '{}' WHERE seq = 1001")
    assert "permission denied" in refused(beta, "DELETE FROM events WHERE seq = 1001")
    assert "permission denied" in refused(beta, "TRUNCATE events")
    assert alpha.execute("SELECT count(*) FROM events WHERE seq = 1001").fetchone() == (1,)


def test_beta_cannot_rewrite_a_claim_or_retire_it_in_alphas_name(hosts: dict[str, PgConnection]) -> None:
    beta = hosts["beta"]
    assert "permission denied" in refused(beta, "UPDATE claims SET text = 'forged' WHERE id = 1")
    assert "permission denied" in refused(beta, "UPDATE claims SET author = ? WHERE id = 1", (BETA_CAROL,))
    assert "another host" in refused(beta, "UPDATE claims SET retired_by = 'alpha/operator:uid0', retired_at = 'now' WHERE id = 1")
    allowed(beta, "UPDATE claims SET retired_by = 'beta/operator:uid0', retired_at = 'now' WHERE id = 1")  # control
    assert beta.execute("SELECT text, retired_by FROM claims WHERE id = 1").fetchone() == ("The cache key includes the compiler version.", "beta/operator:uid0")


def test_beta_cannot_issue_or_revoke_alphas_principals(hosts: dict[str, PgConnection]) -> None:
    beta, alpha = hosts["beta"], hosts["alpha"]
    issue = "INSERT INTO principals(host, agent, session, role, domain, command, started_at) VALUES (?, 'mallory', ?, 'agent', 'mallory', '[]', 'now')"
    assert "row-level security" in refused(beta, issue, ("alpha", "s1"))
    allowed(beta, issue, ("beta", "s2"))
    allowed(alpha, "INSERT INTO principals(agent, session, role, domain, command, started_at) VALUES ('alice', 's3', 'agent', 'alice', '[]', 'now')")
    # An UPDATE of alpha's row by beta's role finds no row to change (the policy hides it from UPDATE).
    allowed(beta, "UPDATE principals SET revoked_at = 'now' WHERE key = 'alpha/alice:s3'")
    assert alpha.execute("SELECT revoked_at FROM principals WHERE key = 'alpha/alice:s3'").fetchone() == (None,)
    allowed(beta, "UPDATE principals SET revoked_at = 'now' WHERE key = 'beta/mallory:s2'")
    assert alpha.execute("SELECT revoked_at FROM principals WHERE key = 'beta/mallory:s2'").fetchone() == ("now",)


def test_a_role_registered_for_no_host_is_refused_and_can_write_nothing(pg_cluster: Any) -> None:
    """A role that is not a registered broker is refused at the door, and could not write anyway."""
    database = pg_cluster.database()
    with pg_cluster.admin(database) as admin:
        admin.execute("CREATE ROLE stray LOGIN")
        admin.execute("GRANT conclave_broker TO stray")
    backend = PostgresBackend(pg_cluster.url(database, user="stray"), migrate=False)
    from store.postgres import StoreError

    with pytest.raises(StoreError, match="not registered as a broker"):
        backend.identify()
    conn = PgConnection(psycopg.connect(backend.url, autocommit=True, cursor_factory=psycopg.RawCursor), host=None, writer=True)
    try:
        assert "row-level security" in refused(conn, CORROBORATE, ("stray/x:y", "x"))
    finally:
        conn.close()
