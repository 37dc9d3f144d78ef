"""What can be locked, and turning what a caller typed into one canonical resource.

Four kinds:

* a **path** (``src/app.py``) -- repo-relative, exactly that file;
* a **glob** (``src/**/*.py``) -- see :mod:`locks.globs`.  A path that is a
  directory, or is written with a trailing ``/`` (``docs/``, for one that
  does not exist yet), means everything under it and becomes ``docs/**``;
* a **named** resource: ``git`` (the index and refs) or any ``scheme://name``
  an agent invents (``name://release-notes``); equal names conflict, nothing
  else does;
* a **slot** (``slot://llm-api``): a counting resource declared in the team
  file (see :mod:`locks.slots`).

Paths and globs are normalized before anything compares them: ``./a//b/`` is
``a/b``; an absolute path inside the repository becomes relative; ``..``, an
absolute path elsewhere, and a symlink that leads out of the repository are
refused.  A symlink that stays inside the repository is recorded under both
names (``aliases``) so locking the link conflicts with locking its target.
A resource never names ``.git/`` directly: the ``git`` resource stands for it.

A **hard link** is refused: a file with more than one name (``st_nlink > 1``)
cannot be locked by any of them, nor committed under the guard.  A symlink
names its target, so the target can be recorded beside it; a hard link names
nothing -- the other names of an inode can only be found by searching the
whole repository -- so two agents could otherwise hold "different" paths to
one file.  The refusal says how to break the link (see docs/LOCKS.md).
"""

from __future__ import annotations

import enum
import os
import re
import stat
import unicodedata
from typing import Final, final

import attrs

from locks import globs
from locks.beneath import open_beneath
from locks.watch import DirectoryWatch

GIT: Final = "git"
SLOT_SCHEME: Final = "slot"
MAX_LENGTH: Final = 1024
MAX_SEGMENTS: Final = 64
#: Most plain-path parses a normalizer keeps (see Normalizer.resource).
MAX_PLAIN: Final = 4096
SCHEME: Final = re.compile(r"^([a-z][a-z0-9+.-]{0,31})://(.*)$", re.DOTALL)
NAMED_REST: Final = re.compile(r"^[^\s\x00-\x1f\x7f]{1,256}$")
#: Unicode categories a lock name may not hold: format characters (zero-width, bidi overrides),
#: line and paragraph separators, surrogates, private use, unassigned.
_INVISIBLE: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class ResourceError(ValueError):
    """A resource that cannot be locked; the message says why and what to write instead."""


class Kind(str, enum.Enum):
    PATH = "path"
    GLOB = "glob"
    NAMED = "named"
    SLOT = "slot"


@final
@attrs.frozen
class Resource:
    """One lockable thing, in canonical form.

    ``key`` is how it is shown and compared; ``aliases`` are other patterns
    naming the same files (through a symlink inside the repository).
    """

    key: str
    kind: Kind
    aliases: tuple[str, ...] = ()

    @property
    def is_filesystem(self) -> bool:
        return self.kind in (Kind.PATH, Kind.GLOB)

    @property
    def patterns(self) -> tuple[str, ...]:
        return (self.key, *self.aliases)

    @property
    def slot_name(self) -> str:
        if self.kind is not Kind.SLOT:
            raise ValueError(f"{self.key} is not a slot")
        return self.key[len(SLOT_SCHEME) + 3 :]

    def __str__(self) -> str:
        return self.key


def overlaps(a: Resource, b: Resource) -> bool:
    """Whether two resources can name the same thing (slots never overlap; they count)."""
    if a.kind is Kind.PATH and b.kind is Kind.PATH and not a.aliases and not b.aliases:
        return a.key == b.key
    if a.is_filesystem and b.is_filesystem:
        return any(globs.overlap(x, y) for x in a.patterns for y in b.patterns)
    if a.kind is Kind.SLOT or b.kind is Kind.SLOT:
        return False
    return a.key == b.key


def covers(held: Resource, path: Resource) -> bool:
    """Whether a lock on ``held`` covers the (literal) ``path``."""
    if not held.is_filesystem or path.kind is not Kind.PATH:
        return False
    return any(globs.matches(x, y) for x in held.patterns for y in path.patterns)


@final
class Normalizer:
    """Turns user text into :class:`Resource` values for one repository."""

    def __init__(self, repo: os.PathLike[str] | str, *, fast: bool = True) -> None:
        self.repo = os.path.abspath(os.fspath(repo))
        self.real_repo = os.path.realpath(self.repo)
        # One system call per look where the kernel has openat2; else the four-call way.
        self._beneath = open_beneath(self.real_repo) if fast else None
        # Texts already found to be plain paths (canonical spelling, no symlink, not a
        # directory), kept while no name has come, gone or moved in any directory on
        # their way (locks.watch).  Without inotify the filesystem is asked again.
        self._plain: dict[str, Resource] = {}
        self._watch = DirectoryWatch.open() if self._beneath is not None else None
        if self._watch is not None and not self._watch.watch(self.real_repo):
            self._watch = None

    def resource(self, text: str) -> Resource:
        """Parse a lock request's resource.

        Raises:
            ResourceError: naming the problem (outside the repository, a
                malformed glob, a bad name, ...).
        """
        plain = self._plain.get(text) if type(text) is str else None
        if plain is not None:
            if self._watch is not None:
                if not self._watch.changed():
                    return plain
                self._plain.clear()  # something moved somewhere: look again, at everything
            elif self._still_plain(text) and _names_of(f"{self.real_repo}/{text}") <= 1:
                return plain  # without inotify a new hard link shows nowhere: look at this name's links too
        if not isinstance(text, str):
            raise ResourceError("a resource must be a string")
        raw = text.strip()
        if not raw:
            raise ResourceError("an empty resource; name a path, a glob, git, or scheme://name")
        if len(raw) > MAX_LENGTH:
            raise ResourceError(f"a resource may be at most {MAX_LENGTH} characters")
        if raw == GIT:
            return Resource(GIT, Kind.NAMED)
        named = SCHEME.match(raw)
        if named:
            return _named(raw, named.group(1), named.group(2))
        resource = self._filesystem(raw, literal=False)
        if resource.key == raw and resource.kind is Kind.PATH and not resource.aliases and self._keep_watching(raw):
            if len(self._plain) >= MAX_PLAIN:
                self._plain.clear()
            self._plain[raw] = resource
        return resource

    def _keep_watching(self, relative: str) -> bool:
        """Whether the parse of the plain path ``relative`` may be kept.

        With inotify: watch every directory on its way, top down, then look
        once more -- a change before a watch was set shows in that look, a
        change after it in the watch.
        """
        if self._beneath is None:
            return False
        if self._watch is not None:
            parts = relative.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory = f"{self.real_repo}/{'/'.join(parts[:depth])}"
                if not self._watch.watch(directory) and os.path.isdir(directory):
                    return False  # a directory we cannot watch (a missing one shows in its parent)
        return self._still_plain(relative)

    def _still_plain(self, relative: str) -> bool:
        """Whether a path once found plain still crosses no symlink and is not a directory."""
        assert self._beneath is not None
        try:
            return not self._beneath.is_directory(relative)
        except OSError:
            return False

    def lexical(self, text: str) -> str | None:
        """The key ``text`` names, from its spelling alone (no filesystem look-up).

        Good for finding a lock already held -- every held key was fully
        checked when it was granted -- never for granting one.  None when the
        text needs the full treatment (``..``, a directory, an error).
        """
        raw = text.strip() if isinstance(text, str) else ""
        if raw == GIT or SCHEME.match(raw):
            return raw
        if raw.startswith("/"):
            raw = self._inside(os.path.normpath(raw)) or ""
        segments = [s for s in raw.split("/") if s not in ("", ".")]
        if not segments or ".." in segments:
            return None
        if raw.endswith("/"):
            segments.append("**")
        return "/".join(_collapse_double_stars(segments))

    def path(self, text: str) -> Resource:
        """A literal repo-relative path (a staged file): wildcards are ordinary characters.

        Raises:
            ResourceError: as for :meth:`resource`.
        """
        return self._filesystem(text, literal=True)

    def _filesystem(self, raw: str, *, literal: bool) -> Resource:
        if CONTROL.search(raw):
            raise ResourceError(f"{raw!r} contains a control character")
        if raw.startswith("/"):
            relative = self._inside(os.path.normpath(raw))
            if relative is None:
                raise ResourceError(f"{raw} is outside the repository {self.repo}; lock paths inside it")
            raw = relative
        segments = [s for s in raw.split("/") if s not in ("", ".")]
        if ".." in segments:
            raise ResourceError(f"{raw!r} uses '..'; resources are relative to the repository root, without '..'")
        if not segments:
            raise ResourceError(f"{raw!r} names the repository root; lock ** for everything, or name paths")
        if len(segments) > MAX_SEGMENTS:
            raise ResourceError(f"{raw!r} is deeper than {MAX_SEGMENTS} segments")
        if segments[0] == ".git":
            raise ResourceError(f"{raw!r} is inside .git; lock the git resource for the index and refs")
        wildcard = not literal and globs.has_wildcard(raw)
        fixed = next((i for i, s in enumerate(segments) if globs.has_wildcard(s)), len(segments)) if wildcard else len(segments)
        real, is_dir = self._probe("/".join(segments[:fixed]))
        if real != self.real_repo and not real.startswith(self.real_repo + "/"):
            raise ResourceError(f"{raw!r} leads outside the repository through a symlink (to {real})")
        if not wildcard and not is_dir:
            names = _names_of(real)
            if names > 1:
                raise ResourceError(
                    f"{raw!r} is a hard link: its file has {names} names, and a lock on one name would not cover "
                    f"the others. Give it a file of its own (cp {raw} {raw}.copy && mv {raw}.copy {raw}), then lock it"
                )
        if not literal and not wildcard and (raw.endswith("/") or is_dir):
            segments.append("**")
            wildcard = True
        if wildcard:
            segments = _collapse_double_stars(segments)
            for s in segments:
                try:
                    globs.check_segment(s)
                except globs.GlobError as exc:
                    raise ResourceError(f"malformed glob {raw!r}: {exc}") from None
                if globs.class_is_empty(s):
                    raise ResourceError(f"malformed glob {raw!r}: a class in {s!r} matches no character")
        key = "/".join(segments)
        alias = "/".join([real[len(self.real_repo) + 1 :], *segments[fixed:]]).strip("/")
        if not alias:
            raise ResourceError(f"{raw!r} resolves to the repository root; lock ** for everything")
        if literal and globs.has_wildcard(key):
            # A literal name with wildcard characters: escape them so it matches only itself.
            key, alias = _escape(key), _escape(alias)
        return Resource(key, Kind.GLOB if wildcard else Kind.PATH, (alias,) if alias != key else ())

    def _inside(self, absolute: str) -> str | None:
        for root in (self.repo, self.real_repo):
            if absolute == root:
                return "."
            if absolute.startswith(root + os.sep):
                return absolute[len(root) + 1 :]
        return None

    def _probe(self, relative: str) -> tuple[str, bool]:
        """The real path of ``repo/relative`` and whether it is a directory.

        A missing rest of the path is kept as written.  With ``openat2``
        (:mod:`locks.beneath`) a path with no symlink on the way is answered
        in one look; a symlink anywhere goes the slow, careful way
        (``os.path.realpath``), so a link to a place outside that does not
        exist yet is still caught.
        """
        if self._beneath is None:
            return self._probe_by_hand(relative)
        try:
            is_dir = self._beneath.is_directory(relative)
        except OSError:  # NotPlain (a symlink on the way), permissions, ...
            return self._slow_probe(relative)
        return (f"{self.real_repo}/{relative}" if relative else self.real_repo), is_dir

    def _probe_by_hand(self, relative: str) -> tuple[str, bool]:
        """:meth:`_probe` without ``openat2``.

        The kernel resolves the parent directory (one ``O_PATH`` open, read
        back through ``/proc/self/fd``) and the last name is looked at without
        following it; a missing rest is kept as written.  Anything unusual --
        a symlink at the end, a missing parent -- goes the slow, careful way
        (``os.path.realpath``), so a link to a place outside that does not
        exist yet is still caught.
        """
        path, rest = f"{self.repo}/{relative}", ""
        while True:
            parent, _, name = path.rpartition("/")
            if len(parent) < len(self.repo):
                return self._slow_probe(relative)
            try:
                fd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                path, rest = parent, f"/{name}{rest}"  # look one level up; the missing part is kept
                continue
            except OSError:
                return self._slow_probe(relative)
            try:
                real = f"{os.readlink(f'/proc/self/fd/{fd}')}/{name}"
                try:
                    mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    return real + rest, False
            except OSError:
                return self._slow_probe(relative)
            finally:
                os.close(fd)
            if stat.S_ISLNK(mode):
                return self._slow_probe(relative)
            return real + rest, not rest and stat.S_ISDIR(mode)

    def _slow_probe(self, relative: str) -> tuple[str, bool]:
        full = os.path.realpath(f"{self.repo}/{relative}")
        return full, os.path.isdir(full)


def _names_of(real: str) -> int:
    """How many names (hard links) the file at ``real`` has; 0 when none is there, 1 for a directory."""
    try:
        st = os.stat(real, follow_symlinks=False)
    except OSError:
        return 0
    return 1 if stat.S_ISDIR(st.st_mode) else st.st_nlink


def _named(raw: str, scheme: str, rest: str) -> Resource:
    if not NAMED_REST.match(rest):
        raise ResourceError(f"{raw!r}: the name after {scheme}:// must be 1-256 characters without spaces")
    # Two names that look the same must be the same lock: no invisible characters, one normal form.
    for at, char in enumerate(rest):
        if unicodedata.category(char) in _INVISIBLE:
            what = unicodedata.name(char, "an unnamed character")
            raise ResourceError(f"{scheme}://...: the name holds U+{ord(char):04X} ({what}) at character {at + 1}, which does not show; "
                                "use visible characters only")
    if unicodedata.normalize("NFC", rest) != rest:
        raise ResourceError(f"{scheme}://...: the name is not in Unicode NFC form (a letter and its accent apart); "
                            f"write it as {scheme}://{unicodedata.normalize('NFC', rest)}")
    if scheme == SLOT_SCHEME:
        return Resource(raw, Kind.SLOT)
    return Resource(raw, Kind.NAMED)


def _collapse_double_stars(segments: list[str]) -> list[str]:
    out: list[str] = []
    for s in segments:
        if s == "**" and out and out[-1] == "**":
            continue
        out.append(s)
    return out


def _escape(text: str) -> str:
    return "".join(f"[{ch}]" if ch in globs.WILDCARDS else ch for ch in text)
