"""Reading and writing git's files without ever following a link an agent could have made.

The broker reads the person's git directory (to copy it into an agent's) and
writes into agents' git directories (to keep them following the person's
branch).  An agent can put a symbolic link anywhere it may write -- in its
own git directory, and, unboxed, in the person's -- pointing at
``~/.bashrc`` or a key.  So every path here is opened from a directory
descriptor one component at a time with ``O_NOFOLLOW``; files are created
with ``O_EXCL`` (a link in the way fails instead of being written through),
and replaced with git's own lock-file protocol (``NAME.lock`` made with
``O_EXCL``, then renamed over ``NAME`` -- a rename replaces a link, never
its target), so the broker and the agent's git exclude each other.

Also here: the index's flags that hide a change from ``git status``
(:func:`flagged_entries`, index versions 2 to 4).
"""

from __future__ import annotations

import os
import re
import stat
from typing import Final, Iterator

OPEN_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_FILE: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Most bytes read from one of git's small files (a ref, HEAD, config-sized files).
SMALL: Final = 1 << 16
#: Most bytes read from an index or packed-refs file.
LARGE: Final = 1 << 30
OID: Final = re.compile(rb"^([0-9a-f]{40}|[0-9a-f]{64})$")
ZERO: Final = re.compile(r"^0+$")


class UnsafePath(OSError):
    """A path component was a link, or not what it had to be."""


def open_dir(path: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """A descriptor of a directory, refusing a symbolic link as the last component."""
    return os.open(path, OPEN_DIR, dir_fd=dir_fd)


def _components(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts) or not parts:
        raise UnsafePath(22, f"not a plain relative path: {rel!r}")
    return parts


def open_dir_beneath(root: int, rel: str, *, create: bool = False, mode: int = 0o755) -> int:
    """The directory ``rel`` beneath ``root``, every component checked; made on the way when ``create``."""
    fd = os.dup(root)
    try:
        for part in _components(rel):
            try:
                nxt = os.open(part, OPEN_DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(part, OPEN_DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_beneath(root: int, rel: str, *, limit: int = SMALL) -> bytes | None:
    """The bytes of regular file ``rel`` beneath ``root``; None when it is missing, a link or not a file."""
    head, _, name = rel.rpartition("/")
    try:
        parent = open_dir_beneath(root, head) if head else os.dup(root)
    except OSError:
        return None
    try:
        return read_at(parent, name, limit=limit)
    finally:
        os.close(parent)


def read_at(dir_fd: int, name: str, *, limit: int = SMALL) -> bytes | None:
    try:
        fd = os.open(name, OPEN_FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def create_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Make the new file ``name`` in ``dir_fd`` holding ``data``; fail if anything is there already.

    Raises:
        FileExistsError: something (a file, a link) has that name.
    """
    fd = os.open(name, CREATE, mode, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=dir_fd)
        raise
    os.close(fd)


class Locked:
    """git's lock on one file: ``NAME.lock`` made with ``O_EXCL``; :meth:`commit` renames it over ``NAME``.

    While the lock exists, git (the agent's, or the person's) will not write ``NAME``
    either, so neither side loses the other's update.

    Raises:
        FileExistsError: from the constructor, when someone holds the lock now.
    """

    def __init__(self, dir_fd: int, name: str, mode: int = 0o644) -> None:
        self.dir_fd, self.name, self.lock = dir_fd, name, name + ".lock"
        self.fd = os.open(self.lock, CREATE, mode, dir_fd=dir_fd)
        self.done = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def commit(self) -> None:
        os.close(self.fd)
        os.rename(self.lock, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        self.done = True

    def rollback(self) -> None:
        if not self.done:
            os.close(self.fd)
            try:
                os.unlink(self.lock, dir_fd=self.dir_fd)
            except FileNotFoundError:
                pass
            self.done = True

    def __enter__(self) -> Locked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.rollback()


# -- refs -------------------------------------------------------------------------------------


def parse_packed_refs(data: bytes | None) -> dict[str, str]:
    """``refname -> oid`` from a ``packed-refs`` file (peeled lines skipped)."""
    refs: dict[str, str] = {}
    for line in (data or b"").splitlines():
        if not line or line[:1] in (b"#", b"^"):
            continue
        oid, _, name = line.partition(b" ")
        if OID.match(oid) and name:
            refs[name.decode(errors="surrogateescape")] = oid.decode()
    return refs


def read_ref_file(data: bytes | None) -> str | None:
    """The object id in a loose ref file; None for a symbolic ref or anything else."""
    if data is None:
        return None
    value = data.strip()
    return value.decode() if OID.match(value) else None


def loose_refs(git_fd: int, top: str = "refs", *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every loose ref file under ``top``: ``refname -> raw content`` (links and odd files skipped)."""
    found: dict[str, bytes] = {}
    try:
        root = open_dir_beneath(git_fd, top)
    except OSError:
        return found

    def walk(fd: int, prefix: str) -> None:
        with os.scandir(fd) as entries:
            listing = [(e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries]
        for name, is_dir, is_file in listing:
            ref = f"{prefix}/{name}"
            if ref in skip or name.endswith(".lock"):
                continue
            if is_dir:
                try:
                    sub = os.open(name, OPEN_DIR, dir_fd=fd)
                except OSError:
                    continue
                try:
                    walk(sub, ref)
                finally:
                    os.close(sub)
            elif is_file:
                data = read_at(fd, name)
                if data is not None:
                    found[ref] = data

    try:
        walk(root, top)
    finally:
        os.close(root)
    return found


def read_refs(git_fd: int, *, skip: tuple[str, ...] = ("refs/replace",)) -> tuple[dict[str, str], dict[str, str]]:
    """The repository's refs: ``(refname -> oid, refname -> symbolic target)``; never ``refs/replace``."""
    refs = {k: v for k, v in parse_packed_refs(read_at(git_fd, "packed-refs", limit=LARGE)).items() if not _under(k, skip)}
    symbolic: dict[str, str] = {}
    for name, raw in loose_refs(git_fd, skip=skip).items():
        oid = read_ref_file(raw)
        if oid is not None:
            refs[name] = oid
        elif raw.startswith(b"ref: "):
            symbolic[name] = raw[5:].strip().decode(errors="surrogateescape")
            refs.pop(name, None)
    return refs, symbolic


def branch_tips(git_fd: int) -> dict[str, str]:
    """``refs/heads/NAME -> oid`` for every branch."""
    refs, _ = read_refs(git_fd, skip=())
    return {k: v for k, v in refs.items() if k.startswith("refs/heads/")}


def read_one_ref(git_fd: int, ref: str) -> str | None:
    """One ref's object id: loose, else packed; None when it is neither.

    A loose ref that is there but not a plain file holding an object id -- a link, a directory,
    a symbolic ref, a link among the directories on its way -- reads as ``""``: not a commit
    the broker knows, so it is never written over as if it were (and never read through).
    """
    head, _, name = ref.rpartition("/")
    try:
        parent = open_dir_beneath(git_fd, head)
    except FileNotFoundError:
        parent = -1
    except OSError:
        return ""
    if parent >= 0:
        try:
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None:
                return (read_ref_file(read_at(parent, name)) or "") if stat.S_ISREG(st.st_mode) else ""
        finally:
            os.close(parent)
    return parse_packed_refs(read_at(git_fd, "packed-refs", limit=LARGE)).get(ref)


def head_branch(git_fd: int) -> str | None:
    """The branch ``HEAD`` names (``refs/heads/...``), or None when detached or unreadable."""
    raw = read_at(git_fd, "HEAD")
    if raw is None or not raw.startswith(b"ref: "):
        return None
    target = raw[5:].strip().decode(errors="surrogateescape")
    return target if target.startswith("refs/heads/") else None


def write_ref(git_fd: int, ref: str, new: str, *, expect: str | None) -> bool:
    """Point loose ref ``ref`` at ``new`` under git's lock if it still reads ``expect``; False when it
    moved, or its lock is held (try again later).  Never follows a link on the way."""
    head, _, name = ref.rpartition("/")
    parent = open_dir_beneath(git_fd, head, create=True)
    try:
        try:
            lock = Locked(parent, name)
        except FileExistsError:
            return False
        with lock:
            if read_one_ref(git_fd, ref) != expect:
                return False
            lock.write(new.encode() + b"\n")
            lock.commit()
            return True
    finally:
        os.close(parent)


def _under(ref: str, tops: tuple[str, ...]) -> bool:
    return any(ref == t or ref.startswith(t + "/") for t in tops)


# -- the index's flags --------------------------------------------------------------------------

ASSUME_VALID: Final = 0x8000
EXTENDED: Final = 0x4000
SKIP_WORKTREE: Final = 0x4000  # in the extended flags
INTENT_TO_ADD: Final = 0x2000  # in the extended flags


class IndexError_(ValueError):
    """The bytes are not an index git would read."""


def flagged_entries(data: bytes, *, hash_size: int = 20) -> set[tuple[str, str]]:
    """``(path, flag)`` for each entry marked ``assume-unchanged``, ``skip-worktree`` or
    ``intent-to-add`` -- the marks that make ``git status`` and ``git diff`` look away.

    Only the flags are read for most entries (a name is decoded when its entry is marked):
    this runs at every spawn and every bring-in.

    Raises:
        IndexError_: not an index of version 2, 3 or 4.
    """
    if len(data) < 12 or data[:4] != b"DIRC":
        raise IndexError_("no DIRC signature")
    version = int.from_bytes(data[4:8], "big")
    count = int.from_bytes(data[8:12], "big")
    if version not in (2, 3, 4):
        raise IndexError_(f"index version {version}")
    found: set[tuple[str, str]] = set()
    pos, previous = 12, b""
    fixed = 40 + hash_size  # ten 32-bit stat fields, then the object id
    end_of_entries = len(data) - hash_size
    for _ in range(count):
        start = pos
        if pos + fixed + 2 > end_of_entries:
            raise IndexError_("truncated entry")
        flags = int.from_bytes(data[pos + fixed : pos + fixed + 2], "big")
        pos += fixed + 2
        extended = 0
        if flags & EXTENDED:
            if version < 3:
                raise IndexError_("extended flags in a version 2 index")
            extended = int.from_bytes(data[pos : pos + 2], "big")
            pos += 2
        marked = flags & ASSUME_VALID or extended & (SKIP_WORKTREE | INTENT_TO_ADD)
        if version == 4:
            strip, pos = _varint(data, pos)
            end = data.index(b"\0", pos)
            if strip > len(previous):
                raise IndexError_("prefix longer than the previous name")
            name = previous[: len(previous) - strip] + data[pos:end]
            previous, pos = name, end + 1
        else:
            length = flags & 0xFFF
            end = pos + length if length < 0xFFF else data.index(b"\0", pos)
            name = data[pos:end] if marked else b""
            pos = start + ((pos - start + (end - pos) + 8) & ~7)
        if marked:
            path = name.decode(errors="surrogateescape")
            if flags & ASSUME_VALID:
                found.add((path, "assume-unchanged"))
            if extended & SKIP_WORKTREE:
                found.add((path, "skip-worktree"))
            if extended & INTENT_TO_ADD:
                found.add((path, "intent-to-add"))
    return found


def new_flags(git_fd: int, baseline: frozenset[tuple[str, str]], *, hash_size: int) -> set[tuple[str, str]]:
    """The hiding flags in the index of the git directory ``git_fd`` beyond ``baseline`` (an index
    that cannot be read says so, as a flag of its own: a commit must not pass because of it)."""
    data = read_at(git_fd, "index", limit=LARGE)
    if data is None:
        return set()
    try:
        return flagged_entries(data, hash_size=hash_size) - baseline
    except (IndexError_, ValueError) as exc:
        return {("(index)", f"unreadable: {exc}")}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    c = data[pos]
    pos += 1
    value = c & 127
    while c & 128:
        value += 1
        c = data[pos]
        pos += 1
        value = (value << 7) + (c & 127)
    return value, pos
