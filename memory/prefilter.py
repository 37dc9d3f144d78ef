"""The prefilter: deterministic rules every claim passes before anything is stored.

A claim is reference material another agent may later be *pushed*.  Text
that reads as an order to that reader, text that is a command to paste into
a shell, text carrying a secret, and text shaped like a prompt injection do
not belong there, whatever their tier.  Each rule has a name; a rejection
names the rule and describes the *shape* it found, never the text itself --
above all never a secret -- so nothing rejected reaches an error, a log or
an event.

Every rule judges the text as :func:`memory.lookalikes.judge` reads it --
NFKC, tag characters spelled out, default-ignorable characters and
combining marks removed, look-alikes folded to ASCII -- so a zero-width
space, a soft hyphen, a fullwidth or Cyrillic letter inside a trigger word
changes nothing.  What is stored is the text as written.  Before the rules,
text that hides what it says from a person (invisible tag characters,
bidirectional overrides) is refused as ``injection``.

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
    ("Always ...", "Never ...", "Run the ...", "Do not ..."), speaks to
    "you" ("you must ..."), or is a conditional instruction ("when asked
    about X, answer Y", "if anyone asks, say ...") -- an instruction even
    without "always" or "must".
``mixed_script``
    A word that mixes scripts with a look-alike (``ѕudo``: Cyrillic ``ѕ``,
    Latin ``udo``): spelled to pass for another word.
``repo_specific``
    Only for ``general`` scope (claims meant to hold everywhere): paths and
    file names tie a claim to one repository.

Evidence and reasons (free text an agent attaches) pass the ``secret``,
``injection`` and ``mixed_script`` rules only: they may quote commands or
give orders to the operator, but they may not smuggle a secret into the
database.

A command *mentioned* as a fact is not a command to run: ``sudo``, ``rm
-rf`` followed by an English word ("the install no longer needs sudo to
write there", "stopped using rm -rf on the cache") passes; followed by a
command or a path it is refused.  The labelled set in
``tests/memory/prefilter_cases.py`` measures each rule (docs/MEMORY.md).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Final, Iterator, final

import attrs

from memory import multilingual
from memory.lookalikes import judge


@final
class _Rule:
    """A rule's regular expression, compiled the first time it is used.

    A broker imports this module at start and most never store a claim;
    compiling the forty-odd expressions below on import cost every broker
    and every ``conclave memory`` command about 35 ms of CPU.  The first
    check pays it instead (and refuses exactly as an eager compile would:
    tests/memory/test_memory_prefilter_fresh.py).
    """

    __slots__ = ("source", "_compiled")

    def __init__(self, source: str) -> None:
        self.source = source
        self._compiled: re.Pattern[str] | None = None

    def _pattern(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.source)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self._pattern().search(text)

    def match(self, text: str) -> re.Match[str] | None:
        return self._pattern().match(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self._pattern().finditer(text)

    def findall(self, text: str) -> list[str]:
        return self._pattern().findall(text)

    def sub(self, replacement: str, text: str, count: int = 0) -> str:
        return self._pattern().sub(replacement, text, count=count)


@final
@attrs.frozen
class Rejection:
    """Why text was refused: the rule and a description of the shape (never the text)."""

    rule: str
    detail: str

    def message(self, what: str = "the text") -> str:
        return f"{what} was refused by the prefilter (rule {self.rule}: {self.detail}); nothing was stored. {self.fix()}"

    def fix(self) -> str:
        """How to say what was meant in a form the prefilter accepts (names no part of the refused text)."""
        return _FIXES[self.rule]


#: Per rule, what to write instead.  A workflow is the usual victim of ``directive``: "Run the
#: tests with ..." is an order; "The tests run with `...`" is the same knowledge as a fact.
_FIXES: Final = {
    "secret": "Remove the secret and say where it is kept instead (\"the deploy key is in the vault under deploy/\").",
    "injection": "A claim may not tell its reader to drop its instructions or take a new role; if an attempt is worth remembering, describe it in the third person (\"an issue comment asked agents to ...\").",
    "executable": "Name the command in backquotes inside a sentence that says what it does (\"`make lint` checks formatting\"); pipes into a shell, sudo with a command, rm -rf with a path and the like are refused even so.",
    "directive": "State it as a fact about the repository, not an order to the reader: instead of \"Run the tests with python3 -m pytest -q\", write \"The tests run with `python3 -m pytest -q`\" (a command in backquotes, mentioned in a sentence, is a fact).",
    "mixed_script": "Write each word in one script.",
    "repo_specific": "Store it with scope repo, or leave out the path.",
}


#: The rules, in the order they are tried.
RULES: Final = ("secret", "injection", "executable", "directive", "mixed_script", "repo_specific")


def check_claim(text: str, scope: str) -> Rejection | None:
    """The first rule ``text`` breaks as a claim of ``scope``, or None."""
    seen = judge(text)
    if seen.hidden is not None:
        return Rejection("injection", seen.hidden)
    judged = seen.text
    for rule in (_secret, _injection, _executable, _directive):
        found = rule(judged)
        if found is not None:
            return found
    other = multilingual.check(text)
    if other is not None:
        return Rejection(other.rule, other.detail)
    if seen.mixed is not None:
        return Rejection("mixed_script", seen.mixed)
    if scope == "general":
        return _repo_specific(judged)
    return None


def check_note(text: str) -> Rejection | None:
    """The first rule an evidence or reason text breaks, or None (secret, injection, mixed_script)."""
    seen = judge(text)
    if seen.hidden is not None:
        return Rejection("injection", seen.hidden)
    found = _secret(seen.text) or _injection(seen.text) or _multilingual_injection(text)
    if found is None and seen.mixed is not None:
        return Rejection("mixed_script", seen.mixed)
    return found


def _multilingual_injection(text: str) -> Rejection | None:
    other = multilingual.check(text, injection_only=True)
    return None if other is None else Rejection(other.rule, other.detail)


# -- secret ---------------------------------------------------------------------

_KEY_NAMES: Final = (
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|"
    r"private[_-]?key|client[_-]?secret|auth[_-]?token|access[_-]?token|refresh[_-]?token|credentials?"
)
_KEY_VALUE: Final = _Rule(rf"(?i)(?<![\w-])(?:{_KEY_NAMES})(?![\w-])\s*[:=]\s*(['\"]?)([^\s'\",;]+)\1")
_KEY_IS: Final = _Rule(r"(?i)\b(?:password|passphrase|passwd)\s+(?:is|was)\s+(['\"]?)([^\s'\",;]+)\1")
_PRIVATE_KEY: Final = _Rule(r"-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----")
_BEARER: Final = _Rule(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}")
_RUN: Final = _Rule(r"[A-Za-z0-9+/=_-]{24,}")
_PLACEHOLDER: Final = _Rule(
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
_MAYBE_SECRET: Final = _Rule(
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
        _Rule(
            r"(?i)\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|all|any|your|the\s+system)\b"
            r"[^.\n]{0,24}?\b(?:instructions?|prompts?|messages|rules|directions|guidelines|guidance|guardrails|policies|orders)\b"
        ),
        "an instruction to ignore earlier instructions",
    ),
    (_Rule(r"(?i)\byou\s+are\s+now\b|\bfrom\s+now\s+on\b[^.\n]{0,30}\byou\b"), "an attempt to re-cast the reader"),
    (_Rule(r"(?i)\bnew\s+(?:system\s+)?instructions?\s*:"), "a fake instruction header"),
    (_Rule(r"(?i)</?\s*(?:system|assistant|user|human|developer|tool_call|tool|instructions?|im_start|im_end)\s*>"), "a fake role tag"),
    (_Rule(r"<\|[A-Za-z_]+\|>"), "a chat-template token"),
    (_Rule(r"\[/?INST\]|<<\s*/?SYS\s*>>"), "a chat-template token"),
    (_Rule(r"(?im)^\s*#{0,3}\s*(?:system|assistant|developer|human)\s*:"), "a fake role line"),
    (_Rule(r"(?i)\bBEGIN\s+(?:SYSTEM|ADMIN|DEVELOPER)\b"), "a fake system block"),
    (_Rule(r"(?i)\b(?:reveal|print|show|leak|output|repeat)\b[^.\n]{0,30}\bsystem\s+prompt\b"), "a request for the system prompt"),
    (
        _Rule(
            r"(?i)\bjailbreak|\bdeveloper\s+mode\s+(?:enabled|on)\b|\bdo\s+anything\s+now\b"
            r"|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|uncensored|jailbroken|evil)\b"
        ),
        "a jailbreak phrase",
    ),
)


def _injection(text: str) -> Rejection | None:
    for pattern, detail in _INJECTION:
        if pattern.search(text):
            return Rejection("injection", detail)
    return None


# -- executable -----------------------------------------------------------------

_SHELLS: Final = r"(?:sh|bash|zsh|dash|ksh|fish|python[0-9.]*|perl|ruby|node|powershell|pwsh|iex|source)"
#: Words after a command name that make it a mention in a sentence ("needs sudo to write
#: there", "stopped using rm -rf on the cache"), not a command line with its operand.
_PROSE: Final = (
    r"(?:to|for|and|or|nor|but|so|in|on|at|of|by|from|with|without|inside|during|before|after|when|if|as|than|"
    r"is|was|are|were|be|been|being|isn't|wasn't|anymore|any|again|here|there|now|only|either|too|also|"
    r"access|rights|privileges?|permissions?|mode|calls?|commands?|the|a|an|which|that|because|since|until)"
)
#: What starts a command's operand: a path, a glob, a variable, a quoted word, a bare name.
_OPERAND: Final = r"(?:[~/$*\"'{\[]|\.{1,2}(?:/|(?!\S))|[\w-])"
#: What ``sudo`` runs in a command line: a flag, a path, a variable, or a common command.
#: "the sudo wrapper was removed" mentions sudo; "sudo apt-get install x" runs something.
_SUDO_RUNS: Final = (
    r"(?:[-/~$.]|(?:apt|apt-get|aptitude|yum|dnf|zypper|pacman|apk|snap|brew|pip\d*|npm|yarn|gem|cargo|make|cmake|install|"
    r"systemctl|service|journalctl|rm|rmdir|mv|cp|chmod|chown|chgrp|ln|mkdir|touch|tee|cat|echo|dd|mkfs\S*|mount|umount|"
    r"fdisk|parted|kill|killall|pkill|reboot|shutdown|halt|poweroff|iptables|ufw|nft|useradd|userdel|usermod|groupadd|"
    r"passwd|visudo|su|bash|sh|zsh|python\d*|docker|podman|kubectl|git|tar|unzip|curl|wget|setcap|sysctl|modprobe|"
    r"ip|crontab|dpkg|rpm|chattr|nano|vim?|env|-[a-z])\b)"
)
#: An argument that marks the token before it as a command: a flag, a path, an assignment.
_ARGUMENT: Final = r"(?:-{1,2}\w|[./~$]\S|\S*=)"
#: Commands a root prompt (``# cmd``) is taken to run; any other ``# words`` line is a heading.
_ROOT_COMMANDS: Final = (
    r"(?:apt|apt-get|yum|dnf|apk|pacman|rm|chmod|chown|systemctl|service|mount|umount|dd|mkfs\S*|curl|wget|make|pip\d*|"
    r"npm|docker|kill|killall|reboot|shutdown|iptables|useradd|usermod|passwd|echo|cat|cd|ls|cp|mv|git|sudo|su|sh|bash|"
    r"python\d*|\./\S+|/\S+)"
)
_EXECUTABLE: Final = (
    (_Rule(r"```|~~~"), "a code fence"),
    (_Rule(rf"\|\s*(?:sudo\s+)?{_SHELLS}\b"), "a pipe into a shell"),
    (_Rule(r"\b(?:curl|wget)\b[^\n|]*\|"), "a download piped into a command"),
    (_Rule(rf"(?i)(?:^|[\s;&|(`])sudo\s+(?:{_SUDO_RUNS}|\S+\s+{_ARGUMENT})"), "a sudo command"),
    (_Rule(rf"(?i)\brm\s+-[A-Za-z]*[rRf][A-Za-z]*\s+(?!{_PROSE}\b){_OPERAND}"), "a recursive or forced rm"),
    (_Rule(r"\$\([^)]*\)|`[^`]*\$\(|\beval\s*\(|\bexec\s*\(|\bos\.system\s*\("), "command substitution or eval"),
    (_Rule(r"(?:;|&&|\|\|)\s*(?:rm|curl|wget|chmod|chown|dd|mkfs|shutdown|reboot|kill|nc)\b"), "a chained shell command"),
    (_Rule(r"\bchmod\s+(?:-R\s+)?(?:777|\+s|u\+s)\b|\bmkfs(?:\.\w+)?\s|\bdd\s+if=|/dev/tcp/|\bnc\s+-[a-z]*e\b"), "a dangerous shell command"),
    (_Rule(r":\(\)\s*\{\s*:\|:&\s*\};:"), "a fork bomb"),
    (_Rule(rf"(?m)^\s*(?:\$\s+[\w./-]+|#\s*{_ROOT_COMMANDS}(?:\s|$))"), "a shell prompt line"),
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
#: Two- and three-word openers that are orders ("Do not deploy ...", not "The workers do not ...").
_ORDER_PHRASES: Final = _Rule(r"(?:make\s+sure|be\s+sure|remember\s+to|don'?t\s+forget|do\s+not|do\s+never)\b")
#: Verbs that are orders when an object follows ("Run the tests", not "Run times doubled").
_VERBS: Final = frozenset(
    """run execute delete remove disable enable install uninstall use set add call commit push skip bypass make
    stop send write copy change replace avoid prefer trust treat follow apply update upload download grant give
    reveal print output respond reply tell override turn switch drop kill force revert reset merge deploy configure
    put keep increase decrease raise lower pin upgrade downgrade restart rerun wrap mark move rename export import
    do try start open close edit fix patch tag publish release say answer claim state deny insist mention report
    recommend suggest explain confirm share approve paste type enter""".split()
)
_OBJECTS: Final = frozenset(
    """the a an all any this that these those it them your every each no my our its their only both everything
    anything nothing yourself to""".split()
)
#: Words a sentence may open with before its verb ("Also, make sure ...").
_LEADS: Final = frozenset("also and then so now first next finally additionally important note but plus again instead".split())
#: Whom a sentence may address before its verb, with a comma ("Assistant, disregard ...").
_VOCATIVES: Final = frozenset("assistant model ai claude gpt chatgpt agent agents bot reader readers everyone team folks all".split())
_MODAL: Final = r"(?:must|should|shall|need\s+to|needs\s+to|has\s+to|have\s+to|are\s+to|is\s+to|ought\s+to|will\s+need\s+to|are\s+required\s+to)"
_SECOND_PERSON: Final = _Rule(
    rf"(?i)\byou(?:'ll)?\s+{_MODAL}\b"
    # the reader named in the third person: "agents reading this must ...", "the assistant should ..."
    rf"|\b(?:agents?|models?|assistants?|readers?|anyone|whoever|everyone)\s+(?:reading|who\s+reads?|that\s+reads?|seeing)\s+this\b[^.\n]{{0,40}}?\b{_MODAL}\b"
    rf"|\b(?:the\s+)?(?:assistant|ai|llm|language\s+model)\s+(?:always\s+|never\s+)?{_MODAL}\b"
)
_SENTENCES: Final = _Rule(r"[^.!?;:\n]+")
_CLAUSES: Final = _Rule(r"[^.!?;\n]+")
_BULLET: Final = _Rule(r"^\s*(?:[-*\u2022>]+|\d+[.)])\s*")

# Conditional instructions: "when asked about X, answer Y", "if anyone asks, say ...",
# "say Y if anyone asks".  An order even without "always" or "must".  The condition
# must be about the reader or about someone asking; the consequence must open with
# a bare verb (an imperative), not with a subject ("..., the CLI prints a URL").
_IF: Final = r"(?:when(?:ever)?|if|once|in\s+case|should|any\s*time|each\s+time|every\s+time)"
_PARTY: Final = (
    r"(?:any|some|every|no)\s*(?:one|body)(?:\s+else)?|(?:the|a)\s+(?:user|operator|human|reviewer|reader|customer|client|person|manager|lead)s?"
    r"|users|people|they|another\s+agent|other\s+agents"
)
_ASKS: Final = r"(?:asks?|asked|wants?|questions?|inquires?|mentions?|brings?\s+up|requests?|says?|wonders?)"
_WHO: Final = rf"(?:asked|questioned|prompted|you|(?:{_PARTY})\s+(?:\w+\s+)?{_ASKS})"
_DO: Final = (
    r"(?:answer|say|reply|respond|tell|claim|state|insist|mention|report|explain|deny|confirm|pretend|refuse|recommend|suggest|"
    r"point|direct|send|give|output|print|return|use|run|keep|act|treat|ignore|change|switch|stay|avoid|push|approve|merge|"
    r"grant|share|reveal|disable|enable|delete|remove|skip|write|add|call|trust|follow)"
)
#: After a verb, words that make it a noun ("use of the CDN", "run times").
_NOUNY: Final = r"(?:of|times?|cases?|rates?|counts?|latency|is|was|are|were|has|had|'s)"
#: Words a consequence opens with when it has a subject ("..., the CLI prints", "..., it returns").
_SUBJECTS: Final = frozenset(
    """the a an it its they them their he she his her we our i my this that these those there here each every all
    some no none both either neither one most many few any nobody nothing everything everyone someone something
    who which what""".split()
)
#: The condition, up to the comma (or "then") that opens the consequence; ``rest`` is the consequence.
_CONDITION: Final = _Rule(
    rf"(?i)^\W*(?:(?:and|but|also|so|then)\s+)?{_IF}\b[^,]{{0,120}}?\b{_WHO}\b[^,]{{0,120}}?"
    r"(?:,\s*|\s+then\s+)(?:(?:just|always|simply|please|only|then|instead)\s+)*(?P<rest>\S.*)"
)
_ORDER_VERB: Final = _Rule(rf"(?i){_DO}\b(?!\s+{_NOUNY}\b)")
_CONDITIONAL: Final = (
    _Rule(
        rf"(?i)^\W*(?:(?:and|but|also|so|then)\s+)?{_IF}\b[^,]{{0,120}}?\b{_WHO}\b[^,]{{0,120}}?"
        r",\s*the\s+(?:(?:right|correct|official|only)\s+)?answer\s+(?:is|should\s+be|must\s+be)\b"
    ),
    _Rule(
        rf"(?i)^\W*{_DO}\b(?!\s+{_NOUNY}\b)[^,]{{0,120}}?\b(?:if|when(?:ever)?|in\s+case|once)\s+"
        rf"(?:asked|you(?:'re|\s+are)\s+asked|(?:{_PARTY})\s+(?:\w+\s+)?{_ASKS})\b"
    ),
)


#: A label or header before what follows: ``IMPORTANT:``, ``Note -``, ``[system]``, ``**NB**:``,
#: ``(admin)``, ``>>>``, ``⚠️`` -- one to three words and a colon, dash or bang, or anything
#: bracketed, or a run of symbols.  It does not hide an instruction after it.
_LABEL: Final = _Rule(
    r"^\s*(?:[\[(<{【「][^\]\)>}】」\n]{0,40}[\])>}】」]|[^\w\s]+(?=\s|\w)|(?:[*_~`]*[A-Za-z][\w'.]*[*_~`]*(?:\s+[*_~`]*[A-Za-z][\w'.]*[*_~`]*){0,2})\s*(?:[:!]+|\s[-–—]+|[-–—]{2,}))\s*"
)


def _unlabel(text: str) -> str:
    """``text`` without the labels and headers in front of it (at most four)."""
    for _ in range(4):
        stripped = _LABEL.sub("", text, count=1)
        if stripped == text or not stripped.strip():
            return text
        text = stripped
    return text


def _imperative(consequence: str) -> bool:
    """Whether a conditional's consequence opens with a bare verb (an order), not a subject."""
    if _ORDER_VERB.match(consequence):
        return True
    words = consequence.split()
    first, nxt = words[0], (words[1].lower().strip("\"'(,") if len(words) > 1 else "")
    # An unlisted verb ("blame the network"): a lowercase word that is no subject and no
    # third-person or past form, with an object after it.
    return (
        first.isalpha() and first.islower() and first not in _SUBJECTS
        and not first.endswith(("s", "ed", "ing", "ly")) and nxt in _OBJECTS
    )


def _directive(text: str) -> Rejection | None:
    if _SECOND_PERSON.search(text):
        return Rejection("directive", "an instruction addressed to the reader")
    for clause in _CLAUSES.findall(text):
        clause = _unlabel(clause)
        condition = _CONDITION.search(clause)
        if (condition and _imperative(condition.group("rest"))) or any(p.search(clause) for p in _CONDITIONAL):
            return Rejection("directive", "a conditional instruction to the reader (when asked ..., answer ...)")
    for sentence in _SENTENCES.findall(text):
        words = _unlabel(_BULLET.sub("", sentence)).split()
        while len(words) > 1 and (
            words[0].lower().strip(",\"'(") in _LEADS or (words[0].endswith(",") and words[0].lower().strip(",\"'(") in _VOCATIVES)
        ):
            words = words[1:]
        if not words:
            continue
        opening = _ORDER_PHRASES.match(" ".join(words[:3]).lower())
        if opening:
            return Rejection("directive", f"a sentence that opens with an order ({opening.group(0)!r})")
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
_FILE: Final = _Rule(rf"(?i)\b[\w-]+\.(?:{_EXTENSIONS})\b")
_KNOWN_NAMES: Final = frozenset(
    {"node.js", "vue.js", "next.js", "nuxt.js", "d3.js", "three.js", "express.js", "ember.js", "backbone.js", "chart.js", "deno.js"}
)
_PATHS: Final = (
    _Rule(r"(?:^|[\s(\"'`])(?:\.{1,2}|~)?/[\w.-]+/[\w.-]+"),
    _Rule(r"(?:^|[\s(\"'`])\.{1,2}/[\w.-]+"),
    _Rule(r"\b[\w.-]+/[\w.-]+/[\w.-]+"),
    _Rule(r"(?i)\b(?:src|lib|pkg|cmd|internal|tests?|app|bin|docs|scripts|config|vendor|node_modules|crates|packages)/[\w.-]+"),
)
_SPECIAL_FILES: Final = _Rule(r"\b(?:Makefile|Dockerfile|Jenkinsfile|Procfile|Gemfile|Rakefile|Vagrantfile)\b|(?<![\w])\.(?:gitignore|dockerignore|editorconfig|env)\b")


def _repo_specific(text: str) -> Rejection | None:
    for pattern in _PATHS:
        if pattern.search(text):
            return Rejection("repo_specific", "a repository path in a general-scope claim (use scope repo)")
    if any(m.group(0).lower() not in _KNOWN_NAMES for m in _FILE.finditer(text)) or _SPECIAL_FILES.search(text):
        return Rejection("repo_specific", "a file name in a general-scope claim (use scope repo)")
    return None
