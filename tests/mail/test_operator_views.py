"""The operator's mail and board: a broadcast nobody hears, a full export, waiters on
the board, and a watch that waits for the broker and leaves with it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from typing import Iterator

import pytest

from agents.harness import Run
from broker.entry import conclave_argv
from tests.mail.mailtools import start_module_run


def test_a_broadcast_reaches_whoever_is_alive_and_with_nobody_else_alive_is_recorded_and_says_nobody_heard_it(start_run):
    run = start_run([{"name": "alice"}, {"name": "bob"}])
    alice = run.puppet("alice")
    # With bob alive, bob receives it.
    sent = json.loads(alice.conclave("msg", "send", "--to", "all", "hello bob", "--json").stdout)
    assert sent["recipients"] == ["bob"]
    assert [m["body"] for m in run.puppet("bob").call("msg.inbox")] == ["hello bob"]
    # bob gone: nobody hears the next one, and the record says so.
    run.puppet("bob").exit(0)
    run.forget("bob")
    run.wait_until(lambda: [a["agent"] for a in run.op("status.board")["agents"]] == ["alice"], what="bob to leave the board")
    out = alice.conclave("msg", "send", "--to", "all", "anyone there?")
    assert out.returncode == 0, out.stderr
    assert "no one received it: no other agent is alive" in out.stdout
    sent = json.loads(alice.conclave("msg", "send", "--to", "all", "still nobody", "--json").stdout)
    assert sent["recipients"] == [] and sent["to"] == "all"
    inbox = run.cli("msg", "search", "anyone")
    assert "all (no one else was alive: nobody received it)" in inbox.stdout


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """alice and bob on one broker, for the tests below (none of them sends mail the other reads)."""
    yield from start_module_run(tmp_path_factory, [{"name": "alice"}, {"name": "bob"}])


def test_msg_export_writes_all_mail_with_every_delivery_and_marks_nothing_read(pair):
    run = pair
    alice, bob = run.puppet("alice"), run.puppet("bob")
    alice.call("msg.send", to="bob", body="one\nwith a second line", subject="first")
    bob.call("msg.send", to="operator", body="two")
    run.op("msg.send", to="all", body="three")
    bob.call("msg.inbox")  # bob reads his copies
    out = run.cli("msg", "export")
    assert out.returncode == 0, out.stderr
    mail = [json.loads(line) for line in out.stdout.splitlines()]
    assert [m["body"] for m in mail] == ["one\nwith a second line", "two", "three"]
    deliveries = {m["body"]: {d["mailbox"]: bool(d["read_at"]) for d in m["deliveries"]} for m in mail}
    assert deliveries == {"one\nwith a second line": {"bob": True}, "two": {"operator": False}, "three": {"alice": False, "bob": True}}
    # Exporting read nothing on the operator's behalf.
    assert run.op("status.board")["operator_unread"] == 1
    markdown = run.cli("msg", "export", "--format", "markdown").stdout
    assert markdown.count("## Message ") == 3 and "one\nwith a second line" in markdown and "operator unread" in markdown
    # Agents may not export everyone's mail.
    refused = alice.conclave("msg", "export")
    assert refused.returncode == 1 and "forbidden" in refused.stderr


def test_the_board_shows_who_waits_for_what(pair):
    run = pair
    alice, bob = run.puppet("alice"), run.puppet("bob")
    alice.call("lock.acquire", resources=["src/app.py"])
    waiting = threading.Thread(target=lambda: bob.try_call("lock.acquire", resources=["src/app.py"], wait=20))
    waiting.start()
    try:
        rows = run.wait_until(lambda: [r for r in run.op("status.board")["agents"] if r["waiting"]], what="a waiter on the board")
        assert [(r["agent"], r["waiting"][0]["resources"], r["waiting"][0]["position"]) for r in rows] == [("bob", ["src/app.py"], 1)]
        human = run.cli("status")
        bob_row = next(line for line in human.stdout.splitlines() if line.startswith("│ bob"))
        assert "src/app.py (exclusive, #1 since" in bob_row
        alice_row = next(line for line in human.stdout.splitlines() if line.startswith("│ alice"))
        assert "src/app.py (exclusive)" in alice_row and "#1" not in alice_row
    finally:
        alice.call("lock.release", resources=["src/app.py"])
        waiting.join(timeout=20)
    # Once granted, bob no longer waits.
    assert not any(r["waiting"] for r in run.op("status.board")["agents"])


def test_status_watch_waits_for_the_broker_and_leaves_when_it_stops(tmp_path):
    run = Run(tmp_path, [{"name": "alice"}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    watch = subprocess.Popen(
        conclave_argv("status", "--watch", "--interval", "0.2", "--json", "--state-dir", str(run.state), "--repo", str(run.repo)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        time.sleep(0.6)
        assert watch.poll() is None, f"status --watch gave up before the run started: {watch.stderr.read() if watch.stderr else ''}"
        run.start()
        run.puppet("alice").call("status.set", text="watched")
        time.sleep(0.6)
        run.stop()
        out, err = watch.communicate(timeout=30)
    finally:
        run.close()
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    boards = [json.loads(line) for line in out.splitlines()]
    assert any(r["status"] == "watched" for b in boards for r in b["agents"]), out
