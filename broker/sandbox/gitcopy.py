"""Copying an agent's commits into the person's repository, verified, reading nothing else.

An agent's object directory is the agent's to write: every file in it may be
a link, and its ``info/alternates`` may name any other object store on the
machine the broker can read (another project's private history).  So the
objects are read by a ``git pack-objects`` in a Landlock domain of its own
(the sandbox launcher, no namespaces) that may read only the system's
programs and libraries, the person's object store (and its own alternates)
and the agent's objects -- a link pointing anywhere else fails to open.  It
runs in an empty git directory of the broker's (:func:`reader_git_dir`), so
it reads none of the person's configuration either.  Its pack is written into
the person's store by ``git unpack-objects --strict``, which rehashes every
object and checks it as ``fsck`` does (a path named ``.git``, a bad
``.gitmodules``, broken links), without the agent's objects in sight; then
connectivity is checked in the person's repository alone.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final, Iterable

from broker.sandbox import gitrun
from broker.sandbox.gitlayout import Layout
from broker.sandbox.machine import launcher_argv

#: What the reader may read besides the two object stores: git and the libraries it loads.
READER_SYSTEM: Final = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/etc", "/nix", "/gnu", "/opt")
#: Seconds a copy may take before it is given up.
TIMEOUT: Final = 600


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


def reader_prefix(layout: Layout, agent_objects: Path, reader: Path) -> list[str]:
    """The launcher options that box a git reading ``agent_objects``: read-only, nothing else in sight."""
    options = ["--landlock"]
    for path in (*READER_SYSTEM, str(reader), str(layout.objects), *_alternates(layout.objects), str(agent_objects)):
        if os.path.exists(path):
            options += ["--ro", path]
    return [*launcher_argv(), *options, "--dev", "/dev/null", "--"]


def copy(layout: Layout, agent_objects: Path, tips: Iterable[str], have: Iterable[str], *, scratch: Path) -> None:
    """Bring the objects ``tips`` need, beyond what ``have`` already reach, into the person's store.

    Raises:
        gitrun.GitFailed: the agent's objects could not be read (a link out of its store), an object
            failed the strict checks, or the result is not connected.
    """
    tips, have = list(tips), list(have)
    revs = "".join(f"{t}\n" for t in tips) + "".join(f"^{h}\n" for h in have)
    reader = reader_git_dir(layout, scratch)
    reader_env = gitrun.environment(
        reader, None,
        {"GIT_OBJECT_DIRECTORY": str(layout.objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(agent_objects),
         "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"},
    )  # fmt: skip
    pack = subprocess.Popen(
        [*reader_prefix(layout, agent_objects, reader), _git_program(), *gitrun.argv("pack-objects", "--revs", "--stdout", "-q")[1:]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=reader_env, cwd="/",
    )  # fmt: skip
    unpack = subprocess.Popen(
        gitrun.argv("unpack-objects", "-q", "--strict"),
        stdin=pack.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=gitrun.environment(layout.git_dir, None), cwd="/",
    )  # fmt: skip
    assert pack.stdin is not None and pack.stdout is not None and pack.stderr is not None and unpack.stderr is not None
    pack.stdout.close()  # the writer's end is unpack's now
    try:
        pack.stdin.write(revs.encode())
        pack.stdin.close()
    except BrokenPipeError:
        pass
    try:
        unpack_err = unpack.stderr.read()
        pack_err = pack.stderr.read()
        pack.wait(TIMEOUT)
        unpack.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        pack.kill()
        unpack.kill()
        raise gitrun.GitFailed(f"copying the agent's objects took more than {TIMEOUT} s") from None
    if pack.returncode != 0:
        raise gitrun.GitFailed(f"the agent's objects could not be read: {_last(pack_err)}")
    if unpack.returncode != 0:
        raise gitrun.GitFailed(f"the agent's objects failed git's checks: {_last(unpack_err)}")
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
