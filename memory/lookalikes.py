"""Text as the prefilter judges it: what it says, however it is spelled.

The prefilter's rules are written in ASCII ("ignore previous instructions",
``<system>``, ``rm -rf``, ``ghp_``, ``AKIA``).  Unicode offers many ways to
write the same words so that a person -- and a model -- reads them while a
regular expression does not: a zero-width space or a soft hyphen inside a
word, fullwidth letters, a Cyrillic ``а`` for a Latin ``a``, combining marks
piled on a letter.  :func:`judge` undoes them, in this order:

1. **NFKC** -- compatibility forms become their plain letters (fullwidth
   ``ｒｍ`` is ``rm``, ``ﬁ`` is ``fi``, mathematical bold is plain);
2. **tag characters** (U+E0020..E007E, invisible) are read as the ASCII they
   encode -- a model reads them, so the rules must too;
3. **default-ignorable code points** are removed (zero-width spaces and
   joiners, the soft hyphen, bidirectional controls, variation selectors);
4. **combining marks** are removed (``ı̇gnóre`` is ``ignore``);
5. **confusables** are folded to the ASCII they look like (Unicode's
   confusables.txt, the subset that looks like ASCII: ``memory/lookalikes_data.py``).

The result is only ever *judged*; what is stored is the text as the agent
wrote it.  Two shapes are refused outright, because a person auditing the
stored text would not see what a model reads: **hidden text** (tag
characters; bidirectional overrides and isolates, which show text in another
order than it is read) and **words that mix scripts** with a look-alike
(``ѕudo``: Cyrillic ``ѕ`` and Latin ``udo``).  A mixed word is refused only
when one of its letters from a second script looks like ASCII, so ``250μs``
(Greek ``μ`` looks like no ASCII letter) and ``Dockerコンテナ`` pass.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from typing import Final, NamedTuple

from memory.lookalikes_data import FOLD, IGNORABLE, SCRIPT_RANGES, SCRIPTS

#: Tag characters: invisible, but each spells an ASCII character.
_TAG_FIRST, _TAG_LAST = 0xE0020, 0xE007E
_HIDING: Final = re.compile("[\U000e0001\U000e0020-\U000e007f]")
_OVERRIDES: Final = re.compile("[\u202a-\u202e\u2066-\u2069]")
_WORD: Final = re.compile(r"\w+")


def _table() -> dict[int, str | None]:
    table: dict[int, str | None] = {cp: None for first, last in IGNORABLE for cp in range(first, last + 1)}
    table.update({cp: chr(cp - 0xE0000) for cp in range(_TAG_FIRST, _TAG_LAST + 1)})
    return table


_UNHIDE: Final = _table()
_STARTS: Final = [first for first, _, _ in SCRIPT_RANGES]
_LATIN: Final = "Latin"


class Judged(NamedTuple):
    """The text to judge, and the first shape refused before any rule runs (or None)."""

    text: str
    hidden: str | None = None
    mixed: str | None = None


def script(char: str) -> str | None:
    """The Unicode script of ``char``; None for Common and Inherited (digits, punctuation, marks)."""
    code = ord(char)
    if code < 0x80:
        return _LATIN if char.isalpha() else None
    i = bisect.bisect_right(_STARTS, code) - 1
    if i >= 0 and SCRIPT_RANGES[i][1] >= code:
        return SCRIPTS[SCRIPT_RANGES[i][2]]
    return None


def judge(text: str) -> Judged:
    """``text`` as the rules should read it (see the module's docstring)."""
    if text.isascii():
        return Judged(text)  # nearly every claim: nothing to undo
    hidden = None
    if _HIDING.search(text):
        hidden = "invisible tag characters (text a model reads and a person cannot see)"
    elif _OVERRIDES.search(text):
        hidden = "bidirectional override or isolate characters (text shown in another order than it is read)"
    plain = unicodedata.normalize("NFKC", text).translate(_UNHIDE)
    plain = "".join(c for c in unicodedata.normalize("NFD", plain) if unicodedata.category(c) != "Mn")
    plain = unicodedata.normalize("NFC", plain)
    return Judged(plain.translate(FOLD), hidden, _mixed(plain))


def _mixed(text: str) -> str | None:
    """The shape of the first word that mixes scripts with a look-alike, or None."""
    for match in _WORD.finditer(text):
        word = match.group()
        if word.isascii():
            continue
        scripts = {s for s in map(script, word) if s is not None}
        if len(scripts) < 2:
            continue
        lookalike = next((c for c in word if ord(c) in FOLD and script(c) not in (None, _LATIN) and FOLD[ord(c)].isalpha()), None)
        if lookalike is not None:
            return f"a word mixing {' and '.join(sorted(scripts))} letters, {script(lookalike)} ones that look like Latin"
    return None
