"""What preflight adds to a run of 8 preset agents when everything is fine.

Run: ``.venv/bin/python bench/preflight.py`` (under a minute; needs the pinned Claude
Code and Codex binaries, which tests/agents/realbin.py fetches: ``make agent-binaries``).

The team: 4 Claude Code and 4 Codex agents, each with its key and a model endpoint
that answers (loopback stand-ins of the two APIs, tests/agents/standins), so every
check passes.  Each round times, in fresh processes, ``conclave team check`` (the team
file alone: what ``conclave run`` did before any agent started until now) and ``conclave
team check --online`` (the same plus preflight: 8 version checks, 8 key checks, 8
endpoint checks -- 2 binaries and 2 URLs once each), alternating the order.  Printed:
the medians, the difference (what preflight adds to ``conclave run``), its ratio to
the baseline, and the time the checks themselves report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.harness import make_repo, toml_value  # noqa: E402
from broker.entry import conclave_argv  # noqa: E402
from tests.agents import realbin  # noqa: E402
from tests.agents.standins import AnthropicStandin, ResponsesStandin  # noqa: E402
from tests.agents.standins.responses import codex_overrides  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    binaries = realbin.ensure()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env["PATH"] = f"{binaries.bin}{os.pathsep}{env['PATH']}"
    with tempfile.TemporaryDirectory(prefix="cv-preflight-") as tmp_name, AnthropicStandin([]) as claude_api, ResponsesStandin([]) as codex_api:
        tmp = Path(tmp_name)
        repo = make_repo(tmp)
        lines = []
        for i in range(4):
            lines += ["[[agent]]", f'name = "claude{i}"', 'preset = "claude-code"', 'prompt = "p"',
                      f"env = {toml_value({'ANTHROPIC_API_KEY': 'sk-bench', 'ANTHROPIC_BASE_URL': claude_api.url})}", ""]  # fmt: skip
            lines += ["[[agent]]", f'name = "codex{i}"', 'preset = "codex"', 'prompt = "p"', f"command = {toml_value(['codex', *codex_overrides(codex_api.url)])}",
                      f"env = {toml_value({'STANDIN_API_KEY': 'sk-bench'})}", ""]  # fmt: skip
        team = tmp / "team.toml"
        team.write_text("\n".join(lines))
        base = conclave_argv("team", "check", str(team), "--repo", str(repo), "--state-dir", str(tmp / "state"), "--json")
        times: dict[str, list[float]] = {"offline": [], "online": []}
        reported: list[float] = []
        for r in range(args.rounds):
            for mode in (("offline", "online") if r % 2 == 0 else ("online", "offline")):
                started = time.perf_counter()
                done = subprocess.run([*base, *(["--online"] if mode == "online" else [])], capture_output=True, text=True, env=env, timeout=60)
                times[mode].append(time.perf_counter() - started)
                if done.returncode != 0:
                    raise SystemExit(f"team check ({mode}) failed: {done.stderr[-2000:]}")
                if mode == "online":
                    report = json.loads(done.stdout)["preflight"]
                    reported.append(report["seconds"])
                    if report["problems"]:
                        raise SystemExit(f"preflight found problems: {report['problems']}")
    offline, online = statistics.median(times["offline"]), statistics.median(times["online"])
    print(f"8 preset agents (4 claude-code, 4 codex), every check passing, median of {args.rounds} rounds")
    print(f"conclave team check           {offline:6.3f} s")
    print(f"conclave team check --online  {online:6.3f} s   ({online / offline:.2f}x)")
    print(f"preflight adds                {online - offline:6.3f} s   (the checks report {statistics.median(reported):.3f} s)")


if __name__ == "__main__":
    main()
