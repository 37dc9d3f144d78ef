"""``conclave demo``: a scripted team on a scratch repository, the whole story.

The demo builds a throwaway git repository, writes a team file of small
shell-scripted agents that use only the ``conclave`` CLI (as a real agent
would), runs the broker on it, and then shows the operator's view.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

SCRIPTS: dict[str, str] = {
    "alice.sh": """\
        #!/usr/bin/env bash
        set -euo pipefail
        echo "alice: I am $(conclave whoami --json | tr -d '\\n ')"
        conclave spawn --name helper --json -- bash agents/helper.sh
        sleep 1
        """,
    "bob.sh": """\
        #!/usr/bin/env bash
        set -euo pipefail
        echo "bob: I am $(conclave whoami --json | tr -d '\\n ')"
        """,
    "helper.sh": """\
        #!/usr/bin/env bash
        set -euo pipefail
        echo "helper: I am $(conclave whoami --json | tr -d '\\n ')"
        """,
}

TEAM = """\
[[agent]]
name = "alice"
command = ["bash", "agents/alice.sh"]
may_spawn = 1

[[agent]]
name = "bob"
command = ["bash", "agents/bob.sh"]
"""


def make_scratch_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "agents").mkdir(parents=True)
    for name, body in SCRIPTS.items():
        (repo / "agents" / name).write_text(textwrap.dedent(body))
    (repo / "team.toml").write_text(TEAM)
    (repo / "README.md").write_text("# scratch repository for conclave demo\n")
    git = ["git", "-C", str(repo), "-c", "user.name=demo", "-c", "user.email=demo@example.invalid"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "scratch repository"], check=True)
    return repo


def _conclave(repo: Path, *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "broker.cli", *args, "--repo", str(repo), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def run_demo(*, keep: bool, json_out: bool) -> int:
    root = Path(tempfile.mkdtemp(prefix="conclave-demo-"))
    try:
        repo = make_scratch_repo(root)
        if not json_out:
            print(f"scratch repository: {repo}\n")
            print("1. the broker spawns alice and bob; alice spawns a child through the broker\n")
        run = _conclave(repo, "run", "--team", str(repo / "team.toml"))
        agents = _conclave(repo, "agents")
        if json_out:
            print(json.dumps({"repo": str(repo), "run": run, "agents": agents}, indent=2))
        else:
            for outcome in run["agents"]:
                log = Path(outcome["log"]).read_text().strip()
                print(f"   {outcome['agent']}:{outcome['session']} exited {outcome['exit_code']}; its log says:")
                for line in log.splitlines():
                    print(f"     | {line}")
            print("\n2. the operator's view: every principal, its parent and its trust domain\n")
            subprocess.run([sys.executable, "-m", "broker.cli", "agents", "--repo", str(repo)], check=True)
        return 0 if all(o["exit_code"] == 0 for o in run["agents"]) else 1
    finally:
        if keep:
            print(f"\nkept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
