"""The commit guard's cost per commit, against the same commit without it, in the same run.

A real broker with one puppet agent, ``alice``, in the strongest box this machine offers
(``strict``: she commits in a git directory of her own), holding ``work/**`` and ``git``.
Inside her box a timer commits, in turn (so the machine's load hits every variant alike):

* ``plain``     a commit in a scratch repository of her own with the same files, no hook at all
                (the floor: git);
* ``python``    the floor of any Python hook: ``python -I -S -c pass``;
* ``guarded``   a commit in her git directory: conclave's reference-transaction hook asks the
                broker, which copies the commit in (verified), checks the locks and content,
                moves the person's branch and the person's index, and answers.

The guard's cost is ``guarded - plain`` (target: within 100 ms p50 per commit).

Then what git adds to a spawn (target: a box within +20 ms of an unboxed spawn, measured by
``bench/broker_bench.py``; here the part that is git's): the same box built and started with
and without its git -- strict with its own git directory made and bound over ``.git``,
landlock with ``.git`` carved out of the tree's write grant -- interleaved, ``--spawns`` each,
on a repository of 500 files.

    .venv/bin/python bench/git_bench.py [--count 40] [--spawns 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TIMER = textwrap.dedent(
    """
    import json, os, subprocess, sys, tempfile, time
    repo, count = sys.argv[1], int(sys.argv[2])
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    scratch = tempfile.mkdtemp()
    subprocess.run(["git", "init", "-q", scratch], check=True)
    for entry in os.listdir(repo):  # the same tree as the agent's, so git stats as many files
        if entry != ".git":
            subprocess.run(["cp", "-r", os.path.join(repo, entry), scratch], check=True)
    subprocess.run(["git", "-C", scratch, "add", "-A"], check=True)
    subprocess.run(["git", "-C", scratch, *ident, "commit", "-qm", "init"], check=True)
    samples = {"plain": [], "python": [], "guarded": []}
    def commit(where, i):
        with open(os.path.join(where, "work", f"f{i % 20}.txt"), "a") as f:
            f.write(f"{i}\\n")
        subprocess.run(["git", "-C", where, "add", "work"], check=True)
        t0 = time.perf_counter()
        done = subprocess.run(["git", "-C", where, *ident, "commit", "-qm", f"commit {i}"], capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        return elapsed
    for i in range(count + 3):
        plain = commit(scratch, i)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        python = time.perf_counter() - t0
        guarded = commit(repo, i)
        if i >= 3:
            samples["plain"].append(plain)
            samples["python"].append(python)
            samples["guarded"].append(guarded)
    print(json.dumps(samples))
    """
)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spawn_costs(tmp: Path, rounds: int) -> dict[str, list[float]]:
    """Seconds to build and start a box around `/bin/true`, with and without its git, interleaved."""
    import itertools
    import subprocess
    import threading
    import time

    from agents.harness import make_repo
    from broker.sandbox import box, gitlayout, machine
    from broker.sandbox.gitviews import GitViews

    found = machine.probe()
    repo = make_repo(tmp / "spawn", {f"src/m{i // 50}/f{i}.py": f"x = {i}\n" for i in range(500)})
    layout = gitlayout.check(repo)
    views = GitViews(layout, tmp / "spawn-state", python=sys.executable)
    (tmp / "spawn-agent").mkdir()
    sessions = itertools.count()
    levels = [level for level in ("strict", "landlock") if found.offers(level) is None]

    def spawn(level: str, with_git: bool, out: list[float]) -> None:
        t0 = time.perf_counter()
        session = f"b{next(sessions)}"
        git = None
        if with_git:
            git = box.GitBox(repo, layout.git_dir, views.create(session).path if level == "strict" else None, layout.protected)
        built = box.build(level, ["/bin/true"], machine=found, repo=repo, state=tmp / "spawn-state", agent_dir=tmp / "spawn-agent",
                          socket_path=tmp / "s.sock", session=session, git=git)  # fmt: skip
        subprocess.run(list(built.argv), cwd=repo, check=True)
        out.append(time.perf_counter() - t0)
        built.release()

    samples: dict[str, list[float]] = {f"{level}{suffix}": [] for level in levels for suffix in ("", "+git")}
    for _ in range(rounds):
        for name in samples:
            got: list[float] = []
            worker = threading.Thread(target=spawn, args=(name.removesuffix("+git"), name.endswith("+git"), got))
            worker.start()
            worker.join()
            samples[name] += got
    views.close()
    return samples


def main() -> None:
    from agents.harness import Run
    from broker.sandbox import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--spawns", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    level = machine.probe().strongest
    files = {f"work/f{i}.txt": f"{i}\n" for i in range(20)} | {f"other/g{i}.txt": "x\n" for i in range(300)}
    with tempfile.TemporaryDirectory(prefix="cvg-") as tmp:
        with Run(Path(tmp), [{"name": "alice", "sandbox": level}], files=files) as run:
            alice = run.puppet("alice")
            alice.call("lock.acquire", resources=["work/**", "git"])
            out = alice.sh(sys.executable, "-I", "-c", TIMER, str(run.repo), str(args.count), timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"the timer failed: {out.stderr[-2000:]}")
            samples = json.loads(out.stdout)
            brought = run.person_git("rev-list", "--count", "HEAD").stdout.strip()
        spawns = spawn_costs(Path(tmp), args.spawns)
    p50 = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    spawn_p50 = {k: statistics.median(v) * 1000 for k, v in spawns.items()}
    added = p50["guarded"] - p50["plain"]
    result = {"level": level, "count": args.count, "p50_ms": p50, "p90_ms": {k: pct(v, 0.9) * 1000 for k, v in samples.items()},
              "guard_added_p50_ms": added, "person_commits": int(brought), "spawn_p50_ms": spawn_p50,
              "spawn_git_added_p50_ms": {k: spawn_p50[f"{k}+git"] - spawn_p50[k] for k in spawn_p50 if not k.endswith("+git")}}  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"commit guard, {args.count} commits each, in a {level} box (python {sys.version.split()[0]})")
    for name in ("plain", "python", "guarded"):
        print(f"  {name:<8} p50 {p50[name]:7.1f} ms   p90 {result['p90_ms'][name]:7.1f} ms")
    print(f"  the guard adds {added:.1f} ms p50 per commit (target <= 100 ms); the person's branch has {brought} commits")
    print(f"spawn of `true` in a box, with and without its git, {args.spawns} each")
    for level, git_added in result["spawn_git_added_p50_ms"].items():
        print(f"  {level:<8} p50 {spawn_p50[level]:7.1f} ms, with its git {spawn_p50[level + '+git']:7.1f} ms: git adds {git_added:+.1f} ms")


if __name__ == "__main__":
    main()
