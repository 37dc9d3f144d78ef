"""One writer agent for ``memory_write``: remember N claims as fast as the broker answers.

The broker spawns it (so it holds a real, broker-issued identity); it
connects, says it is ready, waits for the go file, writes, reports its
start and end times, and waits for the stop file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402

from broker.client import BlockingClient  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--op", default="memory.remember", help="memory.remember, or ping for the round-trip ceiling")
    args = parser.parse_args()
    source = ClaimText(args.seed)
    if args.op == "ping":
        batch: list[dict[str, str]] = [{} for _ in range(args.count)]
    else:
        batch = [{"kind": kind, "text": text} for kind, text in source.claims(args.count)]
    client = BlockingClient.for_agent()
    me = client.identity["agent"]
    (args.out / f"{me}.ready").touch()
    while not args.go.exists():
        time.sleep(0.005)
    errors = 0
    start = time.time()
    for claim in batch:
        try:
            client.call(args.op, claim)
        except Exception:
            errors += 1
    end = time.time()
    (args.out / f"{me}.json").write_text(json.dumps({"start": start, "end": end, "count": args.count, "errors": errors}))
    client.close()
    deadline = time.time() + 120  # stay alive until the broker's figures are read
    while not args.stop.exists() and time.time() < deadline:
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
