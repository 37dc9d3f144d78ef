"""The team file is trusted configuration: no agent locks it exclusively or commits it.

The team file decides every agent's box, environment and powers, and it may live in the work
tree, which agents write.  The attack: an agent edits it, locks it (or a glob over it),
commits it through the guard -- and the next run gives it a wider box.  Each step is refused,
saying why; the controls (a shared lock on it, an exclusive lock beside it, a commit of another
file) go through.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agents.harness import GIT_IDENTITY, Run
from broker.errors import ConclaveError, ErrorCode

pytestmark = pytest.mark.uid_independent("the team file's locks and commits: nothing privileged on the path")


def test_no_agent_locks_or_commits_the_team_file(tmp_path: Path) -> None:
    run = Run(tmp_path, [{"name": "alice"}], files={"README.md": "x\n", "src/x.py": "x = 1\n"})
    run.team_file = run.repo / "team.toml"
    run.team_file.write_text((tmp_path / "team.toml").read_text())
    subprocess.run(["git", "-C", str(run.repo), "add", "team.toml"], check=True)
    subprocess.run(["git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-qm", "the team"], check=True)
    with run:
        alice = run.puppet("alice")
        for resources in (["team.toml"], ["**"], ["*.toml", "src/**"]):
            with pytest.raises(ConclaveError) as refused:
                alice.call("lock.acquire", resources=resources)
            assert refused.value.code is ErrorCode.FORBIDDEN and "team file" in refused.value.message, resources
        assert alice.call("lock.acquire", resources=["team.toml"], shared=True)["grants"]  # control: reading it is fine
        alice.call("lock.release", resources=["team.toml"])
        alice.call("lock.acquire", resources=["src/**", "git"])
        # The edit tool's hook is refused the file too (no exclusive lock can cover it).
        edit = alice.call("lock.check_edit", tool="Edit", paths=["team.toml"])
        assert not edit["allowed"]
        # The commit: alice widens her own box and commits it with everything else she holds.
        (run.repo / "team.toml").write_text(run.team_file.read_text() + 'sandbox = "off"\n')
        (run.repo / "src" / "x.py").write_text("x = 2\n")
        committed = alice.sh("sh", "-c", f"git add team.toml src/x.py && git {' '.join(GIT_IDENTITY)} commit -qm 'wider box'")
        assert committed.returncode != 0 and "team.toml" in committed.stderr and "team file" in committed.stderr, committed.stderr
        assert run.person_git("log", "-1", "--format=%s").stdout.strip() == "the team"
        # Control: the other file alone goes in.
        alice.sh("git", "reset", "-q", "team.toml")
        (run.repo / "team.toml").write_text(run.team_file.read_text().replace('sandbox = "off"\n', ""))
        done = alice.sh("git", *GIT_IDENTITY, "commit", "-qm", "src only")
        assert done.returncode == 0, done.stderr
        assert run.person_git("log", "-1", "--format=%s").stdout.strip() == "src only"
    # The refusal is in the run's summary, for the person to read after the run.
    notes = [n for n in (run.summary or {}).get("git", []) if n["kind"] == "refused"]
    assert notes and "team file" in notes[0]["text"] and notes[0]["principal"].startswith("alice:"), run.summary
