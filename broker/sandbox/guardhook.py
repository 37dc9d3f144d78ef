"""The guard in the person's own hooks directory, for agents that run unboxed.

A boxed agent never touches the person's git directory (strict: it commits
in its own; landlock: git is read-only), so nothing is installed there for
it.  An unboxed (``sandbox = "off"``) agent uses the person's ``.git``
directly; while one runs, conclave's ``reference-transaction`` hook
(``broker.githook``, kind ``person``) sits in the person's hooks directory
and asks the broker before any branch moves.

The hooks directory is a place an unboxed agent can write, so the hook is
written from a directory descriptor opened with ``O_NOFOLLOW`` (a hooks
directory that is a symbolic link is refused), into a new file made with
``O_EXCL``, renamed over the hook's name (a rename replaces a link there,
never its target).  A hook of the person's already there is moved aside and
chained (run first, with the same input); it is put back when the broker
stops.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Final, final

import attrs

from broker.githook import HOOK, MARKER, script
from broker.sandbox import gitfiles
from broker.sandbox.gitlayout import Layout

log = logging.getLogger("conclave.git")

CHAINED: Final = f"{HOOK}.conclave-chained"
TEMP: Final = f".{HOOK}.conclave-tmp"


class GuardError(RuntimeError):
    """The hook cannot be installed; the message says why and what to do."""


@final
@attrs.frozen
class InstalledGuard:
    hooks: Path
    chained: bool
    state: str


def hooks_dir(layout: Layout) -> Path:
    """Where the person's git looks for hooks (``core.hooksPath``, else ``.git/hooks``)."""
    configured = layout.hooks_path
    if configured:
        path = Path(os.path.expanduser(configured))
        return path if path.is_absolute() else layout.repo / path
    return layout.git_dir / "hooks"


def _open_hooks(directory: Path) -> int:
    parent = os.path.realpath(directory.parent)
    try:
        parent_fd = gitfiles.open_dir(parent)
    except OSError as exc:
        raise GuardError(f"cannot open {parent} for the git guard: {exc.strerror}") from None
    try:
        try:
            os.mkdir(directory.name, 0o755, dir_fd=parent_fd)
        except FileExistsError:
            pass
        return gitfiles.open_dir(directory.name, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise GuardError(f"{directory} is a symbolic link or not a directory; conclave writes its git guard into a real hooks directory only") from None
        raise GuardError(f"cannot open {directory} for the git guard: {exc.strerror}") from None
    finally:
        os.close(parent_fd)


def is_ours(data: bytes | None, state: str | None = None) -> bool:
    return data is not None and MARKER.encode() in data[:4096] and (state is None or state.encode() in data[:4096])


def install(layout: Layout, *, python: str, state: str, socket_path: str, key_file: str) -> InstalledGuard:
    """Write the person's hook, chaining a hook of theirs already there (a hook of ours left by a
    broker that crashed is simply replaced).

    Raises:
        GuardError: a symlinked hooks directory, or both a hook of the person's and a chained one exist.
    """
    directory = hooks_dir(layout)
    fd = _open_hooks(directory)
    try:
        existing = _entry(fd, HOOK)
        if existing is not None and not is_ours(gitfiles.read_at(fd, HOOK)):
            if _entry(fd, CHAINED) is not None:
                raise GuardError(f"both {directory / HOOK} and {directory / CHAINED} exist; remove one so the guard can chain the other")
            os.rename(HOOK, CHAINED, src_dir_fd=fd, dst_dir_fd=fd)
        text = script("person", python=python, state=state, socket_path=socket_path, key_file=key_file, chained=CHAINED)
        try:
            os.unlink(TEMP, dir_fd=fd)
        except FileNotFoundError:
            pass
        gitfiles.create_at(fd, TEMP, text.encode(), mode=0o755)
        os.rename(TEMP, HOOK, src_dir_fd=fd, dst_dir_fd=fd)
        return InstalledGuard(directory, _entry(fd, CHAINED) is not None, state)
    finally:
        os.close(fd)


def uninstall(guard: InstalledGuard) -> bool:
    """Remove our hook and put a chained one back.  False when the hook was no longer ours (left alone)."""
    try:
        fd = _open_hooks(guard.hooks)
    except GuardError as exc:
        log.warning("the git guard was not removed: %s", exc)
        return False
    try:
        if not is_ours(gitfiles.read_at(fd, HOOK), guard.state):
            log.warning("the %s hook in %s was replaced while the broker ran; leaving it", HOOK, guard.hooks)
            return False
        if _entry(fd, CHAINED) is not None:
            os.rename(CHAINED, HOOK, src_dir_fd=fd, dst_dir_fd=fd)
        else:
            os.unlink(HOOK, dir_fd=fd)
        return True
    finally:
        os.close(fd)


def _entry(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
