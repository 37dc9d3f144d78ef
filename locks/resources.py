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
"""

from __future__ import annotations

import enum
import os
import re
from typing import Final, final

import attrs

from locks import globs

GIT: Final = "git"
SLOT_SCHEME: Final = "slot"
MAX_LENGTH: Final = 1024
MAX_SEGMENTS: Final = 64
SCHEME: Final = re.compile(r"^([a-z][a-z0-9+.-]{0,31})://(.*)$", re.DOTALL)
NAMED_REST: Final = re.compile(r"^[^\s\x00-\x1f\x7f]{1,256}$")


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

    def __init__(self, repo: os.PathLike[str] | str) -> None:
        self.repo = os.path.abspath(os.fspath(repo))
        self.real_repo = os.path.realpath(self.repo)

    def resource(self, text: str) -> Resource:
        """Parse a lock request's resource.

        Raises:
            ResourceError: naming the problem (outside the repository, a
                malformed glob, a bad name, ...).
        """
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
        return self._filesystem(raw, literal=False)

    def path(self, text: str) -> Resource:
        """A literal repo-relative path (a staged file): wildcards are ordinary characters.

        Raises:
            ResourceError: as for :meth:`resource`.
        """
        return self._filesystem(text, literal=True)

    def _filesystem(self, raw: str, *, literal: bool) -> Resource:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
            raise ResourceError(f"{raw!r} contains a control character")
        if os.path.isabs(raw):
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
        wildcard = not literal and any(globs.has_wildcard(s) for s in segments)
        if not literal and not wildcard and (raw.endswith("/") or os.path.isdir(os.path.join(self.repo, *segments))):
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
        fixed = segments if not wildcard else segments[: next(i for i, s in enumerate(segments) if globs.has_wildcard(s))]
        alias = self._resolved(key, fixed, len(segments))
        if literal and globs.has_wildcard(key):
            # A literal name with wildcard characters: escape them so it matches only itself.
            key = _escape(key)
            alias = _escape(alias) if alias else None
        return Resource(key, Kind.GLOB if wildcard else Kind.PATH, (alias,) if alias and alias != key else ())

    def _inside(self, absolute: str) -> str | None:
        for root in (self.repo, self.real_repo):
            if absolute == root:
                return "."
            if absolute.startswith(root + os.sep):
                return absolute[len(root) + 1 :]
        return None

    def _resolved(self, key: str, fixed: list[str], total: int) -> str | None:
        """Refuse a fixed prefix that leaves the repository through a symlink; return its alias."""
        if not fixed:
            return None
        real = os.path.realpath(os.path.join(self.repo, *fixed))
        if real != self.real_repo and not real.startswith(self.real_repo + os.sep):
            raise ResourceError(f"{key!r} leads outside the repository through a symlink (to {real})")
        rel = os.path.relpath(real, self.real_repo) if real != self.real_repo else ""
        rest = key.split("/")[len(fixed) :]
        if not rel:
            if not rest:
                raise ResourceError(f"{key!r} resolves to the repository root; lock ** for everything")
            return "/".join(rest)
        return "/".join([rel, *rest]) if len(fixed) < total else rel


def _named(raw: str, scheme: str, rest: str) -> Resource:
    if not NAMED_REST.match(rest):
        raise ResourceError(f"{raw!r}: the name after {scheme}:// must be 1-256 characters without spaces")
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
