"""Getting started and keeping tidy: git is required (and the fix named), `team check`,
`init`, runs numbered in `conclave agents`, `conclave gc`, `--version`, completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agents.harness import Run, make_repo
from tests.conclave_run import conclave as conclave_command
from tests.conclave_run import operator_env


def conclave(*args: str, cwd: Path | None = None, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The operator's `conclave` in a process of its own, in ``cwd`` (forked warm: tests/conclave_run.py)."""
    return conclave_command(*args, env=operator_env(**(extra_env or {})), cwd=cwd)


def test_run_and_init_refuse_a_directory_outside_git_and_name_the_fix(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "team.toml").write_text('[[agent]]\nname = "a"\ncommand = ["true"]\n')
    for args in (["run", "--team", "team.toml"], ["init"]):
        out = conclave(*args, "--state-dir", str(tmp_path / "state"), cwd=plain)
        assert out.returncode == 2, out
        assert "is not inside a git repository" in out.stderr and "git init" in out.stderr
    assert not (tmp_path / "state").exists() and not (plain / "agents").exists()
    # Control: once it is a repository, the same command runs.
    subprocess.run(["git", "init", "-q"], cwd=plain, check=True)
    out = conclave("run", "--team", "team.toml", "--json", "--state-dir", str(tmp_path / "state"), cwd=plain)
    assert out.returncode == 0, out.stderr


def test_team_check_validates_without_running(tmp_path):
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "alice"\ncommand = ["sh", "-c", "touch ran"]\nrestart = "on-failure"\n[policy]\nquorum = 3\n')
    out = conclave("team", "check", str(team), "--repo", str(repo), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and [a["name"] for a in report["agents"]] == ["alice"] and report["policy"] == {"quorum": 3}
    assert not (repo / "ran").exists() and not (repo / ".conclave").exists()
    human = conclave("team", "check", str(team), "--repo", str(repo))
    assert "ok: " in human.stdout and "sh -c 'touch ran'" in human.stdout and "quorum = 3" in human.stdout
    team.write_text('[[agent]]\nname = "alice"\ncommand = ["true"]\ncwd = "nowhere"\n')
    bad = conclave("team", "check", str(team), "--repo", str(repo))
    assert bad.returncode == 2 and "cwd 'nowhere' is not a directory" in bad.stderr and bad.stdout == ""


def test_run_without_a_team_file_says_where_it_looked(tmp_path):
    repo = make_repo(tmp_path)
    out = conclave("run", "--repo", str(repo), "--state-dir", str(tmp_path / "state"))
    assert out.returncode == 2 and f"reads {repo / 'team.toml'}" in out.stderr and "conclave init" in out.stderr
    assert not (tmp_path / "state").exists()


def test_init_writes_a_commented_team_that_runs_as_written(tmp_path):
    repo = make_repo(tmp_path)
    state = tmp_path / "state"
    out = conclave("init", "--repo", str(repo))
    assert out.returncode == 0, out.stderr
    team = (repo / "team.toml").read_text()
    assert team.count("#") > 20 and os.access(repo / "agents" / "example.sh", os.X_OK)
    assert conclave("team", "check", str(repo / "team.toml"), "--repo", str(repo)).returncode == 0
    # No --team: `conclave run` reads the team.toml init wrote.
    ran = conclave("run", "--repo", str(repo), "--state-dir", str(state), "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    claims = json.loads(conclave("memory", "list", "--json", "--repo", str(repo), "--state-dir", str(state)).stdout)
    # bob and carol vouched for alice's count: two independent domains, the default quorum.
    assert len(claims) == 1 and claims[0]["counted_corroborations"] == 2 and claims[0]["tier"] == "trusted", claims
    # A second init refuses to overwrite; --force does.
    (repo / "team.toml").write_text("# mine\n")
    again = conclave("init", "--repo", str(repo))
    assert again.returncode == 2 and "already exist" in again.stderr and (repo / "team.toml").read_text() == "# mine\n"
    assert conclave("init", "--repo", str(repo), "--force").returncode == 0 and (repo / "team.toml").read_text() == team


def test_agents_are_grouped_by_run_and_gc_prunes_old_runs_logs_only(tmp_path):
    for reuse in (False, True, True):
        run = Run(tmp_path, [{"name": "alice", "command": ["sh", "-c", "echo hello"]}], reuse=reuse)
        run.start(wait_for=[])
        run.wait_exit()
        run.close()
    state, repo = run.state, run.repo

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return conclave(*args, "--state-dir", str(state), "--repo", str(repo))

    rows = json.loads(cli("agents", "--json").stdout)
    assert [r["run"] for r in rows] == [1, 2, 3]
    assert [r["run"] for r in json.loads(cli("agents", "--run", "2", "--json").stdout)] == [2]
    human = cli("agents").stdout
    assert human.index("run 1") < human.index("run 2") < human.index("run 3")
    assert cli("agents", "--run", "9").returncode == 1
    logs = state / "logs"
    run1 = {f"alice-{rows[0]['session']}.log", "run-1.jsonl"}
    assert run1 <= set(os.listdir(logs))
    # A log past its cap goes on in segments (broker.capture): gc removes those too.
    (logs / f"alice-{rows[0]['session']}.log.3").write_text("later output\n")
    run1.add(f"alice-{rows[0]['session']}.log.3")
    plan = json.loads(cli("gc", "--keep", "2", "--dry-run", "--json").stdout)
    assert plan["runs"] == [1] and set(plan["files"]) == run1 and run1 <= set(os.listdir(logs))
    done = json.loads(cli("gc", "--keep", "2", "--json").stdout)
    assert done["runs"] == [1] and done["not_removed"] == []
    left = set(os.listdir(logs))
    assert not (run1 & left) and {"run-2.jsonl", "run-3.jsonl", f"alice-{rows[1]['session']}.log"} <= left
    # The database keeps every principal and records the prune; verify is still clean.
    assert [r["run"] for r in json.loads(cli("agents", "--json").stdout)] == [2, 3]
    assert [r["pruned"] for r in json.loads(cli("agents", "--all", "--json").stdout)] == [True, False, False]
    gc_events = json.loads(cli("memory", "log", "--kind", "broker.gc", "--json").stdout)
    assert len(gc_events) == 1 and set(gc_events[0]["detail"]["files"]) == run1
    assert cli("memory", "verify").returncode == 0
    assert json.loads(cli("gc", "--keep", "2", "--json").stdout)["runs"] == []  # nothing left to prune


def test_version_and_shell_completion():
    from importlib.metadata import version

    out = conclave("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"conclave {version('conclave')}"
    # Completion is for the installed `conclave` script (the name the shell completes).
    installed = Path(sys.executable).parent / "conclave"
    assert installed.exists(), f"{installed} is missing: install the package (make test does)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    asked = {"_CONCLAVE_COMPLETE": "complete_bash", "COMP_WORDS": "conclave memory tr", "COMP_CWORD": "2"}
    completion = subprocess.run([str(installed)], capture_output=True, text=True, env={**env, **asked}, timeout=60)
    assert completion.stdout.split() == ["trail"]
    # --show-completion detects the shell from its parent process; typer's switch for tests names it instead.
    named = {**env, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = subprocess.run([str(installed), "--show-completion", "bash"], capture_output=True, text=True, env=named, timeout=60)
    assert script.returncode == 0 and "_conclave_completion" in script.stdout
