"""What a burst of agents' output costs the broker: 100,000 lines from 8 agents at once.

Run: ``.venv/bin/python bench/burst.py`` (about two minutes on 2 cores; ``--rounds``,
``--lines`` per agent, ``--agents``).

The broker reads every agent's output through a pipe, writes it to the agent's log
(broker.capture) and, unless the run is quiet, hands every line to the run view, which
writes it -- to a file here, where nothing may be dropped (broker.output).  Each round
runs the same team three ways on a fresh scratch repository:

* ``silent``: the agents do the same work but print nothing (the baseline);
* ``quiet``: they print the burst, ``conclave run --quiet`` (logs only);
* ``file``: they print the burst, the view written to a file.

A prober agent reads the broker's CPU time (``/proc/<broker>/stat``, the broker is its
parent) when the agents start and once they have all finished (each touches a file when
its last line is out; the prober then waits for the broker to say it has drained, through
``conclave agents``), so the figure is the broker's CPU for the burst alone.  Printed:
the median broker CPU seconds and the burst's wall time per mode, and the ratios
against ``silent`` from the same run; in ``file`` mode the script checks that the file
holds every line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.harness import make_repo, toml_value  # noqa: E402
from broker.entry import conclave_argv  # noqa: E402

BURST = """
import os, sys
n, name, loud, done = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4]
out = sys.stdout if loud else open(os.devnull, "w")
for i in range(n):
    out.write(f"{name} {i:07d} the quick brown fox jumps over the lazy dog\\n")
out.flush()
open(done, "w").close()
"""

PROBER = """
import json, os, sys, time
agents, flags, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tick = os.sysconf("SC_CLK_TCK")
def broker_cpu():
    stat = open(f"/proc/{os.getppid()}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / tick
os.makedirs(flags, exist_ok=True)
open(os.path.join(flags, "go"), "w").close()
cpu0, t0 = broker_cpu(), time.monotonic()
while len([f for f in os.listdir(flags) if f.startswith("done-")]) < agents:
    time.sleep(0.01)
t1 = time.monotonic()
time.sleep(1.0)  # the broker finishes writing what the pipes still held
cpu1 = broker_cpu()
json.dump({"cpu": cpu1 - cpu0, "wall": t1 - t0}, open(out, "w"))
"""


def team(repo: Path, agents: int, lines: int, loud: bool) -> Path:
    scripts = repo / "bench-agents"  # inside the work tree: a boxed agent reads it
    scripts.mkdir(exist_ok=True)
    (scripts / "burst.py").write_text(BURST)
    (scripts / "prober.py").write_text(PROBER)
    flags = scripts / "flags"
    # Each burst agent waits for the prober's "go" so the window covers all of it.
    wait = f"while [ ! -e {flags}/go ]; do sleep 0.01; done; exec {sys.executable} {scripts / 'burst.py'}"
    entries = [["[[agent]]", 'name = "prober"', f"command = {toml_value([sys.executable, str(scripts / 'prober.py'), str(agents), str(flags), str(scripts / 'probe.json')])}"]]
    for i in range(agents):
        command = ["sh", "-c", f"{wait} {lines} b{i} {int(loud)} {flags}/done-{i}"]
        entries.append(["[[agent]]", f'name = "burst{i}"', f"command = {toml_value(command)}"])
    path = repo.parent / "team.toml"
    path.write_text("\n\n".join("\n".join(e) for e in entries) + "\n")
    return path


def one(mode: str, agents: int, lines: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cv-burst-") as tmp_name:
        tmp = Path(tmp_name)
        repo = make_repo(tmp)
        team_file = team(repo, agents, lines, loud=mode != "silent")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        argv = conclave_argv("run", "--team", str(team_file), "--repo", str(repo), "--state-dir", str(tmp / "state"), *(["--quiet"] if mode == "quiet" else []))
        view = tmp / "view.txt"
        with open(view, "wb") as sink:
            done = subprocess.run(argv, stdout=sink, stderr=subprocess.PIPE, env=env, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"the {mode} run failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
        probe = json.loads((repo / "bench-agents" / "probe.json").read_text())
        if mode == "file":
            shown = sum(1 for line in view.read_bytes().splitlines() if b" | b" in line)
            if shown != agents * lines:
                raise SystemExit(f"the view to a file has {shown} of {agents * lines} lines")
        return probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--lines", type=int, default=12_500, help="lines per agent")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    modes = ("silent", "quiet", "file")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else tuple(reversed(modes))
        for mode in order:
            res = one(mode, args.agents, args.lines)
            results[mode].append(res)
            print(f"round {r + 1} {mode:6}: broker CPU {res['cpu']:5.2f} s over a {res['wall']:5.2f} s burst", flush=True)
    med = {m: (statistics.median(x["cpu"] for x in results[m]), statistics.median(x["wall"] for x in results[m])) for m in modes}
    print()
    print(f"{args.agents} agents x {args.lines:,} lines ({args.agents * args.lines:,} in all), median of {args.rounds} rounds")
    print(f"{'':10}{'broker CPU (s)':>16}{'burst wall (s)':>16}{'CPU vs silent':>15}")
    for mode in modes:
        cpu, wall = med[mode]
        print(f"{mode:10}{cpu:16.2f}{wall:16.2f}{cpu / max(med['silent'][0], 0.01):15.1f}x")


if __name__ == "__main__":
    main()
