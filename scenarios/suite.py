"""Running many scenarios: discovery, parallelism, reports."""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable
from xml.sax.saxutils import escape, quoteattr

from scenarios.format import ScenarioInvalid, load
from scenarios.runner import FAILED, INVALID, PASSED, Outcome, run_scenario
from scenarios.zygote import Zygote


def known_ops() -> frozenset[str]:
    from broker import composition

    return frozenset(op for feature in composition.features() for op in feature.ops.ops)


def collect(paths: Iterable[Path]) -> list[Path]:
    """Scenario files named directly, or found (``*.toml``) under directories, sorted.

    Raises:
        FileNotFoundError: naming a path that does not exist.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            # Files starting with "_" (like _defences.toml) are not scenarios.
            found.extend(sorted(p for p in path.rglob("*.toml") if not p.name.startswith("_")))
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such scenario file or directory")
    return found


def run_all(
    files: list[Path],
    *,
    jobs: int | None = None,
    on_done: Callable[[Outcome], None] | None = None,
    workdir: Path | None = None,
    launch: Callable[..., Any] | None = None,
) -> list[Outcome]:
    """Validate every file, then run the valid ones in parallel; outcomes in file order.

    ``launch`` starts each broker (a :class:`Zygote`'s ``popen`` the caller holds); without it one zygote
    is started for this call.

    Interrupted (``KeyboardInterrupt``: Ctrl-C, or the SIGTERM ``conclave scenario run`` turns into one),
    it starts no more scenarios, stops the brokers of those running (SIGTERM, when the zygote is its own:
    each ends its agents and writes its summary), waits for them to end, and raises it again.  Killed
    outright, it leaves the zygote's monitors to end them (scenarios/zygote.py).
    """
    ops = known_ops()
    outcomes: dict[Path, Outcome] = {}
    runnable = []
    for path in files:
        try:
            runnable.append(load(path, ops))
        except ScenarioInvalid as exc:
            outcome = Outcome(path.stem, str(path), "?", INVALID, 0.0, detail=str(exc))
            outcomes[path] = outcome
            if on_done:
                on_done(outcome)
    workers = jobs or max(1, min(4, (os.cpu_count() or 1)))
    if not runnable:
        return [outcomes[p] for p in files]
    # One warm interpreter forks every scenario's broker (each still its own process): scenarios/zygote.py.
    with contextlib.ExitStack() as stack:
        zygote = None
        if launch is None:
            zygote = stack.enter_context(Zygote())
            launch = zygote.popen
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=workers))
        stopping = threading.Event()
        futures = {pool.submit(run_scenario, s, workdir=workdir, launch=launch, stopping=stopping): s for s in runnable}
        try:
            for future in as_completed(futures):
                outcome = future.result()
                outcomes[futures[future].path] = outcome
                if on_done:
                    on_done(outcome)
        except KeyboardInterrupt:
            stopping.set()
            for future in futures:
                future.cancel()  # those not started yet
            if zygote is not None:
                zygote.stop_all()
            pool.shutdown(wait=True)  # each running scenario fails as its broker stops, and closes its run
            raise
    return [outcomes[p] for p in files]


def write_junit(outcomes: list[Outcome], path: Path) -> None:
    failures = sum(o.verdict == FAILED for o in outcomes)
    errors = sum(o.verdict == INVALID for o in outcomes)
    total = sum(o.seconds for o in outcomes)
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuite name="conclave-scenarios" tests="{len(outcomes)}" failures="{failures}" errors="{errors}" time="{total:.3f}">',
    ]
    for o in outcomes:
        lines.append(f"  <testcase classname={quoteattr(o.tier)} name={quoteattr(o.name)} file={quoteattr(o.path)} time=\"{o.seconds:.3f}\">")
        if o.verdict == FAILED:
            lines.append(f"    <failure message={quoteattr(o.detail or '')}>expected: {escape(o.expected or '')}\ngot: {escape(o.got or '')}</failure>")
        elif o.verdict == INVALID:
            lines.append(f"    <error message=\"invalid scenario\">{escape(o.detail or '')}</error>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    path.write_text("\n".join(lines) + "\n")


def verdict_ok(outcomes: list[Outcome]) -> bool:
    return bool(outcomes) and all(o.verdict == PASSED for o in outcomes)


