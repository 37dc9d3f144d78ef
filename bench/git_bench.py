"""The commit guard's cost per commit, against the same commit without it, in the same run.

A real broker with one puppet agent, ``alice``, in the strongest box this machine offers
(``strict``: she commits in a git directory of her own), holding ``work/**`` and ``git``.
Inside her box a timer commits, in turn (so the machine's load hits every variant alike):

* ``plain``     a commit in a scratch repository of her own, no hook at all (the floor: git);
* ``python``    the floor of any Python hook: ``python -I -S -c pass``;
* ``guarded``   a commit in her git directory: conclave's reference-transaction hook asks the
                broker, which copies the commit in (verified), checks the locks and content,
                moves the person's branch and the person's index, and answers.

The guard's cost is ``guarded - plain`` (target: within 100 ms p50 per commit).

    .venv/bin/python bench/git_bench.py [--count 40] [--json]
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
    subprocess.run(["cp", "-r", os.path.join(repo, "work"), scratch], check=True)
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


def main() -> None:
    from agents.harness import Run
    from broker.sandbox import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=40)
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
    p50 = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    added = p50["guarded"] - p50["plain"]
    result = {"level": level, "count": args.count, "p50_ms": p50, "p90_ms": {k: pct(v, 0.9) * 1000 for k, v in samples.items()},
              "guard_added_p50_ms": added, "person_commits": int(brought)}  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"commit guard, {args.count} commits each, in a {level} box (python {sys.version.split()[0]})")
    for name in ("plain", "python", "guarded"):
        print(f"  {name:<8} p50 {p50[name]:7.1f} ms   p90 {result['p90_ms'][name]:7.1f} ms")
    print(f"  the guard adds {added:.1f} ms p50 per commit (target <= 100 ms); the person's branch has {brought} commits")


if __name__ == "__main__":
    main()
