"""Repositories inside a work tree: finding them (:func:`nested_repositories`) and making one inert
(:func:`quarantine`).

The person's git, run in a directory of the tree, finds the nearest ``.git`` (or a directory laid out as a
bare repository) and obeys its configuration.  ``gitlayout`` protects the ones there when a run starts;
``gitviews`` renames aside the ones made during it (docs/THREAT_MODEL.md, "Git").
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: What a repository made in the work tree during a run is renamed to (``sub/.git`` -> ``sub/.git.conclave-quarantine``).
QUARANTINE: Final = ".conclave-quarantine"


def quarantine(repo: Path, found: str) -> str | None:
    """Rename the repository ``found`` (a :func:`nested_repositories` path) aside: its ``.git``, or a bare
    layout's ``HEAD``, gets :data:`QUARANTINE` (and a number, if taken) after its name.  The directories on
    the way are opened one by one without following a link, so an agent swapping one for a link after the
    walk cannot turn the rename onto a repository outside the tree.  A directory on the way an agent took
    its owner's write or search permission off (``chmod 0555 sub``: the broker runs as the same uid, so the
    rename was refused and the repository stayed live) gets it back (:func:`_grant_owner`).  The path renamed
    to, relative to ``repo``; None when it is gone already.

    Raises:
        OSError: a directory on the way is a link now, or the rename failed.
    """
    parts = found.split("/")
    directory, entry = (parts[:-1], ".git") if parts[-1] == ".git" else (parts, "HEAD")
    try:
        fd = _open_path(repo, directory)
    except FileNotFoundError:
        return None
    try:
        _grant_owner(fd, stat.S_IXUSR)
        name = _free_name(fd, entry)
        try:
            _rename(fd, entry, name)
        except FileNotFoundError:
            return None
        if entry == ".git":
            # A .git directory renamed is still laid out as a bare repository, which git finds when run inside it.
            try:
                inner = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                pass  # a .git file or link: nothing inside
            else:
                try:
                    _grant_owner(inner, stat.S_IXUSR)
                    _rename(inner, "HEAD", _free_name(inner, "HEAD"))  # a HEAD.conclave-quarantine made in advance is not in the way
                except FileNotFoundError:
                    pass
                finally:
                    os.close(inner)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)
    return "/".join([*directory, name])


def identity(repo: Path, rel: str) -> tuple[int, int] | None:
    """The device and inode of a :func:`nested_repositories` path (not followed), or None if it is gone."""
    try:
        st = os.lstat(repo / rel)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _free_name(fd: int, entry: str) -> str:
    """``entry`` + :data:`QUARANTINE` (and a number, if taken) not yet in the directory ``fd``."""
    number = 0
    while True:
        name = entry + QUARANTINE + (f"-{number}" if number else "")
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return name
        number += 1


def _grant_owner(fd: int, bits: int) -> None:
    """Give the owner ``bits`` on the directory ``fd`` (an ``O_PATH`` descriptor, never a link) if it lacks one.

    The broker runs as the agents' own uid, without ``CAP_DAC_OVERRIDE``: a directory an agent made unreadable
    (``chmod 0111``) hid the repository inside from the walk -- but not from git run there, which only needs to
    traverse it -- and one it made read-only (``chmod 0555``) made the rename fail.  The agent owns what it
    made, and so does the broker: the mode is put back to what the sweep needs (and logged)."""
    st = os.fstat(fd)
    if st.st_mode & bits == bits:
        return
    mode = stat.S_IMODE(st.st_mode) | bits
    os.chmod(f"/proc/self/fd/{fd}", mode)  # follows the descriptor to its own inode: never a path an agent can swap
    log.warning("a directory of the work tree had its owner's permissions taken off (%o); given back for the sweep", stat.S_IMODE(st.st_mode))


def _open_path(repo: Path, parts: list[str]) -> int:
    """The directory ``repo/<parts>`` as an ``O_PATH`` descriptor, each directory on the way opened beneath the
    last without following a link (:func:`_open_below`).

    Raises:
        OSError: a directory on the way is gone, or a link now.
    """
    fd = os.open(repo, os.O_PATH | os.O_DIRECTORY)
    try:
        for part in parts:
            inner = _open_below(fd, part)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_below(fd: int, part: str) -> int:
    """``part`` (a directory, never a link) beneath ``fd``, as an ``O_PATH`` descriptor; ``fd`` searchable first."""
    try:
        return os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except PermissionError:
        _grant_owner(fd, stat.S_IRUSR | stat.S_IXUSR)
        return os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)


def _rename(fd: int, old: str, new: str) -> None:
    """Rename ``old`` to ``new`` in the directory ``fd``; once more after giving its owner write permission back."""
    try:
        os.rename(old, new, src_dir_fd=fd, dst_dir_fd=fd)
    except PermissionError:
        _grant_owner(fd, stat.S_IWUSR | stat.S_IXUSR)
        os.rename(old, new, src_dir_fd=fd, dst_dir_fd=fd)


def _listing(top: str, rel: str, inode: int | None = None) -> list[tuple[str, bool, int]] | None:
    """The entries of the directory ``rel`` of the tree whose real path is ``top`` (name, is a directory not
    followed, inode); None if it cannot be read even after its owner's read and search permissions are given
    back on the way (:func:`_grant_owner`), or if it is not where it was listed: a directory on the way swapped
    for a link after its parent was listed would have led the walk out of the tree (the whole file system, say).
    ``inode``, the one its parent's listing gave, makes that check one ``fstat``; the path the kernel names
    decides when it differs (a mount point) or is not known."""
    path = os.path.join(top, rel) if rel else top
    for attempt in (1, 2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except PermissionError:
            if attempt == 2 or not rel:
                return None
        except OSError:
            return None
        else:
            try:
                if os.fstat(fd).st_ino != inode and os.readlink(f"/proc/self/fd/{fd}") != path:
                    return None  # reached through a link on the way
                with os.scandir(fd) as entries:
                    return [(e.name, e.is_dir(follow_symlinks=False), e.inode()) for e in entries]
            except OSError:
                return None
            finally:
                os.close(fd)
        try:
            fd = _open_path(Path(top), rel.split("/"))
            try:
                _grant_owner(fd, stat.S_IRUSR | stat.S_IXUSR)
            finally:
                os.close(fd)
        except OSError:
            return None
    return None


def nested_repositories(repo: Path) -> set[str]:
    """Repositories inside the work tree, relative to it: every ``.git`` (a directory, a file, a link)
    below the top, and every directory git's ``is_git_directory`` could take for a bare repository: a
    ``HEAD`` with ``objects/`` and ``refs/`` beside it, or with a ``commondir`` file (git then looks for
    ``objects/`` and ``refs/`` where that names, and reads the configuration there).

    The walk keeps its own stack (a chain of directories deeper than Python's recursion limit made a
    recursive one raise, and the broker with it), and reads directories an agent made unreadable
    (:func:`_listing`)."""
    found: set[str] = set()
    top = os.path.realpath(repo)
    pending: list[tuple[str, int | None]] = [("", None)]
    while pending:
        rel, inode = pending.pop()
        listing = _listing(top, rel, inode)
        if listing is None:
            continue
        names = {name for name, _, _ in listing}
        if rel and ".git" in names:
            found.add(f"{rel}/.git")
        if rel and "HEAD" in names and ("commondir" in names or {"objects", "refs"} <= names):
            found.add(rel)
        for name, is_dir, child in listing:
            if is_dir and name != ".git":
                pending.append((f"{rel}/{name}" if rel else name, child))
    return found
