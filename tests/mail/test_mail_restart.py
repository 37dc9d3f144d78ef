"""Mail outlives processes: a restarted broker finds it in the state database,
and a restarted agent finds its predecessor's inbox."""

from __future__ import annotations

import json
from pathlib import Path

from agents.harness import Run
from tests.mail.mailtools import board_row, query, word


def test_mail_survives_a_broker_restart(tmp_path: Path) -> None:
    """Mail, its read/acknowledged state, threads and the search index are in
    the state database: stop the broker, start a new one on the same state
    directory, and everything is where it was."""
    team = [{"name": "alice"}, {"name": "bob"}]
    secret = word()
    with Run(tmp_path, team) as first:
        alice, bob = first.puppet("alice"), first.puppet("bob")
        acked = alice.call("msg.send", to="bob", body=f"first {secret}", subject="plan")
        kept = alice.call("msg.send", to="bob", body=f"second {secret}", thread=acked["thread"])
        bob.call("msg.inbox")
        bob.call("msg.ack", ids=[acked["id"]])
        unread = alice.call("msg.send", to="bob", body=f"third {secret}")
        to_operator = alice.call("msg.send", to="operator", body=f"for you {secret}")
        old_bob = bob.key
    assert first.process is None, "the first broker is still running"
    # With no broker the operator's commands open the store themselves: the
    # operator inbox is readable, mail to a known agent is stored, and a wait
    # is refused (nothing can arrive while no broker runs).
    offline = first.cli("msg", "inbox", "--json")
    assert offline.returncode == 0, offline.stderr
    assert [m["id"] for m in json.loads(offline.stdout)] == [to_operator["id"]]
    note = json.loads(first.cli("msg", "send", "--to", "bob", f"while the broker was down {secret}", "--json").stdout)
    waited = first.cli("msg", "inbox", "--wait", "1")
    assert waited.returncode == 3 and "no broker" in waited.stderr

    with Run(tmp_path, team, reuse=True) as second:
        bob = second.puppet("bob")
        assert bob.key != old_bob, "a new broker issues new sessions"
        assert board_row(second, "bob")["unread"] == 2
        inbox = bob.call("msg.inbox")
        assert [(m["id"], m["read"]) for m in inbox] == [(kept["id"], True), (unread["id"], False), (note["id"], False)]
        assert inbox[2]["sender_agent"] == "operator"
        everything = bob.call("msg.inbox", include_acked=True)
        assert [(m["id"], m["acked"]) for m in everything][0] == (acked["id"], True)
        # Signed by the session that sent them, which the new broker no longer runs.
        from_alice = {m["sender"] for m in everything if m["sender_agent"] == "alice"}
        assert from_alice == {acked["sender"]} != {second.puppet("alice").key}
        reply = bob.call("msg.send", to="alice", body=f"reply {secret}", thread=acked["thread"])
        assert reply["thread"] == acked["thread"]
        assert [m["id"] for m in second.puppet("alice").call("msg.thread", thread=acked["thread"])] == [acked["id"], kept["id"], reply["id"]]
        operator_inbox = json.loads(second.cli("msg", "inbox", "--json").stdout)
        assert [(m["id"], m["read"]) for m in operator_inbox] == [(to_operator["id"], True)]
        found = bob.call("msg.search", query=f"third {secret}")
        assert [m["id"] for m in found] == [unread["id"]]
    # The chain of events still verifies across both runs.
    from store import events
    from store.chainkey import ChainKey
    from store.database import connect

    conn = connect(second.state / "conclave.db", readonly=True)
    try:
        assert events.verify_chain(conn, ChainKey.load(second.state / "chain-key")).ok
    finally:
        conn.close()
    kinds = [k for (k,) in query(second, "SELECT kind FROM events WHERE kind LIKE 'msg.%' ORDER BY seq")]
    assert kinds.count("msg.send") == 6 and "msg.ack" in kinds and "msg.read" in kinds


def test_restarted_agent_shares_its_inbox(start_run) -> None:  # type: ignore[no-untyped-def]
    """carol crashes and is restarted with a new session: mail sent to carol
    before, and while she was down, waits for the new carol.  Her status line
    belonged to the old session and is gone."""
    run = start_run([{"name": "alice"}, {"name": "carol", "restart": "on-failure"}])
    alice, carol = run.puppet("alice"), run.puppet("carol")
    secret = word()
    before = alice.call("msg.send", to="carol", body=f"before the crash {secret}")
    carol.call("status.set", text="refactoring storage")
    old = carol.key
    carol.exit(1)
    during = alice.call("msg.send", to="carol", body=f"while you were down {secret}")
    carol = run.puppet("carol", fresh=True)
    run.wait_until(lambda: carol.key != old, what="a new carol")
    got = [m["id"] for m in carol.call("msg.inbox") if secret in m["body"]]
    assert got == [before["id"], during["id"]]
    assert carol.call("msg.ack", ids=got) == {"acked": got, "already_acked": []}
    row = board_row(run, "carol")
    assert row["principal"] == carol.key and row["status"] is None and row["unread"] == 0


def test_mail_from_an_earlier_run_is_marked_with_its_run_and_age_and_the_operator_archives_it(tmp_path: Path) -> None:
    """Issue 23: mail persists between runs, so an agent could act on a stale request as if it were
    new.  Mail sent in an earlier run reaches its recipient marked with that run and its age, in
    the JSON and in the rendered text an agent reads; mail of this run is not marked (the control).
    `conclave msg archive` takes the old mail out of every inbox and unread count, without deleting
    it (a thread still shows it) and with an event naming each delivery."""
    from broker.mail.render import render_message

    team = [{"name": "alice"}, {"name": "bob"}]
    with Run(tmp_path, team) as first:
        stale = first.puppet("alice").call("msg.send", to="bob", body="please rebuild the index")
        stale_to_op = first.puppet("alice").call("msg.send", to="operator", body="the index is rebuilt")
    with Run(tmp_path, team, reuse=True) as second:
        bob = second.puppet("bob")
        fresh = second.puppet("alice").call("msg.send", to="bob", body="the index is fine now, do not rebuild it")
        inbox = {m["id"]: m for m in bob.call("msg.inbox")}
        old, new = inbox[stale["id"]], inbox[fresh["id"]]
        assert (old["run"], old["earlier_run"]) == (1, True)
        assert (new["run"], new["earlier_run"]) == (2, False)
        shown = render_message(old)
        assert "sent in an earlier run (run 1, " in shown and " ago): it may no longer hold; check before acting on it" in shown
        assert "earlier run" not in render_message(new)
        # The operator archives what came before this run (the default while a broker runs).
        dry = json.loads(second.cli("msg", "archive", "--dry-run", "--json").stdout)
        assert dry["dry_run"] and dry["archived"] == 2 and set(dry["messages"]) == {stale["id"], stale_to_op["id"]}
        assert len(bob.call("msg.inbox", include_acked=True)) == 2  # a dry run changes nothing
        done = second.cli("msg", "archive")
        assert done.returncode == 0 and "archived 2 delivery(ies) of 2 message(s)" in done.stdout, done.stderr
        assert [m["id"] for m in bob.call("msg.inbox", include_acked=True)] == [fresh["id"]]
        assert json.loads(second.cli("msg", "inbox", "--json").stdout) == []
        assert board_row(second, "bob")["unread"] == 0
        # Nothing was deleted: the thread still has it, its delivery marked archived.
        (kept,) = bob.call("msg.thread", thread=stale["thread"])
        assert kept["id"] == stale["id"] and kept["deliveries"][0]["archived_at"] is not None
        again = json.loads(second.cli("msg", "archive", "--json").stdout)
        assert again["archived"] == 0  # archiving twice changes nothing
        log = second.op("memory.log", kind="msg.archive", limit=10)
        assert [e["detail"]["deliveries"] for e in log] == [[["bob", stale["id"]], ["operator", stale_to_op["id"]]]]
    # With no broker running the default is all mail: the next run starts with empty inboxes.
    assert json.loads(first.cli("msg", "archive", "--json").stdout)["messages"] == [fresh["id"]]
    bad = first.cli("msg", "archive", "--before-run", "9")
    assert bad.returncode != 0 and "no run 9 on this state directory (runs: 1 to 2)" in bad.stderr
