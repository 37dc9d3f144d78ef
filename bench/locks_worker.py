"""One benchmark agent's hot loop (run inside an agent's tree by bench/locks_bench.py).

Connects with the agent's own ticket, announces it is ready, waits for the
go file, then runs its loop and prints one JSON line of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.client import BlockingClient  # noqa: E402
from broker.errors import ConclaveError, ErrorCode  # noqa: E402


def wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.002)


def _summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {}
    return {"n": len(xs), "median_us": 1e6 * xs[len(xs) // 2], "p99_us": 1e6 * xs[int(0.99 * (len(xs) - 1))], "mean_us": 1e6 * sum(xs) / len(xs)}


def timed_loop(client: BlockingClient, mode: str, path: str, seconds: float) -> dict:
    """Run ``mode`` for ``seconds``: count iterations, keep every latency.

    ``mixed`` does a ping, an acquire and a release in each iteration, so the
    three see the same machine (the fairest ratio on a busy box).
    """
    pings: list[float] = []
    acquires: list[float] = []
    releases: list[float] = []
    args = {"resources": [path], "wait": 60} if mode == "contended" else {"resources": [path]}
    ops = 0
    started = time.monotonic()
    end = started + seconds
    clock = time.perf_counter
    while time.monotonic() < end:
        if mode in ("ping", "mixed"):
            t0 = clock()
            client.call("ping")
            pings.append(clock() - t0)
        if mode != "ping":
            t0 = clock()
            client.call("lock.acquire", args)
            t1 = clock()
            client.call("lock.release", {"resources": [path]})
            acquires.append(t1 - t0)
            releases.append(clock() - t1)
        ops += 1
    return {"ops": ops, "elapsed": time.monotonic() - started, "ping": _summary(pings), "acquire": _summary(acquires), "release": _summary(releases)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["ping", "mixed", "disjoint", "contended", "chain", "closer"])
    p.add_argument("--path", default="")
    p.add_argument("--next", default="")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--ready", type=Path, required=True)
    p.add_argument("--go", type=Path, required=True)
    p.add_argument("--go2", type=Path)
    a = p.parse_args()
    with BlockingClient.for_agent() as client:
        if a.mode in ("chain", "closer"):
            client.call("lock.acquire", {"resources": [a.path]})
        a.ready.touch()
        wait_for(a.go)
        if a.mode in ("ping", "mixed", "disjoint", "contended"):
            print(json.dumps(timed_loop(client, a.mode, a.path, a.seconds)))
            return 0
        if a.mode == "chain":
            # Wait for the next agent's resource; granted only when the chain unwinds.
            client.call("lock.acquire", {"resources": [a.next], "wait": 300})
            client.call("lock.release", {"resources": [a.path, a.next]})
            print(json.dumps({"ok": True}))
            return 0
        # The closer: each request would close the 32-agent cycle and must be refused.
        assert a.go2 is not None
        wait_for(a.go2)
        refused, pings = [], []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            try:
                client.call("lock.acquire", {"resources": [a.next], "wait": 300})
                raise SystemExit("the closing request was granted: no deadlock detected")
            except ConclaveError as exc:
                if exc.code is not ErrorCode.DEADLOCK:
                    raise
            refused.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            client.call("ping")
            pings.append(time.perf_counter() - t0)
        client.call("lock.release", {"resources": [a.path]})
        print(json.dumps({"refused": refused, "pings": pings, "pid": os.getpid()}))
        return 0


if __name__ == "__main__":
    sys.exit(main())
