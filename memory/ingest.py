"""``memory ingest``: the facts in Markdown notes, runbooks and incident write-ups, as unverified claims.

A file is read the way a person skims it: each paragraph and each list item
is one candidate fact; headings are not facts but choose the kind of what
follows them ("Root cause" -> discovery, "Fix" -> solution, "Runbook" ->
workflow, ...); code blocks, tables, task-list items, front matter and HTML
comments are skipped, and said so.  Every candidate then passes what
``remember`` passes -- the length limit and the prefilter -- and a duplicate
check: a candidate with the same words as a live claim, or as an earlier
candidate of the same ingest, is refused naming it.

What is stored is unverified, authored by the operator, with the evidence
``ingest:<file>`` as its provenance.  An ingested claim is never anyone's
witness: it corroborates nothing, and the meaning pipeline links an
operator-authored restatement without counting it (``memory.absorb``).
"""

from __future__ import annotations

import re
from typing import Any, Final, Iterable

import attrs

from memory import claims, prefilter

#: The fewest words a candidate may have to stand alone as a fact.
MIN_WORDS: Final = 4
PROVENANCE: Final = "ingest:"
_HEADING_KINDS: Final = (
    ("solution", ("fix", "fixes", "fixed", "solution", "solutions", "resolution", "remediation", "workaround", "workarounds", "mitigation")),
    ("failure", ("failure", "failures", "incident", "symptom", "symptoms", "impact", "outage", "errors", "error")),
    ("workflow", ("runbook", "workflow", "workflows", "steps", "procedure", "process", "howto")),
    ("pattern", ("pattern", "patterns", "convention", "conventions", "lessons", "learned")),
    ("discovery", ("cause", "causes", "finding", "findings", "discovery", "discoveries", "root", "background", "facts", "notes")),
)
_FENCE: Final = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING: Final = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM: Final = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])\s+(.*)$")
_TASK: Final = re.compile(r"^\[[ xX]\]\s")
_WORD: Final = re.compile(r"[a-z]+")


@attrs.frozen
class Candidate:
    file: str
    line: int
    kind: str
    text: str


@attrs.frozen
class Skipped:
    file: str
    line: int
    reason: str


def kind_for(heading: str, default: str) -> str:
    words = set(_WORD.findall(heading.lower()))
    for kind, keys in _HEADING_KINDS:
        if words & set(keys):
            return kind
    return default


def split(file: str, markdown: str, default_kind: str) -> tuple[list[Candidate], list[Skipped]]:
    """The candidate facts of one Markdown file, and what was skipped (with why), in file order."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    found: list[Candidate] = []
    skipped: list[Skipped] = []
    kind = default_kind
    block: list[str] = []
    start = 0
    n = 0

    def flush() -> None:
        nonlocal block
        if block:
            text = " ".join(" ".join(block).split())
            if _TASK.match(text):
                skipped.append(Skipped(file, start, "a task-list item: a to-do, not a fact"))
            elif text:
                found.append(Candidate(file, start, kind, text))
        block = []

    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
        if end is not None:
            skipped.append(Skipped(file, 1, "front matter"))
            n = end + 1
    while n < len(lines):
        line = lines[n]
        number = n + 1
        n += 1
        stripped = line.strip()
        fence = _FENCE.match(line)
        if fence:
            flush()
            mark = fence.group(1)
            while n < len(lines) and not lines[n].strip().startswith(mark[0] * len(mark)):
                n += 1
            n += 1
            skipped.append(Skipped(file, number, "a code block: commands and code are not facts"))
            continue
        if stripped.startswith("<!--"):
            flush()
            while n <= len(lines) and "-->" not in lines[n - 1]:
                n += 1
            skipped.append(Skipped(file, number, "an HTML comment"))
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            kind = kind_for(heading.group(2), default_kind)
            continue
        if not stripped:
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            if not lines[n - 2].strip().startswith("|") or n == 1:  # a table is said once, at its first row
                skipped.append(Skipped(file, number, "a table"))
            continue
        if re.fullmatch(r"[-*_=\s]{3,}", stripped):
            flush()
            continue
        item = _ITEM.match(line)
        if item:
            flush()
            start = number
            block = [item.group(2)]
            continue
        if stripped.startswith(">"):
            stripped = stripped.lstrip("> ").strip()
        if not block:
            start = number
        block.append(stripped)
    flush()
    return found, skipped


@attrs.frozen
class Staging:
    """What an ingest would store and what it refused (with the reason), by file and line."""

    store: list[dict[str, Any]]
    refused: list[dict[str, Any]]


def stage(candidates: Iterable[Candidate], skipped: Iterable[Skipped], live_twins: dict[str, tuple[int, str]], scope: str) -> Staging:
    """Screen every candidate: length, words, prefilter, duplicates (``live_twins``: text_key -> (id, tier))."""
    store: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = [{"file": s.file, "line": s.line, "text": None, "reason": s.reason} for s in skipped]
    first_seen: dict[str, dict[str, Any]] = {}
    for c in candidates:
        where = {"file": c.file, "line": c.line, "text": c.text}
        if len(c.text) > claims.MAX_TEXT:
            refused.append({**where, "reason": f"{len(c.text)} characters; a claim holds at most {claims.MAX_TEXT}: split it"})
            continue
        if len(claims.words(c.text)) < MIN_WORDS:
            refused.append({**where, "reason": f"fewer than {MIN_WORDS} words: too short to stand alone as a fact"})
            continue
        rejection = prefilter.check_claim(c.text, scope)
        if rejection is not None:
            # The rule, never the text, for a secret; a refused candidate is never stored or logged.
            shown = None if rejection.rule == "secret" else c.text
            refused.append({**where, "text": shown, "reason": f"refused by the prefilter ({rejection.rule})", "rule": rejection.rule})
            continue
        key = claims.text_key(c.text)
        if key in live_twins:
            twin, tier = live_twins[key]
            refused.append({**where, "reason": f"a duplicate of claim {twin} ({tier}): the same words", "duplicate_of": twin})
            continue
        if key in first_seen:
            earlier = first_seen[key]
            refused.append({**where, "reason": f"a duplicate of {earlier['file']} line {earlier['line']} in this ingest"})
            continue
        entry = {"file": c.file, "line": c.line, "kind": c.kind, "scope": scope, "text": c.text, "provenance": PROVENANCE + c.file}
        first_seen[key] = entry
        store.append(entry)
    refused.sort(key=lambda r: (r["file"], r["line"]))
    return Staging(store, refused)
