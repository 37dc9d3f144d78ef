"""The git guard: a pre-commit hook that asks the broker before a commit goes in.

``conclave run`` installs it when the broker starts and removes it when the
broker stops.  An existing ``pre-commit`` hook is kept and chained (moved to
``pre-commit.conclave-chained``, run first, and put back at the end).  The
hook is a thin caller of ``conclave lock check-commit --staged``; the
decision is the broker's:

* inside an agent's process tree (git was run by the agent, so the hook and
  the CLI it starts are the agent's descendants and carry its ticket) the
  commit needs that agent to hold the ``git`` lock exclusively and an
  exclusive lock covering every staged path; the refusal lists what is
  missing;
* from outside any agent (the operator) it is not blocked;
* an agent process that hides its ticket is refused by the broker's ancestry
  check, so the hook refuses too.

The guard stops honest mistakes, not a hostile agent: ``git commit
--no-verify`` skips every hook (see docs/LOCKS.md).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Final, final

import attrs

from broker.entry import conclave_argv

log = logging.getLogger("conclave.locks.guard")

MARKER: Final = "# conclave-guard"
HOOK: Final = "pre-commit"
CHAINED: Final = "pre-commit.conclave-chained"
#: Staged paths sent to the broker per request (a request line is at most 1 MiB).
CHECK_BATCH: Final = 2000


class GuardError(RuntimeError):
    """The hook cannot be installed; the message says why."""


@final
@attrs.frozen
class InstalledGuard:
    hook: Path
    chained: Path | None
    state: Path


def hooks_dir(repo: Path) -> Path:
    """Where git looks for hooks (honours core.hooksPath and linked worktrees).

    Raises:
        GuardError: when ``repo`` is not a git work tree.
    """
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-path", "hooks"], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise GuardError(f"{repo} is not a git repository ({out.stderr.strip() or 'git rev-parse failed'})")
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (repo / path)


def hook_text(repo: Path, state: Path, python: str) -> str:
    cmd = " ".join(
        shlex.quote(a) for a in conclave_argv("lock", "check-commit", "--staged", "--repo", str(repo), "--state-dir", str(state), python=python)
    )
    return f"""#!/bin/sh
{MARKER}: installed by `conclave run` for {state}; removed when that broker stops.
# Inside an agent's process tree a commit needs the agent to hold the git lock and an
# exclusive lock on every staged path (conclave lock acquire PATH git); see docs/LOCKS.md.
chained="$(dirname "$0")/{CHAINED}"
if [ -x "$chained" ]; then
    "$chained" "$@" || exit $?
fi
exec {cmd}
"""


def is_ours(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return MARKER.encode() in f.read(4096)
    except OSError:
        return False


def install(repo: Path, state: Path, *, python: str | None = None) -> InstalledGuard:
    """Write the hook, chaining any hook already there.

    A hook of ours left by a broker that crashed is simply replaced.

    Raises:
        GuardError: not a git repository, or both a foreign hook and a
            chained one exist (chaining twice would lose one).
    """
    directory = hooks_dir(repo)
    directory.mkdir(parents=True, exist_ok=True)
    hook, chained = directory / HOOK, directory / CHAINED
    if (hook.exists() or hook.is_symlink()) and not is_ours(hook):
        if chained.exists() or chained.is_symlink():
            raise GuardError(f"both {hook} and {chained} exist; remove one so the guard can chain the other")
        os.replace(hook, chained)
    tmp = directory / f".{HOOK}.conclave-tmp"
    tmp.write_text(hook_text(repo, state, python or sys.executable))
    tmp.chmod(0o755)
    os.replace(tmp, hook)
    return InstalledGuard(hook, chained if chained.exists() else None, state)


def uninstall(guard: InstalledGuard) -> bool:
    """Remove our hook and put a chained one back.  Returns False if the hook was no longer ours."""
    hook = guard.hook
    if not is_ours(hook) or str(guard.state) not in hook.read_text(errors="replace"):
        log.warning("the pre-commit hook at %s was replaced while the broker ran; leaving it", hook)
        return False
    chained = hook.with_name(CHAINED)
    if chained.exists() or chained.is_symlink():
        os.replace(chained, hook)
    else:
        hook.unlink()
    return True


def staged_paths(repo: Path) -> list[str]:
    """Every path the next commit changes (a rename counts as both names).

    Runs in ``repo`` with the caller's environment, so inside a hook it reads
    the index git is committing (``GIT_INDEX_FILE``).

    Raises:
        GuardError: when git fails.
    """
    out = subprocess.run(["git", "diff", "--cached", "--name-only", "-z", "--no-renames"], cwd=repo, capture_output=True)
    if out.returncode != 0:
        raise GuardError(f"git diff --cached failed: {out.stderr.decode(errors='replace').strip()}")
    return [os.fsdecode(p) for p in out.stdout.split(b"\0") if p]
