"""Edit-hook latency per call, as Claude Code and Codex pay it, against a no-op hook in the same run.

A real broker with one puppet agent, ``alice``, holding an exclusive lock on
``src/a.py``.  Inside alice's process tree this script (``--worker``) runs
each hook the way the agents do -- ``/bin/sh -c "<command>"`` with the event
JSON on stdin, waiting for it to exit -- round-robin, so drift in the
machine's load hits every variant alike:

* ``noop``            ``sh -c true``: the floor any command hook pays (fork, exec, sh);
* ``python``          the interpreter alone, as the hook starts it (``python -I -c pass``);
* ``python-nosite``   the interpreter without ``site`` (``-I -S``): the floor of any Python hook;
* ``read``            the installed PreToolUse hook on a Read (decided without the broker);
* ``edit-allowed``    the installed hook on an Edit of the locked file (connect, hello, lock.check_edit);
* ``edit-denied``     the same on an unlocked file (the JSON deny);
* ``patch-allowed``   the same hook on a Codex apply_patch of the locked file;
* ``stop``            the installed Stop hook with no mail (connect, hello, msg.inbox);
* ``cli-edit``        ``conclave hook pre-tool-use`` (the typer CLI: what the preset ran before).

    .venv/bin/python bench/hook_bench.py [--count 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def variants(repo: str) -> dict[str, tuple[str, str]]:
    """name -> (shell command, stdin)."""
    import shlex

    from agents.hooks import command

    edit = lambda path: json.dumps({"session_id": "s", "cwd": repo, "hook_event_name": "PreToolUse", "tool_name": "Edit",  # noqa: E731
                                    "tool_input": {"file_path": f"{repo}/{path}", "old_string": "a", "new_string": "b"}})
    patch = json.dumps({"session_id": "s", "cwd": repo, "hook_event_name": "PreToolUse", "tool_name": "apply_patch",
                        "tool_input": {"command": "*** Begin Patch\n*** Update File: src/a.py\n@@\n-a\n+b\n*** End Patch\n"}})
    read = json.dumps({"session_id": "s", "cwd": repo, "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {"file_path": f"{repo}/src/a.py"}})
    stop = json.dumps({"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": False})
    pre, python = command("pre-tool-use"), shlex.join([sys.executable, "-I", "-c", "pass"])
    cli = shlex.join([sys.executable, "-I", "-m", "broker.cli", "hook", "pre-tool-use"])
    return {
        "noop": ("true", edit("src/a.py")),
        "python": (python, edit("src/a.py")),
        "python-nosite": (shlex.join([sys.executable, "-I", "-S", "-c", "pass"]), edit("src/a.py")),
        "read": (pre, read),
        "edit-allowed": (pre, edit("src/a.py")),
        "edit-denied": (pre, edit("src/free.py")),
        "patch-allowed": (pre, patch),
        "stop": (command("stop"), stop),
        "cli-edit": (cli, edit("src/a.py")),
    }


def worker(repo: str, count: int) -> None:
    """Inside the agent: time every variant ``count`` times, round-robin; print the samples."""
    table = variants(repo)
    samples: dict[str, list[float]] = {name: [] for name in table}
    expect = {"edit-allowed": "", "patch-allowed": "", "read": "", "stop": "", "cli-edit": ""}
    for _ in range(count):
        for name, (cmd, stdin) in table.items():
            began = time.perf_counter()
            done = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True)
            samples[name].append(time.perf_counter() - began)
            if name in expect and done.stdout.strip() != expect[name]:
                raise SystemExit(f"{name}: unexpected answer {done.stdout!r} {done.stderr!r}")
            if name == "edit-denied" and '"deny"' not in done.stdout:
                raise SystemExit(f"edit-denied was not denied: {done.stdout!r}")
    print(json.dumps(samples))


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": pick(0.5) * 1e3, "p90_ms": pick(0.9) * 1e3, "mean_ms": statistics.fmean(ordered) * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", metavar="REPO", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.count)
        return 0

    from agents.harness import Run

    with tempfile.TemporaryDirectory(prefix="hook-bench-") as tmp:
        with Run(Path(tmp), [{"name": "alice"}], files={"src/a.py": "a = 1\n", "src/free.py": "f = 1\n"}) as run:
            alice = run.puppet("alice")
            alice.call("lock.acquire", resources=["src/a.py"])
            done = alice.sh(sys.executable, __file__, "--worker", str(run.repo), "--count", str(args.count), timeout=3600)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                return 1
            samples = json.loads(done.stdout)
    results = {name: summary(values) for name, values in samples.items()}
    noop = results["noop"]["p50_ms"]
    for row in results.values():
        row["x_noop_p50"] = row["p50_ms"] / noop
        row["over_noop_p50_ms"] = row["p50_ms"] - noop
    if args.json:
        print(json.dumps({"count": args.count, "results": results}, indent=2))
        return 0
    print(f"edit hooks, {args.count} calls each, round-robin, inside one agent's tree")
    print(f"{'variant':<15} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8} {'x noop':>7} {'+noop ms':>9}")
    for name, row in results.items():
        print(f"{name:<15} {row['p50_ms']:8.1f} {row['p90_ms']:8.1f} {row['mean_ms']:8.1f} {row['x_noop_p50']:7.1f} {row['over_noop_p50_ms']:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
