"""What an agent's box adds to one spawn: the launcher and its setup at each level, against a bare spawn.

    .venv/bin/python bench/spawn_bench.py [--rounds 100] [--json] [--registered 1500]
    .venv/bin/python bench/compare.py --base main --scripts this --repeat 3 -- bench/spawn_bench.py --json

Spawns ``/bin/true`` from a fresh thread each time (as trio spawns), interleaved,
bare and through the launcher with the policy a real agent gets (``box.build`` on a
scratch repository; a strict spawn also makes the agent's own git directory first,
on a repository of 500 files and 50 branches, where the tree has them).  Prints, per level, the wall clock added (p50, p90) and the
CPU time added (user + system of the spawned processes, from RUSAGE_CHILDREN): on a
loaded machine the wall clock mostly measures the wait for a core, the CPU time
what the box itself costs.  Only ``box.build`` and ``machine.probe`` are used, so
``compare.py --scripts this`` runs the same driver against an older tree.

``--registered N`` measures instead what ``box.build`` itself costs the broker (its
CPU per agent, each level) when the person's registry names N existing state
directories -- every one is denied to every agent, so a user's history of runs is
on every spawn's path -- against an empty registry in the same run.
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
    views = _git_views(repo, tmp / "box-state")
    (tmp / "box-agent").mkdir()
    argv = {"plain": ["/bin/true"]}
    boxes = []
    for level in ("off", "landlock", "strict"):
        if found.offers(level) is None:
            built = box.build(level, ["/bin/true"], machine=found, repo=repo, state=tmp / "box-state", agent_dir=tmp / "box-agent",
                              socket_path=tmp / "box.sock", session=f"bench-{level}", **_git_box(views, level, f"bench-{level}"))  # fmt: skip
            argv[level] = list(built.argv)
            boxes.append(built)
    samples: dict[str, list[float]] = {k: [] for k in argv}
    cpu: dict[str, list[float]] = {k: [] for k in argv}
    sessions = iter(range(10**6))

    def spawn(command: list[str], out: list[float]) -> None:
        t0 = time.perf_counter()
        fresh = None
        if views is not None and "--ns" in command:
            # A strict spawn also pays for the agent's own git directory, made for it (in the broker).
            session = f"bench{next(sessions)}"
            fresh = box.build("strict", ["/bin/true"], machine=found, repo=repo, state=tmp / "box-state", agent_dir=tmp / "box-agent",
                              socket_path=tmp / "box.sock", session=session, **_git_box(views, "strict", session))  # fmt: skip
            command = list(fresh.argv)
        subprocess.run(command, cwd=repo, check=True)
        out.append(time.perf_counter() - t0)
        if fresh is not None:
            fresh.release()
            views.dirs.pop(session).remove()

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
    if views is not None:
        for session in list(views.dirs):
            views.dirs.pop(session).remove()
        views.close()
    return samples, cpu


def _git_views(repo: Path, state: Path):  # type: ignore[no-untyped-def]
    """The owner of agents' git directories, on a repository of 500 files and 50 branches -- or None
    in a tree from before agents had git directories of their own (compare.py --scripts this)."""
    try:
        from broker.sandbox import gitlayout
        from broker.sandbox.gitviews import GitViews
    except ImportError:
        return None
    for i in range(500):
        path = repo / "src" / f"m{i // 50}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"x = {i}\n")
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-qm", "bench"], check=True)
    for i in range(50):
        subprocess.run(["git", "-C", str(repo), "branch", f"topic-{i}"], check=True)
    return GitViews(gitlayout.check(repo), state, python=sys.executable)


def _git_box(views, level: str, session: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    if views is None or level == "off":
        return {}
    from broker.sandbox import box

    agent_git_dir = views.create(session).path if level == "strict" else None
    return {"git": box.GitBox(views.layout.repo, views.layout.git_dir, agent_git_dir, views.layout.protected)}


def build_cost(tmp: Path, registered: int, rounds: int) -> dict[str, dict[str, float]]:
    """``box.build``'s CPU per call (ms, median of ``rounds``) at each level, with an empty registry and with
    ``registered`` state directories (made, half under the private /tmp, half under the home's state root)."""
    import resource

    from broker import paths as paths_mod
    from broker.sandbox import box, machine

    found = machine.probe()
    repo = tmp / "cost-repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (tmp / "cost-agent").mkdir()
    home = tmp / "home"
    os.environ["HOME"], os.environ["XDG_STATE_HOME"] = str(home), str(home / ".local" / "state")
    registry = paths_mod.state_roots()[0]
    registry.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(registered):
        where = (tmp / "runs" if i % 2 else registry / "runs") / f"run-{i}"
        where.mkdir(parents=True)
        made.append(os.path.realpath(where))
    result: dict[str, dict[str, float]] = {}
    for level in ("landlock", "strict"):
        if found.offers(level) is not None:
            continue
        for label, lines in (("empty", []), ("registered", made)):
            (registry / paths_mod.STATE_REGISTRY_NAME).write_text("".join(f"{line}\n" for line in lines))
            took, launched = [], []
            for i in range(rounds):
                before = time.process_time()
                built = box.build(level, ["/bin/true"], machine=found, repo=repo, state=tmp / "cost-state",
                                  agent_dir=tmp / "cost-agent", socket_path=tmp / "cost.sock", session=f"cost-{level}-{i}")  # fmt: skip
                took.append(time.process_time() - before)
                children = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(built.argv, env={**os.environ, **built.env}, cwd=repo, check=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                launched.append(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime)
                built.release()
            result.setdefault(level, {})[f"{label}_ms"] = statistics.median(took) * 1000
            result[level][f"{label}_launch_ms"] = statistics.median(launched) * 1000
    return result


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--registered", type=int, default=0, help="measure box.build's CPU with this many registered state directories")
    args = parser.parse_args()
    if args.registered:
        with tempfile.TemporaryDirectory(prefix="cvsb-") as tmp:
            cost = build_cost(Path(tmp), args.registered, min(args.rounds, 50))
        if args.json:
            print(json.dumps(cost))
            return
        print(f"CPU per agent spawn, {args.registered} registered state directories vs none (median):")
        for level, r in cost.items():
            print(f"  {level:<9} box.build (broker) {r['registered_ms']:.1f} ms vs {r['empty_ms']:.1f} ms ({r['registered_ms'] / r['empty_ms']:.2f}x);"
                  f" the launch {r['registered_launch_ms']:.1f} ms vs {r['empty_launch_ms']:.1f} ms ({r['registered_launch_ms'] / r['empty_launch_ms']:.2f}x)")
        return
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
