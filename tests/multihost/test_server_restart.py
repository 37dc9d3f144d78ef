"""The database server restarts under two running brokers (as an operator's upgrade or a crash would).

Every session ends at once: each broker's writer, its readers, its two
listening sessions (mail, locks) and its lock lease.  The brokers must
live through it: connect again, go on writing one verifiable chain, wake
inbox waits from the other host again, and take back the cross-host grants
the server dropped -- nothing granted on a hold that no longer exists.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from agents.harness import Run


def test_brokers_live_through_a_server_restart(two_hosts: Callable[..., tuple[Run, Run]], pg_cluster: Any) -> None:
    a, b = two_hosts([{"name": "alice"}], [{"name": "carol"}, {"name": "dave"}])
    alice, carol, dave = a.puppet("alice"), b.puppet("carol"), b.puppet("dave")  # carol waits for mail throughout
    first = alice.call("memory.remember", kind="discovery", scope="repo", text="The nightly job rebuilds the search index.")
    alice.call("lock.acquire", resources=["name://deploy"])
    assert dave.try_call("lock.acquire", resources=["name://deploy"])["error"]["code"] == "locked"  # the control, before
    got: dict[str, Any] = {}

    def wait() -> None:
        got["inbox"] = carol.call("msg.inbox", wait=30)
        got["at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # carol waits on beta through the restart

    pg_cluster.restart()

    assert a.process is not None and b.process is not None
    time.sleep(1.0)
    assert a.process.poll() is None and b.process.poll() is None  # both brokers live on
    # alpha took back alice's cross-host grant (its hold went with the lease session): dave may have it now.
    a.wait_until(lambda: [e for e in a.op("lock.log", limit=10_000) if e["kind"] == "lock.lost"], timeout=10, what="alpha to take the grant back")
    assert dave.call("lock.acquire", resources=["name://deploy"], wait=10)["grants"][0]["resource"] == "name://deploy"

    # Writes go on, across hosts, on one chain.
    second = alice.call("memory.remember", kind="discovery", scope="repo", text="The search index is rebuilt from the claims table.")
    assert second["id"] > first["id"]
    dave.call("memory.show", id=second["id"])  # dave reads it: an informed witness
    corroborated = dave.call("memory.corroborate", id=second["id"])
    assert corroborated["counted"] is True

    # Mail from alpha still wakes the wait on beta (its listening session came back).
    sent_at = time.monotonic()
    sent = alice.call("msg.send", to="carol", body="the index moved to its own disk")
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert [m["id"] for m in got["inbox"]] == [sent["id"]]
    assert got["at"] - sent_at < 10  # woken by the notification, not by the wait's end

    for run in (a, b):
        report = run.cli("memory", "verify", "--json")
        assert report.returncode == 0, report.stdout + report.stderr
        stats = run.op("broker.stats")
        assert stats["store_reconnects"] >= 1  # the writer connected again
