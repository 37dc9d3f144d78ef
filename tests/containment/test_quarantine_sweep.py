"""The sweep that makes repositories an agent plants in the work tree inert cannot be blinded, refused or crashed.

Red team round 2 (docs/THREAT_MODEL.md, "Git"): the broker walks the tree and renames every ``.git`` made
during the run aside (``GitViews._quarantine``), but a boxed agent, as an ordinary uid, still left a live
repository that the person's git obeyed after the run, four ways:

- ``readonly``: ``git init sub`` (a ``core.fsmonitor``), then ``chmod 0555 sub``.  The broker runs as the
  same uid without ``CAP_DAC_OVERRIDE``: the rename was refused (logged, nothing else), the person's
  top-level ``git status`` showed nothing, and ``cd sub && git status`` ran the program as the person.
- ``unlistable``: the repository in ``sub/hide/sub`` with ``chmod 0111 sub/hide``: the walk's ``scandir``
  failed and it skipped the directory silently; git only needs to traverse it.
- ``commondir``: ``sub/HEAD`` and ``sub/commondir`` (naming ``sub/store``, which holds ``objects/``, ``refs/``
  and ``config``): no directory has all of HEAD, objects/ and refs/, yet git's ``is_git_directory`` takes
  ``sub/`` for a bare repository, from ``sub/`` and every directory below; ``git log`` there ran its
  ``gpg.program`` (``log.showSignature``) as the person.
- ``deep``: a chain of 1100 directories: the recursive walk raised RecursionError, which ended the broker
  (no sweep at the end) and made the next ``conclave run`` on the tree fail at start.

Each shape is checked against git itself first (the control: git does find the planted repository), then
the sweep must find it and make it inert.  The permission shapes prove something only as an ordinary uid
(root ignores modes): ``tests/broker/test_as_user.py`` reruns this file as uid 65534.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import make_repo
from broker.sandbox import machine as sandbox_machine
from broker.sandbox.gitviews import nested_repositories, quarantine
from tests.conclave_run import conclave, operator_env

pytestmark = pytest.mark.uid_independent("planted repositories against the sweep and the boxes: the permission shapes prove something only as an ordinary uid (root ignores modes)")
MACHINE = sandbox_machine.probe()
LEVELS = [level for level in ("strict", "landlock") if level == "strict" and MACHINE.strongest == "strict" or level == "landlock" and MACHINE.landlock_abi >= 1]

#: The shapes, planted by a shell in w/ (a landlock box makes no new top-level entry); $1 is the marker file.
PLANT = r"""
set -e
top=$(pwd)
pay() { printf '#!/bin/sh\necho %s >> %s\ncat >/dev/null 2>&1; exit 1\n' "$2" "$1" > "$3"; chmod +x "$3"; }
# readonly: the rename is refused
mkdir -p ro && git init -q ro && pay "$1" readonly "$top/ro/.git/fsmon" && git -C ro config core.fsmonitor "$top/ro/.git/fsmon"
# unlistable: the walk cannot list the parent
mkdir -p hide/sub && git init -q hide/sub && pay "$1" unlistable "$top/hide/sub/.git/fsmon" && git -C hide/sub config core.fsmonitor "$top/hide/sub/.git/fsmon"
# commondir: a bare layout split in two
mkdir -p cd/store/objects cd/store/refs/heads cd/below
echo 'ref: refs/heads/main' > cd/HEAD; echo store > cd/commondir
pay "$1" commondir "$top/cd/store/pay"
printf '[core]\n\trepositoryformatversion = 0\n[gpg]\n\tprogram = %s\n[log]\n\tshowSignature = true\n' "$top/cd/store/pay" > cd/store/config
tree=$(cd cd/below && git mktree </dev/null)
commit=$(printf 'tree %s\nauthor a <a@x> 1700000000 +0000\ncommitter a <a@x> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\nx\n' "$tree" | (cd cd/below && git hash-object -w -t commit --stdin))
(cd cd/below && git update-ref refs/heads/main "$commit")
chmod 0555 ro
chmod 0111 hide
"""

#: Where the person's git runs, and what: each shape's directory.
PLACES = {"readonly": ("w/ro", "status"), "unlistable": ("w/hide/sub", "status"), "commondir": ("w/cd/below", "log")}


@pytest.fixture(autouse=True)
def _remove_deep_chains(tmp_path: Path) -> Iterator[None]:
    """The 1100-deep chains are removed here (rm walks them without recursion): pytest's own clean-up of old
    temporary directories is recursive, and would fail on them in a later session."""
    yield
    subprocess.run(["chmod", "-R", "u+rwx", str(tmp_path)], capture_output=True)
    subprocess.run(["rm", "-rf", str(tmp_path / "work")], capture_output=True)


def _deep(top: Path, depth: int = 1100) -> None:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def _person_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=operator_env())


def _ran(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def test_every_shape_is_found_and_made_inert(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "x\n", "w/README": "x\n"})
    marker = tmp_path / "ran"
    subprocess.run(["sh", "-c", PLANT, "plant", str(marker)], cwd=repo / "w", check=True, env=operator_env())
    for shape, (where, command) in PLACES.items():  # the control: git finds each and runs what it names
        assert _person_git(repo / where, "rev-parse", "--absolute-git-dir").stdout.strip() != str(repo / ".git"), shape
        _person_git(repo / where, command)
    assert sorted(set(_ran(marker))) == sorted(PLACES), "control: every shape runs its program at the person's git"
    marker.unlink()

    found = nested_repositories(repo)  # missed hide/sub (unlistable) and cd (commondir)
    assert found == {"w/ro/.git", "w/hide/sub/.git", "w/cd"}, found
    for path in sorted(found):
        assert quarantine(repo, path) is not None, path  # ro: PermissionError
    assert nested_repositories(repo) == set()
    for shape, (where, command) in PLACES.items():
        assert _person_git(repo / where, "rev-parse", "--absolute-git-dir").stdout.strip() == str(repo / ".git"), shape
        _person_git(repo / where, command)
    assert not marker.exists(), _ran(marker)


def test_a_chain_deeper_than_pythons_recursion_limit_does_not_stop_the_walk(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "x\n", "w/README": "x\n"})
    _deep(repo / "w")
    assert _person_git(repo / "w", "init", "-q", "sub").returncode == 0
    assert nested_repositories(repo) == {"w/sub/.git"}  # raised RecursionError, and the broker's sweep task with it


def test_a_directory_swapped_for_a_link_after_its_parent_was_listed_is_not_walked(tmp_path: Path) -> None:
    """The walk lists each directory by a descriptor it checks is where it was listed: a directory of the tree
    an agent swaps for a link to elsewhere (the root of the file system, a place holding repositories) between
    the listing of its parent and its own is not followed out of the tree.  The swap is made here before
    listing the child, as the race would leave it.  Control: the same directory, a directory, is listed."""
    from broker.sandbox import nested

    repo = make_repo(tmp_path / "work", {"README.md": "x\n", "w/sub/README": "x\n"})
    outside = tmp_path / "outside"
    assert _person_git(tmp_path, "init", "-q", str(outside)).returncode == 0
    top = os.path.realpath(repo)
    listed = {name: inode for name, _, inode in nested._listing(top, "w") or []}
    assert [name for name, _, _ in nested._listing(top, "w/sub", listed["sub"]) or []] == ["README"]  # control
    (repo / "w" / "sub" / "README").unlink()
    (repo / "w" / "sub").rmdir()
    (repo / "w" / "sub").symlink_to(outside)
    assert nested._listing(top, "w/sub", listed["sub"]) is None  # the inode its parent's listing gave
    assert nested._listing(top, "w/sub") is None  # and none: the path the kernel names
    assert nested_repositories(repo) == set()  # and a link the walk sees as one is never entered


@pytest.mark.parametrize("level", LEVELS)
def test_a_boxed_agent_cannot_keep_its_repository_live_past_the_sweep(level: str, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "x\n", "w/README": "x\n"})
    marker = tmp_path / "ran"
    env = operator_env(XDG_STATE_HOME=str(tmp_path / "state-root"))
    # The deep chain is built in two halves joined by one rename after the plant, so no sweep sees the plant alone.
    agent = (
        'cd "$(git rev-parse --show-toplevel)/w"\n'
        + PLANT
        + r"""
mk() { mkdir "$1"; (cd "$1"; i=0; while [ $i -lt 600 ]; do mkdir d; cd d; i=$((i+1)); done); }
mk deep; mk half
end=$(cd deep; i=0; while [ $i -lt 600 ]; do cd d; i=$((i+1)); done; pwd)
mv half "$end/"
sleep 3
"""
    )
    team = tmp_path / "team.toml"
    team.write_text(f'[[agent]]\nname = "mallory"\nsandbox = "{level}"\ncommand = {json.dumps(["sh", "-c", agent, "plant", str(marker)])}\n')
    out = conclave("run", "--team", str(team), "--accept-team", "--json", env=env, cwd=repo)
    assert out.returncode == 0, out.stderr[-3000:]
    found = sorted(n["detail"]["found"] for n in json.loads(out.stdout)["git"] if n["kind"] == "quarantined")
    assert found == ["w/cd", "w/hide/sub/.git", "w/ro/.git"], found
    for shape, (where, command) in PLACES.items():
        assert _person_git(repo / where, "rev-parse", "--absolute-git-dir").stdout.strip() == str(repo / ".git"), shape
        _person_git(repo / where, command)
    assert not marker.exists(), _ran(marker)
    # The next run on the same tree starts.
    again = tmp_path / "again.toml"
    again.write_text('[[agent]]\nname = "alice"\ncommand = ["true"]\n')
    assert conclave("run", "--team", str(again), "--accept-team", env=env, cwd=repo).returncode == 0


#: A boxed agent's shell: a repository in its own agent directory (writable by the box, kept after it), and a
#: link to it in the tree (the walk does not follow links; the person's `cd` does).
AGENT_DIR_LINK = r"""
session=$(conclave whoami --json | sed -n 's/.*"session": *"\([^"]*\)".*/\1/p')
dir="$CONCLAVE_STATE_DIR/agents/mallory/$session/w"
git init -q "$dir" && printf '#!/bin/sh\necho agent-dir >> %s\nexit 1\n' "$1" > "$dir/.git/fsmon" && chmod +x "$dir/.git/fsmon" &&
git -C "$dir" config core.fsmonitor "$dir/.git/fsmon" && ln -s "$dir" "$(git rev-parse --show-toplevel)/w/tools"
"""


@pytest.mark.parametrize("level", LEVELS)
def test_a_repository_in_an_agents_directory_linked_from_the_tree_is_made_inert(level: str, tmp_path: Path) -> None:
    """``w/tools -> <agent dir>/w`` with a repository there: the person's ``cd w/tools && git status`` ran its
    program as the person after the run.  The last sweep makes the agents' directories' repositories inert too."""
    repo = make_repo(tmp_path / "work", {"README.md": "x\n", "w/README": "x\n"})
    marker = tmp_path / "ran"
    env = operator_env(XDG_STATE_HOME=str(tmp_path / "state-root"))
    team = tmp_path / "team.toml"
    team.write_text(f'[[agent]]\nname = "mallory"\nsandbox = "{level}"\ncommand = {json.dumps(["sh", "-c", AGENT_DIR_LINK, "plant", str(marker)])}\n')
    out = conclave("run", "--team", str(team), "--accept-team", "--json", env=env, cwd=repo)
    assert out.returncode == 0, out.stderr[-3000:]
    tools = repo / "w" / "tools"
    assert tools.is_symlink() and tools.resolve().parent.parent.parent.name == "agents", "control: the plant was made"
    _person_git(tools, "status")
    assert not marker.exists(), _ran(marker)
    assert _person_git(tools, "rev-parse", "--absolute-git-dir").returncode != 0  # no repository there any more
    found = [n["detail"]["found"] for n in json.loads(out.stdout)["git"] if n["kind"] == "quarantined"]
    assert found == [str(tools.resolve() / ".git")], found
