"""The vault on disk: read a folder, and replace one atomically.

An export never leaves a half-written vault where the person looks: it
writes a sibling directory, then swaps it in with one ``renameat2(...,
RENAME_EXCHANGE)`` (or, where the kernel lacks it, two renames).  It
replaces only a vault of its own that nobody has edited since; a folder it
did not write, or a vault with edits not yet imported, is refused unless
``force`` -- and even then the old folder is moved aside and kept, never
deleted.  Hidden entries of an old vault (Obsidian's ``.obsidian``
settings) move into the new one.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

import attrs

from memory import vault
from memory.vault import MANIFEST, Note, VaultError

_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2


@attrs.frozen
class Folder:
    """What is at a vault path now."""

    state: str  # absent, empty, ours, edited, foreign, not_a_directory
    manifest: dict[str, Any] | None = None
    changed: tuple[str, ...] = ()


def _is_hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def note_files(root: Path) -> dict[str, bytes]:
    """Every ``*.md`` under ``root`` by relative path (hidden folders such as ``.obsidian`` and ``.trash`` left out)."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root)
        if _is_hidden(rel) or not path.is_file() or path.is_symlink():
            continue
        out[rel.as_posix()] = path.read_bytes()
    return out


def inspect(root: Path) -> Folder:
    if not root.exists() and not root.is_symlink():
        return Folder("absent")
    if root.is_symlink() or not root.is_dir():
        return Folder("not_a_directory")
    entries = [e for e in root.iterdir() if not e.name.startswith(".")]
    if not entries:
        return Folder("empty")
    manifest_path = root / MANIFEST
    manifest = vault.read_manifest(manifest_path.read_bytes() if manifest_path.is_file() else None)
    if manifest is None:
        return Folder("foreign")
    files = note_files(root)
    recorded: dict[str, str] = manifest["files"]
    changed = sorted(
        {p for p, data in files.items() if recorded.get(p) != hashlib.sha256(data).hexdigest()} | {p for p in recorded if p not in files}
    )
    return Folder("edited" if changed else "ours", manifest, tuple(changed))


def read(root: Path) -> tuple[dict[str, Any], list[Note]]:
    """The vault's manifest and every note, parsed.  Raises VaultError naming what is wrong."""
    folder = inspect(root)
    if folder.state in ("absent", "not_a_directory"):
        raise VaultError(f"{root} is not a directory; give the folder `conclave memory vault export --out` wrote")
    if folder.manifest is None:
        raise VaultError(f"{root} has no {MANIFEST} of conclave's, so it is not a vault this store exported; export one with `conclave memory vault export --out DIR`")
    return folder.manifest, [vault.parse_note(p, b) for p, b in note_files(root).items()]


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(b))


def _aside(root: Path) -> Path:
    for n in range(1, 10_000):
        candidate = root.with_name(f"{root.name}.replaced-{n}")
        if not candidate.exists():
            return candidate
    raise VaultError(f"too many {root.name}.replaced-N folders beside {root}; clear some away")


def write(root: Path, rendered: vault.Vault, *, force: bool) -> dict[str, Any]:
    """Put ``rendered`` at ``root`` atomically; returns what happened to what was there."""
    folder = inspect(root)
    if folder.state == "not_a_directory":
        raise VaultError(f"{root} exists and is not a directory; choose another --out")
    if folder.state == "foreign" and not force:
        raise VaultError(f"{root} holds files conclave did not write (no {MANIFEST}); choose an empty or new folder, or pass --force to move it aside (it is kept)")
    if folder.state == "edited" and not force:
        shown = ", ".join(folder.changed[:5]) + (f" and {len(folder.changed) - 5} more" if len(folder.changed) > 5 else "")
        raise VaultError(
            f"the vault at {root} has edits not imported ({shown}); import them first (conclave memory vault import {root}), "
            "or pass --force to replace it (the old folder is moved aside and kept)"
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.export-", dir=root.parent))
    swapped = False
    try:
        _fill(staging, rendered)
        if folder.state == "absent":
            os.rename(staging, root)
            swapped = True
            old = None
        elif _exchange(staging, root):
            swapped = True
            old = staging  # the exchange left what was at root under the staging name
        else:
            old = _aside(root)
            os.rename(root, old)
            swapped = True
            os.rename(staging, root)
    except BaseException:
        if not swapped:  # only ever our own half-written folder; after the swap nothing is removed here
            shutil.rmtree(staging, ignore_errors=True)
        raise
    kept = None
    if old is not None:
        if folder.state in ("ours", "empty"):
            for hidden in (e for e in old.iterdir() if e.name.startswith(".")):
                os.rename(hidden, root / hidden.name)  # Obsidian's settings stay with the vault
            shutil.rmtree(old)  # our own unedited rendering (the store holds all of it), or nothing at all
        else:
            kept = _keep(old, root) if old == staging else old
    _sync_dir(root.parent)
    return {"replaced": folder.state in ("ours", "edited", "foreign"), "was": folder.state, "kept_aside": None if kept is None else str(kept)}


def _fill(staging: Path, rendered: vault.Vault) -> None:
    for folder_name in sorted({rel.rpartition("/")[0] for rel in rendered.files} - {""}):
        (staging / folder_name).mkdir(parents=True, exist_ok=True)
    for rel, data in rendered.files.items():
        fd = os.open(staging / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def _keep(swapped: Path, root: Path) -> Path:
    """After an exchange the old folder sits at the staging name: give it a name a person will find."""
    aside = _aside(root)
    os.rename(swapped, aside)
    return aside


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
