"""One agent of the crash run (``bench/crash.py``, ``tests/store/test_crash_consistency.py``).

The broker spawns it, so it holds a real, broker-issued identity.  It says it
is ready, waits for the go file, then remembers, corroborates its peers'
claims, takes and releases a lock and sends mail, as fast as the broker
answers, until the broker goes away (it is SIGKILLed mid-run) or the time is
up.  Every request that got an ``ok`` reply is written to its ack file as one
JSON line *after* the reply arrived, so the file lists exactly what the
broker acknowledged; the checker holds the restarted store against it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402

from broker.client import BlockingClient  # noqa: E402
from broker.errors import ConclaveError, ErrorCode  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=60.0, help="stop by itself after this long (the broker is normally killed first)")
    args = parser.parse_args()
    rng = random.Random(args.index)
    texts = ClaimText(1000 + args.index).claims(1_000_000)
    client = BlockingClient.for_agent()
    # The principal key its rows carry (HOST/agent:session on a store several brokers share).
    me = client.identity.get("key") or f"{client.identity['agent']}:{client.identity['session']}"
    peers = [f"crash{i}" for i in range(args.agents) if i != args.index]
    acks = os.open(args.out / f"crash{args.index}.acks", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    # Held until this process ends: the checker takes it to know the worker is gone (a box tied to the broker
    # may end it with the broker, before it writes its summary).
    fcntl.flock(acks, fcntl.LOCK_EX)

    def ack(record: dict[str, object]) -> None:
        os.write(acks, (json.dumps({**record, "t": time.time()}) + "\n").encode())

    (args.out / f"crash{args.index}.ready").write_text(me)
    while not args.go.exists():
        time.sleep(0.005)
    corroborated: set[int] = set()
    peer_claims: list[int] = []
    refused = 0
    n = 0
    ended = "time"
    deadline = time.monotonic() + args.seconds
    try:
        while time.monotonic() < deadline:
            n += 1
            try:
                kind, text = next(texts)
                claim = client.call("memory.remember", {"kind": kind, "text": text})
                ack({"op": "remember", "id": claim["id"], "sha": hashlib.sha256(text.encode()).hexdigest()})
                if n % 16 == 1:
                    peer_claims = _peer_claims(args.out, peers)
                fresh = [c for c in peer_claims[-50:] if c not in corroborated]
                if fresh:
                    target = rng.choice(fresh)
                    corroborated.add(target)
                    client.call("memory.corroborate", {"id": target})
                    ack({"op": "corroborate", "id": target, "by": me})
                path = f"crash/{args.index}/{n % 4}.txt"
                grant = client.call("lock.acquire", {"resources": [path]})
                ack({"op": "lock", "resource": path, "token": grant["grants"][0]["token"]})
                client.call("lock.release", {"resources": [path]})
                ack({"op": "release", "resource": path})
                sent = client.call("msg.send", {"to": rng.choice(peers), "body": f"crash note {args.index}/{n}"})
                ack({"op": "mail", "id": sent["id"]})
            except ConclaveError as exc:
                if exc.code is ErrorCode.UNAVAILABLE:
                    ended = f"unavailable: {exc.message}"
                    break
                refused += 1  # a refusal is not an acknowledgement; it is counted, not checked
    except OSError as exc:  # the broker went away mid-request
        ended = f"disconnected: {type(exc).__name__}"
    (args.out / f"crash{args.index}.done").write_text(json.dumps({"agent": me, "iterations": n, "refused": refused, "ended": ended, "at": time.time()}))
    os.close(acks)
    return 0


def _peer_claims(out: Path, peers: list[str]) -> list[int]:
    """Claim ids the peers have had acknowledged (their ack files, read as they grow)."""
    found: list[int] = []
    for peer in peers:
        try:
            lines = (out / f"{peer}.acks").read_text().splitlines()[-200:]
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if record.get("op") == "remember":
                found.append(record["id"])
    return found


if __name__ == "__main__":
    sys.exit(main())
