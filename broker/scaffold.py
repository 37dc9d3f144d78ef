"""``conclave init``: a commented team file and an agent script to start from.

The two files run as they are (``conclave run``, which reads ``team.toml``):
three agents count the repository's tracked files under a shared lock; the
first to take an exclusive lock remembers the count as a claim, the other two
corroborate it (whoever starts first: no agent waits on a clock) -- two
independent witnesses, the default quorum, so the run ends with a trusted
claim -- and each tells the operator.  Every line a newcomer might change is
commented.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

TEAM_FILE: Final = "team.toml"
AGENT_SCRIPT: Final = "agents/example.sh"

TEAM = """\
# A conclave team file: the agents `conclave run` starts on this repository
# (it reads team.toml; --team names another file).  Check it without running it: `conclave team check team.toml`.
# Each agent gets an identity from the broker (AGENT:SESSION); every
# `conclave` command it runs acts as that agent, and nothing else can.

[[agent]]
name = "alice"                            # the stable name: a letter, then letters, digits, . _ -
command = ["bash", "agents/example.sh"]   # run from the repository root (or from cwd)
# cwd = "services/api"                    # optional: start in this directory of the repository
# env = { ROLE = "reviewer" }             # optional: extra environment variables
# restart = "on-failure"                  # optional: "never" (the default) or "on-failure"
# max_restarts = 3                        # optional: with on-failure, tries before giving up
# may_spawn = 2                           # optional: children alive at once (`conclave spawn`)

[[agent]]
name = "bob"
command = ["bash", "agents/example.sh"]

[[agent]]
name = "carol"                            # whoever of the three is not first: two independent witnesses, the quorum
command = ["bash", "agents/example.sh"]

# A real coding agent instead of a script (see docs/AGENTS.md):
# [[agent]]
# name = "claude"
# preset = "claude-code"                  # or "codex", "aider"
# prompt = "Fix the failing test in tests/test_api.py"

# [policy]                                # optional: when a claim becomes trusted
# quorum = 2                              # corroborations from independent trust domains needed
# require_blind = false                   # require one witness that was never shown the claim
"""

SCRIPT = """\
#!/usr/bin/env bash
# An example conclave agent.  The broker started this process with its
# identity in the environment: every `conclave` command below acts as this
# agent -- there is no flag to act as anyone else.
set -euo pipefail
echo "hello from $(conclave whoami)"
conclave status set "counting the tracked files"

# Read the tree under a shared lock on every path (writers wait; readers do not).
count=$(conclave exec --lock '**' --shared --wait 30 -- git ls-files | wc -l | tr -d ' ')
head=$(git rev-parse --short HEAD 2>/dev/null || echo "no-commit")
echo "the repository tracks $count files at $head"

# Share the finding.  A claim starts unverified; corroborations from
# independent agents (quorum, default 2) make it trusted: the second witness
# sees "[TRUSTED]" in the claim it gets back.
# All three start at once: one at a time (an exclusive lock, waited for) looks
# for the claim, so the first remembers it and the others corroborate it.
text="At commit $head the repository tracks $count files."
conclave lock acquire agents/example.claim --wait 60 > /dev/null
found=$(conclave memory recall "repository tracks files commit $head" --json \\
        | python3 -c 'import json,sys; print(next((str(c["id"]) for c in json.load(sys.stdin) if c["text"] == sys.argv[1]), ""))' "$text")
if [ -n "$found" ]; then
  conclave memory corroborate "$found" --evidence "counted with git ls-files"
else
  conclave memory remember --kind discovery --text "$text" --evidence "counted with git ls-files"
fi
conclave lock release agents/example.claim > /dev/null

# Tell the operator (they read it with `conclave msg inbox`).
conclave msg send --to operator "counted $count tracked files at $head"
"""


class ScaffoldError(RuntimeError):
    """A file ``init`` would write exists already."""


def write(repo: Path, *, force: bool) -> list[Path]:
    """Write the team file and the agent script into ``repo``; return their paths.

    Raises:
        ScaffoldError: naming the files that exist (unless ``force``).
    """
    team, script = repo / TEAM_FILE, repo / AGENT_SCRIPT
    existing = [p for p in (team, script) if p.exists()]
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        raise ScaffoldError(f"{names} already exist(s); move it away or pass --force to overwrite")
    script.parent.mkdir(parents=True, exist_ok=True)
    team.write_text(TEAM)
    script.write_text(SCRIPT)
    mode = script.stat().st_mode
    script.chmod(mode | (mode & 0o444) >> 2)  # executable by whoever may read it
    return [team, script]
