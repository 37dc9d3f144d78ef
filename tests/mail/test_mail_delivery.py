"""Delivery: `inbox --wait` is woken by the broker when mail lands (and only
then), and a message to `all` reaches every live agent but the sender."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import pytest

from agents.harness import Run
from tests.mail.mailtools import start_module_run, word


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield from start_module_run(tmp_path_factory, [{"name": n} for n in ("alice", "bob", "carol", "dave")])


def waiters(run: Run) -> int:
    return run.op("mail.stats")["waiting"]


def in_background(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Start ``fn`` on a thread; return its future and the monotonic start time."""
    pool = ThreadPoolExecutor(max_workers=1)
    started = time.monotonic()
    future = pool.submit(lambda: (fn(), time.monotonic()))
    pool.shutdown(wait=False)
    return future, started


def test_inbox_wait_returns_when_mail_arrives_and_not_before(run: Run) -> None:
    """bob waits on an empty inbox; alice mails him about a second later.  The
    wait must not return before the mail exists, and must return within a
    few seconds of it -- through bob's real broker connection."""
    alice, bob = run.puppet("alice"), run.puppet("bob")
    bob.call("msg.inbox")  # nothing unread before we start
    secret = word()
    future, started = in_background(lambda: bob.call("msg.inbox", wait=20, unread=True))
    run.wait_until(lambda: waiters(run) == 1, what="bob to be waiting")
    time.sleep(max(0.0, started + 1.0 - time.monotonic()))
    assert not future.done(), "the wait returned although no mail had arrived"
    sent_at = time.monotonic()
    alice.call("msg.send", to="bob", body=f"wake up {secret}")
    messages, returned = future.result(timeout=30)
    assert returned - started >= 0.5, "returned before the mail was sent"
    assert returned >= sent_at
    assert returned - sent_at < 5, f"woke {returned - sent_at:.2f}s after the mail was sent"
    assert [m["body"] for m in messages] == [f"wake up {secret}"]
    assert waiters(run) == 0


def test_inbox_wait_without_mail_returns_empty_when_the_wait_ends(run: Run) -> None:
    """Positive control for the above: nobody writes, so the wait runs its
    full length and returns an empty inbox."""
    carol = run.puppet("carol")
    carol.call("msg.inbox")
    started = time.monotonic()
    assert carol.call("msg.inbox", wait=1.0, unread=True) == []
    assert 0.9 <= time.monotonic() - started < 10


def test_inbox_wait_returns_at_once_when_unread_mail_is_waiting(run: Run) -> None:
    alice, carol = run.puppet("alice"), run.puppet("carol")
    secret = word()
    alice.call("msg.send", to="carol", body=f"already here {secret}")
    started = time.monotonic()
    got = carol.call("msg.inbox", wait=20, unread=True)
    assert time.monotonic() - started < 5
    assert any(secret in m["body"] for m in got)


def test_inbox_wait_does_not_poll_the_store(run: Run) -> None:
    """While dave waits on an empty inbox mail runs no store jobs: the wait is
    an event, not a loop of queries.  (Positive control: the one look before
    waiting and the listing after it are counted.)"""
    dave = run.puppet("dave")
    dave.call("msg.inbox")
    at_start = run.op("mail.stats")["store_jobs"]
    future, _ = in_background(lambda: dave.call("msg.inbox", wait=4.0, unread=True))
    run.wait_until(lambda: waiters(run) == 1, what="dave to be waiting")
    time.sleep(0.5)  # the one look before waiting has finished by now
    jobs_before = run.op("mail.stats")["store_jobs"]
    time.sleep(2.0)
    jobs_after = run.op("mail.stats")["store_jobs"]
    assert jobs_after == jobs_before == at_start + 1, f"{jobs_after - jobs_before} store jobs ran while dave only waited"
    assert future.result(timeout=30)[0] == []
    assert run.op("mail.stats")["store_jobs"] == at_start + 2


def test_cli_inbox_wait_is_woken_by_mail(run: Run) -> None:
    """The same through the CLI an agent would run: `conclave msg inbox --wait`."""
    alice, carol = run.puppet("alice"), run.puppet("carol")
    carol.call("msg.inbox")
    secret = word()
    future, started = in_background(lambda: carol.conclave("msg", "inbox", "--unread", "--wait", "30", "--json"))
    run.wait_until(lambda: waiters(run) == 1, timeout=20, what="carol's CLI to be waiting")
    sent_at = time.monotonic()
    alice.call("msg.send", to="carol", body=f"cli wake {secret}")
    result, returned = future.result(timeout=40)
    assert result.returncode == 0, result.stderr
    assert [m["body"] for m in json.loads(result.stdout)] == [f"cli wake {secret}"]
    assert returned - sent_at < 5


def test_broadcast_reaches_every_live_agent_but_the_sender(run: Run) -> None:
    """alice writes to `all`: bob, carol and dave get it, alice does not.
    Then dave exits: the next broadcast goes to the live agents only."""
    alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
    secret = word()
    sent = alice.call("msg.send", to="all", body=f"build broken, hold commits {secret}")
    live = sorted(a["agent"] for a in run.op("agents", live_only=True))
    assert sent["to"] == "all"
    assert sent["recipients"] == [n for n in live if n != "alice"] == ["bob", "carol", "dave"]
    for name in ("bob", "carol", "dave"):
        got = [m for m in run.puppet(name).call("msg.inbox") if secret in m["body"]]
        assert [(m["id"], m["sender"]) for m in got] == [(sent["id"], alice.key)], name
    assert not [m for m in alice.call("msg.inbox", include_acked=True) if secret in m["body"]]

    run.puppet("dave").exit(0)
    run.forget("dave")
    run.wait_until(lambda: "dave" not in [a["agent"] for a in run.op("agents", live_only=True)], what="dave to end")
    again = bob.call("msg.send", to="all", body=f"all clear {secret}")
    assert again["recipients"] == ["alice", "carol"]
    assert any(m["id"] == again["id"] for m in carol.call("msg.inbox"))
    # The operator is no agent: its broadcast reaches every live agent.
    from_operator = run.op("msg.send", to="all", body=f"stand down {secret}")
    assert from_operator["recipients"] == ["alice", "bob", "carol"] and from_operator["sender_agent"] == "operator"


HANG_UP_MID_WAIT = """
import json, os, socket, time
from broker.client import agent_credentials
path, ticket = agent_credentials()
s = socket.socket(socket.AF_UNIX)
s.connect(str(path))
s.sendall(json.dumps({"id": 1, "op": "hello", "args": {"ticket": ticket}}).encode() + b"\\n")
s.recv(65536)
s.sendall(b'{"id": 2, "op": "msg.inbox", "args": {"wait": 30, "unread": true}}\\n')
time.sleep(0.5)
os._exit(0)  # gone mid-wait, without reading the answer
"""


def test_a_waiter_that_hangs_up_loses_no_mail(run: Run) -> None:
    """carol's process asks to wait for mail, then dies.  The broker notices at
    once (no waiter left), and mail sent afterwards stays unread for carol's
    next look -- it is never marked read for a client that is gone.  (The
    positive control, a waiter that stays, is the first test above.)"""
    import sys

    alice, carol = run.puppet("alice"), run.puppet("carol")
    carol.call("msg.inbox")  # nothing unread before we start
    gone = carol.sh(sys.executable, "-c", HANG_UP_MID_WAIT, timeout=60)
    assert gone.returncode == 0, gone.stderr
    run.wait_until(lambda: waiters(run) == 0, what="the broker to notice the hang-up", timeout=5)
    secret = word()
    alice.call("msg.send", to="carol", body=f"after the hang-up {secret}")
    unread = carol.call("msg.inbox", unread=True)
    assert [m["body"] for m in unread] == [f"after the hang-up {secret}"]
