"""Reading the structured output of Claude Code and Codex: readable lines, and usage.

The presets run Claude Code with ``--output-format stream-json --verbose``
and Codex with ``exec --json``: one JSON event per line on stdout, which
carries what the binary used (tokens, and for Claude Code the cost).  The
broker hands each line to the agent's decoder (``broker.spec.OutputDecoder``),
which answers with what a person should read in the log and the run view
instead of the JSON, and keeps the usage up to date:

* Claude Code: every ``assistant`` event carries its message's usage (one
  message may come as several events; they are counted once, by message
  id), the ``result`` event the totals and ``total_cost_usd``.
  Input tokens are ``input_tokens`` + ``cache_creation_input_tokens`` +
  ``cache_read_input_tokens`` (the last of them "cached").
* Codex: every ``turn.completed`` event carries that turn's usage
  (``input_tokens``, of them ``cached_input_tokens``, and ``output_tokens``);
  Codex reports no cost.

Checked against Claude Code 2.1.332 and Codex CLI 0.171.0
(tests/agents/test_real_agents.py reads both through the presets).  A line
that is not an event (a warning a binary printed, a line of a newer format)
is shown as it is.  Usage only ever goes up: a line forged into the stream
by the agent's own processes can raise it, never lower it.
"""

from __future__ import annotations

import json
from typing import Any, Final, final

from broker.limits import Usage

#: Characters of a tool's input or result shown in the readable line.
SHOWN: Final = 200
#: What Claude Code says when it has no key, and what actually helps under conclave.
LOGIN_ADVICE: Final = "Please run /login"
LOGIN_FIX: Final = (
    "[conclave: /login at your own terminal does not reach an agent: each agent has its own configuration "
    "directory. Put ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`) in the environment "
    "of `conclave run`; see docs/AGENTS.md, Credentials]"
)


def _short(value: Any, limit: int = SHOWN) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _event(line: bytes) -> dict[str, Any] | None:
    text = line.strip()
    if not text.startswith(b"{"):
        return None
    try:
        event = json.loads(text)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("type"), str) else None


def _plain(line: bytes) -> list[str]:
    return [line.rstrip(b"\r").decode("utf-8", errors="replace")]


@final
class ClaudeStream:
    """Claude Code's ``stream-json`` (one agent process)."""

    def __init__(self) -> None:
        self.usage = Usage()
        self._messages: dict[str, Usage] = {}
        self._reported = Usage()

    def feed(self, line: bytes) -> list[str]:
        event = _event(line)
        if event is None:
            return _plain(line)
        kind = event["type"]
        if kind == "system":
            return self._system(event)
        if kind == "assistant":
            return self._assistant(event)
        if kind == "user":
            return self._user(event)
        if kind == "result":
            return self._result(event)
        return []  # stream events Claude Code adds (rate limits, keep-alives) say nothing to a person

    def _system(self, event: dict[str, Any]) -> list[str]:
        if event.get("subtype") == "init":
            return [f"claude code {event.get('claude_code_version', '?')}, model {event.get('model', '?')}, session {event.get('session_id', '?')}"]
        return []

    def _assistant(self, event: dict[str, Any]) -> list[str]:
        message = event.get("message")
        if not isinstance(message, dict):
            return []
        usage = message.get("usage")
        if isinstance(usage, dict):
            key = str(message.get("id") or len(self._messages))
            counted = _claude_usage(usage, None)
            self._messages[key] = self._messages.get(key, Usage()).at_least(counted)
            self._update()
        lines: list[str] = []
        side = "(sub-agent) " if event.get("parent_tool_use_id") else ""
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                for text in block["text"].splitlines() or [""]:
                    lines.append(side + text)
                if LOGIN_ADVICE in block["text"]:
                    lines.append(LOGIN_FIX)
            elif block.get("type") == "tool_use":
                lines.append(f"{side}-> {block.get('name', '?')} {_tool_input(block.get('input'))}")
        return lines

    def _user(self, event: dict[str, Any]) -> list[str]:
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        lines = []
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                body = block.get("content")
                if isinstance(body, list):
                    body = " ".join(str(b.get("text", "")) for b in body if isinstance(b, dict))
                mark = "<- error: " if block.get("is_error") else "<- "
                lines.append(mark + _short(body if body is not None else ""))
        return lines

    def _result(self, event: dict[str, Any]) -> list[str]:
        usage = event.get("usage")
        cost = event.get("total_cost_usd")
        cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0 else None
        if isinstance(usage, dict) or cost is not None:
            self._reported = self._reported.at_least(_claude_usage(usage if isinstance(usage, dict) else {}, cost))
            self._update()
        status = "error" if event.get("is_error") else event.get("subtype", "done")
        turns = event.get("num_turns")
        seconds = event.get("duration_ms")
        parts = [f"{turns} turn(s)" if isinstance(turns, int) else None, f"{seconds / 1000:.1f} s" if isinstance(seconds, (int, float)) else None]
        lines = [f"result ({status}): " + ", ".join(p for p in parts if p) + f"; {self.usage.describe()}"]
        result = event.get("result")
        if event.get("is_error") and isinstance(result, str):
            lines.append(f"error: {_short(result, 1000)}")
            if LOGIN_ADVICE in result:
                lines.append(LOGIN_FIX)
        return lines

    def _update(self) -> None:
        summed = Usage()
        for u in self._messages.values():
            summed = summed + Usage(u.input_tokens, u.cached_input_tokens, u.output_tokens)
        self.usage = self.usage.at_least(summed).at_least(self._reported)


def _claude_usage(usage: dict[str, Any], cost: float | None) -> Usage:
    cached = _int(usage.get("cache_read_input_tokens"))
    total_in = _int(usage.get("input_tokens")) + _int(usage.get("cache_creation_input_tokens")) + cached
    return Usage(total_in, cached, _int(usage.get("output_tokens")), cost)


def _tool_input(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("command", "file_path", "notebook_path", "pattern", "url", "description"):
            if isinstance(value.get(key), str):
                return _short(value[key])
    return _short(value if value is not None else {})


@final
class CodexStream:
    """Codex's ``exec --json`` (one agent process)."""

    def __init__(self) -> None:
        self.usage = Usage()

    def feed(self, line: bytes) -> list[str]:
        event = _event(line)
        if event is None:
            return _plain(line)
        kind = event["type"]
        if kind == "thread.started":
            return [f"codex thread {event.get('thread_id', '?')}"]
        if kind == "turn.completed":
            usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
            turn = Usage(_int(usage.get("input_tokens")), _int(usage.get("cached_input_tokens")), _int(usage.get("output_tokens")))
            self.usage = self.usage + turn
            return [f"turn done: {turn.describe()}; so far {self.usage.describe()}"]
        if kind == "turn.failed":
            error = event.get("error")
            return [f"turn failed: {_short(error.get('message') if isinstance(error, dict) else error, 1000)}"]
        if kind == "error":
            return [f"error: {_short(event.get('message'), 1000)}"]
        if kind == "item.completed" and isinstance(event.get("item"), dict):
            return _codex_item(event["item"])
        return []  # turn.started, item.started, item.updated: the completed item says it all


def _codex_item(item: dict[str, Any]) -> list[str]:
    kind = item.get("type")
    if kind == "agent_message":
        return str(item.get("text", "")).splitlines() or [""]
    if kind == "reasoning":
        return [f"(thinking) {_short(item.get('text', ''))}"]
    if kind == "command_execution":
        code = item.get("exit_code")
        lines = [f"$ {_short(item.get('command', ''))}  -> exit {code if code is not None else '?'}"]
        output = str(item.get("aggregated_output") or "")
        if output.strip():
            lines.append("<- " + _short(output))
        return lines
    if kind == "file_change":
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        paths = ", ".join(f"{c.get('kind', '?')} {c.get('path', '?')}" for c in changes if isinstance(c, dict))
        return [f"files changed ({item.get('status', '?')}): {paths}"]
    if kind == "mcp_tool_call":
        lines = [f"-> {item.get('server', '?')}.{item.get('tool', '?')} {_short(item.get('arguments', {}))}"]
        error = item.get("error")
        if error:
            lines.append("<- error: " + _short(error.get("message") if isinstance(error, dict) else error))
        elif item.get("result") is not None:
            lines.append("<- " + _short(item["result"]))
        return lines
    if kind == "web_search":
        return [f"web search: {_short(item.get('query', ''))}"]
    if kind == "error":
        return [f"error: {_short(item.get('message'), 1000)}"]
    if kind == "todo_list":
        items = item.get("items") if isinstance(item.get("items"), list) else []
        return ["plan: " + "; ".join(("[x] " if i.get("completed") else "[ ] ") + str(i.get("text", "")) for i in items if isinstance(i, dict))]
    return [f"({kind}) {_short(item)}"]
