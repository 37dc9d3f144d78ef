"""Build ``memory/lookalikes_data.py`` from three files of the Unicode Character Database.

    python -m memory.lookalikes_build UCD_DIR > memory/lookalikes_data.py

``UCD_DIR`` holds, from one Unicode version (17.0.0 for the table in the
tree; https://www.unicode.org/Public/17.0.0/ucd/ and
https://www.unicode.org/Public/security/17.0.0/):

* ``DerivedCoreProperties.txt`` -- the ``Default_Ignorable_Code_Point`` ranges;
* ``confusables.txt`` (UTS #39) -- the look-alike prototypes;
* ``Scripts.txt`` -- each code point's script.

What is kept (the prefilter judges text against ASCII-spelled rules, so only
look-alikes *of ASCII* matter):

* every single code point outside ASCII whose prototype is made of printable
  ASCII, except those NFKC already changes (NFKC runs first) and those of
  the CJK scripts (Han, Hiragana, Katakana, Hangul, Bopomofo: ``ノ`` as
  ``/`` would turn Japanese words into paths, and nobody spells an English
  keyword in kana);
* three corrections, so a folded word reads as it looks: a capital whose
  prototype is ``l`` (Cyrillic ``І``, Greek ``Ι``) folds to ``I``; a double
  quote whose prototype is ``''`` folds to ``"``; the apostrophe a hooked
  letter's prototype carries (``Ɓ`` is ``'B``) is dropped;
* and, beside confusables.txt, the Latin letters that are an ASCII letter by
  name with a shape added -- small capitals (``ɢ`` LATIN LETTER SMALL
  CAPITAL G is ``G``), hooks, strokes, tails (``ɠ``, ``ł``) -- which
  Unicode does not list as confusable (they are "distinct letters") but a
  reader reads as the letter; those that decompose are left out (the
  prefilter drops combining marks itself).

Nothing here runs in the broker; the output is reviewed and committed.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

CJK = frozenset({"Han", "Hiragana", "Katakana", "Hangul", "Bopomofo"})


def _fields(path: Path) -> list[list[str]]:
    rows = []
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        data = line.split("#", 1)[0].strip()
        if data:
            rows.append([f.strip() for f in data.split(";")])
    return rows


def _span(text: str) -> tuple[int, int]:
    first, _, last = text.partition("..")
    return int(first, 16), int(last or first, 16)


def _version(path: Path) -> str:
    head = path.read_text(encoding="utf-8-sig").splitlines()[:12]
    return next((line.split(":", 1)[1].strip() for line in head if line.startswith("# Version:")), head[0].lstrip("# "))


def scripts(ucd: Path) -> list[tuple[int, int, str]]:
    spans = sorted((*_span(cps), script) for cps, script in _fields(ucd / "Scripts.txt"))
    merged: list[tuple[int, int, str]] = []
    for first, last, script in spans:
        if merged and merged[-1][2] == script and merged[-1][1] + 1 == first:
            merged[-1] = (merged[-1][0], last, script)
        else:
            merged.append((first, last, script))
    return [m for m in merged if m[2] not in ("Common", "Inherited")]


def ignorable(ucd: Path) -> list[tuple[int, int]]:
    spans = sorted(_span(row[0]) for row in _fields(ucd / "DerivedCoreProperties.txt") if row[1] == "Default_Ignorable_Code_Point")
    merged: list[tuple[int, int]] = []
    for first, last in spans:
        if merged and merged[-1][1] + 1 >= first:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def fold(ucd: Path, script_of: dict[int, str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for row in _fields(ucd / "confusables.txt"):
        source, target = row[0].split(), row[1].split()
        if len(source) != 1:
            continue
        code = int(source[0], 16)
        prototype = "".join(chr(int(t, 16)) for t in target)
        if code < 0x80 or not all(" " <= c <= "~" for c in prototype):
            continue
        char = chr(code)
        if unicodedata.normalize("NFKC", char) != char or script_of.get(code) in CJK:
            continue
        if prototype == "l" and unicodedata.category(char) == "Lu":
            prototype = "I"
        elif prototype == "''":
            prototype = '"'
        elif "'" in prototype and any(c.isalnum() for c in prototype):
            prototype = prototype.replace("'", "")
        out[code] = prototype
    for code, script in script_of.items():
        char = chr(code)
        if script != "Latin" or code < 0x80 or code in out or unicodedata.normalize("NFD", char) != char:
            continue
        named = _LATIN_NAME.match(unicodedata.name(char, ""))
        if named and unicodedata.normalize("NFKC", char) == char:
            small_capital, capital, letter = named.group("sc"), named.group("cap"), named.group("letter")
            out[code] = letter if (capital or small_capital) else letter.lower()
    return out


_LATIN_NAME = re.compile(r"^LATIN (?:(?P<cap>CAPITAL )|SMALL )?LETTER (?P<sc>SMALL CAPITAL )?(?P<letter>[A-Z])(?: WITH .+)?$")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    ucd = Path(argv[0])
    script_spans = scripts(ucd)
    script_of = {cp: s for first, last, s in script_spans for cp in range(first, last + 1)}
    table = fold(ucd, script_of)
    names = sorted({s for *_, s in script_spans})
    w = sys.stdout.write
    w('"""Generated by ``python -m memory.lookalikes_build UCD_DIR`` -- do not edit by hand.\n\n')
    w(f"Sources (Unicode, Inc.; terms of use https://www.unicode.org/terms_of_use.html):\n")
    for name in ("DerivedCoreProperties.txt", "confusables.txt", "Scripts.txt"):
        w(f"  {name}: {_version(ucd / name)}\n")
    w('See memory/lookalikes_build.py for what is kept and why.\n"""\n\n')
    w("from __future__ import annotations\n\nfrom typing import Final\n\n")
    w("#: Default_Ignorable_Code_Point, as inclusive ranges.\n")
    w("IGNORABLE: Final[tuple[tuple[int, int], ...]] = (\n")
    for first, last in ignorable(ucd):
        w(f"    (0x{first:04X}, 0x{last:04X}),\n")
    w(")\n\n#: A look-alike of ASCII -> the ASCII it is confusable with (confusables.txt prototypes, corrected).\n")
    w("FOLD: Final[dict[int, str]] = {\n")
    for code, prototype in sorted(table.items()):
        w(f"    0x{code:04X}: {prototype!r},  # {unicodedata.name(chr(code), f'U+{code:04X}')}\n")
    w("}\n\n#: Script names, indexed by SCRIPT_RANGES.\n")
    w(f"SCRIPTS: Final[tuple[str, ...]] = {tuple(names)!r}\n\n")
    w("#: (first, last, index into SCRIPTS) for every script but Common and Inherited, sorted.\n")
    w("SCRIPT_RANGES: Final[tuple[tuple[int, int, int], ...]] = (\n")
    index = {n: i for i, n in enumerate(names)}
    for first, last, s in script_spans:
        w(f"    (0x{first:04X}, 0x{last:04X}, {index[s]}),\n")
    w(")\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
