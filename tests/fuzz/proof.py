"""Prove the fuzzer guards something: switch each defence off in turn and watch it find the hole.

    python -m tests.fuzz.proof [--seconds S] [--only NAME] [-j N]      (make fuzz-proof)

The defences are entries of ``scenarios/_defences.toml`` (one-line patches
the scenario catalogue already uses, ``python -m scenarios.defences``), named
in :data:`DEFENCES` with the area each belongs to.  For each one this copies
the working tree to a scratch directory, applies the patch there (the real
tree is never touched), and runs the fuzzer against the weakened copy -- its
brokers, agents and hooks all import the copy (``source_venv``) -- for at most
``--seconds`` (no shrinking: finding is enough).  A defence is *caught* when
the fuzzer reports a violation.  A control run first fuzzes the unpatched
copy as long, and must find nothing, so a catch is the patch's doing.

The last line is ``fuzz proof: N/M defences caught``; the exit status is
non-zero unless N = M and the control was clean.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agents.harness import source_venv
from scenarios.defences import PatchError, catalogue, copy_tree, switch_off

#: (area, name in scenarios/_defences.toml): at least eight, from at least three areas.
DEFENCES: tuple[tuple[str, str], ...] = (
    ("trust policy", "the author's domain never counts (restarted-author)"),
    ("trust policy", "a domain counts once"),
    ("trust policy", "require_blind needs a blind witness"),
    ("trust policy", "revocation stops a witness counting (collusion audit)"),
    ("trust policy", "disputes count only from independent domains"),
    ("exposures", "a reply that shows a claim records the exposure"),
    ("exposures", "context pushes trusted claims only (MINJA)"),
    ("identity", "identity fields refused on the wire"),
    ("identity", "ticket must come from the agent's tree"),
    ("identity", "exited agent's ticket is revoked"),
    ("identity", "an agent's process is never the operator"),
    ("locks", "a wait that closes a cycle is refused"),
    ("locks", "an exited agent's locks are released"),
    ("mail", "an agent reads only its own mail"),
)


def fuzz_copy(tree: Path, python: Path, seconds: float, seeds: list[int]) -> dict[str, Any]:
    """Run the fuzzer of ``tree`` with its own interpreter; its report as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    argv = [str(python), "-I", "-m", "tests.fuzz.campaign", "--seconds", str(seconds), "--no-shrink", "--json",
            "--out", str(tree / "findings"), *[a for s in seeds for a in ("--seed", str(s))]]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tree, env=env, timeout=seconds * 4 + 600)
    last = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        report = json.loads(last[0])
    except json.JSONDecodeError:
        return {"finding": {"invariant": "crash", "error": (done.stderr or done.stdout).strip()[-600:]}, "figures": {}}
    return report


def check(name: str, defence: dict[str, Any] | None, seconds: float, seeds: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cvf-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        python = source_venv(Path(tmp), tree)
        if defence is not None:
            target = tree / defence["file"]
            try:
                target.write_text(switch_off(defence, target.read_text()))
            except PatchError as exc:
                return {"name": name, "caught": False, "why": str(exc), "seconds": 0.0}
        began = time.monotonic()
        report = fuzz_copy(tree, python, seconds, seeds)
    finding = report.get("finding")
    return {
        "name": name,
        "caught": finding is not None,
        "why": f"[{finding['invariant']}] {finding['error'][:300]}" if finding else "nothing found",
        "seed": finding.get("seed") if finding else None,
        "seconds": round(time.monotonic() - began, 1),
        "steps": report.get("figures", {}).get("steps", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.proof", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_PROOF_SECONDS", 180)),
                        help="fuzzing time per defence (default 180, or FUZZ_PROOF_SECONDS)")
    parser.add_argument("--only", action="append", help="only the named defence(s)")
    parser.add_argument("--seed", type=int, action="append", default=[], help="seeds to start each run with (random ones follow)")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--no-control", action="store_true", help="skip the unpatched control run")
    args = parser.parse_args(argv)
    by_name = {d["name"]: d for d in catalogue()}
    chosen = [(area, name) for area, name in DEFENCES if not args.only or name in args.only]
    missing = [name for _, name in chosen if name not in by_name]
    if missing:
        print(f"fuzz proof: not in scenarios/_defences.toml: {missing}", file=sys.stderr)
        return 2
    jobs: list[tuple[str, dict[str, Any] | None]] = [] if args.no_control else [("control (no defence off)", None)]
    jobs += [(name, by_name[name]) for _, name in chosen]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda job: check(job[0], job[1], args.seconds, args.seed), jobs))
    areas = dict((name, area) for area, name in DEFENCES)
    control_clean = True
    for r in results:
        if r["name"].startswith("control"):
            control_clean = not r["caught"]
            print(f"{'ok  ' if control_clean else 'FAIL'} {r['name']:<58} {r['steps']:>5} steps {r['seconds']:>6.0f} s  {r['why']}")
            continue
        print(f"{'ok  ' if r['caught'] else 'MISS'} {areas[r['name']] + ': ' + r['name']:<58} {r['steps']:>5} steps {r['seconds']:>6.0f} s  {r['why']}")
    caught = sum(r["caught"] for r in results if not r["name"].startswith("control"))
    total = len(chosen)
    if not control_clean:
        print("fuzz proof: the control run (every defence on) reported a violation: fix the model or the broker first")
    print(f"fuzz proof: {caught}/{total} defences caught")
    return 0 if caught == total and control_clean else 1


if __name__ == "__main__":
    sys.exit(main())
