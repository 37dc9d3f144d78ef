"""`inbox --wait` wake-up latency (send to wake-up), against the `ping` round trip.

A real broker with one puppet agent, ``sink``.  Inside sink's process tree
this script runs as a waiter (``--worker``): it calls ``msg.inbox`` with
``wait`` over and over and, on each return, notes the monotonic clock (one
clock for every process on Linux).  The bench process, as the operator,
waits until the broker reports the waiter parked (``mail.stats``), notes the
clock, and sends one message carrying that time.  Latency = waiter's wake
time - sender's time before ``msg.send``: it covers the send round trip's
first half, the store commit, the notifier's ring, the inbox listing and the
reply.  The baseline is the operator's ``ping`` round trip, measured in the
same run, beside an ``inbox`` call that does not wait and a ``msg.send``
that wakes nobody (the two store jobs a wake-up is made of).

    .venv/bin/python bench/mail_wakeup.py [--count 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def waiter(count: int) -> None:
    """Inside the agent: wait for mail ``count`` times; report each latency."""
    from broker.client import BlockingClient

    latencies: list[float] = []
    with BlockingClient.for_agent() as client:
        while len(latencies) < count:
            messages = client.call("msg.inbox", {"wait": 30, "unread": True})
            woke = time.monotonic()
            latencies += [woke - float(m["body"].split("=", 1)[1]) for m in messages]
    print(json.dumps(latencies))


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": pick(0.5) * 1e3, "p90_ms": pick(0.9) * 1e3, "p99_ms": pick(0.99) * 1e3, "mean_ms": statistics.fmean(ordered) * 1e3}


def round_trips(client: Any, op: str, args: dict[str, Any], count: int) -> list[float]:
    out = []
    for _ in range(count):
        began = time.monotonic()
        client.call(op, args)
        out.append(time.monotonic() - began)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="messages to time")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        waiter(args.count)
        return 0

    from agents.harness import Run

    with tempfile.TemporaryDirectory(prefix="conclave-bench-wake-") as tmp, Run(Path(tmp), [{"name": "sink"}]) as run:
        result: dict[str, Any] = {}

        def drive() -> None:
            done = run.puppet("sink").sh(sys.executable, str(Path(__file__).resolve()), "--worker", "--count", str(args.count), timeout=600)
            result["worker"] = done

        thread = threading.Thread(target=drive)
        thread.start()
        with run.operator() as operator:
            ping = round_trips(operator, "ping", {}, 500)
            inbox = round_trips(operator, "msg.inbox", {}, 500)
            # The operator's notes to itself: a send that wakes nobody.
            send = round_trips(operator, "msg.send", {"to": "operator", "body": "note to self"}, 500)
            for _ in range(args.count):
                deadline = time.monotonic() + 30
                while operator.call("mail.stats")["waiting"] < 1:
                    if time.monotonic() > deadline:
                        raise SystemExit("the waiter never parked")
                    time.sleep(0.002)
                sent_at = time.monotonic()
                operator.call("msg.send", {"to": "sink", "body": f"sent_at={sent_at!r}"})
        thread.join()
    done = result["worker"]
    if done.returncode != 0:
        raise SystemExit(f"waiter failed: {done.stderr.strip()}")
    wake = percentiles(json.loads(done.stdout))
    base = percentiles(ping)
    listing = percentiles(inbox)
    sending = percentiles(send)
    figures = {
        "messages": args.count,
        "wake": {k: round(v, 3) for k, v in wake.items()},
        "ping": {k: round(v, 3) for k, v in base.items()},
        "inbox_no_wait": {k: round(v, 3) for k, v in listing.items()},
        "send_round_trip": {k: round(v, 3) for k, v in sending.items()},
        "wake_p50_vs_ping_p50": round(wake["p50_ms"] / base["p50_ms"], 2),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"inbox --wait wake-up latency over {args.count} messages (send -> waiter returns)")
        for name, f in (("wake-up", wake), ("ping round trip", base), ("inbox, no wait", listing), ("msg.send", sending)):
            print(f"  {name:<16} p50 {f['p50_ms']:6.3f} ms   p90 {f['p90_ms']:6.3f} ms   p99 {f['p99_ms']:6.3f} ms")
        print(f"  wake-up p50 = {figures['wake_p50_vs_ping_p50']} x ping p50")
    return 0


if __name__ == "__main__":
    sys.exit(main())
