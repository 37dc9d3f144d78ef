"""``conclave run`` refuses a repository that is not laid out the ordinary way, and protects
the paths in the tree the person's git trusts (``broker.sandbox.gitlayout``).

Each unusual layout is made in a real repository and refused with a line naming what is
wrong and how to fix it; the ordinary repository beside it is the control.  Reading the
index's hiding flags (``broker.sandbox.gitfiles.flagged_entries``) is checked against
indexes git itself wrote, versions 2 to 4.  (That a protected path is read-only in every
box is an attack test: ``tests/containment/test_git_box.py``.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from agents.harness import make_repo
from broker.entry import conclave_argv
from broker.sandbox import gitfiles, gitlayout

EXIT_USAGE = 2


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


UNUSUAL: dict[str, tuple[Callable[[Path], None], str]] = {
    "a .git file (a linked worktree)": (
        lambda r: (os.rename(r / ".git", r.parent / "elsewhere.git"), (r / ".git").write_text(f"gitdir: {r.parent / 'elsewhere.git'}\n")),
        "is a file",
    ),
    "a .git link": (lambda r: (os.rename(r / ".git", r.parent / "real.git"), os.symlink(r.parent / "real.git", r / ".git")), "symbolic link"),
    "commondir": (lambda r: (r / ".git" / "commondir").write_text("../elsewhere\n"), "commondir"),
    "a reftable": (lambda r: (r / ".git" / "reftable").mkdir(), "reftable"),
    "core.worktree": (lambda r: git(r, "config", "core.worktree", str(r.parent)), "core.worktree"),
    "core.bare": (lambda r: git(r, "config", "core.bare", "true"), "core.bare"),
    "extensions.worktreeConfig": (lambda r: git(r, "config", "extensions.worktreeConfig", "true"), "extensions.worktreeconfig"),
    "a hooks path in the tree that is not there": (lambda r: git(r, "config", "core.hooksPath", ".husky"), "core.hookspath names '.husky'"),
    "an include in the tree that is not there": (lambda r: git(r, "config", "include.path", "../conf/git.cfg"), "include.path names"),
    "a filter script in the tree that is not there": (lambda r: git(r, "config", "filter.lfs.clean", "./scripts/clean.sh %f"), "filter.lfs.clean"),
    "a hooks path that is the tree itself": (lambda r: git(r, "config", "core.hooksPath", "."), "the work tree itself"),
}


@pytest.mark.parametrize("case", sorted(UNUSUAL))
def test_an_unusual_layout_is_refused_naming_what_and_how(case: str, tmp_path: Path) -> None:
    make, words = UNUSUAL[case]
    repo = make_repo(tmp_path)
    assert gitlayout.check(repo).protected == ()  # control: the ordinary layout passes
    make(repo)
    with pytest.raises(gitlayout.GitLayoutError) as refused:
        gitlayout.check(repo)
    assert words in str(refused.value), str(refused.value)


def test_conclave_run_refuses_with_one_line_and_exit_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo, "config", "core.hooksPath", ".husky")
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "alice"\ncommand = ["true"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    argv = conclave_argv("run", "--team", str(team), "--repo", str(repo), "--state-dir", str(tmp_path / "state"), "--quiet")
    refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == EXIT_USAGE, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and ".husky" in lines[0] and "create it" in lines[0], refused.stderr
    # Control: once the path exists it is protected, and the run starts (and ends: the team exits).
    (repo / ".husky").mkdir()
    started = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert started.returncode == 0, started.stderr


def test_paths_the_persons_git_trusts_are_found_wherever_the_configuration_names_them(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"README.md": "x\n", ".husky/pre-commit": "#!/bin/sh\n", "conf/git.cfg": "", "scripts/clean.sh": "", "tools/diff.sh": ""})
    git(repo, "config", "core.hooksPath", ".husky")
    git(repo, "config", "include.path", "../conf/git.cfg")
    git(repo, "config", "filter.x.clean", "sh ./scripts/clean.sh %f")
    git(repo, "config", "diff.y.textconv", f"{repo}/tools/diff.sh")
    git(repo, "config", "alias.st", "!git status")  # a word that is no path: nothing to protect
    git(repo, "config", "core.pager", "less -R")  # likewise
    layout = gitlayout.check(repo)
    assert sorted(p.relative_to(repo).as_posix() for p in layout.protected) == [".husky", "conf/git.cfg", "scripts/clean.sh", "tools/diff.sh"]
    assert layout.hooks_path == ".husky"


def test_each_submodules_git_is_protected_and_a_missing_submodule_directory_refused(tmp_path: Path) -> None:
    """The person's git runs git inside every submodule the index names whose ``.git`` it finds:
    a checked-out submodule's ``.git`` file or directory is protected, and so is the empty
    directory of one not checked out (an agent could put a ``.git`` there).  A submodule with
    no directory at all is refused: an agent could create one."""
    repo = make_repo(tmp_path, {"README.md": "x\n", "lib/file/.git": "gitdir: ../../.git/modules/file\n", "lib/dir/.git/HEAD": "ref: refs/heads/main\n"})
    (repo / "lib" / "empty").mkdir()
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    # No gitlink in the index yet: the empty directory is nothing to protect; the two .git are, as repositories in
    # the tree at the start (the person's git run inside one obeys it), gitlinks or not.
    assert sorted(p.relative_to(repo).as_posix() for p in gitlayout.check(repo).protected) == ["lib/dir/.git", "lib/file/.git"]
    for name in ("file", "dir", "empty"):
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},lib/{name}")
    layout = gitlayout.check(repo)
    assert sorted(p.relative_to(repo).as_posix() for p in layout.protected) == ["lib/dir/.git", "lib/empty", "lib/file/.git"]
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},lib/gone")
    with pytest.raises(gitlayout.GitLayoutError) as refused:
        gitlayout.check(repo)
    assert "the submodule lib/gone has no directory" in str(refused.value) and "git submodule update --init" in str(refused.value)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_hiding_flags_are_read_from_every_index_version(version: int, tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {f"d{i}/file-{i}.txt": f"{i}\n" for i in range(5)} | {"Makefile": "all:\n"})
    git(repo, "update-index", "--index-version", str(version))
    assert gitfiles.flagged_entries((repo / ".git" / "index").read_bytes()) == set()  # control: nothing marked
    git(repo, "update-index", "--assume-unchanged", "Makefile")
    expected = {("Makefile", "assume-unchanged")}
    if version >= 3:
        git(repo, "update-index", "--skip-worktree", "d3/file-3.txt")
        (repo / "new.txt").write_text("n\n")
        git(repo, "add", "-N", "new.txt")
        expected |= {("d3/file-3.txt", "skip-worktree"), ("new.txt", "intent-to-add")}
    git(repo, "update-index", "--index-version", str(version))
    assert gitfiles.flagged_entries((repo / ".git" / "index").read_bytes()) == expected
