"""The pre-commit guard on a real repository: commits made inside an agent's tree
need that agent's locks; the operator's do not; the hook chains and goes away."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import GIT_IDENTITY, Puppet, Run
from locks import guard
from tests.locks.conftest import later, module_run, release_everything, repo_file

_edits = itertools.count(1)
FILES = {"README.md": "scratch\n", "a.txt": "a\n", "b.txt": "b\n", "src/x.py": "x = 1\n"}


def operator_git(run: Run, *args: str) -> subprocess.CompletedProcess[str]:
    """git run by this test process, outside every agent's tree with the operator key: the operator."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    return subprocess.run(["git", "-C", str(run.repo), *GIT_IDENTITY, *args], capture_output=True, text=True, env=env)


def agent_commit(run: Run, puppet: Puppet, path: str, *git_env: str) -> subprocess.CompletedProcess[str]:
    """Change ``path``, stage it and commit it -- git run by the agent, inside its tree."""
    repo_file(run, path, f"change {next(_edits)} by {puppet.key}\n")
    added = puppet.sh("git", "-C", str(run.repo), "add", path)
    assert added.returncode == 0, added.stderr
    return puppet.sh(*git_env, "git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", f"{puppet.key} edits {path}")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with module_run(tmp_path_factory, "guard", [{"name": "alice", "may_spawn": 1}, {"name": "bob"}], files=FILES) as run:
        yield run


@pytest.fixture
def run(guarded: Run) -> Iterator[Run]:
    yield guarded
    # Whatever a refused commit left staged is committed by the operator (never blocked).
    operator_git(guarded, "add", "-A")
    operator_git(guarded, "commit", "-qm", "test cleanup")
    release_everything(guarded)


def test_commit_of_an_unlocked_file_is_refused_until_it_is_locked(run: Run) -> None:
    alice = run.puppet("alice")
    refused = agent_commit(run, alice, "a.txt")
    assert refused.returncode != 0
    assert "commit refused" in refused.stderr and "git" in refused.stderr and "a.txt" in refused.stderr
    # The file alone is not enough: git's index and refs need the git lock.
    alice.call("lock.acquire", resources=["a.txt"])
    refused = alice.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "second try")
    assert refused.returncode != 0 and "git  (not held by you" in refused.stderr and "a.txt  (" not in refused.stderr
    alice.call("lock.acquire", resources=["git"])
    accepted = alice.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "with locks")
    assert accepted.returncode == 0, accepted.stderr
    assert operator_git(run, "log", "-1", "--format=%s").stdout.strip() == "with locks"


def test_commit_needs_the_git_lock_exclusive(run: Run) -> None:
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["a.txt"])
    alice.call("lock.acquire", resources=["git"], shared=True)
    refused = agent_commit(run, alice, "a.txt")
    assert refused.returncode != 0 and "held shared" in refused.stderr


def test_commit_of_a_file_another_agent_holds_is_refused_naming_them(run: Run) -> None:
    alice, bob = run.puppet("alice"), run.puppet("bob")
    bob.call("lock.acquire", resources=["b.txt"])
    alice.call("lock.acquire", resources=["git"])
    refused = agent_commit(run, alice, "b.txt")
    assert refused.returncode != 0 and f"held by {bob.key}" in refused.stderr


def test_a_glob_lock_covers_the_staged_paths_it_matches(run: Run) -> None:
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["src/**", "git"])
    assert agent_commit(run, alice, "src/x.py").returncode == 0
    # ...but not a path outside it.
    assert agent_commit(run, alice, "b.txt").returncode != 0


def test_operator_commit_is_not_blocked(run: Run) -> None:
    bob = run.puppet("bob")
    bob.call("lock.acquire", resources=["b.txt", "git"])  # even with an agent holding them
    repo_file(run, "b.txt", "the operator's edit\n")
    operator_git(run, "add", "b.txt")
    done = operator_git(run, "commit", "-m", "operator edit")
    assert done.returncode == 0, done.stderr


def test_agent_hiding_its_ticket_cannot_commit_as_the_operator(run: Run) -> None:
    # The attack: alice holds nothing, drops CONCLAVE_TICKET so the hook's CLI
    # connects as the operator (who is never blocked).  In her box she cannot even
    # read the operator key the operator's CLI presents.
    alice = run.puppet("alice")
    refused = agent_commit(run, alice, "a.txt", "env", "-u", "CONCLAVE_TICKET")
    assert refused.returncode != 0
    assert "cannot see it (an agent in a sandbox cannot)" in refused.stderr, refused.stderr
    # Positive control: with its ticket and its locks, the same commit goes in.
    alice.call("lock.acquire", resources=["a.txt", "git"])
    assert alice.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "honest").returncode == 0


def test_a_child_agent_needs_its_own_locks_to_commit(run: Run) -> None:
    alice = run.puppet("alice")
    kid = run.spawn_puppet("alice", "kid")
    try:
        alice.call("lock.acquire", resources=["a.txt", "git"])
        refused = agent_commit(run, kid, "a.txt")  # the parent's locks are not the child's
        assert refused.returncode != 0 and f"held by {alice.key}" in refused.stderr
    finally:
        kid.exit(0)
        run.forget("alice/kid")


def test_two_agents_commit_in_parallel_without_an_index_lock_failure(run: Run) -> None:
    alice, bob = run.puppet("alice"), run.puppet("bob")
    rounds = 10
    start = int(operator_git(run, "rev-list", "--count", "HEAD").stdout)

    def work(puppet: Puppet, name: str) -> list[subprocess.CompletedProcess[str]]:
        results = []
        for i in range(rounds):
            body = f"echo {i} >> {name} && git add {name} && git {' '.join(GIT_IDENTITY)} commit -q -m '{name} {i}'"
            results.append(puppet.sh("conclave", "exec", "--lock", name, "--lock", "git", "--wait", "60", "--", "sh", "-c", body, timeout=120))
        return results

    a, b = later(work, alice, "par-a.txt"), later(work, bob, "par-b.txt")
    outcomes = a.result(timeout=300) + b.result(timeout=300)
    for out in outcomes:
        assert out.returncode == 0, out.stderr
        assert "index.lock" not in out.stderr
    assert int(operator_git(run, "rev-list", "--count", "HEAD").stdout) == start + 2 * rounds
    assert run.op("lock.list")["holdings"] == []


def test_an_existing_hook_is_chained_and_put_back_when_the_broker_stops(tmp_path: Path) -> None:
    run = Run(tmp_path, [{"name": "alice"}], files=FILES)
    hooks = guard.hooks_dir(run.repo)
    hooks.mkdir(parents=True, exist_ok=True)
    # The chained hook runs inside alice's commit, in her box: it logs to the work tree, which she may write.
    original = f"#!/bin/sh\necho chained-ran >> {run.repo}/.chained.log\nexit 0\n"
    (hooks / "pre-commit").write_text(original)
    (hooks / "pre-commit").chmod(0o755)
    run.start()
    try:
        assert guard.is_ours(hooks / "pre-commit")
        alice = run.puppet("alice")
        alice.call("lock.acquire", resources=["a.txt", "git"])
        assert agent_commit(run, alice, "a.txt").returncode == 0
        assert (run.repo / ".chained.log").read_text() == "chained-ran\n"
    finally:
        run.close()
    assert (hooks / "pre-commit").read_text() == original
    assert not (hooks / guard.CHAINED).exists()


def test_a_failing_chained_hook_still_blocks_the_commit(tmp_path: Path) -> None:
    run = Run(tmp_path, [{"name": "alice"}], files=FILES)
    hooks = guard.hooks_dir(run.repo)
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\necho 'lint failed' >&2\nexit 1\n")
    (hooks / "pre-commit").chmod(0o755)
    with run:
        alice = run.puppet("alice")
        alice.call("lock.acquire", resources=["a.txt", "git"])
        refused = agent_commit(run, alice, "a.txt")
        assert refused.returncode != 0 and "lint failed" in refused.stderr


def test_the_guard_is_gone_after_the_broker_stops(tmp_path: Path) -> None:
    run = Run(tmp_path, [{"name": "alice"}], files=FILES)
    hook = guard.hooks_dir(run.repo) / "pre-commit"
    with run:
        assert guard.is_ours(hook)
    assert not hook.exists()
    # With no broker, nothing stands in the operator's way.
    repo_file(run, "a.txt", "after\n")
    operator_git(run, "add", "a.txt")
    assert operator_git(run, "commit", "-m", "after the run").returncode == 0
