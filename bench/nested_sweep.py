"""What the broker's sweep for repositories made in the work tree costs (broker/main.py ``_quarantine_nested``).

The sweep walks the whole tree (``broker.sandbox.nested.nested_repositories``) every NESTED_SWEEP seconds, or,
when a walk is slow, every twenty walks' time: at most 5% of a core.  This builds scratch trees of N
directories (ten files each) and prints the walk's time, the interval the sweep then keeps, its share of a
core, and against it the baseline of the same run: ``os.walk`` over the same tree (what any walker pays).

    python bench/nested_sweep.py --dirs 1000 10000 50000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.main import NESTED_SWEEP  # noqa: E402
from broker.sandbox.nested import nested_repositories  # noqa: E402


def build(root: Path, dirs: int) -> None:
    """``dirs`` directories, 30 to a level, ten empty files in each."""
    made = 0
    frontier = [root]
    while made < dirs:
        parent = frontier.pop(0)
        for i in range(min(30, dirs - made)):
            d = parent / f"d{i}"
            d.mkdir()
            for f in range(10):
                (d / f"f{f}.txt").touch()
            frontier.append(d)
            made += 1


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dirs", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'dirs':>8} {'walk ms':>9} {'os.walk ms':>11} {'ratio':>6} {'interval s':>11} {'core %':>7}")
    for dirs in args.dirs:
        root = Path(tempfile.mkdtemp(prefix="nested-sweep-"))
        try:
            build(root, dirs)
            walk = timed(lambda: nested_repositories(root), args.repeat)
            base = timed(lambda: sum(1 for _ in os.walk(root)), args.repeat)
            interval = max(NESTED_SWEEP, 20 * walk)
            print(f"{dirs:>8} {walk * 1e3:>9.1f} {base * 1e3:>11.1f} {walk / base:>6.2f} {interval:>11.1f} {100 * walk / (interval + walk):>7.1f}")
        finally:
            shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
