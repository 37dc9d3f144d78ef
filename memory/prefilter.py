"""The prefilter: deterministic rules every claim passes before anything is stored.

A claim is reference material another agent may later be *pushed*.  Text
that reads as an order to that reader, text that is a command to paste into
a shell, text carrying a secret, and text shaped like a prompt injection do
not belong there, whatever their tier.  Each rule has a name; a rejection
names the rule and describes the *shape* it found, never the text itself --
above all never a secret -- so nothing rejected reaches an error, a log or
an event.

Rules (in the order they are tried):

``secret``
    Known key formats (detect-secrets' detectors: AWS, GitHub, Slack, Stripe,
    JWT, private keys, ...), ``key=value`` secrets, private-key headers,
    bearer tokens and long high-entropy runs.
``injection``
    "ignore previous instructions" and kin, fake role or system tags
    (``<system>``, ``<|im_start|>``, ``[INST]``, a ``System:`` line).
``executable``
    Code fences, pipes into a shell, ``curl ... |``, ``sudo``, ``rm -rf``,
    command substitution, shell prompts.
``directive``
    Imperatives aimed at the reader: a sentence that opens with an order
    ("Always ...", "Never ...", "Run the ...") or speaks to "you".
``repo_specific``
    Only for ``general`` scope (claims meant to hold everywhere): paths and
    file names tie a claim to one repository.

Evidence and reasons (free text an agent attaches) pass the ``secret`` and
``injection`` rules only: they may quote commands or give orders to the
operator, but they may not smuggle a secret into the database.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Final, final

import attrs


@final
@attrs.frozen
class Rejection:
    """Why text was refused: the rule and a description of the shape (never the text)."""

    rule: str
    detail: str

    def message(self, what: str = "the text") -> str:
        return f"{what} was refused by the prefilter (rule {self.rule}: {self.detail}); nothing was stored"


#: The rules, in the order they are tried.
RULES: Final = ("secret", "injection", "executable", "directive", "repo_specific")


def check_claim(text: str, scope: str) -> Rejection | None:
    """The first rule ``text`` breaks as a claim of ``scope``, or None."""
    for rule in (_secret, _injection, _executable, _directive):
        found = rule(text)
        if found is not None:
            return found
    if scope == "general":
        return _repo_specific(text)
    return None


def check_note(text: str) -> Rejection | None:
    """The first rule an evidence or reason text breaks, or None (secret and injection only)."""
    return _secret(text) or _injection(text)


# -- secret ---------------------------------------------------------------------

_KEY_NAMES: Final = (
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|"
    r"private[_-]?key|client[_-]?secret|auth[_-]?token|access[_-]?token|refresh[_-]?token|credentials?"
)
_KEY_VALUE: Final = re.compile(rf"(?i)(?<![\w-])(?:{_KEY_NAMES})(?![\w-])\s*[:=]\s*(['\"]?)([^\s'\",;]+)\1")
_KEY_IS: Final = re.compile(r"(?i)\b(?:password|passphrase|passwd)\s+(?:is|was)\s+(['\"]?)([^\s'\",;]+)\1")
_PRIVATE_KEY: Final = re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----")
_BEARER: Final = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}")
_RUN: Final = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_PLACEHOLDER: Final = re.compile(
    r"(?i)^(none|null|nil|true|false|undefined|empty|redacted|changeme|example|secret|password|xxx+|\*+|\.\.\.|<.*>|\$\{.*|\$\w+|\{\{.*|os\.environ.*|env\..*|getenv.*|process\.env.*)$"
)
#: detect-secrets detectors that are about formats, not entropy or keywords (ours are stricter there).
_GENERIC_DETECTORS: Final = frozenset({"Base64 High Entropy String", "Hex High Entropy String", "Secret Keyword", "Public IP (ipv4)"})


@lru_cache(maxsize=1)
def _format_detectors() -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
    """detect-secrets' known-format detectors as (name, patterns).

    Only their patterns are used (``analyze_string``'s denylist): the
    plugins' ``analyze_line`` can try to *verify* a candidate against the
    provider's API over the network, which must never happen to a secret an
    agent just tried to store.
    """
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    return tuple(
        (kind, tuple(cls().denylist))
        for kind, cls in sorted(get_mapping_from_secret_type_to_class().items())
        if kind not in _GENERIC_DETECTORS
    )


#: Every secret shape below needs one of these: a long unbroken token, a URL with
#: credentials, a key header, or a key-ish word.  Most claims have none, and skip the rest.
_MAYBE_SECRET: Final = re.compile(
    r"[A-Za-z0-9+/=_.-]{16,}|://|-----BEGIN|(?i:key|token|secret|pass|pwd|auth|cred|bearer|sk_|xox)"
)


def _secret(text: str) -> Rejection | None:
    if not _MAYBE_SECRET.search(text):
        return None
    if _PRIVATE_KEY.search(text):
        return Rejection("secret", "a private-key header")
    for kind, patterns in _format_detectors():
        if any(p.search(text) for p in patterns):
            return Rejection("secret", f"a string shaped like a known credential ({kind})")
    for pattern in (_KEY_VALUE, _KEY_IS):
        for match in pattern.finditer(text):
            if _looks_secret(match.group(2)):
                return Rejection("secret", "a key=value secret")
    if _BEARER.search(text):
        return Rejection("secret", "a bearer token")
    for match in _RUN.finditer(text):
        if _high_entropy(match.group(0)):
            return Rejection("secret", f"a high-entropy string of {len(match.group(0))} characters")
    return None


def _looks_secret(value: str) -> bool:
    if len(value) < 6 or _PLACEHOLDER.match(value):
        return False
    # A plain word ("hashed", "rotated") is prose, not a credential.
    return bool(re.search(r"\d", value) or re.search(r"[^A-Za-z]", value) or (value != value.lower() and value != value.capitalize()))


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _high_entropy(run: str) -> bool:
    bare = run.replace("-", "").replace("_", "")
    # Hex runs are commit ids, checksums and UUIDs far more often than keys.
    if re.fullmatch(r"[0-9a-fA-F]+", bare):
        return False
    if not (re.search(r"\d", run) and re.search(r"[A-Za-z]", run)):
        return False
    return _entropy(run) >= max(3.6, 0.82 * math.log2(min(len(run), 64)))


# -- injection ------------------------------------------------------------------

_INJECTION: Final = (
    (
        re.compile(
            r"(?i)\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|all|any|your|the\s+system)\b"
            r"[^.\n]{0,24}?\b(?:instructions?|prompts?|messages|rules|directions|guidelines|guardrails|policies)\b"
        ),
        "an instruction to ignore earlier instructions",
    ),
    (re.compile(r"(?i)\byou\s+are\s+now\b|\bfrom\s+now\s+on\b[^.\n]{0,30}\byou\b"), "an attempt to re-cast the reader"),
    (re.compile(r"(?i)\bnew\s+(?:system\s+)?instructions?\s*:"), "a fake instruction header"),
    (re.compile(r"(?i)</?\s*(?:system|assistant|user|human|developer|tool_call|tool|instructions?|im_start|im_end)\s*>"), "a fake role tag"),
    (re.compile(r"<\|[A-Za-z_]+\|>"), "a chat-template token"),
    (re.compile(r"\[/?INST\]|<<\s*/?SYS\s*>>"), "a chat-template token"),
    (re.compile(r"(?im)^\s*#{0,3}\s*(?:system|assistant|developer|human)\s*:"), "a fake role line"),
    (re.compile(r"(?i)\bBEGIN\s+(?:SYSTEM|ADMIN|DEVELOPER)\b"), "a fake system block"),
    (re.compile(r"(?i)\b(?:reveal|print|show|leak|output|repeat)\b[^.\n]{0,30}\bsystem\s+prompt\b"), "a request for the system prompt"),
    (re.compile(r"(?i)\bjailbreak|\bdeveloper\s+mode\s+(?:enabled|on)\b|\bdo\s+anything\s+now\b"), "a jailbreak phrase"),
)


def _injection(text: str) -> Rejection | None:
    for pattern, detail in _INJECTION:
        if pattern.search(text):
            return Rejection("injection", detail)
    return None


# -- executable -----------------------------------------------------------------

_SHELLS: Final = r"(?:sh|bash|zsh|dash|ksh|fish|python[0-9.]*|perl|ruby|node|powershell|pwsh|iex|source)"
_EXECUTABLE: Final = (
    (re.compile(r"```|~~~"), "a code fence"),
    (re.compile(rf"\|\s*(?:sudo\s+)?{_SHELLS}\b"), "a pipe into a shell"),
    (re.compile(r"\b(?:curl|wget)\b[^\n|]*\|"), "a download piped into a command"),
    (re.compile(r"(?:^|[\s;&|(`])sudo\s+\S"), "a sudo command"),
    (re.compile(r"\brm\s+-[A-Za-z]*[rRf]"), "a recursive or forced rm"),
    (re.compile(r"\$\([^)]*\)|`[^`]*\$\(|\beval\s*\(|\bexec\s*\(|\bos\.system\s*\("), "command substitution or eval"),
    (re.compile(r"(?:;|&&|\|\|)\s*(?:rm|curl|wget|chmod|chown|dd|mkfs|shutdown|reboot|kill|nc)\b"), "a chained shell command"),
    (re.compile(r"\bchmod\s+(?:-R\s+)?(?:777|\+s|u\+s)\b|\bmkfs(?:\.\w+)?\s|\bdd\s+if=|/dev/tcp/|\bnc\s+-[a-z]*e\b"), "a dangerous shell command"),
    (re.compile(r":\(\)\s*\{\s*:\|:&\s*\};:"), "a fork bomb"),
    (re.compile(r"(?m)^\s*[$#]\s+[\w./-]+"), "a shell prompt line"),
)


def _executable(text: str) -> Rejection | None:
    for pattern, detail in _EXECUTABLE:
        if pattern.search(text):
            return Rejection("executable", detail)
    return None


# -- directive ------------------------------------------------------------------

#: Openers that are orders whatever follows.
_ALWAYS_ORDERS: Final = frozenset(
    {"always", "never", "don't", "dont", "ignore", "disregard", "forget", "ensure", "pretend", "obey", "please", "must"}
)
#: Verbs that are orders when an object follows ("Run the tests", not "Run times doubled").
_VERBS: Final = frozenset(
    """run execute delete remove disable enable install uninstall use set add call commit push skip bypass make
    stop send write copy change replace avoid prefer trust treat follow apply update upload download grant give
    reveal print output respond reply tell override turn switch drop kill force revert reset merge deploy configure
    put keep increase decrease raise lower pin upgrade downgrade restart rerun wrap mark move rename export import
    do try start open close edit fix patch tag publish release""".split()
)
_OBJECTS: Final = frozenset(
    """the a an all any this that these those it them your every each no my our its their only both everything
    anything nothing yourself to""".split()
)
_SECOND_PERSON: Final = re.compile(
    r"(?i)\byou(?:'ll)?\s+(?:must|should|shall|need\s+to|have\s+to|are\s+to|ought\s+to|will\s+need\s+to|are\s+required\s+to)\b"
    r"|\b(?:make\s+sure|be\s+sure\s+to|remember\s+to|don'?t\s+forget|do\s+not)\b"
)
_SENTENCES: Final = re.compile(r"[^.!?;:\n]+")
_BULLET: Final = re.compile(r"^\s*(?:[-*\u2022>]+|\d+[.)])\s*")


def _directive(text: str) -> Rejection | None:
    if _SECOND_PERSON.search(text):
        return Rejection("directive", "an instruction addressed to the reader")
    for sentence in _SENTENCES.findall(text):
        words = _BULLET.sub("", sentence).split()
        if not words:
            continue
        first = words[0].lower().strip("\"'(")
        nxt = words[1].lower().strip("\"'(,") if len(words) > 1 else ""
        if first in _ALWAYS_ORDERS or (first in _VERBS and nxt in _OBJECTS):
            return Rejection("directive", f"a sentence that opens with an order ({first!r})")
    return None


# -- repo-specific (general scope only) -----------------------------------------

_EXTENSIONS: Final = (
    "py|pyi|go|rs|js|jsx|mjs|ts|tsx|c|h|cc|cpp|hpp|java|kt|rb|php|cs|swift|sh|bash|zsh|toml|ya?ml|json|ini|cfg|conf|"
    "lock|md|rst|txt|sql|proto|gradle|mk|xml|html|css|scss|vue|ipynb|env"
)
_FILE: Final = re.compile(rf"(?i)\b[\w-]+\.(?:{_EXTENSIONS})\b")
_KNOWN_NAMES: Final = frozenset(
    {"node.js", "vue.js", "next.js", "nuxt.js", "d3.js", "three.js", "express.js", "ember.js", "backbone.js", "chart.js", "deno.js"}
)
_PATHS: Final = (
    re.compile(r"(?:^|[\s(\"'`])(?:\.{1,2}|~)?/[\w.-]+/[\w.-]+"),
    re.compile(r"(?:^|[\s(\"'`])\.{1,2}/[\w.-]+"),
    re.compile(r"\b[\w.-]+/[\w.-]+/[\w.-]+"),
    re.compile(r"(?i)\b(?:src|lib|pkg|cmd|internal|tests?|app|bin|docs|scripts|config|vendor|node_modules|crates|packages)/[\w.-]+"),
)
_SPECIAL_FILES: Final = re.compile(r"\b(?:Makefile|Dockerfile|Jenkinsfile|Procfile|Gemfile|Rakefile|Vagrantfile)\b|(?<![\w])\.(?:gitignore|dockerignore|editorconfig|env)\b")


def _repo_specific(text: str) -> Rejection | None:
    for pattern in _PATHS:
        if pattern.search(text):
            return Rejection("repo_specific", "a repository path in a general-scope claim (use scope repo)")
    if any(m.group(0).lower() not in _KNOWN_NAMES for m in _FILE.finditer(text)) or _SPECIAL_FILES.search(text):
        return Rejection("repo_specific", "a file name in a general-scope claim (use scope repo)")
    return None
