"""What a change to the box costs one spawn: two trees' boxes, measured in turn on this machine.

    .venv/bin/python bench/box_compare.py /work/main .          # 3 alternations of 40 rounds (default)
    .venv/bin/python bench/box_compare.py A B --rounds 60 --turns 5

Each turn builds each tree's boxes (``box.build``, as ``spawn_bench.box_overhead``
does) in a process of its own (so each imports its own ``broker``), one tree
after the other, and prints the
p50 wall time and CPU time (user + system) a spawn at each level adds over a
bare spawn of ``/bin/true`` in the same process.  Alternating the trees
shares the machine's load between them; the CPU time is what load inflates
least.  Results are ratios of the same run, never absolute targets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ONE = r"""
import json, resource, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path
root, rounds = sys.argv[1], int(sys.argv[2])
sys.path[:0] = [root]
from broker.sandbox import box, machine
assert box.__file__.startswith(root), box.__file__
found, tmp = machine.probe(), Path(tempfile.mkdtemp(prefix="cvb-"))
repo = tmp / "box-repo"
subprocess.run(["git", "init", "-q", str(repo)], check=True)
(tmp / "box-agent").mkdir()
argv = {"plain": ["/bin/true"]}
for level in ("off", "landlock", "strict"):
    if found.offers(level) is None:
        argv[level] = list(box.build(level, ["/bin/true"], machine=found, repo=repo, state=tmp / "box-state",
                                     agent_dir=tmp / "box-agent", socket_path=tmp / "box.sock", session=f"cmp-{level}").argv)
wall, cpu = {k: [] for k in argv}, {k: [] for k in argv}
def spawn(command):
    subprocess.run(command, cwd=repo, check=True)
for _ in range(rounds):
    for name, command in argv.items():
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        worker = threading.Thread(target=spawn, args=(command,))  # a fresh thread, as trio spawns
        worker.start()
        worker.join()
        wall[name].append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[name].append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
out = {}
for name in argv:
    if name != "plain":
        out[name] = (statistics.median(wall[name]) - statistics.median(wall["plain"])) * 1000
        out["cpu:" + name] = (statistics.median(cpu[name]) - statistics.median(cpu["plain"])) * 1000
print(json.dumps(out))
"""

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs=2, type=Path)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, list[dict[str, float]]] = {str(t): [] for t in args.trees}
    for _ in range(args.turns):
        for tree in args.trees:
            done = subprocess.run([sys.executable, "-c", ONE, str(tree.resolve()), str(args.rounds)], capture_output=True, text=True, check=True)
            found[str(tree)].append(json.loads(done.stdout))
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"added to a spawn of /bin/true, p50 of {args.rounds} rounds, median of {args.turns} turns (load average {load} at the end)")
    keys = sorted({k for runs in found.values() for run in runs for k in run})
    print(f"  {'':<16}" + "".join(f"{str(t):>22}" for t in args.trees))
    for key in keys:
        cells = [statistics.median(run.get(key, float("nan")) for run in runs) for runs in found.values()]
        label = f"{key[4:]} CPU" if key.startswith("cpu:") else f"{key} wall"
        print(f"  {label:<16}" + "".join(f"{c:>19.1f} ms" for c in cells))


if __name__ == "__main__":
    main()
