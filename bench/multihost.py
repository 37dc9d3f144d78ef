"""PostgreSQL against SQLite, and two brokers on one PostgreSQL store, in one run.

Three measurements, each beside its baseline from the same run:

1. ``context`` latency at N claims (default 100,000, a fifth of them
   trusted): the same corpus and the same queries on a SQLite store and on a
   PostgreSQL store, each called in process on the store's writer connection
   exactly as the store owner runs the job (ranking, loading, rendering,
   logging the exposures, committing).  p50/p99 in milliseconds.
2. ``remember`` throughput: 2 brokers x 8 writer agents on one PostgreSQL
   store, against 1 broker x 8 and 1 broker x 16 agents on SQLite.
3. Lock hand-over: how long after an agent releases ``name://bench`` an
   agent waiting for it gets it -- on another host's broker (PostgreSQL),
   against two agents of one broker (the local table).

The PostgreSQL server is started here, as the tests start it
(tests/pgtools.py), on a Unix socket with fsync off -- a local test server,
not a tuned production one; SQLite runs with its usual settings.

    python bench/multihost.py [--claims 100000] [--queries 300] [--total 8000] [--handovers 40]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402
from memory_write import cpu_seconds  # noqa: E402

from agents.harness import Run, make_repo  # noqa: E402
from broker import composition  # noqa: E402
from broker.identity import Principal, Role  # noqa: E402
from memory import claims as claim_rows  # noqa: E402
from memory import retrieval  # noqa: E402
from store import database  # noqa: E402
from store.postgres import PostgresBackend  # noqa: E402
from tests.pgtools import Cluster, copy_chain_key  # noqa: E402

HERE = Path(__file__).resolve().parent
QUIET = "\n[memory]\ngroom_after_seconds = 1000000000\n"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def figures(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(samples, 50) * 1e3, "p99_ms": percentile(samples, 99) * 1e3, "mean_ms": statistics.mean(samples) * 1e3}


# -- 1: context at N claims ------------------------------------------------------------------


def corpus(count: int) -> list[tuple[Any, ...]]:
    source = ClaimText(3)
    rows = []
    for i, (kind, text) in enumerate(source.claims(count), start=1):
        tier = "trusted" if i % 5 == 0 else "unverified"
        rows.append((i, i, 1, kind, "repo", text, claim_rows.text_key(text), f"alice:s{i % 97}", "alice", tier, "2026-01-01T00:00:00.000000+00:00"))
    return rows


COLUMNS = "id, lineage, edition, kind, scope, text, text_key, author, author_domain, tier, created_at"


def fill_sqlite(path: Path, rows: list[tuple[Any, ...]]) -> Any:
    conn = database.open_store(path, composition.schemas())
    with conn:
        conn.executemany(f"INSERT INTO claims({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        conn.execute("INSERT INTO claims_fts(claims_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO trusted_fts(trusted_fts) VALUES ('rebuild')")
    return conn


def fill_postgres(url: str, rows: list[tuple[Any, ...]]) -> Any:
    conn = PostgresBackend(url, migrate=False).open_writer(composition.schemas())
    with conn.raw.cursor().copy(f"COPY claims ({COLUMNS}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    conn.raw.execute("VACUUM ANALYZE claims")
    return conn


def context_latency(conn: Any, queries: list[str]) -> dict[str, float]:
    reader = Principal(agent="reader", session="bench", role=Role.AGENT, domain="reader")
    for q in queries[:20]:  # warm caches
        with conn:
            retrieval.context(conn, reader, q, budget=2000, include_unverified=False)
    samples, returned = [], []
    for q in queries:
        t0 = time.perf_counter()
        with conn:
            out = retrieval.context(conn, reader, q, budget=2000, include_unverified=False)
        samples.append(time.perf_counter() - t0)
        returned.append(len(out["claims"]))
    return {**figures(samples), "mean_claims": statistics.mean(returned)}


# -- 2: remember/s ----------------------------------------------------------------------------------


def writers(prefix: str, count: int, per_agent: int, go: Path, stop: Path, out: Path, seed: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"{prefix}{i}",
            "command": [sys.executable, str(HERE / "memory_writer.py"), "--go", str(go), "--stop", str(stop), "--out", str(out),
                        "--count", str(per_agent), "--seed", str(seed + i)],
            # Each writer runs in its box: it may read the bench scripts, and read and write `out` (never a state directory).
            "allow_read": [str(HERE), str(out)],
            "allow_write": [str(out)],
        }
        for i in range(count)
    ]


def remember_rate(root: Path, urls: list[str | None], agents: int, total: int) -> dict[str, Any]:
    """``total`` claims from ``agents`` writers on each broker (one broker per url; None: SQLite)."""
    out = root / "out"
    go, stop = out / "go", out / "stop"  # inside `out`: the boxed writers see nothing else of the bench's
    out.mkdir(parents=True)
    per_agent = max(1, total // (agents * len(urls)))
    origin = make_repo(root / "origin")
    runs = []
    try:
        for n, url in enumerate(urls):
            clone = root / f"host{n}" / "repo"
            subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
            store = f'\n[store]\nurl = "{url}"\n' if url else ""
            runs.append(Run(root / f"host{n}", writers(f"w{n}x", agents, per_agent, go, stop, out, seed=100 * n), repo=clone, extra_toml=QUIET + store))
        for n, run in enumerate(runs):
            if n:
                # One chain, one key: the first broker made it (its anchor follows once the log is keyed).
                runs[0].wait_until(lambda: (runs[0].state / "chain-anchor").exists(), timeout=60, what="the first broker to key the log")
                copy_chain_key(runs[0], run)
            run.start(wait_for=[], timeout=60)
        runs[0].wait_until(lambda: len(list(out.glob("*.ready"))) == agents * len(urls), timeout=120, what="writers to connect")
        cpu = [cpu_seconds(r.process.pid) for r in runs]  # type: ignore[union-attr]
        go.touch()
        runs[0].wait_until(lambda: len(list(out.glob("*.json"))) == agents * len(urls), timeout=900, interval=0.2, what="writers")
        cpu = [cpu_seconds(r.process.pid) - c for r, c in zip(runs, cpu)]  # type: ignore[union-attr]
        reports = [json.loads(p.read_text()) for p in out.glob("*.json")]
        stats = [run.op("broker.stats") for run in runs]
        stop.touch()
    finally:
        for run in runs:
            run.close()
    stored = sum(r["count"] - r["errors"] for r in reports)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    jobs = sum(st["store_jobs"] for st in stats)
    return {"brokers": len(urls), "agents": agents * len(urls), "claims": stored, "errors": sum(r["errors"] for r in reports),
            "seconds": seconds, "per_second": stored / seconds, "broker_cores": [c / seconds for c in cpu],
            # Over each broker's whole run (start-up included): how its writer worked.
            "jobs_per_batch": jobs / max(1, sum(st["store_batches"] for st in stats)),
            "round_trips_per_job": sum(st["store_round_trips"] for st in stats) / max(1, jobs),
            "whole_batches": sum(st["store_whole_batches"] for st in stats),
            "replayed_batches": sum(st["store_replayed_batches"] for st in stats)}


# -- 3: lock hand-over ---------------------------------------------------------------------------------


def handover(holder: Any, waiter: Any, resource: str, rounds: int) -> dict[str, float]:
    samples = []
    for _ in range(rounds):
        holder.call("lock.acquire", resources=[resource])
        got: dict[str, float] = {}

        def wait() -> None:
            waiter.call("lock.acquire", resources=[resource], wait=10)
            got["at"] = time.perf_counter()

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.05)  # the waiter is queued (locally) or polling (across hosts)
        released = time.perf_counter()
        holder.call("lock.release", resources=[resource])
        thread.join(timeout=15)
        samples.append(got["at"] - released)
        waiter.call("lock.release", resources=[resource])
    return figures(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--total", type=int, default=8_000, help="claims per throughput setting")
    parser.add_argument("--handovers", type=int, default=40)
    parser.add_argument("--skip", nargs="*", default=[], choices=["context", "remember", "locks"])
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout's TERM still stops the brokers and the server
    work = Path(tempfile.mkdtemp(prefix="conclave-multihost-"))
    cluster = Cluster().start()
    report: dict[str, Any] = {}
    try:
        if "context" not in args.skip:
            rows = corpus(args.claims)
            source = ClaimText(99)
            queries = [source.query() for _ in range(args.queries)]
            t0 = time.perf_counter()
            sqlite = fill_sqlite(work / "context.db", rows)
            filled_sqlite = time.perf_counter() - t0
            t0 = time.perf_counter()
            pg = fill_postgres(cluster.url(cluster.database()), rows)
            filled_pg = time.perf_counter() - t0
            report["context"] = {"claims": args.claims, "sqlite": context_latency(sqlite, queries), "postgresql": context_latency(pg, queries),
                                 "fill_seconds": {"sqlite": filled_sqlite, "postgresql": filled_pg}}
            sqlite.close()
            pg.close()
            c = report["context"]
            print(f"context at {args.claims:,} claims: SQLite p50 {c['sqlite']['p50_ms']:.2f} ms p99 {c['sqlite']['p99_ms']:.2f} ms | "
                  f"PostgreSQL p50 {c['postgresql']['p50_ms']:.2f} ms p99 {c['postgresql']['p99_ms']:.2f} ms | "
                  f"ratio p50 {c['postgresql']['p50_ms'] / c['sqlite']['p50_ms']:.2f}x "
                  f"(mean claims returned {c['sqlite']['mean_claims']:.1f} / {c['postgresql']['mean_claims']:.1f})", flush=True)
        if "remember" not in args.skip:
            database_name = cluster.database()
            urls = [cluster.broker_url(database_name, host) for host in ("alpha", "beta")]
            rates = {
                "sqlite 1x8": remember_rate(work / "r1", [None], 8, args.total),
                "sqlite 1x16": remember_rate(work / "r2", [None], 16, args.total),
                "postgresql 2x8": remember_rate(work / "r3", urls, 8, args.total),
            }
            report["remember"] = rates
            for name, r in rates.items():
                print(f"remember {name}: {r['claims']:,} claims in {r['seconds']:.2f} s = {r['per_second']:,.0f}/s "
                      f"(errors {r['errors']}, broker cores {', '.join(f'{c:.2f}' for c in r['broker_cores'])}, "
                      f"{r['jobs_per_batch']:.1f} jobs per commit, {r['round_trips_per_job']:.2f} round trips per job, "
                      f"batches run whole {r['whole_batches']}, replayed {r['replayed_batches']})", flush=True)
        if "locks" not in args.skip:
            database_name = cluster.database()
            origin = make_repo(work / "l-origin")
            runs = []
            for host in ("alpha", "beta"):
                clone = work / f"l-{host}" / "repo"
                subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
                url = cluster.broker_url(database_name, host)
                run = Run(work / f"l-{host}", [{"name": f"{host}1"}, {"name": f"{host}2"}], repo=clone, extra_toml=f'{QUIET}\n[store]\nurl = "{url}"\n')
                if runs:
                    copy_chain_key(runs[0], run)
                runs.append(run.start())
            try:
                a1, a2, b1 = runs[0].puppet("alpha1"), runs[0].puppet("alpha2"), runs[1].puppet("beta1")
                local = handover(a1, a2, "name://bench-local", args.handovers)
                across = handover(a1, b1, "name://bench", args.handovers)
                path = handover(a1, a2, "bench.txt", args.handovers)
            finally:
                for run in runs:
                    run.close()
            report["locks"] = {"same_broker_named": local, "same_broker_path": path, "across_brokers_named": across}
            print(f"lock hand-over: across brokers p50 {across['p50_ms']:.1f} ms p99 {across['p99_ms']:.1f} ms | "
                  f"same broker (named) p50 {local['p50_ms']:.1f} ms p99 {local['p99_ms']:.1f} ms | "
                  f"same broker (path, no server) p50 {path['p50_ms']:.1f} ms p99 {path['p99_ms']:.1f} ms", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
