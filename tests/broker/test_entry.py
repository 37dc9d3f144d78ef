"""Nothing conclave runs inside a work tree imports code from it.

The attack (T1, file edits only): an agent writes a ``broker/`` package into
the repository.  Whatever conclave starts there with ``python -m broker.cli``
-- the pre-commit hook a person or another agent triggers, the Claude Code
hook, the MCP server, the launcher -- would import it instead of conclave,
and act as that person or with that agent's ticket.  Each entry point is run
here from the work tree with such a package planted; the package must never
run, and the real conclave must (its own answer is checked).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from agents import presets
from agents.harness import GIT_IDENTITY, Run
from broker.entry import conclave_argv
from broker.identity import Principal, Role
from broker.paths import StatePaths
from broker.spec import AgentSpec
from broker.githook import HOOK


def plant(repo: Path, tmp_path: Path, package: str = "broker", module: str = "cli") -> Path:
    """A package named like one of conclave's in the work tree that leaves a mark when imported
    (``broker``; ``agents`` with ``hooks`` for the edit hooks)."""
    mark = tmp_path / f"planted-{package}-ran"
    where = repo / package
    where.mkdir(exist_ok=True)
    (where / "__init__.py").write_text(f"open({str(mark)!r}, 'a').write('ran\\n')\n")
    (where / f"{module}.py").write_text("raise SystemExit(0)\n")
    return mark


def plant_agents(repo: Path, tmp_path: Path) -> Path:
    return plant(repo, tmp_path, "agents", "hooks")


def operator_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}


@pytest.fixture
def repo(tmp_path: Path, start_run: Callable[..., Run]) -> Run:
    # carol runs unboxed, so the person's own hooks directory gets conclave's hook for the run too.
    return start_run([{"name": "alice"}, {"name": "carol", "sandbox": "off"}])


def test_control_a_planted_package_does_run_when_python_imports_from_the_tree(tmp_path: Path, repo: Run) -> None:
    """Positive control: without isolated mode the plant works, so the tests below would see it."""
    mark = plant(repo.repo, tmp_path)
    subprocess.run([sys.executable, "-m", "broker.cli", "--help"], cwd=repo.repo, env=operator_env(), capture_output=True)
    assert mark.read_text() == "ran\n"
    agents_mark = plant_agents(repo.repo, tmp_path)
    subprocess.run([sys.executable, "-m", "agents.hooks", "stop"], cwd=repo.repo, env=operator_env(), capture_output=True, input=b"{}")
    assert agents_mark.read_text() == "ran\n"


def test_the_commit_hook_never_imports_the_work_tree_for_the_operator_or_an_agent(tmp_path: Path, repo: Run) -> None:
    mark = plant(repo.repo, tmp_path)
    # The hook itself imports only the standard library: a json.py in the tree must not be it.
    stdlib_mark = tmp_path / "planted-json-ran"
    (repo.repo / "json.py").write_text(f"open({str(stdlib_mark)!r}, 'a').write('ran\\n')\n")
    alice, carol = repo.puppet("alice"), repo.puppet("carol")
    for hook in ((repo.repo / ".git" / "hooks" / HOOK).read_text(), alice.sh("cat", f".git/hooks/{HOOK}").stdout):
        assert "-I" in shlex.split(hook.splitlines()[-1].split("exec ", 1)[1])  # what the broker installed
    # A person commits: the hook runs, and lets the operator's commit through.
    (repo.repo / "README.md").write_text("the operator's edit\n")
    git = ["git", "-C", str(repo.repo), *GIT_IDENTITY]
    subprocess.run([*git, "add", "README.md"], check=True, env=operator_env())
    done = subprocess.run([*git, "commit", "-m", "operator"], cwd=repo.repo, capture_output=True, text=True, env=operator_env())
    assert done.returncode == 0, done.stderr
    repo.wait_followed("alice")
    # Agents commit without the git lock: the real guard (not the plant, which would exit 0) refuses,
    # in alice's own git directory (boxed) and in the person's (carol, unboxed).
    for puppet, name in ((alice, "README.md"), (carol, "notes.txt")):
        (repo.repo / name).write_text(f"{puppet.key}'s edit\n")
        puppet.sh("git", "-C", str(repo.repo), "add", name)
        refused = puppet.sh(*git, "commit", "-m", "without locks")
        assert refused.returncode != 0 and "commit refused" in refused.stderr, refused.stderr
        puppet.call("lock.acquire", resources=[name, "git"])
        allowed = puppet.sh(*git, "commit", "-m", f"{puppet.key} with locks")
        assert allowed.returncode == 0, allowed.stderr
        puppet.call("lock.release", resources=["git"])
        repo.wait_followed("alice")
    assert not mark.exists() and not stdlib_mark.exists()


def test_the_agent_side_entry_points_never_import_the_work_tree(tmp_path: Path, repo: Run) -> None:
    """The Claude Code hook, the MCP server and the launcher, run from the work tree as the agent."""
    mark = plant(repo.repo, tmp_path)
    agents_mark = plant_agents(repo.repo, tmp_path)
    alice = repo.puppet("alice")
    identity = tmp_path / "no-such-identity"
    for hook in (presets.claude_settings()["hooks"]["PreToolUse"][0]["hooks"][0]["command"], presets.claude_settings()["hooks"]["Stop"][0]["hooks"][0]["command"]):
        event = {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {"file_path": str(repo.repo / "README.md")}, "cwd": str(repo.repo)}
        answered = alice.sh("/bin/sh", "-c", hook, stdin=json.dumps(event))
        assert answered.returncode == 0, answered.stderr
        if "pre-tool-use" in hook:  # the real hook, as alice: she holds no lock on README.md
            assert "alice may not Edit README.md" in json.loads(answered.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    assert not agents_mark.exists()
    server = presets._mcp_server_entry(identity)
    served = alice.sh(server["command"], *server["args"], stdin="")
    assert served.returncode == 0 and "serving" in served.stderr and "as alice:" in served.stderr  # the real server
    spec = AgentSpec(name="alice", command=("true",), preset="command")
    launch = presets.prepare(spec, StatePaths(repo=repo.repo, state=tmp_path / "st"), Principal("alice", "s1", Role.AGENT, "alice"))
    assert launch[:2] == [sys.executable, "-I"]
    launched = subprocess.run(launch, cwd=repo.repo, env=operator_env(), capture_output=True, text=True)
    assert launched.returncode != 0 and "agent-launch" in launched.stderr  # refused: not started by a broker
    assert not mark.exists()


def test_every_command_conclave_builds_is_isolated() -> None:
    argv = conclave_argv("whoami")
    assert argv[0] == sys.executable and os.path.isabs(argv[0]) and argv[1] == "-I"
