"""One agent of the gauntlet (``bench/gauntlet.py``).

``--mode load``: a mixed agent -- remember, recall, corroborate a peer's
claim, take and release a shared lock (waiting for it), send mail, and wait
on its inbox -- as fast as the broker answers, from the go file until
``--seconds`` have passed.  Each request's round trip is timed.

``--mode herd-lock``: one of 50 agents that, at each round's go file, all ask
for the same lock at once (waiting), and release it as soon as it is theirs.

``--mode herd-inbox``: 50 connections of this one agent wait on its inbox at
once (``inbox --wait``); ``--mode herd-sender`` sends it one message per round.
The waiters record when they woke; the sender when its send was answered.

Every mode writes ``<out>/<agent>.json``: latencies per op (seconds), errors
per op with a few messages, and, for the herd, wall-clock wake times.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402

from broker.client import BlockingClient  # noqa: E402
from broker.errors import ConclaveError  # noqa: E402

#: Shared lock paths in the load: enough that most acquires are free, few enough that some wait.
LOCK_PATHS = 64


class Recorder:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[str, int] = {}
        self.samples: list[str] = []
        self.extra: dict[str, Any] = {}

    def timed(self, op: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        try:
            result = fn()
        except (ConclaveError, OSError) as exc:
            self.errors[op] = self.errors.get(op, 0) + 1
            if len(self.samples) < 10:
                self.samples.append(f"{op}: {type(exc).__name__}: {exc}")
            return None
        self.latency.setdefault(op, []).append(time.perf_counter() - start)
        return result

    def dump(self, path: Path, **more: Any) -> None:
        path.write_text(json.dumps({"latency": self.latency, "errors": self.errors, "samples": self.samples, **self.extra, **more}))


def wait_for(path: Path, interval: float = 0.002) -> None:
    while not path.exists():
        time.sleep(interval)


def load(args: argparse.Namespace, client: BlockingClient, rec: Recorder) -> None:
    rng = random.Random(args.index)
    texts = ClaimText(5000 + args.index)
    peers = [f"load{i}" for i in range(args.agents) if i != args.index]
    mine: list[int] = []
    corroborated: set[int] = set()
    wait_for(args.go)
    deadline = time.monotonic() + args.seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        claim = rec.timed("remember", lambda: client.call("memory.remember", {"kind": texts.kind(), "text": texts.text()}))
        if claim:
            mine.append(claim["id"])
            if len(mine) % 20 == 0:
                (args.out / f"{args.me}.claims").write_text(json.dumps(mine[-200:]))
        rec.timed("recall", lambda: client.call("memory.recall", {"query": texts.query(), "limit": 10}))
        if n % 2 == 0:
            target = _peer_claim(args.out, peers, rng, corroborated)
            if target is not None:
                corroborated.add(target)
                rec.timed("corroborate", lambda: client.call("memory.corroborate", {"id": target}))
        path = f"shared/{rng.randrange(LOCK_PATHS)}.txt"
        if rec.timed("lock.acquire", lambda: client.call("lock.acquire", {"resources": [path], "wait": 30})) is not None:
            rec.timed("lock.release", lambda: client.call("lock.release", {"resources": [path]}))
        rec.timed("msg.send", lambda: client.call("msg.send", {"to": rng.choice(peers), "body": f"gauntlet note {n} from {args.me}"}))
        if n % 2 == 1:
            start = time.perf_counter()
            got = rec.timed("inbox.wait", lambda: client.call("msg.inbox", {"wait": 0.25, "unread": True, "limit": 20}))
            if got == []:  # the wait ran out with nothing new: that is waiting, not latency
                rec.latency["inbox.wait"].pop()
                rec.extra["inbox_wait_empty"] = rec.extra.get("inbox_wait_empty", 0) + 1
                rec.extra.setdefault("inbox_wait_empty_seconds", []).append(time.perf_counter() - start)
            elif got:
                ids = [m["id"] for m in got]
                rec.timed("msg.ack", lambda: client.call("msg.ack", {"ids": ids}))
    rec.extra["iterations"] = n


def _peer_claim(out: Path, peers: list[str], rng: random.Random, done: set[int]) -> int | None:
    peer = rng.choice(peers)
    try:
        ids = json.loads((out / f"{peer}.claims").read_text())
    except (FileNotFoundError, ValueError):
        return None
    fresh = [c for c in ids if c not in done]
    return rng.choice(fresh) if fresh else None


def herd_lock(args: argparse.Namespace, client: BlockingClient, rec: Recorder) -> None:
    for r in range(args.rounds):
        wait_for(args.out / f"go-lock-{r}", 0.001)
        if rec.timed("herd.lock.acquire", lambda: client.call("lock.acquire", {"resources": ["herd/one.txt"], "wait": 120})) is not None:
            rec.timed("herd.lock.release", lambda: client.call("lock.release", {"resources": ["herd/one.txt"]}))
        (args.out / f"{args.me}.lock-{r}").touch()


def herd_inbox(args: argparse.Namespace, client: BlockingClient, rec: Recorder) -> None:
    """``--clients`` connections of this agent wait on its one inbox; each round one message wakes them all."""
    clients = [client] + [BlockingClient.for_agent() for _ in range(args.clients - 1)]
    woke: list[list[float]] = [[] for _ in range(args.rounds)]
    lock = threading.Lock()

    def waiter(i: int, c: BlockingClient) -> None:
        for r in range(args.rounds):
            # The coordinator sends once the broker counts every waiter (mail.stats), so no "ready" file.
            # Not timed: the call's round trip is mostly waiting for the coordinator's go (the wake is what counts).
            try:
                c.call("msg.inbox", {"wait": 60, "unread": True, "limit": 1})
            except (ConclaveError, OSError) as exc:
                with lock:
                    rec.errors["herd.inbox.wait"] = rec.errors.get("herd.inbox.wait", 0) + 1
                    rec.samples.append(f"herd.inbox.wait: {exc}")
            with lock:
                woke[r].append(time.time())
            (args.out / f"inbox-woke-{r}-{i}").touch()
            wait_for(args.out / f"inbox-next-{r}", 0.001)

    threads = [threading.Thread(target=waiter, args=(i, c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.extra["woke"] = woke


def herd_sender(args: argparse.Namespace, client: BlockingClient, rec: Recorder) -> None:
    sent: list[float] = []
    for r in range(args.rounds):
        wait_for(args.out / f"go-inbox-{r}", 0.001)
        rec.timed("herd.inbox.send", lambda: client.call("msg.send", {"to": args.to, "body": f"wake up, round {r}"}))
        sent.append(time.time())
        wait_for(args.out / f"inbox-next-{r}", 0.001)
    rec.extra["sent"] = sent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("load", "herd-lock", "herd-inbox", "herd-sender"), required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--to", default="")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--go", type=Path)
    args = parser.parse_args()
    client = BlockingClient.for_agent()
    args.me = client.identity["agent"]
    rec = Recorder()
    (args.out / f"{args.me}.ready").touch()
    {"load": load, "herd-lock": herd_lock, "herd-inbox": herd_inbox, "herd-sender": herd_sender}[args.mode](args, client, rec)
    rec.dump(args.out / f"{args.me}.json")
    # Stay alive until the broker's figures are read (the coordinator ends the run).
    stop = args.out / "stop"
    deadline = time.time() + 600
    while not stop.exists() and time.time() < deadline:
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
