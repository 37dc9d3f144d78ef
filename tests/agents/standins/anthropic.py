"""Stand-in for the Anthropic Messages API, as Claude Code 2.1.x uses it (``POST /v1/messages``, SSE).

Point Claude Code at it with ``ANTHROPIC_BASE_URL=<url>`` (no ``/v1``) and any
``ANTHROPIC_API_KEY``.  A request that offers ``tools`` is the agent's own loop
(its sub-agents' too) and takes the next turn; anything else gets "ok".
Tool calls become ``tool_use`` blocks (``mcp__<server>__<tool>`` for MCP tools);
a turn with only text ends the agent's turn (``end_turn``).
"""

from __future__ import annotations

import json
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.standins import Standin, route, send_json, send_sse


class AnthropicStandin(Standin):
    name = "anthropic stand-in"

    def is_main(self, method: str, path: str, body: Any) -> bool:
        return method == "POST" and route(path) == "/v1/messages" and isinstance(body, dict) and bool(body.get("tools"))

    def answer(self, h: BaseHTTPRequestHandler, method: str, path: str, body: Any, turn: dict[str, Any] | None) -> None:
        where = route(path)
        if method == "POST" and where == "/v1/messages":
            self._messages(h, body if isinstance(body, dict) else {}, turn)
        elif method == "POST" and where == "/v1/messages/count_tokens":
            send_json(h, 200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
        else:
            send_json(h, 404, {"type": "error", "error": {"type": "not_found_error", "message": f"stand-in: no {method} {where}"}})

    def _messages(self, h: BaseHTTPRequestHandler, body: dict[str, Any], turn: dict[str, Any] | None) -> None:
        blocks: list[dict[str, Any]] = []
        turn = turn or {"text": "ok"}
        if turn.get("text"):
            blocks.append({"type": "text", "text": turn["text"]})
        for i, call in enumerate(turn.get("tool_calls") or []):
            blocks.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:20]}", "name": call["name"], "input": call.get("input") or {}})
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        usage = {"input_tokens": max(1, len(json.dumps(body)) // 4), "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        message = {"id": f"msg_{uuid.uuid4().hex[:16]}", "type": "message", "role": "assistant", "model": body.get("model") or "claude-standin",
                   "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            send_json(h, 200, message)
            return
        events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}})]
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}))
            else:
                events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 10}}))
        events.append(("message_stop", {"type": "message_stop"}))
        send_sse(h, events)
