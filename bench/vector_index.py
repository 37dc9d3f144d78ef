"""The in-broker vector index alone (``memory.vectors.VectorIndex``): memory and search time at 100k and 1M vectors.

No model and no database: the index is filled with random unit vectors
through the same code the broker's first look uses (``_add``, chunks of
10,000 rows into arrays sized once), and searched with the same method
minus the catch-up query.  The resident memory it adds is read from
``/proc/self/status`` before and after.  This is the figure behind the
"broker at 1M claims" estimate in docs/BENCHMARKS.md.

    python bench/vector_index.py --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from memory import vectors  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Offline:
    """What ``catch_up`` would read, already read: the search without its query."""

    def execute(self, *_: object) -> list[object]:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'vectors':>10} {'index MB':>9} {'RSS added MB':>13} {'search p50':>11} {'trusted-only p50':>17}")
    for size in args.sizes:
        before = rss_mb()
        index = vectors.VectorIndex("bench/random")
        index._event_seq = 0  # as after a first look
        index._dim, index._words = 384, 6
        index._grow(size)
        for start in range(0, size, vectors.LOAD_CHUNK):
            n = min(vectors.LOAD_CHUNK, size - start)
            chunk = rng.normal(size=(n, 384)).astype(np.float32)
            chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
            tiers = ["trusted" if (start + i) % 10 == 0 else "unverified" for i in range(n)]
            index._add([(start + i + 1, start + i + 1, vectors.encode(v), t) for i, (v, t) in enumerate(zip(chunk, tiers))])
        added = rss_mb() - before
        index.catch_up = lambda conn: None  # type: ignore[method-assign]
        timings: dict[bool, list[float]] = {False: [], True: []}
        for q in range(args.queries):
            query = rng.normal(size=384).astype(np.float32)
            query /= np.linalg.norm(query)
            for trusted in (False, True):
                t0 = time.perf_counter()
                index.search(Offline(), query, limit=62, trusted_only=trusted, floor=-1.0)  # type: ignore[arg-type]
                timings[trusted].append(time.perf_counter() - t0)
        print(
            f"{size:>10,} {index.statistics()['bytes'] / 1e6:>9.0f} {added:>13.0f} {statistics.median(timings[False]) * 1e3:>9.2f}ms {statistics.median(timings[True]) * 1e3:>15.2f}ms",
            flush=True,
        )
        del index


if __name__ == "__main__":
    main()
