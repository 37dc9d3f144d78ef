"""Does watching a run slow the broker?  The whoami round trip with streaming on and off.

Run: ``.venv/bin/python bench/run_view.py`` (about four minutes on 2 cores;
``--agents 32 --rate 100`` are the defaults: 3,200 lines a second into the logs).

Each round starts the same team twice on a fresh scratch repository: once
with ``conclave run --quiet`` (nothing shown: the agents write their logs and
the broker never reads them) and once with the view on (the broker tails
every log and writes each line, prefixed, to a pipe this script drains as a
fast terminal would).  The team is ``--agents`` chatty agents printing
``--rate`` lines a second each, plus one prober agent that, after a warm-up,
calls ``whoami`` back to back for ``--seconds`` and records every round trip
and the broker's CPU time over the same window (from ``/proc``; the broker
is the prober's parent), then sends nothing for ``--idle`` seconds and takes
the broker's CPU again: what the agents' output alone costs it.  Rounds alternate the order (quiet first, then view
first) so drift on a shared machine falls on both sides.  Printed: the
median over rounds of each mode's p50 and p99 round trip, their ratio, and
the broker's CPU share.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.harness import make_repo  # noqa: E402
from broker.entry import conclave_argv  # noqa: E402

CHATTY = """
import sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
line = "x" * 72
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    i += 1
    print(f"{i:07d} {line}", flush=True)
    time.sleep(1 / rate)
"""

PROBER = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from broker.client import BlockingClient
warmup, seconds, idle, out = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
tick = os.sysconf("SC_CLK_TCK")
def broker_cpu():
    stat = open(f"/proc/{os.getppid()}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / tick
time.sleep(warmup)
samples = []
with BlockingClient.for_agent() as client:
    for _ in range(200):
        client.call("whoami")
    cpu0, t0 = broker_cpu(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        a = time.perf_counter()
        client.call("whoami")
        samples.append(time.perf_counter() - a)
    cpu1, t1 = broker_cpu(), time.monotonic()
# Then no requests at all: what the broker spends on the agents' output alone.
time.sleep(idle)
cpu2, t2 = broker_cpu(), time.monotonic()
json.dump({"samples": samples, "cpu": (cpu1 - cpu0) / (t1 - t0), "idle_cpu": (cpu2 - cpu1) / (t2 - t1)}, open(out, "w"))
"""


def team(tmp: Path, repo: Path, agents: int, rate: float, seconds: float, warmup: float, idle: float) -> Path:
    # Inside the work tree: a boxed agent sees its tree, not the rest of /tmp.
    scripts = repo / "bench-agents"
    scripts.mkdir(exist_ok=True)
    (scripts / "chatty.py").write_text(CHATTY)
    (scripts / "prober.py").write_text(PROBER)
    total = warmup + seconds + idle + 2
    lines = [
        "[[agent]]",
        'name = "prober"',
        f"command = {json.dumps([sys.executable, str(scripts / 'prober.py'), str(ROOT), str(warmup), str(seconds), str(idle), str(scripts / 'probe.json')])}",
    ]
    for i in range(agents):
        lines += ["", "[[agent]]", f'name = "chatty{i}"', f"command = {json.dumps([sys.executable, str(scripts / 'chatty.py'), str(rate), str(total)])}"]
    path = tmp / "team.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_run(quiet: bool, agents: int, rate: float, seconds: float, warmup: float, idle: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cv-bench-") as tmp_name:
        tmp = Path(tmp_name)
        repo = make_repo(tmp)
        team_file = team(tmp, repo, agents, rate, seconds, warmup, idle)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        argv = conclave_argv("run", "--team", str(team_file), "--repo", str(repo), "--state-dir", str(tmp / "state"), *(["--quiet"] if quiet else []))
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        shown = [0]

        def drain() -> None:  # a fast terminal: read everything, keep nothing
            assert process.stdout is not None
            for chunk in iter(lambda: process.stdout.read1(1 << 16), b""):  # type: ignore[union-attr]
                shown[0] += chunk.count(b"\n")

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        process.wait(timeout=warmup + seconds + idle + 120)
        reader.join(timeout=10)
        if process.returncode != 0:
            raise SystemExit(f"the run failed ({process.returncode}): {process.stderr.read().decode()[-2000:] if process.stderr else ''}")
        probe = json.loads((repo / "bench-agents" / "probe.json").read_text())
        logged = sum(len(p.read_bytes().splitlines()) for p in (tmp / "state" / "logs").glob("chatty*.log"))
        samples = sorted(probe["samples"])
        return {
            "mean": statistics.fmean(samples) * 1e6,
            "p50": samples[len(samples) // 2] * 1e6,
            "p99": samples[int(len(samples) * 0.99)] * 1e6,
            "calls": len(samples),
            "cpu": probe["cpu"] * 100,
            "idle_cpu": probe["idle_cpu"] * 100,
            "shown": shown[0],
            "logged": logged,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--rate", type=float, default=100.0, help="lines per second per chatty agent")
    parser.add_argument("--seconds", type=float, default=6.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--idle", type=float, default=3.0, help="then seconds with no requests: the broker's CPU for the output alone")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"quiet": [], "view": []}
    for r in range(args.rounds):
        order = ("quiet", "view") if r % 2 == 0 else ("view", "quiet")
        for mode in order:
            res = one_run(mode == "quiet", args.agents, args.rate, args.seconds, args.warmup, args.idle)
            results[mode].append(res)
            print(f"round {r + 1} {mode:5}: whoami mean {res['mean']:5.0f} us  p50 {res['p50']:5.0f} us  p99 {res['p99']:6.0f} us  "
                  f"({res['calls']:.0f} calls)  broker CPU {res['cpu']:5.1f}%, idle {res['idle_cpu']:4.1f}%  lines logged {res['logged']:.0f}, shown {res['shown']:.0f}", flush=True)  # fmt: skip

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in results[mode])

    print()
    print(f"{args.agents} agents x {args.rate:g} lines/s, whoami back to back for {args.seconds:g} s, median of {args.rounds} rounds")
    print(f"{'':14}{'mean (us)':>10}{'p50 (us)':>10}{'p99 (us)':>10}{'broker CPU':>12}{'idle CPU':>10}")
    for mode, label in (("quiet", "--quiet"), ("view", "view on")):
        print(f"{label:14}{med(mode, 'mean'):10.0f}{med(mode, 'p50'):10.0f}{med(mode, 'p99'):10.0f}{med(mode, 'cpu'):11.1f}%{med(mode, 'idle_cpu'):9.1f}%")
    ratio = [med("view", k) / med("quiet", k) for k in ("mean", "p50", "p99")]
    print(f"{'ratio':14}{ratio[0]:10.2f}{ratio[1]:10.2f}{ratio[2]:10.2f}")


if __name__ == "__main__":
    main()
