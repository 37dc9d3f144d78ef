"""Before and after in the same run: a benchmark from a base revision and from this tree, alternately.

    .venv/bin/python bench/compare.py --base main --repeat 3 -- bench/locks_bench.py --agents 8 --json
    .venv/bin/python bench/compare.py --base main -- bench/memory_write.py --agents 8 --out {out}

The base revision is checked out in a scratch git worktree and given an
interpreter of its own that imports conclave from there -- also in isolated
mode (``-I``), which every process conclave starts uses
(``agents.harness.source_venv``, as ``python -m scenarios.defences`` does).  The benchmark then runs ``--repeat``
times from each tree, base and this tree in turn, so both see the same
machine.  With ``--scripts this`` the base runs this tree's ``bench/`` scripts
too (the driver is then the same on both sides; use it when the base's own
scripts no longer run).  Its JSON result (``{out}`` in the arguments is replaced by a file
to write it to; otherwise stdout is read as JSON) is reduced to every numeric
leaf, and each leaf is printed as base median, this tree's median, and their
ratio.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.harness import source_venv  # noqa: E402


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, float(value)


def run_once(python: Path, tree: Path, argv: list[str], scratch: Path) -> dict[str, float]:
    out = scratch / "result.json"
    out.unlink(missing_ok=True)
    args = [a.replace("{out}", str(out)) for a in argv]
    done = subprocess.run([str(python), str(tree / args[0]), *args[1:]], cwd=tree, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    text = out.read_text() if "{out}" in " ".join(argv) else done.stdout
    return dict(leaves(json.loads(text)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against (a branch, tag or commit)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keys", default=".", help="only leaves whose path matches this regex")
    parser.add_argument("--scripts", choices=("each", "this"), default="each",
                        help="run each tree's own bench/ scripts (default), or this tree's against both (the same driver for both sides)")
    parser.add_argument("--same-interpreter", action="store_true",
                        help="run this tree through a scratch interpreter made the same way as the base's (no editable-install finder "
                        "in its site): for start-up costs, where that finder's imports would count against this tree alone")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS... (SCRIPT relative to the tree)")
    args = parser.parse_args()
    argv = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not argv:
        parser.error("name the benchmark after --")
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        scratch = Path(tmp)
        base_tree = scratch / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(base_tree), args.base], check=True)
        try:
            if args.scripts == "this":
                shutil.rmtree(base_tree / "bench")
                shutil.copytree(ROOT / "bench", base_tree / "bench", ignore=shutil.ignore_patterns("__pycache__"))
            base_python = source_venv(scratch / "base-venv", base_tree)
            this_python = source_venv(scratch / "this-venv", ROOT) if args.same_interpreter else Path(sys.executable)
            runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
            for i in range(args.repeat):
                for label, python, tree in (("base", base_python, base_tree), ("this", this_python, ROOT)):
                    runs[label].append(run_once(python, tree, argv, scratch))
                    print(f"run {i + 1}/{args.repeat} {label} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
    wanted = re.compile(args.keys)
    keys = [k for k in runs["this"][0] if wanted.search(k) and all(k in r for r in runs["base"] + runs["this"])]
    print(f"{' '.join(argv)}: base {args.base} vs this tree, median of {args.repeat} alternating runs each")
    print(f"{'measure':<48} {'base':>10} {'this':>10} {'this/base':>9}   every run (base | this)")
    for k in keys:
        b = statistics.median(r[k] for r in runs["base"])
        t = statistics.median(r[k] for r in runs["this"])
        every = " ".join(_figure(r[k]) for r in runs["base"]) + " | " + " ".join(_figure(r[k]) for r in runs["this"])
        print(f"{k:<48} {_figure(b, 1):>10} {_figure(t, 1):>10} {t / b if b else float('nan'):>9.3f}   {every}")
    return 0


def _figure(value: float, places: int = 0) -> str:
    """``value`` with ``places`` decimals, or three significant digits when it is small (a CPU time in ms, a ratio)."""
    return f"{value:.{places}f}" if abs(value) >= 100 or value == 0 else f"{value:.3g}"


if __name__ == "__main__":
    sys.exit(main())
