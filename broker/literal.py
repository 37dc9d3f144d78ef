"""Text from agents, shown to a person exactly as it is -- never as instructions to the terminal.

Everything an operator view prints that an agent could have written (lock
names, claim text, evidence, reasons, mail, status lines, program output)
passes through here first.  Two things could go wrong otherwise:

* **markup**: rich reads ``[red]`` or ``[/]`` in a plain string as style
  tags -- a lock named ``name://[/]`` made ``lock list`` raise
  ``MarkupError`` for as long as the lock was in the log.  Views build rich
  ``Text`` objects (never parsed) from the strings below.
* **control characters**: an escape sequence can recolour, hide, erase or
  rewrite what the operator sees (``\\x1b[2K\\r`` over a table row, a
  window-title change), and a right-to-left override makes ``txt.exe``
  read as ``exe.txt``.  :func:`visible` spells each one out as an escape
  (``\\x1b``, ``\\u202e``) so it is seen, and never acted on.

The stored data is untouched: ``--json`` carries the exact text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Final

#: Categories spelled out: controls, format characters (bidi overrides,
#: zero-width joiners and spaces), line and paragraph separators, lone surrogates.
_ESCAPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


@lru_cache(maxsize=4096)
def _needs_escape(ch: str) -> bool:
    return unicodedata.category(ch) in _ESCAPED_CATEGORIES


def _spell(ch: str) -> str:
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control and format character spelled out as an escape.

    ``keep_newlines`` keeps ``\\n`` and ``\\t`` as they are (a message body
    shown as a block); a one-line field (a name, a table cell, a status
    line) spells them out too, so text cannot fake a line of its own.
    """
    s = "" if text is None else str(text)
    if s.isascii() and s.isprintable():
        return s  # the common case: nothing to do
    out = []
    for ch in s:
        if keep_newlines and ch in "\n\t":
            out.append(ch)
        elif _needs_escape(ch):
            out.append(_spell(ch))
        else:
            out.append(ch)
    return "".join(out)


def fence_for(text: str, mark: str = "`") -> str:
    """A Markdown code fence longer than any run of ``mark`` in ``text`` (at least three)."""
    longest = max((len(run) for run in re.findall(re.escape(mark) + "+", text)), default=0)
    return mark * max(3, longest + 1)


def code_span(text: object) -> str:
    """``text`` as a Markdown code span that nothing inside it can close, one line, shown literally."""
    s = visible(text)
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    tick = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{tick}{pad}{s}{pad}{tick}"


def code_block(text: object, info: str = "text") -> str:
    """``text`` as a fenced Markdown block that nothing inside it can close; newlines kept."""
    s = visible(text, keep_newlines=True)
    fence = fence_for(s)
    return f"{fence}{info}\n{s}\n{fence}"
