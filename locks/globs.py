"""The glob language of lock resources, and deciding whether two patterns overlap.

A pattern is a repo-relative path whose segments may hold wildcards:

* ``*`` -- any run of characters within one segment (never ``/``);
* ``?`` -- one character within a segment;
* ``[abc]``, ``[a-z]``, ``[!a-z]`` -- one character from (or not from) a class;
  write ``[*]``, ``[?]`` or ``[[]`` for a literal ``*``, ``?`` or ``[``;
* ``**`` -- a whole segment: any number of segments (``src/**/test_*.py``);
  at the end (``src/**``) it means the directory itself and everything under
  it, at any depth.

A pattern matches paths exactly as written: ``src/*`` is the entries directly
in ``src``, not ``src/sub/deep.py`` (write ``src/**`` for that).  A lock on a
directory is a lock on ``dir/**`` (:mod:`locks.resources` rewrites it).  Two
resources overlap when some path matches both.

Each pattern compiles to a small nondeterministic automaton; two patterns
overlap when the product of their automata reaches a state where both
accept.  That decides glob-vs-glob and glob-vs-path exactly and symmetrically
(``overlap(a, b) == overlap(b, a)``).  Only when the product grows past
:data:`PRODUCT_LIMIT` states -- patterns far longer than anyone writes --
does it give up and answer "overlaps", because a false conflict costs a wait
while a missed one costs a corrupted file.
"""

from __future__ import annotations

import functools
import re
from typing import Final, final

import attrs

#: States the product search may visit before it answers "overlaps".
PRODUCT_LIMIT: Final = 200_000
WILDCARDS: Final = frozenset("*?[")

# A transition's predicate on one character.
#   ("c", ch)                 exactly ch
#   ("n",)                    any character but "/"
#   ("a",)                    any character
#   ("k", negated, ranges)    a class; never "/"; ranges are (lo, hi) code points
Predicate = tuple


class GlobError(ValueError):
    """A pattern that cannot be read; the message says which part and why."""


@final
@attrs.frozen
class Automaton:
    """Transitions per state, epsilon moves per state, and the accepting states."""

    moves: tuple[tuple[tuple[Predicate, int], ...], ...]
    empties: tuple[tuple[int, ...], ...]
    accepting: frozenset[int]


_WILDCARD: Final = re.compile(r"[*?\[]")


def has_wildcard(text: str) -> bool:
    return _WILDCARD.search(text) is not None


def check_segment(segment: str) -> None:
    """Raise GlobError unless ``segment`` is a well-formed glob segment."""
    _tokens(segment)


class _Builder:
    def __init__(self) -> None:
        self.moves: list[list[tuple[Predicate, int]]] = []
        self.empties: list[list[int]] = []

    def state(self) -> int:
        self.moves.append([])
        self.empties.append([])
        return len(self.moves) - 1

    def move(self, src: int, pred: Predicate, dst: int) -> None:
        self.moves[src].append((pred, dst))

    def empty(self, src: int, dst: int) -> None:
        self.empties[src].append(dst)


NOT_SLASH: Final[Predicate] = ("n",)
ANY: Final[Predicate] = ("a",)
SLASH: Final[Predicate] = ("c", "/")


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Automaton:
    """The automaton for a normalized pattern (segments joined by ``/``).

    Raises:
        GlobError: for a malformed segment.
    """
    b = _Builder()
    s = b.state()
    accepting: set[int] = set()
    before_slash: int | None = None
    segments = pattern.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            if last:
                # Everything below, at any depth -- and the directory itself.
                t = b.state()
                b.move(s, NOT_SLASH, t)
                b.move(t, ANY, t)
                if before_slash is not None:
                    accepting.add(before_slash)
                s = t
            else:
                # ([^/]+/)* : zero or more whole segments, each with its slash.
                inner, back = b.state(), b.state()
                b.move(s, NOT_SLASH, inner)
                b.move(inner, NOT_SLASH, inner)
                b.move(inner, SLASH, back)
                b.empty(back, s)
                t = b.state()
                b.empty(s, t)
                s = t
            continue
        tokens = _tokens(segment)
        if all(tok == ("*",) for tok in tokens):
            # A segment of stars still names something: one or more characters.
            t = b.state()
            b.move(s, NOT_SLASH, t)
            b.move(t, NOT_SLASH, t)
            s = t
        else:
            for tok in tokens:
                if tok == ("*",):
                    b.move(s, NOT_SLASH, s)
                    continue
                t = b.state()
                b.move(s, NOT_SLASH if tok == ("?",) else tok, t)
                s = t
        if not last:
            before_slash = s
            t = b.state()
            b.move(s, SLASH, t)
            s = t
    accepting.add(s)
    return Automaton(
        moves=tuple(tuple(m) for m in b.moves),
        empties=tuple(tuple(e) for e in b.empties),
        accepting=frozenset(accepting),
    )


def _tokens(segment: str) -> list[Predicate]:
    """Split one segment into literal characters, ``*``, ``?`` and classes."""
    if "**" in segment and segment != "**":
        raise GlobError(f"'**' must be a whole path segment (like src/**/x.py), not part of {segment!r}")
    out: list[Predicate] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            if not out or out[-1] != ("*",):
                out.append(("*",))
            i += 1
        elif ch == "?":
            out.append(("?",))
            i += 1
        elif ch == "[":
            pred, i = _read_class(segment, i)
            out.append(pred)
        else:
            out.append(("c", ch))
            i += 1
    return out


def _read_class(segment: str, start: int) -> tuple[Predicate, int]:
    i = start + 1
    negated = i < len(segment) and segment[i] in "!^"
    if negated:
        i += 1
    ranges: list[tuple[int, int]] = []
    first = True
    while True:
        if i >= len(segment):
            raise GlobError(f"unclosed '[' in {segment!r} (a class ends with ']'; write [[] for a literal '[')")
        ch = segment[i]
        if ch == "]" and not first:
            i += 1
            break
        first = False
        if i + 2 < len(segment) and segment[i + 1] == "-" and segment[i + 2] != "]":
            lo, hi = ord(ch), ord(segment[i + 2])
            if lo > hi:
                raise GlobError(f"the range {ch}-{segment[i + 2]} in {segment!r} runs backwards")
            ranges.append((lo, hi))
            i += 3
        else:
            ranges.append((ord(ch), ord(ch)))
            i += 1
    return ("k", negated, tuple(ranges)), i


# -- predicates ---------------------------------------------------------------

_SLASH_CODE: Final = ord("/")
_MAX_CODE: Final = 0x10FFFF


def _class_allows(pred: Predicate, code: int) -> bool:
    _, negated, ranges = pred
    if code == _SLASH_CODE:
        return False
    inside = any(lo <= code <= hi for lo, hi in ranges)
    return inside != negated


def _allows(pred: Predicate, ch: str) -> bool:
    kind = pred[0]
    if kind == "c":
        return pred[1] == ch
    if kind == "n":
        return ch != "/"
    if kind == "a":
        return True
    return _class_allows(pred, ord(ch))


def _class_spans(pred: Predicate) -> list[tuple[int, int]]:
    """The code point spans a class allows (sorted, "/" removed)."""
    _, negated, ranges = pred
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    if negated:
        spans, cursor = [], 0
        for lo, hi in merged:
            if cursor < lo:
                spans.append((cursor, lo - 1))
            cursor = hi + 1
        if cursor <= _MAX_CODE:
            spans.append((cursor, _MAX_CODE))
        merged = spans
    out: list[tuple[int, int]] = []
    for lo, hi in merged:
        if lo <= _SLASH_CODE <= hi:
            if lo < _SLASH_CODE:
                out.append((lo, _SLASH_CODE - 1))
            if _SLASH_CODE < hi:
                out.append((_SLASH_CODE + 1, hi))
        else:
            out.append((lo, hi))
    return out


@functools.lru_cache(maxsize=8192)
def _meet(p: Predicate, q: Predicate) -> bool:
    """Whether some single character satisfies both predicates."""
    if p[0] == "c":
        return _allows(q, p[1])
    if q[0] == "c":
        return _allows(p, q[1])
    if p[0] == "a":
        return _nonempty(q)
    if q[0] == "a":
        return _nonempty(p)
    if p[0] == "n":
        return _nonempty(q)
    if q[0] == "n":
        return _nonempty(p)
    a, b = _class_spans(p), _class_spans(q)
    return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b)


def _nonempty(pred: Predicate) -> bool:
    return pred[0] != "k" or bool(_class_spans(pred))


def class_is_empty(segment: str) -> bool:
    """True when a segment holds a class no character can satisfy (like ``[/]``)."""
    return any(tok[0] == "k" and not _nonempty(tok) for tok in _tokens(segment))


# -- deciding -----------------------------------------------------------------


def _closure(auto: Automaton, states: list[int]) -> set[int]:
    seen = set(states)
    stack = list(states)
    while stack:
        for nxt in auto.empties[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


@functools.lru_cache(maxsize=16384)
def overlap(a: str, b: str) -> bool:
    """Whether some path matches both patterns (symmetric).

    Answers True when the search would exceed :data:`PRODUCT_LIMIT` states:
    when in doubt, conflict.
    """
    if a > b:
        return overlap(b, a)
    if not has_wildcard(a) and not has_wildcard(b):
        return a == b
    return _intersects(compile_pattern(a), compile_pattern(b))


def _intersects(x: Automaton, y: Automaton) -> bool:
    start = [(i, j) for i in _closure(x, [0]) for j in _closure(y, [0])]
    seen = set(start)
    stack = list(start)
    while stack:
        i, j = stack.pop()
        if i in x.accepting and j in y.accepting:
            return True
        for p, ni in x.moves[i]:
            for q, nj in y.moves[j]:
                if not _meet(p, q):
                    continue
                for pair in ((a, b) for a in _closure(x, [ni]) for b in _closure(y, [nj])):
                    if pair not in seen:
                        seen.add(pair)
                        stack.append(pair)
        if len(seen) > PRODUCT_LIMIT:
            return True
    return False


def matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern`` (is covered by a lock on it)."""
    if not has_wildcard(pattern):
        return path == pattern
    auto = compile_pattern(pattern)
    current = _closure(auto, [0])
    for ch in path:
        nxt = [dst for state in current for pred, dst in auto.moves[state] if _allows(pred, ch)]
        if not nxt:
            return False
        current = _closure(auto, nxt)
    return bool(current & auto.accepting)
