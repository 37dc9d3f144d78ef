"""Running the fuzzer: seeds, a time budget, findings saved as scenario files, figures.

    python -m tests.fuzz.campaign [--seconds S] [--seed N ...] [--backend sqlite|postgresql] [--out DIR] [--no-shrink]

A *campaign* is one Hypothesis run from one seed: a few examples of a few
dozen steps each, on one world (real brokers) that every example continues.
Campaigns follow each other until the time budget is spent; each prints its
seed, so ``--seed N`` replays it.  The first failure ends the run: its
minimal sequence (Hypothesis shrinks it, unless ``--no-shrink``) is written
to ``OUT/<seed>.toml`` as a scenario file and printed, with the exception.
The last lines are the figures: steps, steps per second, examples, worlds
and broker starts, and how often each rule ran and each invariant was
checked.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, seed as use_seed, settings
from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

from scenarios.zygote import Zygote
from tests.fuzz import machine
from tests.fuzz.checks import INVARIANTS, Violation
from tests.fuzz.driver import Fuzz
from tests.fuzz.model import Policy
from tests.fuzz.world import HostSpec, World

TEAM = ("alice", "bob", "carol", "dave")
#: Fixed seeds every `make test` runs (each one's base policy follows from it).
FIXED_SEEDS = (1, 2)
EXAMPLES_PER_CAMPAIGN = 6
STEPS_PER_EXAMPLE = 30


@dataclass
class Finding:
    seed: int
    backend: str
    error: str
    invariant: str
    scenario: str
    path: Path | None = None


@dataclass
class Report:
    backend: str
    seconds: float = 0.0
    seeds: list[int] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    examples: int = EXAMPLES_PER_CAMPAIGN
    steps: int = STEPS_PER_EXAMPLE

    def replay(self, seed: int) -> str:
        """The command that replays ``seed`` as this run did (and shrinks what it finds)."""
        return (f"python -m tests.fuzz.campaign --backend {self.backend} --seed {seed} --seconds 0"
                f"{f' --examples {self.examples}' if self.examples != EXAMPLES_PER_CAMPAIGN else ''}"
                f"{f' --steps {self.steps}' if self.steps != STEPS_PER_EXAMPLE else ''}")

    @property
    def finding(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def lines(self) -> list[str]:
        f = self.figures
        out = [
            f"fuzz ({self.backend}): seeds {', '.join(map(str, self.seeds)) or 'none'}",
            f"fuzz ({self.backend}): {f.get('steps', 0)} steps in {self.seconds:.1f} s ({f.get('steps_per_second', 0):.1f} steps/s; "
            f"{f.get('step_seconds', 0):.1f} s of it stepping), {f.get('examples', 0)} examples, {f.get('worlds', 0)} world(s), "
            f"{f.get('broker_starts', 0)} broker start(s); baseline in the same run: {f.get('baseline_ops_per_second', 0):.0f} operator "
            f"whoami/s, so a step costs {f.get('baseline_ops_per_second', 0) / max(f.get('steps_per_second', 0), 1e-9):.0f} round trips",
            f"fuzz ({self.backend}): rules {json.dumps(f.get('rules', {}), sort_keys=True)}",
            f"fuzz ({self.backend}): seconds per rule {json.dumps(f.get('seconds_per_rule', {}))}",
            f"fuzz ({self.backend}): invariant checks {json.dumps(f.get('invariants', {}), sort_keys=True)}",
        ]
        for finding in self.findings:
            out.append(f"fuzz ({self.backend}): FOUND [{finding.invariant}] with seed {finding.seed}: {finding.error}")
            if finding.path is not None:
                out.append(f"fuzz ({self.backend}): the minimal sequence as a scenario: {finding.path}")
        return out


def budget_seeds(random_ones: int = 1) -> list[int]:
    """make test's seeds: the fixed ones, then ``random_ones`` random ones (FUZZ_SEED=N,M replaces the random ones)."""
    chosen = os.environ.get("FUZZ_SEED")
    extra = [int(s) for s in chosen.split(",")] if chosen else [random.randrange(1, 2**31) for _ in range(random_ones)]
    return [*FIXED_SEEDS, *extra]


def base_policy(seed: int) -> Policy:
    """Each seed fuzzes under a policy of its own (quorum 1-3, require_blind or not)."""
    rng = random.Random(seed)
    return Policy(quorum=rng.choice((1, 2, 2, 3)), require_blind=rng.random() < 0.35)


def sqlite_world(root: Path) -> Callable[[], World]:
    counter = iter(range(10**6))

    def make() -> World:
        return World(Path(tempfile.mkdtemp(prefix=f"w{next(counter)}-", dir=root)), [HostSpec("local", TEAM)])

    return make


def postgres_world(root: Path, cluster: Any) -> Callable[[], World]:
    """Two hosts on one database: alpha runs alice, bob and carol; beta runs carol and dave (carol is one domain on both)."""
    from tests.pgtools import copy_chain_key

    counter = iter(range(10**6))

    def make() -> World:
        database = cluster.database()
        specs = [HostSpec("alpha", ("alice", "bob", "carol"), cluster.broker_url(database, "alpha")),
                 HostSpec("beta", ("carol", "dave"), cluster.broker_url(database, "beta"))]
        world = World(Path(tempfile.mkdtemp(prefix=f"pg{next(counter)}-", dir=root)), specs)

        def share_key(first: Any) -> None:
            # What the operator does once per host (docs/DEPLOYMENT.md): every broker appends under the one key.
            for host in world.hosts.values():
                if host is not first:
                    copy_chain_key(first.run, SimpleNamespace(state=host.root / "state"))

        world.on_first_start = share_key
        return world

    return make


def run(make_world: Callable[[], World], *, backend: str, seconds: float, seeds: list[int] | None, out: Path | None,
        shrink: bool, keep_going: bool = False, shrink_seconds: float | None = None, witness_kinds: bool = True, keep_last: Path | None = None, steps: int = STEPS_PER_EXAMPLE, examples: int = EXAMPLES_PER_CAMPAIGN,
        log: Callable[[str], None] = print) -> Report:
    """Campaigns until ``seconds`` are spent (the fixed ``seeds`` first, then random ones), or the first finding
    (with ``keep_going``, every finding is saved and the next seed runs on a fresh world)."""
    report = Report(backend, examples=examples, steps=steps)
    started = time.monotonic()
    rng = random.Random()
    queue = list(seeds or [])
    fuzz: Fuzz | None = None
    stepping = 0.0
    # Every world's brokers (shrinking starts many) are forks of one warm interpreter, each its own process.
    zygote = Zygote()
    warm_world = make_world
    make_world = lambda: warm_world().forking(zygote.popen)  # noqa: E731
    try:
        while True:
            elapsed = time.monotonic() - started
            if elapsed > seconds and not queue and report.seeds:
                break  # the seeds asked for always run; random ones only while time is left
            seed = queue.pop(0) if queue else rng.randrange(1, 2**31)
            if fuzz is None:
                fuzz = Fuzz(make_world, policy=base_policy(seed), witness_kinds=witness_kinds)
            fuzz.base_policy = base_policy(seed)  # the next example restarts the brokers under it if it changed
            report.seeds.append(seed)
            policy = fuzz.base_policy
            log(f"fuzz ({backend}): seed {seed} (quorum {policy.quorum}{', require_blind' if policy.require_blind else ''}) "
                f"at {elapsed:.0f} s; replay with: {report.replay(seed)}")
            began = time.monotonic()
            try:
                campaign(fuzz, seed, steps=steps, examples=examples, shrink=shrink,
                         shrink_seconds=shrink_seconds or max(60.0, seconds - (time.monotonic() - started)))
            except BaseException as exc:  # noqa: BLE001 -- every failure is a finding, reported with its sequence
                if isinstance(exc, KeyboardInterrupt):
                    raise
                report.findings.append(_finding(fuzz, seed, backend, exc, out))
                log(f"fuzz ({backend}): FOUND [{report.findings[-1].invariant}] with seed {seed}"
                    f"{f'; saved as {report.findings[-1].path}' if report.findings[-1].path else ''}")
                if not keep_going:
                    break
            finally:
                stepping += time.monotonic() - began
    finally:
        if fuzz is not None:
            report.figures = _figures(fuzz, time.monotonic() - started, stepping)
            report.figures["baseline_ops_per_second"] = _baseline(fuzz)
            if keep_last is not None and fuzz.log is not None and not report.findings:
                keep_last.write_text(fuzz.log.render(name="the fuzzer's last example", description="The last example of a clean fuzzing run."))
            fuzz.close()
        zygote.close()
        report.seconds = time.monotonic() - started
    return report


def campaign(fuzz: Fuzz, seed: int, *, steps: int, examples: int, shrink: bool, shrink_seconds: float = 300) -> None:
    """One Hypothesis run of the state machine from ``seed``."""
    machine.bind(fuzz)
    fuzz.first_failure = None
    engine.MAX_SHRINKING_SECONDS = int(shrink_seconds)
    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    chosen = settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None, phases=phases,
        suppress_health_check=list(HealthCheck), derandomize=False, report_multiple_bugs=False, print_blob=False,
    )
    try:
        run_state_machine_as_test(use_seed(seed)(machine.ConclaveMachine), settings=chosen)
    finally:
        machine.bind(None)


def _finding(fuzz: Fuzz, seed: int, backend: str, exc: BaseException, out: Path | None) -> Finding:
    log = fuzz.log
    note = ""
    if isinstance(exc, (FlakyFailure, FlakyStrategyDefinition)) and fuzz.first_failure is not None:
        # The example failed on a world with history and passed when replayed on a fresh one: report
        # the first failure, with the steps of the example it happened in.
        log, exc = fuzz.first_failure
        note = " (it did not fail again when replayed on a fresh world: the history before the example mattered)"
    invariant = exc.invariant if isinstance(exc, Violation) else "error"
    error = (str(exc) if isinstance(exc, Violation) else "".join(traceback.format_exception_only(type(exc), exc)).strip()) + note
    scenario = ""
    if log is not None:
        scenario = log.render(
            name=f"fuzz finding: {invariant} (seed {seed})",
            description=f"Found by the invariant fuzzer (python -m tests.fuzz.campaign --seed {seed} --backend {backend}).\n{error}",
            failing=error.splitlines()[0][:300],
        )
    finding = Finding(seed, backend, error, invariant, scenario)
    if out is not None and scenario:
        out.mkdir(parents=True, exist_ok=True)
        finding.path = out / f"{backend}-{seed}.toml"
        finding.path.write_text(scenario)
        diagnosis = fuzz.diagnosis
        (out / f"{backend}-{seed}.txt").write_text("".join(traceback.format_exception(exc)) + "\n" + diagnosis)
    return finding


def _baseline(fuzz: Fuzz, calls: int = 100) -> float:
    """The same run's baseline: the operator's ``whoami`` round trips per second on the world's first broker (0 if none is up)."""
    world = fuzz.world
    if world is None or fuzz.dirty:
        return 0.0
    host = next(iter(world.hosts.values()))
    try:
        began = time.monotonic()
        for _ in range(calls):
            if not host.op("whoami").get("ok"):
                return 0.0
        return calls / (time.monotonic() - began)
    except Exception:  # noqa: BLE001 -- a figure, never a failure
        return 0.0


def _figures(fuzz: Fuzz, seconds: float, stepping: float) -> dict[str, Any]:
    c = fuzz.coverage
    return {
        "steps": c.steps,
        "steps_per_second": c.steps / seconds if seconds else 0.0,
        "step_seconds": stepping,
        "examples": c.examples,
        "worlds": c.worlds,
        "broker_starts": c.broker_starts,
        "rules": dict(sorted(c.rules.items())),
        "seconds_per_rule": {k: round(v, 2) for k, v in sorted(c.seconds.items(), key=lambda kv: -kv[1])},
        "invariants": {k: c.invariants.get(k, 0) for k in INVARIANTS if k != "reply"} | {"after every step": c.steps},
    }


def assert_clean(report: Report) -> None:
    """Fail with the seeds, the figures and the finding's scenario (and how to replay and shrink it) if the run found anything."""
    if report.finding is None:
        return
    f = report.finding
    raise AssertionError("\n".join([
        *report.lines(),
        f"replay and shrink it: {report.replay(f.seed)}",
        "the sequence as found (not shrunk):",
        f.scenario,
    ]))


#: What a run of make test's budget must have done: remembered and vouched, and taken this many kinds of step.
MUST_RUN = ("remember", "corroborate")
KINDS_OF_STEP = 8
#: Invariants checked only when their step ran (context pushes, revisions): every other one runs after every step.
ONLY_WITH_THEIR_STEPS = ("2-context",)


def assert_exercised(report: Report) -> None:
    """A clean run proves something only if it stepped: claims made and vouched for, several kinds of step, every invariant checked."""
    rules, checks = report.figures.get("rules", {}), report.figures.get("invariants", {})
    missing = [r for r in MUST_RUN if not rules.get(r)]
    kinds = [r for r, n in rules.items() if n and not r.startswith("examples ")]
    unchecked = [name for name, count in checks.items() if not count and name not in ONLY_WITH_THEIR_STEPS]
    assert not missing and not unchecked and len(kinds) >= KINDS_OF_STEP, (
        f"the run did not exercise rules {missing}, took {len(kinds)} kinds of step (at least {KINDS_OF_STEP}), "
        f"or did not check invariants {unchecked}:\n" + "\n".join(report.lines()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.campaign", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", 600)))
    parser.add_argument("--seed", type=int, action="append", help="replay this seed (repeatable); random seeds follow")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("FUZZ_OUT", "fuzz-findings")))
    parser.add_argument("--no-shrink", action="store_true", help="report the first failing sequence as found")
    parser.add_argument("--keep-going", action="store_true", help="after a finding, save it and go on with the next seed until the time is spent")
    parser.add_argument("--shrink-seconds", type=float, help="time Hypothesis may spend shrinking a failure (default: what is left of --seconds, at least 60)")
    parser.add_argument("--steps", type=int, default=STEPS_PER_EXAMPLE, help=f"steps per example (default {STEPS_PER_EXAMPLE})")
    parser.add_argument("--examples", type=int, default=EXAMPLES_PER_CAMPAIGN, help=f"examples per seed (default {EXAMPLES_PER_CAMPAIGN})")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object at the end")
    parser.add_argument("--keep-last", type=Path, help="write the last example of a clean run here, as a scenario file")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="conclave-fuzz-"))
    cluster = None
    try:
        if args.backend == "postgresql":
            from tests.pgtools import Cluster

            cluster = Cluster().start()
            make = postgres_world(root, cluster)
        else:
            make = sqlite_world(root)
        report = run(make, backend=args.backend, seconds=args.seconds, seeds=args.seed, out=args.out,
                     shrink=not args.no_shrink, keep_going=args.keep_going, shrink_seconds=args.shrink_seconds, steps=args.steps, examples=args.examples, keep_last=args.keep_last, log=lambda line: print(line, flush=True))
    finally:
        if cluster is not None:
            cluster.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    for line in report.lines():
        print(line)
    for finding in report.findings:
        print(finding.scenario)
    if args.json:
        print(json.dumps({"backend": report.backend, "seconds": report.seconds, "seeds": report.seeds, "figures": report.figures,
                          "finding": None if report.finding is None else {"invariant": report.finding.invariant, "error": report.finding.error,
                                                                          "seed": report.finding.seed, "path": str(report.finding.path)}}))
    return 1 if report.finding is not None else 0


if __name__ == "__main__":
    sys.exit(main())
