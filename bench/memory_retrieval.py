"""``recall`` and ``context`` latency through a real broker, beside a CLIO-style linear scan.

For each corpus size: a cached store (``memory_load``) is copied into a
fresh run, ``conclave run`` starts on it, and this process -- the operator,
over the broker's Unix socket, the same wire path an agent's CLI takes --
sends ``memory.recall`` and ``memory.context`` for queries drawn from the
corpus's own words.  In the same run, over the same claims, a linear-scan
selector in Python does what CLIO does per request: score every entry by
keyword overlap and keep the best ten.  Also reported: the broker's peak
resident memory and the database size.

    python bench/memory_retrieval.py --sizes 1000 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402
from memory_load import fresh_run  # noqa: E402

from store import database  # noqa: E402

QUIET = "\n[memory]\ngroom_after_seconds = 1000000000\n"
_WORD = re.compile(r"\w+")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(samples, 0.5) * 1e3, "p99_ms": percentile(samples, 0.99) * 1e3, "mean_ms": statistics.mean(samples) * 1e3, "n": len(samples)}


def linear_scan(texts: list[tuple[int, str]], query: str, k: int = 10) -> list[int]:
    """CLIO's per-request selection: every entry scored by keyword overlap, best k kept."""
    wanted = set(_WORD.findall(query.lower()))
    scored = []
    for claim_id, text in texts:
        overlap = len(wanted.intersection(_WORD.findall(text.lower())))
        if overlap:
            scored.append((overlap, claim_id))
    scored.sort(reverse=True)
    return [c for _, c in scored[:k]]


def broker_memory(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"peak_rss_mb": int(values["VmHWM"].split()[0]) / 1024, "rss_mb": int(values["VmRSS"].split()[0]) / 1024}


def measure(size: int, workdir: Path, queries: int) -> dict[str, object]:
    run = fresh_run(workdir, size, "retrieval", QUIET, agent="reader")
    source = ClaimText(99)
    asked = [source.query() for _ in range(queries)]
    result: dict[str, object] = {"claims": size}
    try:
        run.start(timeout=120)
        with run.operator() as client:
            for q in asked[:20]:  # warm the page cache and the broker
                client.call("memory.context", {"query": q})
                client.call("memory.recall", {"query": q})
            for op, args in (("context", {}), ("recall", {"limit": 10})):
                samples, returned = [], []
                for q in asked:
                    t0 = time.perf_counter()
                    reply = client.call(f"memory.{op}", {"query": q, **args})
                    samples.append(time.perf_counter() - t0)
                    returned.append(len(reply["claims"]) if op == "context" else len(reply))
                result[op] = {**figures(samples), "mean_results": statistics.mean(returned)}
            t0 = time.perf_counter()
            for _ in range(200):
                client.call("ping", {})
            result["ping_ms"] = (time.perf_counter() - t0) / 200 * 1e3
        assert run.process is not None
        result["broker"] = broker_memory(run.process.pid)
    finally:
        run.close()
    db = run.state / "conclave.db"
    result["database_mb"] = sum(p.stat().st_size for p in (db, Path(str(db) + "-wal")) if p.exists()) / 1e6

    conn = database.connect(store, readonly=True)
    texts = list(conn.execute("SELECT id, text FROM claims WHERE tier IN ('unverified', 'trusted', 'disputed')"))
    conn.close()
    scans = max(3, min(queries, 3_000_000 // size))
    samples = []
    for q in asked[:scans]:
        t0 = time.perf_counter()
        linear_scan(texts, q)
        samples.append(time.perf_counter() - t0)
    result["linear_scan"] = figures(samples)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conclave-bench"))
    parser.add_argument("--out", type=Path, help="Also write the figures as JSON here.")
    args = parser.parse_args()
    rows = []
    print(f"{'claims':>9} {'context p50':>12} {'p99':>8} {'recall p50':>11} {'p99':>8} {'scan p50':>10} {'scan/ctx':>9} {'broker MB':>10} {'db MB':>8}")
    for size in args.sizes:
        r = measure(size, args.workdir, args.queries)
        rows.append(r)
        ctx, rec, scan = r["context"], r["recall"], r["linear_scan"]  # type: ignore[index]
        print(
            f"{size:>9,} {ctx['p50_ms']:>10.2f}ms {ctx['p99_ms']:>6.2f}ms {rec['p50_ms']:>9.2f}ms {rec['p99_ms']:>6.2f}ms "
            f"{scan['p50_ms']:>8.1f}ms {scan['p50_ms'] / ctx['p50_ms']:>8.0f}x {r['broker']['peak_rss_mb']:>9.0f} {r['database_mb']:>8.0f}",  # type: ignore[index]
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
