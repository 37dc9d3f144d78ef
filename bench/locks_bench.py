"""Lock throughput and deadlock detection through a real broker.

    .venv/bin/python bench/locks_bench.py [--seconds 2] [--agents 1,8,32]

Starts ``conclave run`` on a scratch repository with 32 puppet agents.  For
1, 8 and 32 agents at once it measures, each for ``--seconds``:

* the no-op round trip (``ping``) -- the baseline, in the same run;
* acquire+release pairs on disjoint paths (one path per agent);
* acquire+release pairs on one contended path (``--wait``: they queue).

Then 31 agents form a wait chain (agent i holds d/i and waits for d/i+1) and
the 32nd, holding d/31, asks for d/0: every such request closes a 32-agent
cycle and must be refused with ``deadlock``; its round trip is timed against
a ping on the same connection.  Each worker is a separate process inside its
agent's tree, authenticated with that agent's ticket, like any agent's CLI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.harness import Run  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "locks_worker.py")
TARGET_PAIRS_8 = 5000
TARGET_OVERHEAD = 0.25


def launch(run: Run, pool: ThreadPoolExecutor, names: list[str], argv_for, tmp: Path, tag: str) -> tuple[list, Path]:
    """Start one worker per agent; return their futures once all are ready, and the go file."""
    go = tmp / f"go-{tag}"
    futures = []
    readies = []
    for i, name in enumerate(names):
        ready = tmp / f"ready-{tag}-{i}"
        readies.append(ready)
        argv = [sys.executable, WORKER, *argv_for(i), "--ready", str(ready), "--go", str(go)]
        futures.append(pool.submit(run.puppet(name).sh, *argv, timeout=600))
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in readies):
        for f in futures:
            if f.done():
                out = f.result()
                raise SystemExit(f"a worker exited early: {out.returncode} {out.stderr}")
        if time.monotonic() > deadline:
            raise SystemExit("workers did not get ready")
        time.sleep(0.01)
    return futures, go


def collect(futures) -> list[dict]:
    out = []
    for f in futures:
        done = f.result()
        if done.returncode != 0:
            raise SystemExit(f"worker failed: {done.stderr}")
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def throughput(run: Run, pool: ThreadPoolExecutor, names: list[str], mode: str, seconds: float, tmp: Path) -> dict:
    def argv(i: int) -> list[str]:
        path = "hot/file.txt" if mode == "contended" else f"cold/agent-{i}.txt"
        return [mode, "--path", path, "--seconds", str(seconds)]

    futures, go = launch(run, pool, names, argv, tmp, f"{mode}-{len(names)}")
    go.touch()
    rows = collect(futures)
    iterations = sum(r["ops"] for r in rows)
    elapsed = max(r["elapsed"] for r in rows)

    def median(kind: str) -> float | None:
        values = [r[kind]["median_us"] for r in rows if r[kind]]
        return statistics.median(values) if values else None

    return {
        "per_second": iterations / elapsed,
        "median_ping_us": median("ping"),
        "median_acquire_us": median("acquire"),
        "median_release_us": median("release"),
        "p99_acquire_us": max((r["acquire"]["p99_us"] for r in rows if r["acquire"]), default=None),
    }


def deadlock(run: Run, pool: ThreadPoolExecutor, names: list[str], repeat: int, tmp: Path) -> dict:
    n = len(names)
    go2 = tmp / "go2-deadlock"

    def argv(i: int) -> list[str]:
        mode = "closer" if i == n - 1 else "chain"
        extra = ["--go2", str(go2), "--repeat", str(repeat)] if mode == "closer" else []
        return [mode, "--path", f"d/{i}", "--next", f"d/{(i + 1) % n}", *extra]

    futures, go = launch(run, pool, names, argv, tmp, "deadlock")
    go.touch()
    deadline = time.monotonic() + 60
    while len(run.op("lock.list")["waiting"]) < n - 1:
        if time.monotonic() > deadline:
            raise SystemExit("the wait chain did not form")
        time.sleep(0.02)
    go2.touch()
    rows = collect(futures)
    closer = rows[-1]
    refused, pings = sorted(closer["refused"]), sorted(closer["pings"])
    return {
        "waiting_agents": n - 1,
        "cycle_length": n,
        "median_refusal_us": 1e6 * statistics.median(refused),
        "p95_refusal_us": 1e6 * refused[int(0.95 * (len(refused) - 1))],
        "median_ping_us": 1e6 * statistics.median(pings),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--agents", default="1,8,32")
    p.add_argument("--repeat", type=int, default=300)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    counts = [int(x) for x in a.agents.split(",")]
    total = max(max(counts), 32)
    root = Path(tempfile.mkdtemp(prefix="locks-bench-"))
    # The workers' ready and go files: the one directory (beside the state, never above it) their boxes may write.
    io = root / "io"
    io.mkdir()
    results: dict = {"throughput": {}, "mixed": None, "deadlock": None}
    bench_dir = str(Path(__file__).resolve().parent)
    agents = [{"name": f"a{i:02d}", "allow_read": [bench_dir, str(io)], "allow_write": [str(io)]} for i in range(total)]
    # Real agents lock files that exist: seed one per agent.
    files = {f"cold/agent-{i}.txt": "x\n" for i in range(total)} | {"hot/file.txt": "x\n", "README.md": "bench\n"}
    with Run(root, agents, files=files, grace=2.0) as run, ThreadPoolExecutor(max_workers=total) as pool:
        names = [f"a{i:02d}" for i in range(total)]
        for n in counts:
            row = {}
            for mode in ("ping", "disjoint", "contended"):
                row[mode] = throughput(run, pool, names[:n], mode, a.seconds, io)
            results["throughput"][n] = row
        results["mixed"] = throughput(run, pool, names[:1], "mixed", a.seconds * 2, io)
        results["deadlock"] = deadlock(run, pool, names[:32], a.repeat, io)
        results["broker_stats"] = run.op("broker.stats")
    if a.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'agents':>6} {'ping/s':>8} {'disjoint pairs/s':>17} {'contended pairs/s':>18} {'ping µs':>8} {'acquire µs':>11} {'release µs':>11}  (medians)")
    for n, row in results["throughput"].items():
        print(
            f"{n:>6} {row['ping']['per_second']:>8.0f} {row['disjoint']['per_second']:>17.0f} {row['contended']['per_second']:>18.0f}"
            f" {row['ping']['median_ping_us']:>8.0f} {row['disjoint']['median_acquire_us']:>11.0f} {row['disjoint']['median_release_us']:>11.0f}"
        )
    m = results["mixed"]
    acq, rel, ping = m["median_acquire_us"], m["median_release_us"], m["median_ping_us"]
    print(
        f"one agent, interleaved: ping {ping:.0f} µs, acquire {acq:.0f} µs ({acq / ping - 1:+.0%}), release {rel:.0f} µs ({rel / ping - 1:+.0%}), "
        f"pair vs two pings {(acq + rel) / (2 * ping) - 1:+.0%}   (target < {TARGET_OVERHEAD:+.0%})"
    )
    d = results["deadlock"]
    print(
        f"deadlock among {d['waiting_agents']} waiting agents (cycle of {d['cycle_length']}): refused in median "
        f"{d['median_refusal_us']:.0f} µs (p95 {d['p95_refusal_us']:.0f} µs) vs ping {d['median_ping_us']:.0f} µs"
    )
    eight = results["throughput"].get(8)
    if eight:
        ratio = 2 * eight["disjoint"]["per_second"] / eight["ping"]["per_second"]
        print(
            f"8 agents, disjoint: {eight['disjoint']['per_second']:.0f} pairs/s = {2 * eight['disjoint']['per_second']:.0f} lock ops/s, "
            f"{ratio:.0%} of the no-op rate {eight['ping']['per_second']:.0f}/s   (target >= {TARGET_PAIRS_8} pairs/s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
