"""What an agent's box adds to one spawn: the launcher and its setup at each level, against a bare spawn.

    .venv/bin/python bench/spawn_bench.py [--rounds 100] [--json]
    .venv/bin/python bench/compare.py --base main --scripts this --repeat 3 -- bench/spawn_bench.py --json

Spawns ``/bin/true`` from a fresh thread each time (as trio spawns), interleaved,
bare and through the launcher with the policy a real agent gets (``box.build`` on a
scratch repository).  Prints, per level, the wall clock added (p50, p90) and the
CPU time added (user + system of the spawned processes, from RUSAGE_CHILDREN): on a
loaded machine the wall clock mostly measures the wait for a core, the CPU time
what the box itself costs.  Only ``box.build`` and ``machine.probe`` are used, so
``compare.py --scripts this`` runs the same driver against an older tree.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def box_overhead(tmp: Path, rounds: int = 100) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock samples and CPU time per spawn (see the module docstring), by level ("plain": no box)."""
    import resource
    import threading

    from broker.sandbox import box, machine

    found = machine.probe()
    repo = tmp / "box-repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (tmp / "box-agent").mkdir()
    argv = {"plain": ["/bin/true"]}
    boxes = []
    for level in ("off", "landlock", "strict"):
        if found.offers(level) is None:
            built = box.build(level, ["/bin/true"], machine=found, repo=repo, state=tmp / "box-state", agent_dir=tmp / "box-agent",
                              socket_path=tmp / "box.sock", session=f"bench-{level}")
            argv[level] = list(built.argv)
            boxes.append(built)
    samples: dict[str, list[float]] = {k: [] for k in argv}
    cpu: dict[str, list[float]] = {k: [] for k in argv}

    def spawn(command: list[str], out: list[float]) -> None:
        t0 = time.perf_counter()
        subprocess.run(command, cwd=repo, check=True)
        out.append(time.perf_counter() - t0)

    def used() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    for _ in range(rounds):
        for name, command in argv.items():
            got: list[float] = []
            before = used()
            worker = threading.Thread(target=spawn, args=(command, got))
            worker.start()
            worker.join()
            cpu[name].append(used() - before)
            samples[name] += got
    for built in boxes:
        built.release()
    return samples, cpu


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cvsb-") as tmp:
        wall, cpu = box_overhead(Path(tmp), args.rounds)
    plain, plain_cpu = statistics.median(wall.pop("plain")), statistics.median(cpu.pop("plain"))
    result = {
        level: {
            "wall_added_ms": (statistics.median(samples) - plain) * 1000,
            "wall_p90_ms": pct(samples, 0.9) * 1000,
            "cpu_added_ms": (statistics.median(cpu[level]) - plain_cpu) * 1000,
        }
        for level, samples in wall.items()
    }
    result["plain"] = {"wall_ms": plain * 1000, "cpu_ms": plain_cpu * 1000}
    if args.json:
        print(json.dumps(result))
        return
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"spawn `true`, {args.rounds} rounds (load average {load}); bare: {plain * 1000:.1f} ms, CPU {plain_cpu * 1000:.1f} ms")
    for level, r in result.items():
        if level != "plain":
            print(f"  {level:<9} +{r['wall_added_ms']:.1f} ms p50 (p90 {r['wall_p90_ms']:.1f} ms), CPU +{r['cpu_added_ms']:.1f} ms   target <= +20 ms")


if __name__ == "__main__":
    main()
