"""Every string an op accepts is text: valid Unicode, no NUL, no control
character but newline and tab.  Refused at the edge, by field, on every op,
before any handler (or the store, or the lock journal) sees it."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from agents.harness import Run
from broker import wire
from broker.errors import ConclaveError, ErrorCode

SLOT = '\n[[slot]]\nname = "llm-api"\ncapacity = 2\n'

# The three hostile characters, and how the refusal must name each (an escape, never the raw character).
HOSTILE = {"\x00": "U+0000", "\x1b": "U+001B", "\ud800": "U+D800"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    run = Run(tmp_path_factory.mktemp("text"), [{"name": "alice"}, {"name": "bob"}], extra_toml=SLOT)
    try:
        yield run.start()
    finally:
        run.close()


@pytest.fixture(scope="module")
def claim(run: Run) -> dict[str, Any]:
    return run.puppet("alice").call("memory.remember", kind="discovery", text="The ingest queue holds 512 batches at most.")


def ops_with_text(claim_id: int) -> list[tuple[str, str, dict[str, Any], str]]:
    """(op, field, good args, path in the message): the field is where the hostile character goes."""
    return [
        ("lock.acquire", "resources", {"resources": ["name://release-notes"]}, "args.resources[0]"),
        ("lock.acquire", "resources", {"resources": ["src/app.py"]}, "args.resources[0]"),
        ("lock.release", "resources", {"resources": ["name://never-held"]}, "args.resources[0]"),
        ("slot.acquire", "name", {"name": "llm-api"}, "args.name"),
        ("memory.remember", "text", {"kind": "discovery", "text": "The cache warms in 30 s."}, "args.text"),
        ("memory.remember", "evidence", {"kind": "discovery", "text": "The cache warms in 31 s.", "evidence": "timed it"}, "args.evidence"),
        ("memory.remember", "kind", {"kind": "discovery", "text": "The cache warms in 32 s."}, "args.kind"),
        ("memory.corroborate", "evidence", {"id": claim_id, "evidence": "saw it"}, "args.evidence"),
        ("memory.dispute", "reason", {"id": claim_id, "reason": "it holds 256"}, "args.reason"),
        ("memory.recall", "query", {"query": "ingest queue"}, "args.query"),
        ("memory.context", "query", {"query": "ingest queue"}, "args.query"),
        ("msg.send", "body", {"to": "bob", "body": "hello"}, "args.body"),
        ("msg.send", "to", {"to": "bob", "body": "hello"}, "args.to"),
        ("msg.send", "subject", {"to": "bob", "body": "hello", "subject": "hi"}, "args.subject"),
        ("msg.search", "query", {"query": "hello"}, "args.query"),
        ("msg.thread", "thread", {"thread": "t1"}, "args.thread"),
        ("status.set", "text", {"text": "writing tests"}, "args.text"),
    ]


def poisoned(args: dict[str, Any], field: str, char: str) -> dict[str, Any]:
    value = args[field]
    if isinstance(value, list):
        return {**args, field: [f"{value[0]}{char}x"]}
    return {**args, field: f"{value[:3]}{char}{value[3:]}"}


def test_nul_escape_and_lone_surrogates_are_refused_on_every_op_naming_field_and_character(run: Run, claim: dict[str, Any]) -> None:
    """Attack: NUL, ESC and a lone surrogate in each text field of each op.  Each
    is refused with invalid_args naming the field and the character as an escape;
    the raw character never comes back.  Control: the same op with clean text works."""
    alice = run.puppet("alice")
    for op, field, args, path in ops_with_text(claim["id"]):
        for char, code in HOSTILE.items():
            reply = alice.try_call(op, **poisoned(args, field, char))
            assert reply["ok"] is False, (op, field, char, reply)
            error = reply["error"]
            assert error["code"] == "invalid_args", (op, field, char, error)
            assert path in error["message"] and code in error["message"], (op, field, char, error)
            assert char not in error["message"]
    # Controls: the same ops with clean text are served (released/acked so the next test starts clean).
    for op, field, args, _ in ops_with_text(claim["id"]):
        if op == "msg.thread":
            args = {"thread": alice.call("msg.send", to="bob", body="a thread")["thread"]}
        reply = alice.try_call(op, **args)
        assert reply["ok"] or reply["error"]["code"] in ("not_found",), (op, reply)  # releasing a lock never held: not_found
    alice.call("lock.release", resources=["name://release-notes", "src/app.py"])
    alice.call("slot.release", name="llm-api")


def test_newline_and_tab_are_text(run: Run, claim: dict[str, Any]) -> None:
    """Control for the rule: newline and tab are the two control characters text may hold."""
    alice, bob = run.puppet("alice"), run.puppet("bob")
    remembered = alice.call("memory.remember", kind="discovery", text="The queue:\n\tholds 512 batches\n\tflushes every 2 s.")
    assert remembered["text"] == "The queue:\n\tholds 512 batches\n\tflushes every 2 s."
    disputed = bob.call("memory.dispute", id=claim["id"], reason="measured:\n\t256 batches")
    assert disputed["disputes"][-1]["reason"] == "measured:\n\t256 batches"
    assert alice.call("msg.send", to="bob", body="line one\n\tline two")["body"] == "line one\n\tline two"
    # ... but a subject or status is one line: there, newline and tab are refused by mail's own rule.
    for op, args in (("msg.send", {"to": "bob", "body": "x", "subject": "a\tb"}), ("status.set", {"text": "a\nb"})):
        reply = alice.try_call(op, **args)
        assert reply["error"]["code"] == "invalid_args" and "one line" in reply["error"]["message"], reply


def test_a_lone_surrogate_lock_name_is_refused_and_no_one_elses_history_is_lost(run: Run) -> None:
    """The attack of the issue: a lock named with a lone surrogate was granted,
    and its event then broke the lock journal's batch -- every other agent's
    events in it were dropped.  Now it is refused at the edge; bob's grant,
    made right after, is in the lock history."""
    alice, bob = run.puppet("alice"), run.puppet("bob")
    for name in ("name://x\ud800", "slot://\udfff", "src/\ud83d.py", "name://a\x00b"):
        with pytest.raises(ConclaveError) as refused:
            alice.call("lock.acquire", resources=[name])
        assert refused.value.code is ErrorCode.INVALID_ARGS
    granted = bob.call("lock.acquire", resources=["name://after-the-attack"])
    assert granted["grants"][0]["resource"] == "name://after-the-attack"
    bob.call("lock.release", resources=["name://after-the-attack"])
    history = run.op("lock.log")
    mine = [e for e in history if e["subject"] == "name://after-the-attack"]
    assert [e["kind"] for e in mine] == ["lock.grant", "lock.release"], mine
    assert not any("\ud800" in (e["subject"] or "") for e in history)
    # Control: a name with a real astral character (a valid pair) is text and is granted.
    assert alice.call("lock.acquire", resources=["name://rocket-\U0001f680"])["grants"][0]["resource"] == "name://rocket-\U0001f680"
    alice.call("lock.release", resources=["name://rocket-\U0001f680"])


def test_the_definition_itself() -> None:
    """One definition (broker.wire.text_problem): what it refuses and what it lets through."""
    for bad in ("\x00", "a\x07", "\x1b[2J", "\x7f", "\x85", "\x9b", "\ud800", "x\udfffy", "\r"):
        assert wire.text_problem(bad) is not None, repr(bad)
    for good in ("", "plain", "tab\there", "new\nline", "é ñ 中文", "\U0001f600", "\u200b", "\u202e"):
        assert wire.text_problem(good) is None, repr(good)
    assert wire.text_problem("a\nb", one_line=True) is not None
    assert wire.text_problem("a\u2028b", one_line=True) is not None
    assert wire.text_problem("one line", one_line=True) is None
    message = wire.text_problem("ab\x1bc")
    assert message is not None and "\\x1b" in message and "U+001B" in message and "offset 2" in message and "\x1b" not in message
