"""What a broker's start and a ``conclave`` command cost in CPU: the test suite's ~400 of each.

    .venv/bin/python bench/startup.py [--runs 5] [--json]
    .venv/bin/python bench/compare.py --base main --scripts this --repeat 3 -- bench/startup.py --json

CPU (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``), averaged
over ``--runs``; on a shared machine the wall clock mostly measures the wait
for a core, the CPU what the process itself costs.  Each figure is in
milliseconds:

* ``broker_start_stop``: ``Run.start`` and ``Run.stop`` of a broker with one
  puppet agent (the harness's ``conclave run`` and the puppet, every process
  they started).  ``broker_ready`` is the broker process's own CPU (from
  ``/proc``) when its agent's puppet first answers.
* ``agent_whoami``: ``conclave whoami --json`` run by the agent, timed by a
  script in its process tree (from inside the box, as the tests do).
* ``operator_recall``: ``conclave memory recall`` as the operator
  (``Run.cli``), on a store holding one claim.
* ``interpreter``: ``python -I -c pass``, what every process costs before
  conclave's first import (the floor of the figures above).

Only ``agents.harness.Run`` and the CLI are used, so ``compare.py --scripts
this`` runs the same driver against an older tree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.harness import Run  # noqa: E402
from broker.entry import conclave_argv  # noqa: E402


def children_cpu() -> float:
    """Seconds of user + system CPU of every child this process has waited for."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def own_cpu(pid: int) -> float:
    """Seconds of user + system CPU process ``pid`` has used itself (not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker(tmp: Path, runs: int) -> tuple[list[float], list[float]]:
    """CPU of a broker's start and stop with one puppet agent, and of the broker alone when ready."""
    total, ready = [], []
    for i in range(runs):
        before = children_cpu()
        run = Run(tmp / f"broker{i}", [{"name": "alice"}])
        run.start(wait_for=["alice"])
        assert run.process is not None
        ready.append(own_cpu(run.process.pid))
        run.puppet("alice").call("whoami")
        run.stop()
        total.append(children_cpu() - before)
    return total, ready


TIMER = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    def cpu():
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        return used.ru_utime + used.ru_stime
    out = []
    for _ in range({runs}):
        before = cpu()
        subprocess.run({argv!r}, check=True, capture_output=True)
        out.append(cpu() - before)
    print(json.dumps(out))
    """
)


def commands(tmp: Path, runs: int) -> tuple[list[float], list[float]]:
    """CPU of ``conclave whoami`` run by an agent, and of ``conclave memory recall`` run by the operator."""
    run = Run(tmp / "cli", [{"name": "alice"}])
    run.start(wait_for=["alice"])
    try:
        alice = run.puppet("alice")
        alice.call("memory.remember", kind="discovery", text="The billing module rounds invoice totals to whole cents before tax.")
        timed = alice.sh(sys.executable, "-c", TIMER.format(runs=runs, argv=conclave_argv("whoami", "--json")))
        if timed.returncode != 0:
            raise SystemExit(f"conclave whoami as an agent failed: {timed.stderr.strip()[-800:]}")
        whoami = json.loads(timed.stdout)
        recall = []
        for _ in range(runs):
            before = children_cpu()
            done = run.cli("memory", "recall", "invoice rounding", "--json")
            recall.append(children_cpu() - before)
            if done.returncode != 0:
                raise SystemExit(f"conclave memory recall failed ({done.returncode}): {done.stderr.strip()[-800:]}")
        return whoami, recall
    finally:
        run.close()


def interpreter(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        before = children_cpu()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        out.append(children_cpu() - before)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the means (ms) as JSON, for bench/compare.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        total, ready = broker(Path(tmp), args.runs)
        whoami, recall = commands(Path(tmp), args.runs)
    figures = {
        "broker_start_stop": total,
        "broker_ready": ready,
        "agent_whoami": whoami,
        "operator_recall": recall,
        "interpreter": interpreter(args.runs),
    }
    means = {k: round(statistics.fmean(v) * 1000, 1) for k, v in figures.items()}
    if args.json:
        print(json.dumps(means))
        return 0
    print(f"CPU (user + system), mean of {args.runs} runs, ms")
    for k, v in figures.items():
        print(f"{k:<20} {means[k]:>8.1f}   every run: {' '.join(f'{x * 1000:.0f}' for x in v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
