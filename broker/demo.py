"""``conclave demo``: a scripted team on a scratch repository, the whole story.

The demo builds a throwaway git repository and a team of small shell-scripted
agents that use only the ``conclave`` CLI, as a real agent would:

* alice and bob edit different files **in parallel** and commit through
  ``conclave exec --lock FILE --lock git``, so git never sees two writers;
* alice remembers a discovery and mails its id to everyone;
* alice then tries a **sybil**: she spawns a child to vouch for her own claim;
  the child's corroboration is recorded but does not count (same trust domain);
* bob and carol, independent agents, corroborate it: two domains make a
  quorum, and the claim becomes **trusted**;
* the operator reads the claim's biography and alice's trail, which show all of
  it, and ``memory context`` now injects the claim, badged ``[TRUSTED]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from broker.entry import conclave_argv

CLAIM = "The config loader reads UTF-8 only and rejects other encodings when the file is opened."

SCRIPTS: dict[str, str] = {
    "commit.sh": """\
        #!/usr/bin/env bash
        # commit.sh FILE LINE: append LINE to FILE and commit, holding FILE and git.
        set -euo pipefail
        me=$(conclave whoami --json | python -c 'import json,sys; print(json.load(sys.stdin)["agent"])')
        export GIT_AUTHOR_NAME="$me" GIT_COMMITTER_NAME="$me"
        export GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_EMAIL=agent@example.invalid
        export FILE="$1" LINE="$2"
        conclave exec --lock "$FILE" --lock git --wait 60 -- \\
          sh -c 'echo "$LINE" >> "$FILE" && git add "$FILE" && git commit -qm "$LINE"'
        """,
    "wait_for_claim.sh": """\
        #!/usr/bin/env bash
        # Block until alice's announcement arrives (no polling), print the claim id.
        set -euo pipefail
        conclave msg inbox --wait 60 --json | python -c '
        import json, sys
        for m in json.load(sys.stdin):
            if m["body"].startswith("claim "):
                print(m["body"].split()[1].rstrip(":")); break
        '
        """,
    "alice.sh": f"""\
        #!/usr/bin/env bash
        set -euo pipefail
        conclave status set "editing config/loader.py"
        for i in 1 2 3; do bash agents/commit.sh config/loader.py "# loader change $i"; done
        id=$(conclave memory remember --kind discovery --text "{CLAIM}" --json | python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
        echo "alice: remembered claim $id"
        conclave msg send --to all "claim $id: please check the config loader's encoding handling"
        echo "alice: the sybil attempt: a child of mine vouches for my claim"
        conclave spawn --name echo --json -- bash agents/echo.sh "$id" > /dev/null
        sleep 2
        """,
    "echo.sh": """\
        #!/usr/bin/env bash
        set -euo pipefail
        conclave memory corroborate "$1" --json | python -c '
        import json, sys
        c = json.load(sys.stdin)
        print("alice/echo: corroborated; counted =", c.get("counted"), "-", c.get("reason_not_counted") or "")
        '
        """,
    "bob.sh": """\
        #!/usr/bin/env bash
        set -euo pipefail
        conclave status set "editing docs/usage.md"
        for i in 1 2 3; do bash agents/commit.sh docs/usage.md "usage note $i"; done
        id=$(bash agents/wait_for_claim.sh)
        conclave memory recall "config loader encoding" --json > /dev/null
        conclave memory corroborate "$id" --evidence "read config/loader.py: it opens with encoding='utf-8'" --json > /dev/null
        echo "bob: corroborated claim $id"
        """,
    "carol.sh": """\
        #!/usr/bin/env bash
        set -euo pipefail
        id=$(bash agents/wait_for_claim.sh)
        sleep 1
        conclave memory corroborate "$id" --evidence "a latin-1 config file fails to load in my test run" --json > /dev/null
        echo "carol: corroborated claim $id"
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

[[agent]]
name = "carol"
command = ["bash", "agents/carol.sh"]
"""


def make_scratch_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "agents").mkdir(parents=True)
    (repo / "config").mkdir()
    (repo / "docs").mkdir()
    for name, body in SCRIPTS.items():
        (repo / "agents" / name).write_text(textwrap.dedent(body))
    (repo / "team.toml").write_text(TEAM)
    (repo / "config" / "loader.py").write_text("def load(path):\n    return open(path, encoding='utf-8').read()\n")
    (repo / "docs" / "usage.md").write_text("# usage\n")
    git = ["git", "-C", str(repo), "-c", "user.name=demo", "-c", "user.email=demo@example.invalid"]
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "scratch repository"], check=True)
    return repo


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}


def _where(repo: Path) -> list[str]:
    # The state directory sits beside the scratch repository (outside its work tree) and goes with it.
    return ["--repo", str(repo), "--state-dir", str(repo.parent / "state")]


def _conclave(repo: Path, *args: str) -> Any:
    out = subprocess.run(
        conclave_argv(*args, *_where(repo), "--json"),
        capture_output=True, text=True, check=True, env=_env(),
    )
    return json.loads(out.stdout)


def _show(repo: Path, *args: str) -> None:
    subprocess.run(conclave_argv(*args, *_where(repo)), check=True, env=_env())


def run_demo(*, keep: bool, json_out: bool) -> int:
    root = Path(tempfile.mkdtemp(prefix="conclave-demo-"))
    try:
        repo = make_scratch_repo(root)
        say = (lambda *a: None) if json_out else print
        say(f"scratch repository: {repo}\n")
        say("1. the broker spawns alice, bob and carol; each acts only through `conclave` as itself\n")
        run = _conclave(repo, "run", "--team", str(repo / "team.toml"))
        claims = _conclave(repo, "memory", "list")
        claim_id = next(c["id"] for c in claims if c["text"] == CLAIM)
        commits = subprocess.run(["git", "-C", str(repo), "log", "--format=%an: %s"], capture_output=True, text=True).stdout
        if json_out:
            print(json.dumps({
                "repo": str(repo),
                "run": run,
                "claim": _conclave(repo, "memory", "show", str(claim_id)),
                "trail": _conclave(repo, "memory", "trail", "--agent", "alice"),
                "commits": commits.splitlines(),
                "agents": _conclave(repo, "agents"),
            }, indent=2))
        else:
            for outcome in run["agents"]:
                log = Path(outcome["log"]).read_text().strip()
                print(f"   {outcome['agent']}:{outcome['session']} exited {outcome['exit_code']}")
                for line in log.splitlines():
                    print(f"     | {line}")
            print("\n2. parallel edits, serialised by the git lock (no index.lock failures):\n")
            for line in commits.splitlines():
                print(f"     {line}")
            print("\n3. the claim's biography: alice's child was recorded but not counted; bob and carol made it trusted\n")
            _show(repo, "memory", "show", str(claim_id))
            print("\n4. alice's trail, as the operator audits it\n")
            _show(repo, "memory", "trail", "--agent", "alice")
            print("\n5. what an agent is now pushed for 'config loader encoding' (trusted claims only)\n")
            _show(repo, "memory", "context", "config loader encoding")
            print("\n6. every principal, its parent and its trust domain\n")
            _show(repo, "agents")
            print("\n7. the event log's hash chain is intact\n")
            _show(repo, "memory", "verify")
        ok = all(o["exit_code"] == 0 for o in run["agents"])
        return 0 if ok else 1
    finally:
        if keep:
            print(f"\nkept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
