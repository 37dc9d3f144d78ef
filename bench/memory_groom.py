"""``groom`` time at 10k and 100k claims through a real broker, beside CLIO's all-pairs consolidation.

The cached corpus (``memory_load``: 2% exact duplicates, 10% trusted) is
copied into a fresh run; a fifth of the claims are aged to 40 days idle so
decay has work, and the default cap (10,000 live claims per kind) binds at
100k.  The operator's ``memory.groom`` is timed end to end: plan on a read
connection, retirements applied in chunks through the store owner, one
tombstone and one event each.

The baseline does what CLIO's consolidation does: compare every pair of
entries by Jaccard similarity.  It is run at 1k and 4k claims of the same
corpus and its quadratic cost extrapolated to 10k and 100k (said so in the
output) -- running it there would take minutes to hours.

    python bench/memory_groom.py --sizes 10000 100000
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_load import cached_store, fresh_run, size_args  # noqa: E402

from store import database  # noqa: E402

_WORD = re.compile(r"\w+")


def all_pairs(texts: list[str], threshold: float = 0.7) -> tuple[float, int]:
    """CLIO's dedup: Jaccard over every pair.  Returns (seconds, pairs above threshold)."""
    sets = [set(_WORD.findall(t.lower())) for t in texts]
    start = time.perf_counter()
    found = 0
    for i in range(len(sets)):
        a = sets[i]
        for j in range(i + 1, len(sets)):
            b = sets[j]
            if len(a & b) / len(a | b) >= threshold:
                found += 1
    return time.perf_counter() - start, found


def age(state: Path, share: float = 0.2, days: int = 40) -> int:
    conn = database.connect(state / "conclave.db")
    stamp = (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()
    with conn:
        conn.execute("UPDATE claims SET created_at = ? WHERE id % ? = 0", (stamp, round(1 / share)))
        aged = conn.changes()
    conn.close()
    return aged


def measure(size: int, workdir: Path) -> dict[str, object]:
    run = fresh_run(workdir, size, "groom", "\n[memory]\ngroom_after_seconds = 1000000000\n")
    aged = age(run.state)
    try:
        run.start(timeout=120)
        with run.operator() as client:
            t0 = time.perf_counter()
            plan = client.call("memory.groom", {"dry_run": True})
            planned = time.perf_counter() - t0
            t0 = time.perf_counter()
            done = client.call("memory.groom", {})
            groomed = time.perf_counter() - t0
            stats = client.call("memory.stats", {})
    finally:
        run.close()
    return {
        "claims": size,
        "aged": aged,
        "plan_seconds": planned,
        "groom_seconds": groomed,
        "retired": done["retired"],
        "by_rule": {k: v for k, v in plan["counts"].items() if k.startswith("retire_")},
        "review": plan["counts"]["review"],
        "rows_after": stats["claims"],
    }


def main() -> None:
    args = size_args(__doc__.splitlines()[0])
    conn = database.connect(cached_store(args.workdir, 10000), readonly=True)
    texts = [r[0] for r in conn.execute("SELECT text FROM claims ORDER BY id LIMIT 4000")]
    conn.close()
    baseline = {}
    for n in (1000, 4000):
        seconds, _ = all_pairs(texts[:n])
        baseline[n] = seconds
    per_pair = baseline[4000] / (4000 * 3999 / 2)
    print(f"all-pairs Jaccard (CLIO-style): 1k {baseline[1000]:.2f} s, 4k {baseline[4000]:.2f} s (measured)")
    rows = []
    print(f"{'claims':>9} {'groom':>9} {'plan only':>10} {'retired':>8}  by rule                                  {'all-pairs (extrapolated)':>24}")
    for size in args.sizes:
        r = measure(size, args.workdir)
        extrapolated = per_pair * size * (size - 1) / 2
        r["all_pairs_extrapolated_seconds"] = extrapolated
        rows.append(r)
        print(f"{size:>9,} {r['groom_seconds']:>8.2f}s {r['plan_seconds']:>9.2f}s {r['retired']:>8,}  {json.dumps(r['by_rule']):<40} {extrapolated:>22,.0f} s", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"baseline_measured": baseline, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
