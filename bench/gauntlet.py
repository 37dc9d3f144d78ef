"""The gauntlet: 32 agents under a sustained mixed load, then a thundering herd of 50 on one lock and on one inbox.

    .venv/bin/python bench/gauntlet.py [--seconds 300] [--agents 32] [--herd 50] [--rounds 5]

Shaped after the stress suites agent-coordination tools publish.  Phase 1
starts ``conclave run`` with ``--agents`` agents (``gauntlet_worker --mode
load``), each of which, for ``--seconds``, remembers a claim, recalls, every
other turn corroborates a peer's claim, takes one of 64 shared locks
(waiting for it) and releases it, sends mail to a peer, and every other
turn waits on its inbox (``inbox --wait``, then acks what came).  Every round
trip is timed.  The broker's RSS and the database's size are sampled every
two seconds.  At the end ``conclave memory verify`` runs through the broker.

Phase 2 starts a broker on the same state with ``--herd`` agents that, each
round, all ask for one lock at the same moment (granted one by one, FIFO,
each released at once), and one agent with ``--herd`` connections waiting
on its one inbox while another agent sends it a message: the wake-up time of
every waiter is measured from the send's reply.

Reports p50, p99 and max latency per op, errors per op (target: 0), RSS
over time, and the database size.  Errors are every refusal and every
failed request; an ``inbox --wait`` that ran out with nothing new is not an
error and is counted apart, not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.harness import Run  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "gauntlet_worker.py")
#: The automatic groom stays off (it would retire claims a peer is about to corroborate: an error that is the
#: bench's, not the broker's), and the mail budget is out of reach (32 agents mailing flat out are a flood by design).
SETTINGS = "\n[memory]\ngroom_after_seconds = 1000000000\n\n[mail]\ndeliveries_per_minute = 1000000000\nbytes_per_minute = 1000000000000\n"


def boxed(entry: dict[str, Any], out: Path) -> dict[str, Any]:
    """An agent in its box may read the worker's scripts, and read and write the phase's directory."""
    return {**entry, "allow_read": [str(HERE), str(out)], "allow_write": [str(out)]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def db_mb(state: Path) -> float:
    return sum(p.stat().st_size for p in state.glob("conclave.db*")) / 1e6


def collect(out: Path, names: list[str]) -> dict[str, Any]:
    latency: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    samples: list[str] = []
    extra: dict[str, Any] = {}
    for name in names:
        data = json.loads((out / f"{name}.json").read_text())
        for op, values in data["latency"].items():
            latency.setdefault(op, []).extend(values)
        for op, count in data["errors"].items():
            errors[op] = errors.get(op, 0) + count
        samples += data["samples"]
        extra[name] = {k: v for k, v in data.items() if k not in ("latency", "errors", "samples")}
    return {"latency": latency, "errors": errors, "samples": samples, "extra": extra}


def sustained(root: Path, agents: int, seconds: float) -> dict[str, Any]:
    out = root / "load"
    out.mkdir()
    go = out / "go"
    names = [f"load{i}" for i in range(agents)]
    team = [
        boxed({"name": name, "command": [sys.executable, WORKER, "--mode", "load", "--index", str(i), "--agents", str(agents),
                                         "--seconds", str(seconds), "--out", str(out), "--go", str(go)]}, out)
        for i, name in enumerate(names)
    ]
    run = Run(root, team, extra_toml=SETTINGS)
    samples: list[tuple[float, float, float]] = []
    try:
        run.start(wait_for=[], timeout=60)
        run.wait_until(lambda: len(list(out.glob("*.ready"))) == agents, timeout=300, what="load agents to connect")
        assert run.process is not None
        pid = run.process.pid
        started = time.monotonic()
        samples.append((0.0, rss_mb(pid), db_mb(run.state)))
        go.touch()
        midway: dict[str, Any] | None = None
        while len(list(out.glob("load*.json"))) < agents:
            time.sleep(2)
            samples.append((time.monotonic() - started, rss_mb(pid), db_mb(run.state)))
            if midway is None and time.monotonic() - started > seconds / 2:
                # verify under full load: the head it holds against the anchor keeps moving meanwhile
                t = time.monotonic()
                done = run.cli("memory", "verify", "--json")
                midway = {"ok": done.returncode == 0, "seconds": time.monotonic() - t, "output": done.stdout[-600:] + done.stderr[-300:]}
            if time.monotonic() - started > seconds + 300:
                raise SystemExit("the load agents did not finish")
        elapsed = time.monotonic() - started
        stats = run.op("broker.stats")
        verify_started = time.monotonic()
        verified = run.cli("memory", "verify", "--json")
        verify_seconds = time.monotonic() - verify_started
        (out / "stop").touch()
    finally:
        run.close()
    result = collect(out, names)
    report = json.loads(verified.stdout) if verified.stdout.strip() else {}
    result.update(
        seconds=elapsed, rss=samples, stats=stats, verify_ok=verified.returncode == 0 and report.get("ok") is True, midway=midway,
        verify_seconds=verify_seconds, verify_problems=[p["problem"] for p in report.get("problems", [])][:5],
        events=report.get("events"),
    )
    return result


def herd(root: Path, size: int, rounds: int) -> dict[str, Any]:
    out = root / "herd"
    out.mkdir()
    lockers = [f"herd{i}" for i in range(size)]
    team = [boxed({"name": n, "command": [sys.executable, WORKER, "--mode", "herd-lock", "--rounds", str(rounds), "--out", str(out)]}, out) for n in lockers]
    team.append(boxed({"name": "inbox", "command": [sys.executable, WORKER, "--mode", "herd-inbox", "--rounds", str(rounds), "--clients", str(size), "--out", str(out)]}, out))
    team.append(boxed({"name": "sender", "command": [sys.executable, WORKER, "--mode", "herd-sender", "--rounds", str(rounds), "--to", "inbox", "--out", str(out)]}, out))
    names = [t["name"] for t in team]
    run = Run(root, team, reuse=True, extra_toml=SETTINGS)
    try:
        run.start(wait_for=[], timeout=60)
        run.wait_until(lambda: len(list(out.glob("*.ready"))) == len(names), timeout=300, what="the herd to connect")
        assert run.process is not None
        peak = rss_mb(run.process.pid)
        for r in range(rounds):
            (out / f"go-lock-{r}").touch()
            run.wait_until(lambda: len(list(out.glob(f"*.lock-{r}"))) == size, timeout=300, interval=0.01, what=f"lock round {r}")
            peak = max(peak, rss_mb(run.process.pid))
        for r in range(rounds):
            run.wait_until(lambda: run.op("mail.stats")["waiting"] >= size, timeout=60, interval=0.01, what=f"{size} inbox waiters")
            (out / f"go-inbox-{r}").touch()
            run.wait_until(lambda: len(list(out.glob(f"inbox-woke-{r}-*"))) == size, timeout=120, interval=0.01, what=f"inbox round {r}")
            (out / f"inbox-next-{r}").touch()
            peak = max(peak, rss_mb(run.process.pid))
        run.wait_until(lambda: len(list(out.glob("*.json"))) == len(names), timeout=120, what="the herd's reports")
        (out / "stop").touch()
    finally:
        run.close()
    result = collect(out, names)
    sent = result["extra"]["sender"]["sent"]
    woke = result["extra"]["inbox"]["woke"]
    result["latency"]["herd.inbox.wake"] = [t - sent[r] for r in range(rounds) for t in woke[r]]
    result["peak_rss"] = peak
    return result


ORDER = ("remember", "recall", "corroborate", "lock.acquire", "lock.release", "msg.send", "inbox.wait", "msg.ack",
         "herd.lock.acquire", "herd.lock.release", "herd.inbox.send", "herd.inbox.wake")


def table(latency: dict[str, list[float]], errors: dict[str, int], seconds: float | None) -> list[dict[str, Any]]:
    rows = []
    for op in [o for o in ORDER if o in latency or o in errors] + sorted(set(latency) - set(ORDER)):
        values = latency.get(op, [])
        rows.append({
            "op": op, "count": len(values), "per_second": len(values) / seconds if seconds else None,
            "p50_ms": percentile(values, 0.50) * 1000, "p99_ms": percentile(values, 0.99) * 1000,
            "max_ms": max(values) * 1000 if values else float("nan"), "errors": errors.get(op, 0),
        })
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'op':<18} {'count':>8} {'per s':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>9} {'errors':>6}")
    for r in rows:
        rate = f"{r['per_second']:>7.0f}" if r["per_second"] is not None else f"{'':>7}"
        print(f"{r['op']:<18} {r['count']:>8} {rate} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>9.1f} {r['errors']:>6}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the sustained load runs (default 300)")
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--herd", type=int, default=50, help="clients in each thundering herd")
    parser.add_argument("--rounds", type=int, default=5, help="herd rounds")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--out", type=Path, help="also write everything measured as JSON here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gauntlet-", dir=args.workdir))
    load_avg = os.getloadavg()
    try:
        print(f"gauntlet: {args.agents} agents for {args.seconds:.0f} s, then herds of {args.herd} x {args.rounds} rounds "
              f"({os.cpu_count()} cores, load average {load_avg[0]:.2f} at the start)", flush=True)
        load = sustained(root, args.agents, args.seconds)
        print(f"\nsustained mixed load: {load['seconds']:.0f} s, {load['events']} events in the log, "
              f"{load['stats']['store_batches']} commits of {load['stats']['store_jobs']} jobs")
        rows = table(load["latency"], load["errors"], load["seconds"])
        print_table(rows)
        empty = sum(v.get("inbox_wait_empty", 0) for v in load["extra"].values())
        print(f"inbox --wait that ran out with nothing new (not timed, not errors): {empty}")
        print("\nbroker RSS and database size over time:")
        step = max(1, len(load["rss"]) // 12)
        for t, rss, size in load["rss"][::step] + ([load["rss"][-1]] if (len(load["rss"]) - 1) % step else []):
            print(f"  t={t:>6.0f} s  RSS {rss:>7.1f} MB  database {size:>7.1f} MB")
        midway = load["midway"]
        if midway is not None:
            print(f"verify under load (half way): {'ok' if midway['ok'] else 'FAILED'} in {midway['seconds']:.1f} s"
                  + ("" if midway["ok"] else ": " + midway["output"]))
        print(f"verify after the load: {'ok' if load['verify_ok'] else 'FAILED'} in {load['verify_seconds']:.1f} s"
              + ("" if load["verify_ok"] else ": " + "; ".join(load["verify_problems"])))
        crowd = herd(root, args.herd, args.rounds)
        print(f"\nthundering herd: {args.herd} clients on one lock, {args.herd} connections waiting on one inbox, {args.rounds} rounds each")
        herd_rows = table(crowd["latency"], crowd["errors"], None)
        print_table(herd_rows)
        print(f"broker peak RSS during the herd: {crowd['peak_rss']:.1f} MB; database after both phases: {db_mb(root / 'state'):.1f} MB")
        errors = sum(load["errors"].values()) + sum(crowd["errors"].values())
        print(f"\nerrors: {errors} (target 0)" + ("" if not errors else "; first: " + " | ".join((load["samples"] + crowd["samples"])[:5])))
        if args.out:
            args.out.write_text(json.dumps({
                "load": {k: v for k, v in load.items() if k not in ("latency", "extra")}, "load_table": rows,
                "herd_table": herd_rows, "herd_peak_rss": crowd["peak_rss"], "load_average_at_start": load_avg,
            }, indent=2, default=str))
        return 0 if errors == 0 and load["verify_ok"] and (midway is None or midway["ok"]) else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
