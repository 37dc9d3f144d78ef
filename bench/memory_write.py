"""``remember`` throughput through a real broker with 1, 8 and 32 concurrent writer agents.

Each writer is an agent process the broker spawned (``memory_writer``),
with its own ticket and connection; all start on one signal.  Throughput is
claims stored per second of wall time, from the first writer's start to the
last writer's end.  Every claim passes the prefilter, is indexed, and writes
its hash-chained event; the store owner commits whatever jobs are waiting
together (group commit).  ``ping`` with the same number of agents gives the
broker's round-trip ceiling in the same run.

    python bench/memory_write.py --agents 1 8 32
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.harness import Run  # noqa: E402

HERE = Path(__file__).resolve().parent
TOTAL = 12_000


def measure(agents: int, total: int, workdir: Path, op: str = "memory.remember", embedder: str | None = None) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix=f"write{agents}-", dir=workdir))
    out = root / "out"
    out.mkdir()
    go, stop = out / "go", out / "stop"
    per_agent = max(1, total // agents)
    # Each writer runs in its box: it may read the bench scripts, and read and write `out` (never the state beside it).
    team = [
        {
            "name": f"writer{i}",
            "command": [sys.executable, str(HERE / "memory_writer.py"), "--go", str(go), "--stop", str(stop), "--out", str(out), "--count", str(per_agent), "--seed", str(i), "--op", op],
            "allow_read": [str(HERE), str(out)],
            "allow_write": [str(out)],
        }
        for i in range(agents)
    ]
    # Meaning (issue 24): the broker embeds in the background; --embedder none turns it off (the words-only tree).
    # A tree from before meaning (compare.py --scripts this against an older commit) has no embedder
    # setting: "none" is what it does anyway; "local" cannot be asked of it.
    if embedder is not None and not (HERE.parent / "memory" / "meaning.py").exists():
        if embedder != "none":
            raise SystemExit(f"the tree at {HERE.parent} has no embedder (it predates memory by meaning): use --embedder none")
        embedder = None
    chosen = "" if embedder is None else f'embedder = "{embedder}"\n'
    run = Run(root, team, extra_toml="\n[memory]\ngroom_after_seconds = 1000000000\n" + chosen)
    try:
        run.start(wait_for=[], timeout=60)
        run.wait_until(lambda: len(list(out.glob("*.ready"))) == agents, timeout=120, what="writers to connect")
        assert run.process is not None
        cpu_before = cpu_seconds(run.process.pid)
        go.touch()
        run.wait_until(lambda: len(list(out.glob("*.json"))) == agents, timeout=600, interval=0.2, what="writers to finish")
        broker_cpu = cpu_seconds(run.process.pid) - cpu_before
        reports = [json.loads(p.read_text()) for p in out.glob("*.json")]
        stats = run.op("broker.stats")
        memory = run.op("memory.stats") if embedder is not None else {}
        stop.touch()
    finally:
        run.close()
        shutil.rmtree(root, ignore_errors=True)
    stored = sum(r["count"] - r["errors"] for r in reports)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return {
        "agents": agents,
        "claims": stored,
        "errors": sum(r["errors"] for r in reports),
        "seconds": seconds,
        "per_second": stored / seconds,
        "jobs_per_batch": stats["store_jobs"] / max(1, stats["store_batches"]),
        "broker_cpu_share": broker_cpu / seconds,  # cores the broker process kept busy
        # The broker's CPU per claim: what bounds remember/s once the broker has a core to itself
        # (on a loaded machine remember/s also waits for the scheduler; this much less).
        "broker_cpu_ms_per_claim": broker_cpu / max(1, stored) * 1000,
        # How far the background embedder had got when the last writer finished.
        "embedded_by_then": (memory.get("meaning") or {}).get("embedded"),
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--total", type=int, default=TOTAL, help="claims per setting, split across the writers")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conclave-bench"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--embedder", choices=("local", "none"), help="[memory] embedder for the run (default: the tree's default)")
    parser.add_argument("--no-ping", action="store_true", help="skip the ping ceiling")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'agents':>6} {'claims':>8} {'seconds':>8} {'remember/s':>11} {'jobs/commit':>12} {'broker cores':>13} {'broker ms/claim':>16} {'errors':>7} {'ping/s':>9}")
    for n in args.agents:
        r = measure(n, args.total, args.workdir, embedder=args.embedder)
        r["ping_per_second"] = 0 if args.no_ping else measure(n, args.total, args.workdir, op="ping")["per_second"]
        rows.append(r)
        print(f"{n:>6} {r['claims']:>8,} {r['seconds']:>8.2f} {r['per_second']:>11,.0f} {r['jobs_per_batch']:>12.1f} {r['broker_cpu_share']:>13.2f} {r['broker_cpu_ms_per_claim']:>16.3f} {r['errors']:>7} {r['ping_per_second']:>9,.0f}"
              + (f"  embedded by then: {r['embedded_by_then']}" if r.get("embedded_by_then") is not None else ""), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
