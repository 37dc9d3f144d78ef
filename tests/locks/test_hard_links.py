"""Hard links through a real broker: a second name for a locked file buys nothing.

A hard link is a second path to the same inode.  conclave refuses to lock a
file that has more than one name (docs/LOCKS.md, "Hard links"): the grant,
and the commit guard, both look at the file's link count.
"""

from __future__ import annotations

import os
import subprocess
from typing import Iterator

import pytest

from agents.harness import GIT_IDENTITY, Run
from broker.errors import ErrorCode
from tests.locks.conftest import held, module_run, refusal, release_everything, repo_file

FILES = {"README.md": "scratch\n", "data/table.csv": "a,b\n", "notes/other.csv": "c,d\n"}


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with module_run(tmp_path_factory, "hardlinks", [{"name": "alice"}, {"name": "bob"}], files=FILES) as run:
        yield run


@pytest.fixture
def run(linked: Run) -> Iterator[Run]:
    yield linked
    for leftover in ("notes/mirror.csv", "notes/late.csv"):
        (linked.repo / leftover).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    subprocess.run(["git", "-C", str(linked.repo), *GIT_IDENTITY, "reset", "-q"], env=env, check=True)
    release_everything(linked)


def test_a_hard_link_to_a_locked_file_is_not_a_way_in(run: Run) -> None:
    """Attack: alice holds data/table.csv.  bob makes notes/mirror.csv a second
    name for the same file and asks for that name: refused, saying it is a hard
    link; alice still holds the file alone.  Control: two distinct files are
    granted to two agents at once."""
    alice, bob = run.puppet("alice"), run.puppet("bob")
    alice.call("lock.acquire", resources=["data/table.csv"])
    made = bob.sh("ln", str(run.repo / "data/table.csv"), str(run.repo / "notes/mirror.csv"))
    assert made.returncode == 0, made.stderr
    refused = refusal(bob.call, "lock.acquire", resources=["notes/mirror.csv"])
    assert refused.code is ErrorCode.INVALID_ARGS and "hard link" in refused.message and "2 names" in refused.message
    # Waiting does not help either, and the absolute spelling is the same file.
    refused = refusal(bob.call, "lock.acquire", resources=[str(run.repo / "notes/mirror.csv")], wait=0.2)
    assert "hard link" in refused.message
    assert held(run) == {"data/table.csv": [alice.key]}
    # Control: distinct files, distinct locks.
    assert bob.call("lock.acquire", resources=["notes/other.csv"])["grants"][0]["resource"] == "notes/other.csv"
    assert alice.call("lock.acquire", resources=["README.md"])["grants"][0]["resource"] == "README.md"
    assert held(run) == {"data/table.csv": [alice.key], "notes/other.csv": [bob.key], "README.md": [alice.key]}
    # The holder keeps what it held before the link appeared, releases it, and the operator can force it.
    assert alice.call("lock.release", resources=["README.md"])["released"][0]["resource"] == "README.md"
    forced = run.op("lock.force_release", resource="data/table.csv", reason="the file has a second name now")
    assert [h["resource"] for h in forced["released"]] == ["data/table.csv"]


def test_a_link_made_after_the_lock_cannot_be_committed(run: Run) -> None:
    """Attack: bob locks notes/late.csv while it does not exist (nothing to refuse
    yet), then makes it a hard link to alice's locked file and commits it: the
    commit guard refuses the hard link by name.  Control: the same commit of an
    ordinary file bob holds goes through."""
    alice, bob = run.puppet("alice"), run.puppet("bob")
    alice.call("lock.acquire", resources=["data/table.csv"])
    bob.call("lock.acquire", resources=["notes/late.csv", "notes/other.csv", "git"])
    os.link(run.repo / "data/table.csv", run.repo / "notes/late.csv")
    assert bob.sh("git", "-C", str(run.repo), "add", "notes/late.csv").returncode == 0
    commit = bob.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "sneak")
    assert commit.returncode != 0 and "hard link" in commit.stderr and "notes/late.csv" in commit.stderr, commit.stderr
    # Control: unstage it; an ordinary file bob holds commits.
    assert bob.sh("git", "-C", str(run.repo), "reset", "-q").returncode == 0
    repo_file(run, "notes/other.csv", "changed by bob\n")
    assert bob.sh("git", "-C", str(run.repo), "add", "notes/other.csv").returncode == 0
    commit = bob.sh("git", "-C", str(run.repo), *GIT_IDENTITY, "commit", "-m", "ordinary")
    assert commit.returncode == 0, commit.stderr
