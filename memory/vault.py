"""The vault: every live claim as an Obsidian-compatible Markdown note, and back.

``render`` turns the store into files (bytes by relative path), the same
bytes for the same store: one note per live claim (``claims/claim-ID.md``),
an index note per trust domain (``authors/NAME.md``), and a manifest
(``conclave-vault.json``) with each file's SHA-256 and a *snapshot* hash
over all of them.  No time of export is written anywhere, so a re-export of
an unchanged store is byte-identical.

A note is YAML front matter with sorted keys (each value written as JSON,
which YAML reads as it is) and the claim's text in a fenced block longer
than any backtick run in it: Obsidian shows the text literally (an agent's
``![](https://...)`` stays text, never a fetched image) and the text comes
back exactly.  Only the text in the fence is the person's to edit; the
front matter is what the store says (tier, author, witnesses, links).

``parse`` reads a vault back and ``diff`` holds it against a fresh render:
edited text, deleted notes, new notes, and refusals for anything else.
Nothing here touches the filesystem or the store's writer
(``memory.vault_files`` writes; ``memory.ops`` applies).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Final, Iterable

import apsw
import attrs

from memory import claims
from memory.policy import LIVE_TIERS
from broker.literal import fence_for
from store import dialect

MANIFEST: Final = "conclave-vault.json"
FORMAT: Final = "conclave-vault"
VERSION: Final = 1
CLAIMS_DIR: Final = "claims"
AUTHORS_DIR: Final = "authors"
#: Front-matter keys a new note may carry (everything else is the store's to say).
NEW_NOTE_KEYS: Final = frozenset({"kind", "scope"})
_NAME: Final = re.compile(r"[^A-Za-z0-9._-]")
_NOTE_NAME: Final = re.compile(r"claim-(\d+)\.md")


class VaultError(ValueError):
    """A vault (or one of its notes) that cannot be read back; the message names the file and what to do."""


def note_path(claim_id: int) -> str:
    return f"{CLAIMS_DIR}/claim-{claim_id}.md"


def wikilink(claim_id: int) -> str:
    return f"[[claim-{claim_id}]]"


#: One encoder for every value (``json.dumps`` with options builds a new one per call).
_VALUE: Final = json.JSONEncoder(ensure_ascii=False).encode
_READ: Final = json.JSONDecoder().decode


def _front(fields: dict[str, Any]) -> str:
    lines = ["---", *(f"{k}: {_VALUE(fields[k])}" for k in sorted(fields)), "---"]
    return "\n".join(lines) + "\n"


def render_note(fields: dict[str, Any], text: str) -> str:
    fence = fence_for(text)
    return f"{_front(fields)}{fence}text\n{text}\n{fence}\n"


# -- from the store ------------------------------------------------------------------


def _links(conn: apsw.Connection) -> dict[int, list[tuple[str, int]]]:
    """Typed links by source lineage: ``(kind, target lineage)``.

    Issue 26's links (``claim_relations``, ``memory.links``); read only when
    the table exists, so a store not yet migrated exports ``links: []``.
    """
    if dialect.is_postgresql(conn):
        present = conn.execute("SELECT to_regclass('claim_relations') IS NOT NULL").fetchone()[0]
    else:
        present = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'claim_relations'").fetchone() is not None
    if not present:
        return {}
    out: dict[int, list[tuple[str, int]]] = {}
    for source, kind, target in conn.execute("SELECT source_lineage, kind, target_lineage FROM claim_relations ORDER BY id"):
        out.setdefault(source, []).append((kind, target))
    return out


@attrs.frozen
class Vault:
    """A rendered vault: ``files`` (relative path -> bytes, the manifest included) and its snapshot hash."""

    files: dict[str, bytes]
    snapshot: str
    claims: int

    @property
    def notes(self) -> dict[str, bytes]:
        return {p: b for p, b in self.files.items() if p != MANIFEST}


def render(conn: apsw.Connection) -> Vault:
    """Every live shared claim as a note, an index per author domain, and the manifest (one read snapshot).

    An agent's private claims are its own notebook, not the team's: they are left out.
    """
    live = "', '".join(t.value for t in LIVE_TIERS)
    rows = list(
        conn.execute(
            f"SELECT id, lineage, edition, kind, scope, tier, author, author_domain, text, evidence, created_at "
            f"FROM claims WHERE tier IN ('{live}') AND private_to IS NULL ORDER BY id"
        )
    )
    witnesses: dict[int, list[str]] = {}
    for claim, principal in conn.execute(
        f"SELECT w.claim, w.principal FROM corroborations w JOIN claims c ON c.id = w.claim "
        f"WHERE c.tier IN ('{live}') AND c.private_to IS NULL ORDER BY w.claim, w.id"
    ):
        witnesses.setdefault(claim, []).append(principal)
    current = {lineage: cid for cid, lineage, *_ in rows}
    links = _links(conn)
    files: dict[str, bytes] = {}
    by_domain: dict[str, list[tuple[int, str, str, str]]] = {}
    for cid, lineage, edition, kind, scope, tier, author, domain, text, evidence, created_at in rows:
        fields: dict[str, Any] = {
            "author": author,
            "created_at": created_at,
            "edition": edition,
            "id": cid,
            "kind": kind,
            "links": [f"{k} {wikilink(current[t])}" for k, t in links.get(lineage, []) if t in current],
            "scope": scope,
            "tier": tier,
            "witnesses": witnesses.get(cid, []),
        }
        if evidence is not None:
            fields["evidence"] = evidence
        files[note_path(cid)] = render_note(fields, text).encode()
        by_domain.setdefault(domain, []).append((cid, tier, kind, author))
    for domain, listed in sorted(by_domain.items()):
        body = [f"# {domain}", "", f"Claims authored in trust domain `{domain}` (the agent, its restarts and its children).", ""]
        body += [f"- {wikilink(cid)} {tier} {kind}, by `{author}`" for cid, tier, kind, author in listed]
        files[f"{AUTHORS_DIR}/{_NAME.sub('_', domain)}.md"] = (_front({"claims": len(listed), "domain": domain}) + "\n".join(body) + "\n").encode()
    sums = {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())}
    snapshot = hashlib.sha256("".join(f"{p}\0{h}\n" for p, h in sums.items()).encode()).hexdigest()
    manifest = {"claims": len(rows), "files": sums, "format": FORMAT, "snapshot": snapshot, "version": VERSION}
    files[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    return Vault(files, snapshot, len(rows))


# -- from the folder ---------------------------------------------------------------------


@attrs.frozen
class Note:
    path: str
    fields: dict[str, Any]
    text: str


def parse_note(path: str, data: bytes) -> Note:
    """A note's front matter and fenced text.  Raises VaultError naming the file and the fix."""
    try:
        raw = data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise VaultError(f"note {path} is not UTF-8 text; save it as UTF-8") from None
    fields: dict[str, Any] = {}
    body = raw
    if raw.startswith("---\n"):
        end = raw.find("\n---\n", 3)
        if end < 0:
            raise VaultError(f"note {path} opens front matter with --- but never closes it; end it with a line holding only ---")
        for n, line in enumerate(raw[4:end].split("\n"), 2):
            if not line.strip():
                continue
            key, sep, value = line.partition(": ")
            if not sep or not key or key != key.strip():
                raise VaultError(f"note {path}, line {n}: front matter lines are `key: value`, not {line[:60]!r}")
            try:
                fields[key] = _READ(value)
            except json.JSONDecodeError:
                raise VaultError(f"note {path}, line {n}: the value of {key} must be written as the export wrote it (JSON: quoted text, [lists])") from None
        body = raw[end + 5 :]
    text = _fenced(path, body)
    return Note(path, fields, text)


def _fenced(path: str, body: str) -> str:
    lines = body.strip("\n").split("\n")
    opening = re.fullmatch(r"(`{3,})(text)?", lines[0]) if lines else None
    if opening is None:
        # A note a person wrote from scratch: its whole body is the text.
        text = body.strip()
        if not text:
            raise VaultError(f"note {path} has no text; write the claim below the front matter, or delete the note")
        return text
    fence = opening.group(1)
    if len(lines) < 3 or lines[-1] != fence:
        raise VaultError(f"note {path}: the text's fence {fence} is not closed by the note's last line; put {fence} on a line of its own at the end")
    inner = "\n".join(lines[1:-1])
    if re.search(rf"^{fence}\s*$", inner, re.M):
        raise VaultError(f"note {path} holds text after its fenced block closes; keep the claim inside one fence")
    if not inner.strip():
        raise VaultError(f"note {path} has an empty fence; write the claim inside it, or delete the note to retire the claim")
    return inner


def read_manifest(data: bytes | None) -> dict[str, Any] | None:
    """The manifest if it is one of ours, else None."""
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("files"), dict) or not isinstance(doc.get("snapshot"), str):
        return None
    return doc


# -- the diff -------------------------------------------------------------------------------


@attrs.frozen
class Plan:
    """What an import would do: new editions, retirements, new claims, and what it ignores."""

    snapshot: str
    edits: list[dict[str, Any]]
    retire: list[dict[str, Any]]
    new: list[dict[str, Any]]
    unchanged: int
    ignored: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot, "edits": self.edits, "retire": self.retire, "new": self.new,
            "unchanged": self.unchanged, "ignored": self.ignored,
        }  # fmt: skip

    @property
    def empty(self) -> bool:
        return not (self.edits or self.retire or self.new)


#: Front-matter fields whose change a note may not carry: the store decides them.
READ_ONLY_HINTS: Final = {
    "tier": "a vault import never changes a tier; `conclave memory promote ID` or `retire ID` does, as a decision of its own",
    "witnesses": "witnesses are agents' corroborations; a file cannot add or remove one",
    "author": "the author is whoever wrote the edition; an edit becomes the operator's new edition",
}


def diff(fresh: Vault, manifest: dict[str, Any], notes: Iterable[Note], kinds: tuple[str, ...], scopes: tuple[str, ...]) -> Plan:
    """Hold the folder's notes against a fresh render.

    Raises:
        VaultError: the vault is stale (the store moved since its export), or
            a note cannot be taken as it is (changed front matter, a duplicate
            or unknown id, a new note without a kind); the message names it.
    """
    if manifest["snapshot"] != fresh.snapshot:
        raise VaultError(
            f"the vault is stale: it was exported at snapshot {manifest['snapshot'][:16]}, and the store has moved since "
            f"(now {fresh.snapshot[:16]}); export a fresh vault (conclave memory vault export --out DIR) and make your edits there"
        )
    fresh_notes = {p: parse_note(p, b) for p, b in fresh.notes.items() if p.startswith(f"{CLAIMS_DIR}/")}
    by_id = {n.fields["id"]: n for n in fresh_notes.values()}
    seen: dict[int, str] = {}
    edits, new, ignored = [], [], []
    unchanged = 0
    for note in sorted(notes, key=lambda n: n.path):
        if note.path.startswith(f"{AUTHORS_DIR}/"):
            if note.path not in manifest["files"] or fresh.files.get(note.path) is None:
                ignored.append(f"{note.path}: index notes are written by the export; a new one is ignored")
            continue
        if "id" not in note.fields:
            extra = sorted(set(note.fields) - NEW_NOTE_KEYS)
            if extra:
                raise VaultError(f"new note {note.path} sets {', '.join(extra)}; a new note starts unverified with you as its author: give only kind (and scope)")
            kind, scope = note.fields.get("kind"), note.fields.get("scope", "repo")
            if kind not in kinds:
                raise VaultError(f"new note {note.path} needs a kind in its front matter (---, kind: \"discovery\", ---); one of {', '.join(kinds)}")
            if scope not in scopes:
                raise VaultError(f"new note {note.path}: scope must be one of {', '.join(scopes)}, not {scope!r}")
            new.append({"path": note.path, "kind": kind, "scope": scope, "text": note.text})
            continue
        cid = note.fields["id"]
        old = by_id.get(cid) if type(cid) is int else None
        if old is None:
            raise VaultError(f"note {note.path} names claim {cid!r}, which is not a live claim of this vault; remove its id line to store it as a new claim")
        if cid in seen:
            raise VaultError(f"notes {seen[cid]} and {note.path} both name claim {cid}; keep one of them")
        seen[cid] = note.path
        for key in sorted(set(old.fields) | set(note.fields)):
            if old.fields.get(key) != note.fields.get(key):
                hint = READ_ONLY_HINTS.get(key, "only the text inside the fence is yours to edit")
                raise VaultError(f"note {note.path} changes {key} ({json.dumps(old.fields.get(key))} -> {json.dumps(note.fields.get(key))}); {hint}")
        if note.text != old.text:
            edits.append({"claim": cid, "path": note.path, "tier": old.fields["tier"], "from": old.text, "to": note.text})
        else:
            unchanged += 1
    retire = [{"claim": cid, "path": n.path, "tier": n.fields["tier"]} for cid, n in sorted(by_id.items()) if cid not in seen]
    return Plan(fresh.snapshot, edits, retire, new, unchanged, ignored)
