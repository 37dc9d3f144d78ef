"""Reading Claude Code's and Codex's structured output (agents/streams.py), on lines the real binaries printed.

The events below were printed by Claude Code 2.1.332 and Codex CLI 0.171.0 against the
loopback stand-ins (trimmed of fields the decoders do not read); the end-to-end runs are
in tests/agents/test_real_long_runs.py.
"""

from __future__ import annotations

import json

from agents.streams import LOGIN_FIX, ClaudeStream, CodexStream

CLAUDE = [
    {"type": "system", "subtype": "init", "cwd": "/repo", "session_id": "e9a4", "model": "claude-opus-5-5", "claude_code_version": "2.1.332"},
    {"type": "assistant", "message": {"id": "msg_1", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo hi", "description": "say hi"}}],
                                      "usage": {"input_tokens": 12515, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}, "parent_tool_use_id": None},
    {"type": "user", "message": {"role": "user", "content": [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "hi", "is_error": False}]}},
    {"type": "assistant", "message": {"id": "msg_2", "content": [{"type": "text", "text": "all done\nsecond line"}],
                                      "usage": {"input_tokens": 12584, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}},
    {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "duration_ms": 493, "total_cost_usd": 0.100796, "result": "all done\nsecond line",
     "usage": {"input_tokens": 25099, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 20}},
]
CODEX = [
    {"type": "thread.started", "thread_id": "01a2"},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"id": "item_0", "type": "command_execution", "command": "/bin/bash -lc 'echo hi'", "aggregated_output": "", "exit_code": None, "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_0", "type": "command_execution", "command": "/bin/bash -lc 'echo hi'", "aggregated_output": "hi\n", "exit_code": 0, "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "all done"}},
    {"type": "turn.completed", "usage": {"input_tokens": 12931, "cached_input_tokens": 0, "cache_write_input_tokens": 0, "output_tokens": 20, "reasoning_output_tokens": 0}},
]


def feed(stream, events) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for event in events:
        out += stream.feed(json.dumps(event).encode())
    return out


def test_claude_code_stream_reads_as_text_with_its_usage_and_cost() -> None:
    stream = ClaudeStream()
    lines = feed(stream, CLAUDE)
    assert lines == [
        "claude code 2.1.332, model claude-opus-5-5, session e9a4",
        "-> Bash echo hi",
        "<- hi",
        "all done",
        "second line",
        "result (success): 2 turn(s), 0.5 s; 25,119 tokens (25,099 in, 20 out), $0.1008",
    ]
    assert (stream.usage.input_tokens, stream.usage.output_tokens, stream.usage.cost_usd) == (25099, 20, 0.100796)


def test_a_message_split_over_several_events_is_counted_once() -> None:
    """Claude Code prints one assistant event per content block, each with its message's usage."""
    stream = ClaudeStream()
    block = dict(CLAUDE[1])
    feed(stream, [block, block, block])
    assert stream.usage.tokens == 12525


def test_usage_only_goes_up_a_forged_line_cannot_lower_it() -> None:
    """Attack: a process of the agent writes a result event claiming almost nothing was spent,
    to slip under its budget.  The usage stays where the real stream put it.  Control: a
    forged *higher* figure is believed (it can only stop the agent sooner)."""
    stream = ClaudeStream()
    feed(stream, CLAUDE)
    before = stream.usage
    feed(stream, [{"type": "result", "subtype": "success", "total_cost_usd": 0.0001, "usage": {"input_tokens": 1, "output_tokens": 1}}])
    assert stream.usage == before
    feed(stream, [{"type": "result", "subtype": "success", "total_cost_usd": 9.5, "usage": {"input_tokens": 10**6, "output_tokens": 1}}])
    assert stream.usage.cost_usd == 9.5 and stream.usage.input_tokens == 10**6


def test_not_logged_in_says_what_actually_helps_under_conclave() -> None:
    """Claude Code with no key says "Please run /login", which cannot help an agent (its own
    configuration directory).  The readable stream keeps its words and adds what does help."""
    stream = ClaudeStream()
    result = {"type": "result", "subtype": "success", "is_error": True, "num_turns": 1, "duration_ms": 726, "total_cost_usd": 0,
              "usage": {"input_tokens": 0, "output_tokens": 0}, "result": "Not logged in \u00b7 Please run /login"}  # fmt: skip
    lines = stream.feed(json.dumps(result).encode())
    assert lines[1] == "error: Not logged in \u00b7 Please run /login" and lines[2] == LOGIN_FIX
    assert "ANTHROPIC_API_KEY" in LOGIN_FIX and "environment of `conclave run`" in LOGIN_FIX
    # Control: an error that is not about logging in gets no such line.
    other = stream.feed(json.dumps({**result, "result": "API Error: Connection refused"}).encode())
    assert LOGIN_FIX not in other


def test_lines_that_are_not_events_are_shown_as_they_are() -> None:
    for stream in (ClaudeStream(), CodexStream()):
        assert stream.feed(b"WARNING: proceeding, even though we could not create PATH aliases\r") == ["WARNING: proceeding, even though we could not create PATH aliases"]
        assert stream.feed(b'{"not": "an event"}') == ['{"not": "an event"}']
        assert stream.feed(b"{broken json") == ["{broken json"]


def test_codex_stream_reads_as_text_and_adds_up_each_turns_usage() -> None:
    stream = CodexStream()
    lines = feed(stream, CODEX)
    assert lines == [
        "codex thread 01a2",
        "$ /bin/bash -lc 'echo hi'  -> exit 0",
        "<- hi",
        "all done",
        "turn done: 12,951 tokens (12,931 in, 20 out); so far 12,951 tokens (12,931 in, 20 out)",
    ]
    feed(stream, [CODEX[-1]])  # a second turn (mail woke it through its Stop hook)
    assert stream.usage.tokens == 2 * 12951 and stream.usage.cost_usd is None
