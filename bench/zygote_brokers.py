"""What a broker forked from the zygote (scenarios/zygote.py) costs when it judges and embeds claims.

    .venv/bin/python bench/zygote_brokers.py [--brokers 4] [--json]
    .venv/bin/python bench/compare.py --base main --scripts this --repeat 3 -- bench/zygote_brokers.py --json

The scenario catalogue and every test's ``Run`` fork their brokers from one
warm interpreter.  Each broker here starts with one puppet agent, has it
remember an ordinary claim and try a secret-shaped one (refused by the
prefilter's known-format patterns), waits for the background embedder
(``memory.settle``) and stops: what most memory tests and scenarios do first.
CPU (user + system, ms) from ``RUSAGE_CHILDREN`` once the zygote has exited
(it waits for its forks, so their CPU reaches this process):

* ``zygote``: starting and closing a zygote with no broker (its warm imports).
* ``per_broker``: (a zygote with ``--brokers`` brokers, minus ``zygote``) / ``--brokers``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.harness import Run  # noqa: E402
from scenarios.zygote import Zygote  # noqa: E402


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one_broker(root: Path, zygote: Zygote) -> None:
    with Run(root, [{"name": "alice"}], launch=zygote.popen) as run:
        alice = run.puppet("alice")
        alice.call("memory.remember", kind="discovery", text="The billing module rounds invoice totals to whole cents before tax.")
        refused = alice.try_call("memory.remember", kind="discovery", text="CI pushes tags with the token ghp_Zq3mW8xY1vB6nK0pL4sT7uH2cR9dF5gJ8aE1 from the vault.")
        assert not refused["ok"] and refused["error"]["code"] == "rejected", refused
        assert run.op("memory.settle", timeout=120)["settled"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the figures (ms) as JSON, for bench/compare.py")
    args = parser.parse_args()
    before = children_cpu()
    with Zygote():
        pass
    warm = children_cpu() - before
    before = children_cpu()
    with tempfile.TemporaryDirectory(prefix="zygote-bench-") as tmp, Zygote() as zygote:
        for i in range(args.brokers):
            one_broker(Path(tmp) / f"b{i}", zygote)
    total = children_cpu() - before
    figures = {"zygote": round(warm * 1000, 1), "per_broker": round((total - warm) / args.brokers * 1000, 1)}
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name:<12} {value:>8.1f} ms CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
