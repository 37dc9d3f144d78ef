"""The status board shows what is really there: live agents, their status
lines, the locks they hold and their unread mail -- and the event log has a
record of every send, acknowledgement and status change (without bodies)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Iterator

import pytest

from agents.harness import Run
from tests.mail.mailtools import board_row, query, start_module_run, word


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield from start_module_run(tmp_path_factory, [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}])


def unread_in_database(run: Run) -> dict[str, int]:
    return dict(query(run, "SELECT mailbox, COUNT(*) FROM mail_deliveries WHERE read_at IS NULL GROUP BY mailbox"))


def test_status_board_matches_reality(run: Run) -> None:
    alice, bob = run.puppet("alice"), run.puppet("bob")
    bob.call("msg.inbox")
    alice.call("status.set", text="taking the storage module")
    for _ in range(2):
        run.op("msg.send", to="bob", body=f"from the operator {word()}")
    alice.call("msg.send", to="bob", body=f"from alice {word()}")
    bob.call("msg.send", to="operator", body=f"a question {word()}")

    board = run.op("status.board")
    live = {a["agent"]: a["session"] for a in run.op("agents", live_only=True)}
    assert {r["agent"]: r["session"] for r in board["agents"]} == live
    assert {r["agent"]: r["principal"] for r in board["agents"]} == {n: run.puppet(n).key for n in ("alice", "bob", "carol")}
    reality = unread_in_database(run)
    assert {r["agent"]: r["unread"] for r in board["agents"]} == {n: reality.get(n, 0) for n in live}
    assert board["operator_unread"] == reality["operator"]
    row = board_row(run, "bob")
    assert row["unread"] == 3 == len(bob.call("msg.inbox", unread=True))
    assert board_row(run, "bob")["unread"] == 0, "reading the inbox must clear the unread count"
    alice_row = board_row(run, "alice")
    assert alice_row["status"] == "taking the storage module" and alice_row["since"] is not None
    assert board_row(run, "carol")["status"] is None

    # The CLI shows the same board, to the operator and to agents alike.
    cli = json.loads(run.cli("status", "--json").stdout)
    assert [(r["agent"], r["status"], r["unread"]) for r in cli["agents"]] == [
        (r["agent"], r["status"], r["unread"]) for r in run.op("status.board")["agents"]
    ]
    human = run.cli("status")
    assert human.returncode == 0 and "taking the storage module" in human.stdout and "operator inbox:" in human.stdout
    from_agent = run.puppet("carol").conclave("status", "--json")
    assert from_agent.returncode == 0 and len(json.loads(from_agent.stdout)["agents"]) == 3

    # A new status replaces the old one, with a new `since`.
    set_again = alice.conclave("status", "set", "reviewing bob's patch", "--json")
    assert json.loads(set_again.stdout)["status"] == "reviewing bob's patch"
    assert board_row(run, "alice")["since"] > alice_row["since"]


def test_status_board_shows_the_locks_each_agent_holds(run: Run) -> None:
    """alice takes a lock on README.md: the board shows it on alice's row
    and on no one else's; after she releases it, on no row."""
    alice = run.puppet("alice")
    taken = alice.conclave("lock", "acquire", "README.md", "--json")
    assert taken.returncode == 0, taken.stderr
    held = {r["agent"]: [h["resource"] for h in r["locks"]] for r in run.op("status.board")["agents"]}
    assert any("README.md" in resource for resource in held["alice"]), held
    assert held["bob"] == [] and held["carol"] == []
    board = run.op("status.board")
    assert board["locks_tracked"] is True
    released = alice.conclave("lock", "release", "README.md", "--json")
    assert released.returncode == 0, released.stderr
    assert all(r["locks"] == [] for r in run.op("status.board")["agents"])


def test_status_watch_refreshes(run: Run) -> None:
    """`conclave status --watch --json` prints one board per refresh; a status
    change shows up in a later one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "status", "--watch", "--interval", "0.3", "--json",
         "--repo", str(run.repo), "--state-dir", str(run.state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert watcher.stdout is not None
        first = json.loads(watcher.stdout.readline())
        text = f"watch me {word()}"
        run.puppet("bob").call("status.set", text=text)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            board = json.loads(watcher.stdout.readline())
            if any(r["status"] == text for r in board["agents"]):
                break
        else:
            pytest.fail("the watched board never showed bob's new status")
        assert board["at"] > first["at"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_events_record_send_ack_and_status_without_bodies(run: Run) -> None:
    """Every send, read, acknowledgement and status change has an event by
    the acting principal; mail bodies and subjects stay out of the log (only
    their SHA-256, so verify can hold the rows to them)."""
    alice, bob = run.puppet("alice"), run.puppet("bob")
    secret = word()
    sent = alice.call("msg.send", to="bob", body=f"private {secret}", subject=f"subject {secret}")
    bob.call("msg.inbox")
    bob.call("msg.ack", ids=[sent["id"]])
    bob.call("status.set", text="acked alice")
    rows = query(run, "SELECT kind, actor, subject, payload FROM events WHERE kind IN ('msg.send', 'msg.read', 'msg.ack', 'status.set') ORDER BY seq")
    assert all(secret not in payload and secret not in (subject or "") for _, _, subject, payload in rows)
    send = [json.loads(p) for k, a, s, p in rows if k == "msg.send" and s == f"msg:{sent['id']}"]
    assert send == [{
        "id": sent["id"], "thread": sent["thread"], "to": "bob", "recipients": ["bob"], "bytes": len(sent["body"]), "sender_box": "alice",
        "subject_sha256": hashlib.sha256(f"subject {secret}".encode()).hexdigest(), "body_sha256": hashlib.sha256(sent["body"].encode()).hexdigest(),
    }]
    assert any(k == "msg.send" and a == alice.key for k, a, _, _ in rows)
    assert any(k == "msg.read" and a == bob.key and sent["id"] in json.loads(p)["ids"] for k, a, _, p in rows)
    assert any(k == "msg.ack" and a == bob.key and json.loads(p) == {"ids": [sent["id"]]} for k, a, _, p in rows)
    assert any(k == "status.set" and a == bob.key and json.loads(p) == {"text": "acked alice"} for k, a, _, p in rows)


def test_an_exited_agent_leaves_the_board(run: Run) -> None:
    """The board lists live agents only: when carol's process exits her row goes."""
    carol_key = run.puppet("carol").key
    assert board_row(run, "carol")["principal"] == carol_key
    run.puppet("carol").exit(0)
    run.forget("carol")
    run.wait_until(lambda: "carol" not in [r["agent"] for r in run.op("status.board")["agents"]], what="carol to leave the board")
    assert sorted(r["agent"] for r in run.op("status.board")["agents"]) == ["alice", "bob"]
