"""The commit guard on a real repository: an agent's commit reaches the person's branch only
with that agent's locks; the person's commits are never blocked and every agent follows them.

Boxed agents (the default box here) commit in a git directory of their own and the broker
brings each commit in (``locks.bringin``); the unboxed agent commits in the person's
repository through the ``reference-transaction`` hook conclave puts in its hooks directory
only while such an agent runs (``broker.sandbox.guardhook``).
"""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import GIT_IDENTITY, Puppet, Run
from broker.githook import HOOK
from broker.sandbox import gitlayout, guardhook
from tests.locks.conftest import later, module_run, release_everything, repo_file

_edits = itertools.count(1)
FILES = {"README.md": "scratch\n", "a.txt": "a\n", "b.txt": "b\n", "src/x.py": "x = 1\n"}


def agent_commit(run: Run, puppet: Puppet, path: str, *git_env: str) -> subprocess.CompletedProcess[str]:
    """Change ``path``, stage it and commit it -- git run by the agent, inside its tree."""
    repo_file(run, path, f"change {next(_edits)} by {puppet.key}\n")
    added = puppet.sh("git", "-C", str(run.repo), "add", path)
    assert added.returncode == 0, added.stderr
    return puppet.sh(*git_env, "git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", f"{puppet.key} edits {path}")


def person_log(run: Run) -> str:
    return run.person_git("log", "-1", "--format=%s").stdout.strip()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    agents = [{"name": "alice", "may_spawn": 1}, {"name": "bob"}, {"name": "carol", "sandbox": "off"}]
    with module_run(tmp_path_factory, "guard", agents, files=FILES) as run:
        yield run


@pytest.fixture
def run(guarded: Run) -> Iterator[Run]:
    yield guarded
    # Whatever a refused commit left changed is committed by the person (never blocked); every agent follows.
    guarded.person_git("add", "-A")
    guarded.person_git("commit", "-qm", "test cleanup")
    guarded.wait_followed("alice", "bob")
    release_everything(guarded)


def test_commit_of_an_unlocked_file_is_refused_until_it_is_locked(run: Run) -> None:
    alice = run.puppet("alice")
    before = person_log(run)
    refused = agent_commit(run, alice, "a.txt")
    assert refused.returncode != 0
    assert "commit refused" in refused.stderr and "git  (not held by you" in refused.stderr and "a.txt  (" in refused.stderr
    assert person_log(run) == before
    # The file alone is not enough: git's refs need the git lock.
    alice.call("lock.acquire", resources=["a.txt"])
    refused = alice.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "second try")
    assert refused.returncode != 0 and "git  (not held by you" in refused.stderr and "a.txt  (" not in refused.stderr
    alice.call("lock.acquire", resources=["git"])
    accepted = alice.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "with locks")
    assert accepted.returncode == 0, accepted.stderr
    assert person_log(run) == "with locks"
    # The person's own view is true at once: the branch moved and the index followed.
    assert run.person_git("status", "--porcelain").stdout == ""


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


def test_the_persons_commit_is_not_blocked_and_every_agent_follows_it(run: Run) -> None:
    bob = run.puppet("bob")
    bob.call("lock.acquire", resources=["b.txt", "git"])  # even with an agent holding them
    repo_file(run, "b.txt", "the person's edit\n")
    run.person_git("add", "b.txt")
    done = run.person_git("commit", "-m", "person edit")
    assert done.returncode == 0, done.stderr
    head = run.wait_followed("alice", "bob")
    for name in ("alice", "bob"):
        shown = run.puppet(name).sh("git", "status", "--porcelain")
        assert shown.stdout == "", (name, shown.stdout)
        assert run.puppet(name).sh("git", "log", "-1", "--format=%H %s").stdout.strip() == f"{head} person edit"


def test_agent_hiding_its_ticket_cannot_commit_as_the_operator(run: Run) -> None:
    # The attack: alice holds nothing and drops CONCLAVE_TICKET, so her hook has no identity;
    # an unboxed carol does the same, and can even read the operator key -- but her process
    # is inside her agent's tree, so the broker refuses the key to it.
    alice, carol = run.puppet("alice"), run.puppet("carol")
    before = person_log(run)
    refused = agent_commit(run, alice, "a.txt", "env", "-u", "CONCLAVE_TICKET")
    assert refused.returncode != 0 and "no agent identity" in refused.stderr, refused.stderr
    refused = agent_commit(run, carol, "b.txt", "env", "-u", "CONCLAVE_TICKET")
    assert refused.returncode != 0 and "commit refused" in refused.stderr, refused.stderr
    assert person_log(run) == before
    run.person_git("reset", "-q")
    # Positive control: with their tickets and their locks, the same commits go in.
    alice.call("lock.acquire", resources=["a.txt", "git"])
    assert agent_commit(run, alice, "a.txt").returncode == 0
    alice.call("lock.release", resources=["git"])
    carol.call("lock.acquire", resources=["b.txt", "git"])
    honest = agent_commit(run, carol, "b.txt")
    assert honest.returncode == 0, honest.stderr
    assert person_log(run) == f"{carol.key} edits b.txt"


def test_an_unboxed_agents_commit_needs_its_locks_too(run: Run) -> None:
    carol = run.puppet("carol")
    before = person_log(run)
    refused = agent_commit(run, carol, "a.txt")
    assert refused.returncode != 0 and "git  (not held by you" in refused.stderr and "a.txt  (" in refused.stderr
    assert person_log(run) == before
    carol.call("lock.acquire", resources=["a.txt", "git"])
    allowed = carol.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "carol with locks")
    assert allowed.returncode == 0, allowed.stderr
    assert person_log(run) == "carol with locks"
    run.wait_followed("alice", "bob")


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
    start = int(run.person_git("rev-list", "--count", "HEAD").stdout)

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
    assert int(run.person_git("rev-list", "--count", "HEAD").stdout) == start + 2 * rounds
    assert run.op("lock.list")["holdings"] == []
    # Each agent's git shows all twenty, and nothing changed: every git status is true.
    for puppet in (alice, bob):
        assert int(puppet.sh("git", "rev-list", "--count", "HEAD").stdout) == start + 2 * rounds
        assert puppet.sh("git", "status", "--porcelain").stdout == ""
    assert run.person_git("status", "--porcelain").stdout == ""


def test_no_hook_is_written_into_the_persons_repository_for_boxed_agents(tmp_path: Path) -> None:
    run = Run(tmp_path, [{"name": "alice"}], files=FILES)
    hooks = run.repo / ".git" / "hooks"
    before = sorted(p.name for p in hooks.iterdir())
    with run:
        run.puppet("alice")
        assert sorted(p.name for p in hooks.iterdir()) == before
    # Control: with an unboxed agent in the team the guard is there for the run, and gone after.
    run = Run(tmp_path / "second", [{"name": "carol", "sandbox": "off"}], files=FILES)
    hook = run.repo / ".git" / "hooks" / HOOK
    with run:
        run.puppet("carol")
        assert guardhook.is_ours(hook.read_bytes())
    assert not hook.exists()


def test_an_existing_hook_is_chained_a_failing_one_still_blocks_and_it_is_put_back_when_the_broker_stops(tmp_path: Path) -> None:
    """The person's own reference-transaction hook keeps running during the run (it logs every phase);
    when it fails (here: while a ``.deny`` file exists) the commit is blocked with its message; at the
    stop it is put back as it was."""
    run = Run(tmp_path, [{"name": "carol", "sandbox": "off"}], files=FILES)
    hooks = guardhook.hooks_dir(gitlayout.check(run.repo))
    original = (
        f"#!/bin/sh\necho \"$1\" >> {run.repo}/.chained.log\n"
        f"[ \"$1\" = prepared ] && [ -e {run.repo}/.deny ] && {{ echo 'policy says no' >&2; exit 1; }}\n"
        "cat >/dev/null\nexit 0\n"
    )
    (hooks / HOOK).write_text(original)
    (hooks / HOOK).chmod(0o755)
    run.start()
    try:
        assert guardhook.is_ours((hooks / HOOK).read_bytes())
        carol = run.puppet("carol")
        carol.call("lock.acquire", resources=["a.txt", "git"])
        assert agent_commit(run, carol, "a.txt").returncode == 0
        assert (run.repo / ".chained.log").read_text().split() == ["prepared", "committed"]
        # The same commit with the person's hook failing: blocked, with its message.
        (run.repo / ".deny").write_text("")
        refused = agent_commit(run, carol, "a.txt")
        assert refused.returncode != 0 and "policy says no" in refused.stderr
    finally:
        run.close()
    assert (hooks / HOOK).read_text() == original
    assert not (hooks / guardhook.CHAINED).exists()


def test_an_unboxed_agents_commit_naming_a_missing_object_is_refused(run: Run) -> None:
    """Attack: carol (unboxed, with her locks) writes a tree naming a blob that is in no store
    (``mktree --missing``), commits it and moves the branch with ``update-ref``: the person's
    branch would name a commit git cannot check out.  Refused as incomplete; the same commit
    with a blob that exists lands (the control)."""
    carol = run.puppet("carol")
    carol.call("lock.acquire", resources=["a.txt", "git"])
    git = ["git", "-C", str(run.repo), *GIT_IDENTITY]
    branch = run.person_git("symbolic-ref", "HEAD").stdout.strip()

    def commit_naming(blob: str, message: str) -> subprocess.CompletedProcess[str]:
        entries = carol.sh("git", "-C", str(run.repo), "ls-tree", "HEAD").stdout
        entries = "".join(line + "\n" for line in entries.splitlines() if not line.endswith("\ta.txt"))
        tree = carol.sh("sh", "-c", f'printf "%s100644 blob {blob}\\ta.txt\\n" "$1" | git -C "$2" mktree --missing', "-", entries, str(run.repo))
        assert tree.returncode == 0, tree.stderr
        commit = carol.sh(*git, "commit-tree", tree.stdout.strip(), "-p", "HEAD", "-m", message)
        assert commit.returncode == 0, commit.stderr
        return carol.sh(*git, "update-ref", branch, commit.stdout.strip())

    before = person_log(run)
    refused = commit_naming("0123456789abcdef0123456789abcdef01234567", "carol names a missing blob")
    assert refused.returncode != 0 and "not complete" in refused.stderr, refused.stderr
    assert person_log(run) == before
    real = carol.sh("sh", "-c", 'echo "a, by carol" | git -C "$1" hash-object -w --stdin', "-", str(run.repo)).stdout.strip()
    allowed = commit_naming(real, "carol names a real blob")
    assert allowed.returncode == 0, allowed.stderr
    assert person_log(run) == "carol names a real blob"
    run.wait_followed("alice", "bob")
