"""CPU of a tab switch in the dashboard: its footer against Textual's own, in the same run.

Run: ``.venv/bin/python bench/dashboard_tabs.py [--switches 40] [--rounds 3]``

The dashboard runs headless (Textual's own driver) with no broker (the keys and the panes' layout
do not need one), and the keys ``4`` and ``1`` are pressed in turn; each key is handled to its end
before the next (tests/dashboard/dashtools.py ``press``).  Figures: CPU seconds of this process per
switch (``time.process_time``, so time spent waiting for a core on a loaded machine is left out),
median of the rounds, for the dashboard's footer (rebuilt only when the keys it shows change) and
for the baseline -- the same app with Textual's ``Footer.bindings_changed`` (rebuilt at every
change of the screen's bindings: each focus change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.clikit import Target  # noqa: E402
from broker.dashboard import app as dashboard  # noqa: E402
from tests.dashboard.dashtools import drive, press  # noqa: E402


def per_switch(where: Path, switches: int) -> float:
    app = dashboard.DashboardApp(Target(False, where / "repo", where / "state"), refresh=1.0, tail=0.2)
    spent: list[float] = []

    async def scenario(pilot: object) -> None:
        await press(pilot, "4", "1")  # warm: both tabs drawn once
        started = time.process_time()
        for _ in range(switches // 2):
            await press(pilot, "4")
            await press(pilot, "1")
        spent.append((time.process_time() - started) / switches)

    drive(app, scenario)
    return spent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="dashboard-tabs-"))
    (where / "repo").mkdir()
    ours = dashboard.Footer.bindings_changed
    figures: dict[str, list[float]] = {"ours": [], "textual": []}
    for _ in range(args.rounds):  # interleaved, so a change in the machine's load hits both alike
        dashboard.Footer.bindings_changed = ours  # type: ignore[method-assign]
        figures["ours"].append(per_switch(where, args.switches))
        dashboard.Footer.bindings_changed = dashboard.TextualFooter.bindings_changed  # type: ignore[method-assign]
        figures["textual"].append(per_switch(where, args.switches))
    dashboard.Footer.bindings_changed = ours  # type: ignore[method-assign]
    result = {name: statistics.median(values) for name, values in figures.items()}
    result["ratio"] = result["ours"] / result["textual"]
    if args.json:
        print(json.dumps(result))
        return
    print(f"CPU per tab switch, median of {args.rounds} rounds of {args.switches} switches:")
    print(f"  Textual's footer (baseline): {result['textual'] * 1000:7.1f} ms")
    print(f"  the dashboard's footer:      {result['ours'] * 1000:7.1f} ms   ({result['ratio']:.2f}x)")


if __name__ == "__main__":
    main()
