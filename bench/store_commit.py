"""What one commit of the store owner costs, in process: no socket, no agents, just the owner.

    .venv/bin/python bench/store_commit.py [--jobs 3000] [--json]
    .venv/bin/python bench/compare.py --base main --scripts this -- bench/store_commit.py --json

Three shapes, each ``--jobs`` jobs appending one event (the lock journal's
and every memory change's unit of work):

* ``serial``: one caller, one job at a time -- every job is its own batch, so
  this is the price of a commit (with the keyed chain: the head check, the
  HMAC, the anchor's pwrite; its fdatasync runs on another thread);
* ``grouped``: 8 callers at once -- the owner's group commit;
* ``journal``: batches of 64 events through ``append_many`` (how lock
  history is written).

Runs against any tree (``compare.py --scripts this`` runs it on the base
too): it passes the chain files only where ``StoreOwner`` takes them.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store import events  # noqa: E402
from store.backend import SqliteBackend  # noqa: E402
from store.owner import StoreOwner  # noqa: E402


def owner_in(tmp: Path) -> StoreOwner:
    if "chain" in inspect.signature(StoreOwner).parameters:
        from store.owner import ChainFiles

        return StoreOwner(SqliteBackend(tmp / "db"), [], chain=ChainFiles(tmp / "chain-key", tmp / "chain-anchor"))
    return StoreOwner(SqliteBackend(tmp / "db"), [])


async def measure(jobs: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="store-commit-") as tmp:
        owner = owner_in(Path(tmp))
        async with trio.open_nursery() as nursery:
            await nursery.start(owner.run)

            def one(i: int):  # type: ignore[no-untyped-def]
                return lambda conn: events.append(conn, "bench.n", actor="bench:1", subject=str(i), payload={"i": i})

            started = time.perf_counter()
            for i in range(jobs):
                await owner.call(one(i))
            out["serial_jobs_per_second"] = jobs / (time.perf_counter() - started)

            async def caller(k: int) -> None:
                for i in range(jobs // 8):
                    await owner.call(one(k * jobs + i))

            before = owner.statistics().batches
            started = time.perf_counter()
            async with trio.open_nursery() as callers:
                for k in range(8):
                    callers.start_soon(caller, k)
            out["grouped_jobs_per_second"] = (jobs // 8 * 8) / (time.perf_counter() - started)
            out["grouped_jobs_per_batch"] = (jobs // 8 * 8) / max(1, owner.statistics().batches - before)

            batch = [events.Pending("bench.lock", "bench:1", f"r{i}", {"tokens": [i]}, events.now()) for i in range(64)]
            started = time.perf_counter()
            for _ in range(jobs // 64):
                await owner.call(lambda conn: events.append_many(conn, batch))
            out["journal_events_per_second"] = (jobs // 64 * 64) / (time.perf_counter() - started)
            owner.close()
            nursery.cancel_scope.cancel()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = trio.run(measure, args.jobs)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:<28} {v:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
