"""`conclave hook pre-tool-use`, fed the JSON Claude Code sends, inside real agents' trees.

Exit 0 lets the edit through; exit 2 blocks it with the reason on stderr (Claude Code's
documented contract).  Decisions that need the lock table skip, by name, until the broker
serves `lock.check_commit`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agents.harness import Run
from tests.agents.conftest import edit_event, hook, require


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    files = {"src/a.py": "a = 1\n", "src/b.py": "b = 2\n", "src/c.py": "c = 3\n", "docs/guide.md": "# guide\n"}
    with Run(tmp_path_factory.mktemp("hooks"), [{"name": "alice"}, {"name": "bob"}], files=files) as run:
        yield run


def blocked(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, f"expected a block, got {done.returncode}: {done.stderr}"
    return done.stderr


def allowed(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""


def test_tools_that_edit_nothing_pass_through(run):
    alice = run.puppet("alice")
    for tool_name, tool_input in (("Read", {"file_path": f"{run.repo}/src/a.py"}), ("Bash", {"command": "ls"}), ("Grep", {"pattern": "a"})):
        event = {**edit_event(run.repo, "src/a.py"), "tool_name": tool_name, "tool_input": tool_input}
        allowed(hook(alice, event))


def test_edit_outside_the_repository_needs_no_lock(run, tmp_path):
    allowed(hook(run.puppet("alice"), edit_event(run.repo, str(tmp_path / "scratch.txt"), tool="Write")))


def test_editing_the_commit_guard_in_dot_git_is_blocked(run):
    """Attack: the model edits .git/hooks/pre-commit to switch the commit guard off."""
    reason = blocked(hook(run.puppet("alice"), edit_event(run.repo, ".git/hooks/pre-commit", tool="Write")))
    assert ".git/hooks/pre-commit" in reason and "commit guard" in reason


def test_symlink_into_dot_git_is_followed_and_blocked(run):
    """Attack: a symlink inside the work tree points at .git/hooks, so the path the model
    names looks like an ordinary source file.  The hook resolves it first."""
    link = run.repo / "tools"
    link.symlink_to(run.repo / ".git" / "hooks")
    try:
        reason = blocked(hook(run.puppet("alice"), edit_event(run.repo, "tools/pre-commit", tool="Edit")))
        assert ".git/hooks/pre-commit" in reason
    finally:
        link.unlink()


def test_editing_conclave_state_is_blocked(run):
    """Attack: the model rewrites the broker's database or logs through the Edit tool."""
    reason = blocked(hook(run.puppet("alice"), edit_event(run.repo, str(run.state / "conclave.db"), tool="Write")))
    assert "state directory" in reason


def test_malformed_event_blocks_rather_than_guessing(run):
    alice = run.puppet("alice")
    assert "not JSON" in blocked(hook(alice, "{not json"))
    assert "tool_name" in blocked(hook(alice, ["Edit"]))
    event = edit_event(run.repo, "src/a.py")
    event["tool_input"] = {}
    assert "file_path" in blocked(hook(alice, event))


def test_hook_without_an_agent_identity_blocks(run):
    """A hook run outside any agent (no ticket) cannot prove a lock is held, so it blocks --
    even for a path that would need none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    event = json.dumps(edit_event(run.repo, "/tmp/elsewhere.txt"))
    done = subprocess.run([sys.executable, "-m", "broker.cli", "hook", "pre-tool-use"], input=event, capture_output=True, text=True, env=env, timeout=60)
    assert "no agent identity" in blocked(done)
    allowed(hook(run.puppet("alice"), json.loads(event)))  # control: the same event, as alice
    read = json.dumps({**json.loads(event), "tool_name": "Read"})
    done = subprocess.run([sys.executable, "-m", "broker.cli", "hook", "pre-tool-use"], input=read, capture_output=True, text=True, env=env, timeout=60)
    allowed(done)  # a tool that edits nothing needs no identity to pass


# -- decisions that need the lock table ------------------------------------------------------


def test_edit_on_an_unlocked_path_is_blocked_naming_the_lock_to_take(run):
    require(run, "lock.check_commit", "lock.acquire", "lock.release")
    alice = run.puppet("alice")
    for tool in ("Edit", "Write", "MultiEdit"):
        reason = blocked(hook(alice, edit_event(run.repo, "src/a.py", tool=tool)))
        assert "src/a.py" in reason and "lock_acquire" in reason and "conclave lock acquire src/a.py" in reason
    alice.call("lock.acquire", resources=["src/a.py"])
    try:
        for tool in ("Edit", "Write", "MultiEdit"):
            allowed(hook(alice, edit_event(run.repo, "src/a.py", tool=tool)))
        relative = {**edit_event(run.repo, "src/a.py"), "tool_input": {"file_path": "src/a.py"}}
        allowed(hook(alice, relative))
    finally:
        alice.call("lock.release", resources=["src/a.py"])
    blocked(hook(alice, edit_event(run.repo, "src/a.py")))


def test_path_locked_by_another_agent_is_blocked_naming_the_holder(run):
    """Attack: alice edits a file bob holds, hoping nobody checks."""
    require(run, "lock.check_commit", "lock.acquire", "lock.release")
    alice, bob = run.puppet("alice"), run.puppet("bob")
    bob.call("lock.acquire", resources=["src/b.py"])
    try:
        reason = blocked(hook(alice, edit_event(run.repo, "src/b.py", tool="Write")))
        assert bob.key in reason
        allowed(hook(bob, edit_event(run.repo, "src/b.py", tool="Write")))  # control: the holder may
    finally:
        bob.call("lock.release", resources=["src/b.py"])


def test_shared_lock_is_not_enough_to_edit(run):
    require(run, "lock.check_commit", "lock.acquire", "lock.release")
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["src/c.py"], shared=True)
    try:
        blocked(hook(alice, edit_event(run.repo, "src/c.py")))
    finally:
        alice.call("lock.release", resources=["src/c.py"])
    alice.call("lock.acquire", resources=["src/c.py"])
    try:
        allowed(hook(alice, edit_event(run.repo, "src/c.py")))
    finally:
        alice.call("lock.release", resources=["src/c.py"])


def test_glob_lock_covers_new_files_below_it(run):
    require(run, "lock.check_commit", "lock.acquire", "lock.release")
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["docs/**"])
    try:
        allowed(hook(alice, edit_event(run.repo, "docs/new/page.md", tool="Write")))
        blocked(hook(alice, edit_event(run.repo, "src/new.py", tool="Write")))
    finally:
        alice.call("lock.release", resources=["docs/**"])


def test_a_repository_file_named_git_still_needs_its_lock(run):
    # The attack: edit a file whose path is literally `git`, hoping the hook mistakes
    # it for the named git lock (which an edit does not need) and waves it through.
    alice = run.puppet("alice")
    reason = blocked(hook(alice, edit_event(run.repo, "git", tool="Write")))
    assert "git" in reason
    # Control: once alice locks the file, the same edit passes.
    alice.call("lock.acquire", resources=["./git"])  # a path, not the named git lock
    try:
        allowed(hook(alice, edit_event(run.repo, "git", tool="Write")))
    finally:
        alice.call("lock.release", resources=["./git"])
