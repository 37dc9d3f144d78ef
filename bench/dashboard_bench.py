"""The dashboard under load: 32 agents each printing 100 lines a second.

Run: ``.venv/bin/python bench/dashboard_bench.py [--seconds 12]`` (about a minute on 2 cores).

A real broker (``conclave run``) spawns 32 agents (each in its default box);
each prints 10 lines every 100 ms while ``<repo>/.bench-go`` exists (so the same agents can be silent or loud).
The dashboard runs in this process, headless under Textual's own driver, with
its default settings (broker read every 1 s, logs every 0.2 s, 1,000 lines
kept per agent), one agent's output selected so the output pane scrolls live.

Three phases, measured in one run:

* ``quiet``   -- dashboard on, agents silent: the baseline for frame time.
* ``loud``    -- dashboard on, agents printing: frame time, input latency, CPU.
* ``no-dash`` -- agents printing, no dashboard: the baseline for the broker's CPU.

Figures:

* **frame time** -- wall time of each screen update Textual makes (layout, the
  compositor's update, and producing the terminal's bytes for it: the headless
  driver skips only the final write), p50 / p99 / max, and frames per second;
  **frame CPU time** is the same with this thread's CPU time, which leaves out
  the time the process waited for a core (2 cores, 32 printing agents);
* **loop lag** -- how late a 10 ms timer fires on the UI's event loop (what a key
  press would wait before it is handled), p50 / p99 / max;
* **key to screen** -- a key press that selects another agent, until the output
  pane shows that agent's newest line;
* **CPU share** -- CPU seconds per wall second of the broker process and of this
  process (the dashboard), from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.harness import Run  # noqa: E402
from broker.clikit import Target  # noqa: E402

AGENTS = 32
LINES_PER_TICK = 10  # every 100 ms: 100 lines a second
PRINTER = """
import os, sys, time
go, name = sys.argv[1], sys.argv[2]
i = 0
while True:
    start = time.monotonic()
    if os.path.exists(go):
        sys.stdout.write("".join(f"{name} line {i + k:08d} compiling module {k} of the tree, all fine so far\\n" for k in range(%d)))
        sys.stdout.flush()
        i += %d
    time.sleep(max(0.0, 0.1 - (time.monotonic() - start)))
""" % (LINES_PER_TICK, LINES_PER_TICK)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def log_lines(logs: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in logs.glob("p*.log"))


class FrameClock:
    """Times every screen update: Textual's ``Screen._on_timer_update``, with the terminal bytes produced."""

    def __init__(self) -> None:
        from textual.app import App
        from textual.screen import Screen

        self.samples: list[float] = []
        self.cpu: list[float] = []
        self.recording = False
        original_update = Screen._on_timer_update
        original_display = App._display
        clock = self

        def timed_update(screen: Any) -> None:
            start, cpu = time.perf_counter(), time.thread_time()
            original_update(screen)
            if clock.recording:
                clock.samples.append(time.perf_counter() - start)
                clock.cpu.append(time.thread_time() - cpu)

        def display(app: Any, screen: Any, renderable: Any) -> None:
            # Headless, Textual would stop here; produce the bytes a terminal would get, and drop them.
            from textual._compositor import CompositorUpdate

            if isinstance(renderable, CompositorUpdate):
                renderable.render_segments(app.console)
            original_display(app, screen, renderable)

        Screen._on_timer_update = timed_update  # type: ignore[method-assign]
        App._display = display  # type: ignore[method-assign]


async def measure_phase(pilot: Any, broker_pid: int, seconds: float, clock: FrameClock) -> dict[str, Any]:
    app = pilot.app
    lag: list[float] = []
    keys: list[float] = []
    clock.samples.clear()
    clock.cpu.clear()
    clock.recording = True
    app.tick_seconds.clear()
    cpu_b, cpu_me, wall = cpu_seconds(broker_pid), time.process_time(), time.monotonic()
    deadline = wall + seconds
    next_key = wall + 1.0
    down = True
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        await asyncio.sleep(0.01)
        lag.append(time.perf_counter() - t0 - 0.01)
        if time.monotonic() >= next_key:
            before = app.selected_agent
            start = time.perf_counter()
            app.simulate_key("down" if down else "up")  # as the terminal's input thread delivers a key
            down = not down
            # Until the output pane shows the newly selected agent's newest line (or, silent, its title).
            give_up = time.monotonic() + 5
            while time.monotonic() < give_up and (app.selected_agent == before or (
                app.output.last(app.selected_agent) is not None
                and (app.query_one("#output").lines or [None])[-1] != app.output.last(app.selected_agent)
            )):
                await asyncio.sleep(0.001)
            keys.append(time.perf_counter() - start)
            next_key = time.monotonic() + 1.0
    clock.recording = False
    wall = time.monotonic() - wall
    return {
        "frames": list(clock.samples),
        "frame_cpu": list(clock.cpu),
        "lag": lag,
        "keys": keys,
        "ticks": list(app.tick_seconds),
        "broker_cpu": (cpu_seconds(broker_pid) - cpu_b) / wall,
        "dash_cpu": (time.process_time() - cpu_me) / wall,
        "wall": wall,
    }


def run_dashboard(run: Run, go: Path, seconds: float) -> dict[str, dict[str, Any]]:
    from broker.dashboard.app import DashboardApp

    clock = FrameClock()
    app = DashboardApp(Target(False, run.repo, run.state))
    results: dict[str, dict[str, Any]] = {}
    broker_pid = run.process.pid  # type: ignore[union-attr]

    async def main() -> None:
        async with app.run_test(size=(200, 50)) as pilot:
            while sum(1 for r in app.agent_rows() if r.live) < AGENTS:
                await pilot.pause(0.1)
            await pilot.press("down")  # the output pane follows one printer
            await pilot.pause(2.0)
            results["quiet"] = await measure_phase(pilot, broker_pid, seconds, clock)
            go.touch()
            await pilot.pause(2.0)  # let the logs fill past the first screen
            profile = None
            if os.environ.get("DASH_PROFILE"):
                import cProfile

                profile = cProfile.Profile()
                profile.enable()
            results["loud"] = await measure_phase(pilot, broker_pid, seconds, clock)
            if profile is not None:
                profile.disable()
                profile.dump_stats(os.environ["DASH_PROFILE"])

    asyncio.run(main())
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="Length of each measured phase.")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="conclave-dash-bench-"))
    # The flag lives in the work tree: each agent runs in a box with a /tmp of its own.
    go = root / "run" / "repo" / ".bench-go"
    team = [{"name": f"p{i:02d}", "command": [sys.executable, "-I", "-c", PRINTER, str(go), f"p{i:02d}"]} for i in range(AGENTS)]
    run = Run(root / "run", team)
    run.start(wait_for=[])
    try:
        logs = run.state / "logs"
        run.wait_until(lambda: len(list(logs.glob("p*.log"))) == AGENTS, timeout=30, what="32 agents")
        results = run_dashboard(run, go, args.seconds)
        # The broker with the same load and no dashboard.
        lines_before, t0 = log_lines(logs), time.monotonic()
        cpu0 = cpu_seconds(run.process.pid)  # type: ignore[union-attr]
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        no_dash = {"broker_cpu": (cpu_seconds(run.process.pid) - cpu0) / wall}  # type: ignore[union-attr]
        rate = (log_lines(logs) - lines_before) / wall
        if rate < 0.8 * AGENTS * LINES_PER_TICK * 10:
            raise SystemExit(f"the agents printed {rate:.0f} lines/s, not {AGENTS * LINES_PER_TICK * 10}: the load did not happen; see {logs}")
    finally:
        go.unlink(missing_ok=True)
        run.close()

    def ms(x: float) -> str:
        return f"{x * 1000:7.2f} ms"

    quiet, loud = results["quiet"], results["loud"]
    print(f"dashboard bench: {AGENTS} agents, measured output {rate:,.0f} lines/s in all ({rate / AGENTS:.0f} per agent); {args.seconds:g} s per phase")
    print(f"{'':34}{'quiet (baseline)':>18}{'loud':>14}{'ratio':>9}")
    for label, key in (("frame time p50", 0.5), ("frame time p99", 0.99), ("frame time max", 1.0)):
        a, b = pct(quiet["frames"], key), pct(loud["frames"], key)
        print(f"  {label:32}{ms(a):>18}{ms(b):>14}{b / a:8.2f}x")
    for label, key in (("frame CPU time p50", 0.5), ("frame CPU time p99", 0.99), ("frame CPU time max", 1.0)):
        a, b = pct(quiet["frame_cpu"], key), pct(loud["frame_cpu"], key)
        print(f"  {label:32}{ms(a):>18}{ms(b):>14}{b / a:8.2f}x")
    fq, fl = len(quiet["frames"]) / quiet["wall"], len(loud["frames"]) / loud["wall"]
    print(f"  {'frames per second':32}{fq:18.1f}{fl:14.1f}")
    for label, key in (("loop lag p50", 0.5), ("loop lag p99", 0.99), ("loop lag max", 1.0)):
        a, b = pct(quiet["lag"], key), pct(loud["lag"], key)
        print(f"  {label:32}{ms(a):>18}{ms(b):>14}")
    print(f"  {'key to screen p50 / max':32}{ms(pct(quiet['keys'], 0.5)):>18}{ms(pct(loud['keys'], 0.5)):>14}   (max {ms(max(loud['keys'])).strip()})")
    print(f"  {'our refresh work p50 / max':32}{ms(pct(quiet['ticks'], 0.5)):>18}{ms(pct(loud['ticks'], 0.5)):>14}   (max {ms(max(loud['ticks'])).strip()})")
    print(f"  {'dashboard CPU share':32}{quiet['dash_cpu']:17.1%}{loud['dash_cpu']:14.1%}")
    print(f"  {'broker CPU share':32}{quiet['broker_cpu']:17.1%}{loud['broker_cpu']:14.1%}   (no dashboard, loud: {no_dash['broker_cpu']:.1%})")


if __name__ == "__main__":
    main()
