"""``conclave demo``: a scripted team on a scratch repository, the whole story.

The demo builds a throwaway git repository and a team of small shell-scripted
agents that use only the ``conclave`` CLI, as a real agent would:

* alice and bob edit different files **in parallel** and commit through
  ``conclave exec --lock FILE --lock git``, so git never sees two writers;
* alice remembers a discovery and mails its id to everyone;
* alice then tries a **sybil**: she spawns a child to vouch for her own claim;
  the child's corroboration is recorded but does not count (same trust domain);
* bob and carol, independent agents, corroborate it: bob after reading it
  (informed), carol never shown it but saying in her own words what she
  found (blind, matched by meaning); two domains make a quorum, and the
  claim becomes **trusted**;
* the operator reads the claim's biography and alice's trail, which show all of
  it, and ``memory context`` now injects the claim, badged ``[TRUSTED]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from broker.entry import conclave_argv
from broker.sandbox import gitrun

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
        conclave memory corroborate "$id" --evidence "In my test run the config loader failed on a latin-1 file: it only reads utf-8 config files." --json > /dev/null
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


WIDTH = 80


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}


def _where(repo: Path) -> list[str]:
    # The state directory sits beside the scratch repository (outside its work tree) and goes with it.
    return ["--repo", str(repo), "--state-dir", str(repo.parent / "state")]


def _conclave(repo: Path, *args: str, check: bool = True) -> Any:
    out = subprocess.run(
        conclave_argv(*args, *_where(repo), "--json"),
        capture_output=True, text=True, check=check, env=_env(),
    )  # fmt: skip
    return json.loads(out.stdout)


def _show(repo: Path, *args: str) -> None:
    subprocess.run(conclave_argv(*args, *_where(repo)), check=True, env={**_env(), "COLUMNS": str(WIDTH)})


def _say(text: str = "", indent: int = 0) -> None:
    """Print ``text`` wrapped at 80 columns, continuation lines indented."""
    from broker.literal import visible

    pad = " " * indent
    for para in visible(text, keep_newlines=True).split("\n"):
        print(textwrap.fill(para, WIDTH, initial_indent=pad, subsequent_indent=pad + "  ", break_on_hyphens=False) if para else "")


def _heading(text: str) -> None:
    print()
    _say(text)
    print()


def _hhmmss(iso: str) -> str:
    return iso[11:19]


def run_demo(*, keep: bool, json_out: bool) -> int:
    root = Path(tempfile.mkdtemp(prefix="conclave-demo-"))
    repo = root / "repo"
    try:
        repo = make_scratch_repo(root)
        if not json_out:
            _say(f"scratch repository: {repo}")
            _heading("1. the broker spawns alice, bob and carol; each acts only through `conclave` as itself (`conclave run` shows this live)")
        run = _conclave(repo, "run", "--team", str(repo / "team.toml"), check=False)
        claims = _conclave(repo, "memory", "list")
        claim_id = next(c["id"] for c in claims if c["text"] == CLAIM)
        # After the agents ran: the repository's own .git named, never found from inside the tree.
        commits = gitrun.text(repo / ".git", repo, ["log", "--format=%an: %s"]) + "\n"
        claim = _conclave(repo, "memory", "show", str(claim_id))
        trail = _conclave(repo, "memory", "trail", "--agent", "alice")
        if json_out:
            print(json.dumps({
                "repo": str(repo),
                "run": run,
                "claim": claim,
                "trail": trail,
                "commits": commits.splitlines(),
                "agents": _conclave(repo, "agents"),
            }, indent=2))  # fmt: skip
        else:
            _tell(repo, run, commits, claim, trail)
        return int(run["exit_code"])
    finally:
        if not json_out:
            _what_next(repo, keep)
        if keep:
            if json_out:
                print(f"kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _tell(repo: Path, run: dict[str, Any], commits: str, claim: dict[str, Any], trail: list[dict[str, Any]]) -> None:
    """The story, from the commands' --json, at 80 columns; each step names the full view."""
    for outcome in run["agents"]:
        _say(f"{outcome['agent']}:{outcome['session']}: {outcome['status']}", indent=3)
        for line in Path(outcome["log"]).read_text().strip().splitlines():
            _say(f"| {line}", indent=5)
    _heading("2. parallel edits, serialised by the git lock (no index.lock failures):")
    for line in commits.splitlines():
        _say(line, indent=5)
    _heading(
        f"3. claim {claim['id']}'s witnesses: alice's child was recorded but not counted; "
        f"bob and carol made it {claim['tier']}  (full biography: conclave memory show {claim['id']})"
    )
    _say(f"{claim['badge']} {claim['text']}", indent=3)
    _say(f"by {claim['author']}", indent=5)
    for w in claim["corroborations"]:
        verdict = "counted" if w["counted"] else f"NOT counted ({w['reason_not_counted']}: same trust domain as the author)"
        _say(f"{_hhmmss(w['at'])} {w['principal']} vouched, {w.get('witness') or ('blind' if w['blind'] else 'informed')}: {verdict}", indent=5)
        if w.get("evidence"):
            _say(f"evidence: {w['evidence']}", indent=7)
    _heading("4. alice's trail, as the operator audits it  (conclave memory trail --agent alice)")
    for r in trail:
        verdict = "" if r["counted"] is None else (" counted" if r["counted"] else f" NOT counted ({r['note']})")
        _say(f"{_hhmmss(r['at'])} {r['principal']} {r['action']} claim {r['claim']}{verdict}", indent=5)
    _heading("5. what an agent is now pushed for 'config loader encoding' (trusted claims only)")
    for line in _conclave(repo, "memory", "context", "config loader encoding")["block"].splitlines():
        _say(line, indent=3)
    _heading("6. every principal, its parent and its trust domain")
    _show(repo, "agents")
    _heading("7. the event log's hash chain is intact")
    _show(repo, "memory", "verify")


def _what_next(repo: Path, keep: bool) -> None:
    _heading("what next")
    _say("* your own team: in your repository, `conclave init` writes a commented team.toml and an agent script; "
         "`conclave team check team.toml` checks it and `conclave run --team team.toml` runs it.", indent=2)  # fmt: skip
    _say('* real coding agents: preset = "claude-code", "codex" or "aider" in the team file (docs/AGENTS.md).', indent=2)
    if keep:
        state = repo.parent / "state"
        _say(f"* this scratch repository is kept: cd {repo}, export CONCLAVE_STATE_DIR={state}, and try "
             "`conclave logs`, `conclave memory trail 1`, `conclave memory export --format markdown`.", indent=2)  # fmt: skip
    else:
        _say("* this scratch repository is deleted now; `conclave demo --keep` keeps it to look around "
             "(`conclave logs`, `conclave memory trail 1`).", indent=2)  # fmt: skip
