"""The same agent remembering the same thing again gets its claim back (issue 23).

A long team runs again and again; an agent that rediscovers what it already
recorded used to store it once more each time (one claim was stored three
times across three runs).  Now the same agent -- any session, any run --
remembering the same text (normalized: Unicode form, case, white space,
trailing punctuation) of the same kind and scope gets its live claim back,
and the repetition is logged.  Controls: another agent's identical text is a
claim of its own (a twin to corroborate, never merged); another kind is
another claim; a retired claim is not brought back.
"""

from __future__ import annotations

from pathlib import Path

from tests.memory.memory_support import POLICY, principal, read_db

from agents.harness import Run
from memory import authoring

TEXT = "The parser in src/b.py keeps its state in a module-level integer named y."


def test_the_same_agent_across_three_runs_holds_one_claim(tmp_path: Path) -> None:
    team = [{"name": "alice"}, {"name": "bob"}]
    ids, sessions = [], []
    for n, spelling in enumerate((TEXT, "  the PARSER in src/b.py keeps its state in a module-level integer named y ", TEXT + "!")):
        with Run(tmp_path, team, reuse=n > 0) as run:
            alice = run.puppet("alice")
            sessions.append(alice.key)
            reply = alice.call("memory.remember", kind="discovery", text=spelling)
            ids.append(reply["id"])
            assert reply.get("repeated", False) is (n > 0)
            if n == 2:
                other = run.puppet("bob").call("memory.remember", kind="discovery", text=TEXT)
                again_as_pattern = alice.call("memory.remember", kind="pattern", text=TEXT)
    assert len(set(sessions)) == 3 and len(set(ids)) == 1, ids  # three sessions, one claim
    # Controls: bob's identical text is bob's own claim (alice's is named as its twin); another kind is another claim.
    assert other["id"] != ids[0] and {"id": ids[0], "tier": "unverified"} in other["twins"]
    assert again_as_pattern["id"] not in (ids[0], other["id"]) and "repeated" not in again_as_pattern
    conn = read_db(tmp_path / "state")
    try:
        texts = [r[0] for r in conn.execute("SELECT text FROM claims WHERE author LIKE 'alice:%' AND kind = 'discovery'")]
        repeats = [(actor, subject) for actor, subject in conn.execute("SELECT actor, subject FROM events WHERE kind = 'memory.repeat' ORDER BY seq")]
    finally:
        conn.close()
    assert texts == [TEXT]
    assert repeats == [(sessions[1], str(ids[0])), (sessions[2], str(ids[0]))]


def remember_as_the_op_does(job, store, who: str, text: str, scope: str = "repo", evidence: str | None = None):  # type: ignore[no-untyped-def]
    """``memory.remember`` as the op runs it: on a server it looks for the agent's own claim first
    (on a reader, in the broker), on SQLite the job does."""
    from store import dialect

    author = principal(who)
    again = job(authoring.own_live_claim, author, kind="discovery", scope=scope, text=text) if dialect.is_postgresql(store) else None
    return job(authoring.remember, POLICY, author, kind="discovery", scope=scope, text=text, evidence=evidence, again=again)


def test_a_repeat_is_judged_on_both_backends_and_a_retired_claim_is_not_brought_back(job, store) -> None:  # type: ignore[no-untyped-def]
    first = remember_as_the_op_does(job, store, "alice", TEXT)
    again = remember_as_the_op_does(job, store, "alice", TEXT.upper(), evidence="seen again")
    assert again["id"] == first["id"] and again["repeated"] and again["text"] == TEXT
    general = remember_as_the_op_does(job, store, "alice", TEXT, scope="general")
    assert general["id"] != first["id"]  # another scope is another claim
    from broker.identity import Principal, Role
    from memory import curation

    operator = Principal(agent="operator", session="uid0", role=Role.OPERATOR, domain="operator")
    job(curation.retire_by_operator, POLICY, operator, first["id"], reason="outdated")
    after = remember_as_the_op_does(job, store, "alice", TEXT)
    assert after["id"] not in (first["id"], general["id"]) and "repeated" not in after
