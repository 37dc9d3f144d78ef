"""Messages per second from 8 agents to one, against the no-op `ping` baseline.

A real broker (``conclave run``) with nine puppet agents: ``sink`` and
``s1``..``s8``.  Each sender runs this script as a child process (``--worker``,
inside its agent's process tree, so it connects with the agent's own ticket)
and, at a common start instant, makes COUNT calls as fast as one connection
allows.  First every sender pings (the baseline: a round trip that touches
nothing), then every sender mails ``sink``.  Rate = all calls / (last finish
- common start).

    .venv/bin/python bench/mail_throughput.py [--count 500] [--json]

Not a test: it prints figures (and checks that every message arrived).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SENDERS = 8


def worker(op: str, count: int, start_at: float) -> None:
    """Inside an agent: wait for the common start, make ``count`` calls, report."""
    from broker.client import BlockingClient

    with BlockingClient.for_agent() as client:
        me = client.identity["agent"]
        args: dict[str, Any] = {}
        time.sleep(max(0.0, start_at - time.monotonic()))
        begin = time.monotonic()
        for i in range(count):
            if op == "msg.send":
                args = {"to": "sink", "body": f"report {i} from {me}: the storage module tests pass"}
            client.call(op, args)
        end = time.monotonic()
    print(json.dumps({"agent": me, "begin": begin, "end": end, "count": count}))


def phase(run: Any, op: str, count: int) -> dict[str, float]:
    """Every sender makes ``count`` calls of ``op`` from a common start; the aggregate rate."""
    start_at = time.monotonic() + 2.0  # time for every worker to start its interpreter and connect
    reports: list[dict[str, Any]] = []
    errors: list[str] = []

    def drive(name: str) -> None:
        done = run.puppet(name).sh(
            sys.executable, str(Path(__file__).resolve()), "--worker", op, "--count", str(count), "--start-at", repr(start_at), timeout=600
        )
        if done.returncode != 0:
            errors.append(f"{name}: {done.stderr.strip()}")
        else:
            reports.append(json.loads(done.stdout))

    threads = [threading.Thread(target=drive, args=(f"s{i}",)) for i in range(1, SENDERS + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("worker failed: " + "; ".join(errors))
    late = max(r["begin"] for r in reports) - start_at
    elapsed = max(r["end"] for r in reports) - start_at
    total = sum(r["count"] for r in reports)
    return {"calls": total, "seconds": elapsed, "per_second": total / elapsed, "latest_start": late}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500, help="calls per sender per phase")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", choices=["ping", "msg.send"], help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.count, args.start_at)
        return 0

    from agents.harness import Run

    agents = [{"name": "sink"}] + [{"name": f"s{i}"} for i in range(1, SENDERS + 1)]
    # The send path itself is measured, so the per-domain budget (broker/mail/budget.py) is set out of reach.
    unlimited = "\n[mail]\ndeliveries_per_minute = 1000000000\nbytes_per_minute = 1000000000000\n"
    with tempfile.TemporaryDirectory(prefix="conclave-bench-mail-") as tmp, Run(Path(tmp), agents, extra_toml=unlimited) as run:
        ping = phase(run, "ping", args.count)
        mail = phase(run, "msg.send", args.count)
        ping_after = phase(run, "ping", args.count)
        stats = run.op("broker.stats")
        unread = next(r["unread"] for r in run.op("status.board")["agents"] if r["agent"] == "sink")
    if unread != mail["calls"]:
        raise SystemExit(f"sink has {unread} unread messages; {mail['calls']} were sent")
    result = {
        "senders": SENDERS,
        "count_per_sender": args.count,
        "ping_per_second": round(ping["per_second"]),
        "ping_after_per_second": round(ping_after["per_second"]),
        "messages_per_second": round(mail["per_second"]),
        "messages_vs_ping": round(mail["per_second"] / ping["per_second"], 3),
        "messages_delivered": unread,
        "store_jobs": stats["store_jobs"],
        "store_batches": stats["store_batches"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{SENDERS} agents x {args.count} calls each, one connection per agent")
        print(f"  ping (baseline)   {result['ping_per_second']:>8} calls/s   (again after: {result['ping_after_per_second']})")
        print(f"  msg.send -> sink  {result['messages_per_second']:>8} msgs/s    = {result['messages_vs_ping']:.2f} x ping")
        print(f"  delivered {unread} messages; store: {stats['store_jobs']} jobs in {stats['store_batches']} batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
