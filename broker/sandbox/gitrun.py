"""How the broker (and every hook conclave installs) runs git on the person's repository.

Git finds its repository by walking up from the current directory, and takes
code and behaviour from what it finds there (``core.fsmonitor``, hooks,
replace refs).  Inside a work tree agents write, that walk can end in a
repository an agent planted.  So every git the broker runs names the
person's git directory and work tree explicitly, and:

* starts from an environment with no ``GIT_*`` variable of the caller's
  (none can point it elsewhere);
* sets ``GIT_NO_REPLACE_OBJECTS=1`` (a ``refs/replace`` ref never swaps
  an object under the broker);
* runs no hook (``core.hooksPath=/dev/null``): the broker's own ref and
  index updates never start a program from a hooks directory;
* asks for ``safe.bareRepository=explicit`` on the command line, the only
  place besides the person's own files where git honours it;
* runs from ``/`` (never a directory inside the tree).

An agent's own git directory is never a ``GIT_DIR`` here: its objects are
only ever read through a verified copy (``locks.bringin``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Final, Mapping, Sequence

#: Options every git the broker runs gets before its subcommand.
SAFE_OPTIONS: Final = ("-c", "core.hooksPath=/dev/null", "-c", "safe.bareRepository=explicit")


class GitFailed(RuntimeError):
    """A git command the broker ran failed; the message has its words."""


def environment(git_dir: Path, work_tree: Path | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a git the broker runs on the person's repository."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_DIR"] = str(git_dir)
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    env.update(extra or {})
    return env


def argv(*args: str) -> list[str]:
    return ["git", *SAFE_OPTIONS, *args]


def run(
    git_dir: Path,
    work_tree: Path | None,
    args: Sequence[str],
    *,
    stdin: bytes | None = None,
    extra_env: Mapping[str, str] | None = None,
    check: bool = True,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` on the person's repository; raise :class:`GitFailed` when it fails and ``check``.

    ``prefix`` goes before ``git`` (the sandbox launcher, for a git that reads what an agent wrote).
    """
    done = subprocess.run(
        [*prefix, *argv(*args)],
        input=stdin,
        capture_output=True,
        env=environment(git_dir, work_tree, extra_env),
        cwd="/",
    )
    if check and done.returncode != 0:
        words = done.stderr.decode(errors="replace").strip().splitlines()
        raise GitFailed(f"git {args[0]} failed: {words[-1] if words else f'exit {done.returncode}'}")
    return done


def text(git_dir: Path, work_tree: Path | None, args: Sequence[str], **kwargs: object) -> str:
    """``run`` and its standard output as text, stripped."""
    return run(git_dir, work_tree, args, **kwargs).stdout.decode(errors="surrogateescape").strip()  # type: ignore[arg-type]
