"""A wrong team file is refused before anything runs, with a message naming the fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agents.harness import make_repo
from broker.composition import team_rules
from broker.team import TeamError, load

GOOD = '[[agent]]\nname = "alice"\ncommand = ["true"]\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD + GOOD, "appears twice"),
        ('[[agent]]\nname = "alice"\n', "missing command"),
        ('[[agent]]\nname = "operator"\ncommand = ["true"]\n', "reserved"),
        ('[[agent]]\nname = "all"\ncommand = ["true"]\n', "reserved"),
        ('[[agent]]\nname = "x y"\ncommand = ["true"]\n', "must start with a letter"),
        ('[[agent]]\nname = "alice"\ncommand = ["no-such-program-xyz"]\n', "not found on PATH"),
        ('[[agent]]\nname = "alice"\ncommand = ["./missing.sh"]\n', "not an executable file"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\ncolour = "red"\n', "unknown key(s) colour"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\nrestart = "always"\n', "restart must be one of"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\nmay_spawn = -1\n', "may_spawn"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\ncwd = "../.."\n', "leaves the repository"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\ncwd = "no/such/dir"\n', "cwd 'no/such/dir' is not a directory in the repository"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\nenv = {CONCLAVE_TICKET = "x"}\n', "CONCLAVE_"),
        ('[[agent]]\nname = "alice"\ncommand = ["true"]\nprompt = "do it"\n', "prompt is the task for a preset agent"),
        # Every agent's box reads the work tree, and so the team file: the broker's password is never there.
        (GOOD + '[store]\nurl = "postgresql://broker_p:hunter2@db.example/conclave"\n', "[store] url carries a password"),
        (GOOD + '[store]\nurl = "postgresql://broker_p@db.example/conclave?password=hunter2"\n', "[store] url carries a password"),
        ('[[agent]]\nname = "alice"\ncommand = "sh -c \'echo hi"\n', "cannot be split into words (No closing quotation)"),
        ("[[agent]\n", "not valid TOML"),
        ("", "no agents"),
    ],
)
def test_bad_team_file_is_refused_naming_the_problem(tmp_path, text, message):
    team = tmp_path / "team.toml"
    team.write_text(text)
    with pytest.raises(TeamError) as refused:
        load(team, repo=tmp_path, rules=team_rules())
    assert message in str(refused.value)


def test_good_team_file_parses(tmp_path):
    team = tmp_path / "team.toml"
    team.write_text(GOOD + '[[agent]]\nname = "bob"\ncommand = "sh -c true"\nmay_spawn = 2\nrestart = "on-failure"\n')
    parsed = load(team, repo=tmp_path, rules=team_rules())
    assert [a.name for a in parsed.agents] == ["alice", "bob"]
    assert parsed.agents[1].command == ("sh", "-c", "true") and parsed.agents[1].may_spawn == 2


def test_a_store_url_without_a_password_is_accepted(tmp_path):
    """Control for the password refusal: the same URL, its password left to the broker's passfile."""
    team = tmp_path / "team.toml"
    team.write_text(GOOD + '[store]\nurl = "postgresql://broker_p@db.example/conclave?sslmode=require"\n')
    assert load(team, repo=tmp_path, rules=team_rules()).store_url == "postgresql://broker_p@db.example/conclave?sslmode=require"


def test_a_cwd_that_exists_is_accepted(tmp_path):
    """Control for the missing-cwd refusal: the same entry loads once the directory is there."""
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "alice"\ncommand = ["true"]\ncwd = "sub/dir"\n')
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    assert load(team, repo=tmp_path, rules=team_rules()).agents[0].cwd == "sub/dir"


def test_conclave_run_with_a_bad_team_file_exits_2_and_writes_nothing(tmp_path):
    repo = make_repo(tmp_path)
    state = tmp_path / "state"
    team = tmp_path / "team.toml"
    team.write_text(GOOD + GOOD)
    cmd = [sys.executable, "-m", "broker.cli", "run", "--team", str(team), "--repo", str(repo), "--state-dir", str(state)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "appears twice" in out.stderr
    assert not state.exists()
    # Control: the fixed file runs to completion (alice runs `true` and exits).
    team.write_text(GOOD)
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (state / "conclave.db").exists()


def test_an_unclosed_quote_in_a_string_command_is_one_line_and_exit_2(tmp_path):
    """A newcomer's typo in a string command: one line naming the agent and the fix, no traceback."""
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "alice"\ncommand = "sh -c \'echo hi"\n')
    cmd = [sys.executable, "-m", "broker.cli", "run", "--team", str(team), "--repo", str(repo), "--state-dir", str(tmp_path / "state")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "agent 'alice'" in out.stderr and "close the quote" in out.stderr
    # Control: the same command with its quote closed runs.
    team.write_text('[[agent]]\nname = "alice"\ncommand = "sh -c \'echo hi\'"\n')
    assert subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=60).returncode == 0


def test_default_state_dir_is_outside_the_work_tree_under_the_state_home(tmp_path):
    """Agents write their work tree; the state (database, keys, identity files) must not be in it."""
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    team.write_text(GOOD)
    home = tmp_path / "state-home"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("CONCLAVE_")}
    env["XDG_STATE_HOME"] = str(home)
    out = subprocess.run(
        [sys.executable, "-m", "broker.cli", "run", "--team", str(team), "--repo", str(repo), "--json"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 0, out.stderr
    [state] = [p for p in (home / "conclave").iterdir() if p.is_dir()]
    # Beside it, the registry of state directories every box is kept out of (broker.paths.register_state_dir).
    assert (home / "conclave" / "state-dirs").read_text().splitlines() == [str(state)]
    assert state.name.startswith("repo-") and (state / "conclave.db").exists() and (state / "operator.key").exists()
    assert (state / "operator.key").stat().st_mode & 0o777 == 0o600 and state.stat().st_mode & 0o777 == 0o700
    assert not (repo / ".conclave").exists()
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    # Control: the same repository resolves to the same state directory again (one home per work tree).
    again = subprocess.run(
        [sys.executable, "-m", "broker.cli", "agents", "--json", "--repo", str(repo)], capture_output=True, text=True, timeout=60, env=env
    )
    assert again.returncode == 0, again.stderr
    assert [a["agent"] for a in json.loads(again.stdout)] == ["alice"]
