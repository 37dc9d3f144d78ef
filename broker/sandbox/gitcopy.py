"""Copying an agent's commits into the person's repository, verified, reading nothing else.

The agent's objects are read only by the boxed reader (:mod:`broker.sandbox.gitreader`:
``git pack-objects`` in a Landlock domain that may read the system's programs, the person's
object store and the agents' git directories, and nothing else).  Its pack is written into
the person's store by ``git unpack-objects --strict``, which rehashes every object and checks
it as ``fsck`` does (a path named ``.git``, a bad ``.gitmodules``, broken links), without the
agent's objects in sight; then connectivity is checked in the person's repository alone.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Final, Iterable

from broker.sandbox import gitrun
from broker.sandbox.gitreader import Reader, ReaderFailed
from broker.sandbox.gitlayout import Layout
from broker.sandbox.machine import launcher_argv

#: What the reader may read besides the two object stores: git and the libraries it loads.
READER_SYSTEM: Final = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/etc", "/nix", "/gnu", "/opt")


def reader_git_dir(layout: Layout, scratch: Path) -> Path:
    """An empty git directory of the broker's own (the reader's ``GIT_DIR``): no config, hooks or refs of anyone's."""
    path = scratch / "reader.git"
    if not (path / "HEAD").exists():
        for sub in ("refs", "objects"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        version = "0" if layout.object_format == "sha1" else "1"
        extra = "" if layout.object_format == "sha1" else f"[extensions]\n\tobjectformat = {layout.object_format}\n"
        (path / "config").write_text(f"[core]\n\trepositoryformatversion = {version}\n\tbare = true\n{extra}")
        (path / "HEAD").write_text("ref: refs/heads/main\n")
    return path


def _alternates(objects: Path) -> list[str]:
    """The object stores the person's own store borrows from (``objects/info/alternates``)."""
    try:
        lines = (objects / "info" / "alternates").read_text().splitlines()
    except OSError:
        return []
    return [os.path.normpath(objects / line) for line in lines if line.strip() and not line.startswith("#")]


def reader(layout: Layout, gitdirs: Path, scratch: Path) -> Reader:
    """The boxed reader for this run: it may read the system, the person's object store (and the
    stores it borrows from), the agents' git directories under ``gitdirs`` and its own empty git
    directory -- nothing else."""
    from broker.sandbox import gitreader

    empty = reader_git_dir(layout, scratch)
    python_dirs = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    grants = (*READER_SYSTEM, *sorted(python_dirs), os.path.dirname(os.path.abspath(gitreader.__file__)),
              str(empty), str(layout.objects), *_alternates(layout.objects), str(gitdirs))  # fmt: skip
    options = ["--landlock"]
    for path in dict.fromkeys(grants):
        if os.path.exists(path):
            options += ["--ro", path]
    argv = [*launcher_argv(), *options, "--dev", "/dev/null", "--", sys.executable, "-I", "-S", gitreader.__file__, _git_program()]
    env = gitrun.environment(empty, None, {"GIT_OBJECT_DIRECTORY": str(layout.objects), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"})
    return Reader(argv, env)


def copy(layout: Layout, boxed: Reader, agent_objects: Path, tips: Iterable[str], have: Iterable[str]) -> None:
    """Bring the objects ``tips`` need, beyond what ``have`` already reach, into the person's store.

    Raises:
        gitrun.GitFailed: the agent's objects could not be read (a link out of its store), an object
            failed the strict checks, or the result is not connected.
    """
    tips, have = list(tips), list(have)
    revs = "".join(f"{t}\n" for t in tips) + "".join(f"^{h}\n" for h in have)
    try:
        pack = boxed.pack(str(agent_objects), revs)
    except ReaderFailed as exc:
        raise gitrun.GitFailed(f"the agent's objects could not be read: {_last(str(exc).encode())}") from None
    done = gitrun.run(layout.git_dir, None, ["unpack-objects", "-q", "--strict"], stdin=pack, check=False)
    if done.returncode != 0:
        raise gitrun.GitFailed(f"the agent's objects failed git's checks: {_last(done.stderr)}")
    connected(layout, tips, have)


@functools.lru_cache(maxsize=1)
def _git_program() -> str:
    """git's absolute path, found in the broker's PATH (the boxed reader cannot look through directories it may not read)."""
    found = shutil.which("git")
    if found is None:
        raise gitrun.GitFailed("git is not on the PATH")
    return os.path.realpath(found)


def connected(layout: Layout, tips: Iterable[str], have: Iterable[str]) -> None:
    """Every object ``tips`` reach is in the person's store (its own objects only, no alternate of the agent's).

    Raises:
        gitrun.GitFailed: naming what is missing.
    """
    args = ["rev-list", "--objects", "--quiet", *tips, "--not", *have, "--"]
    done = gitrun.run(layout.git_dir, None, args, check=False)
    if done.returncode != 0:
        raise gitrun.GitFailed(f"the commit is not complete in the person's repository: {_last(done.stderr)}")


def _last(err: bytes) -> str:
    """What git said, in brief: its error lines (fsck names the object and the check), else its last line."""
    lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return "; ".join(errors[:3]) if errors else lines[-1] if lines else "no message"
