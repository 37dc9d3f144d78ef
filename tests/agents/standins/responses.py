"""Stand-in for the OpenAI Responses API, as Codex CLI 0.17x uses it (``POST /v1/responses``, SSE).

Point Codex at it with a model provider whose ``base_url`` is ``<url>/v1``
and ``wire_api = "responses"`` (see :func:`codex_overrides`).  Every request
with ``input`` takes the next turn.  Codex acts only on
``response.output_item.done`` items and needs ``response.completed`` at the end.
A tool call is a ``function_call`` (an MCP tool: ``"namespace": "mcp__<server>"``;
the shell: ``exec_command`` with ``{"cmd": ...}``) or, with ``"custom": true``,
a ``custom_tool_call`` whose input is raw text (``apply_patch``).
"""

from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.agents.standins import Standin, route, send_json, send_sse

#: A model catalog with one model, "gpt-standin": classic tools, apply_patch as a freeform
#: tool, MCP tools offered up front (no tool search), no code mode.
CATALOG = Path(__file__).with_name("codex-catalog.json")
MODEL = "gpt-standin"


def codex_overrides(url: str, key_env: str = "STANDIN_API_KEY") -> list[str]:
    """``-c`` overrides that point Codex at a stand-in (a team file puts them in ``command``)."""
    provider = f'{{name = "standin", base_url = "{url}/v1", wire_api = "responses", env_key = "{key_env}"}}'
    pairs = [f'model = "{MODEL}"', 'model_provider = "standin"', f"model_providers.standin = {provider}", f'model_catalog_json = "{CATALOG}"']
    return [a for pair in pairs for a in ("-c", pair.replace(" = ", "=", 1))]


class ResponsesStandin(Standin):
    name = "responses stand-in"

    def is_main(self, method: str, path: str, body: Any) -> bool:
        return method == "POST" and route(path).endswith("/responses") and isinstance(body, dict) and "input" in body

    def answer(self, h: BaseHTTPRequestHandler, method: str, path: str, body: Any, turn: dict[str, Any] | None) -> None:
        if method == "POST" and route(path).endswith("/responses"):
            self._responses(h, body if isinstance(body, dict) else {}, turn)
        else:
            send_json(h, 404, {"error": {"message": f"stand-in: no {method} {route(path)}", "type": "invalid_request_error"}})

    def _responses(self, h: BaseHTTPRequestHandler, body: dict[str, Any], turn: dict[str, Any] | None) -> None:
        turn = turn or {"text": "ok"}
        items: list[dict[str, Any]] = []
        if turn.get("text"):
            items.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": turn["text"], "annotations": []}]})
        for call in turn.get("tool_calls") or []:
            call_id = call.get("id") or f"call_{uuid.uuid4().hex[:12]}"
            if call.get("custom"):
                items.append({"type": "custom_tool_call", "id": f"ctc_{uuid.uuid4().hex[:12]}", "call_id": call_id, "name": call["name"],
                              "input": call["input"], "status": "completed"})
                continue
            item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}", "call_id": call_id, "name": call["name"],
                    "arguments": json.dumps(call.get("input") or {}), "status": "completed"}
            if call.get("namespace"):
                item["namespace"] = call["namespace"]
            items.append(item)
        size = max(1, len(json.dumps(body)) // 4)
        usage = {"input_tokens": size, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": size + 10}
        response = {"id": f"resp_{uuid.uuid4().hex[:16]}", "object": "response", "created_at": int(time.time()), "model": body.get("model") or MODEL}
        events: list[tuple[str, Any]] = [("response.created", {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}})]
        for i, item in enumerate(items):
            events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i, "item": item}))
        events.append(("response.completed", {"type": "response.completed", "response": {**response, "status": "completed", "output": items, "usage": usage}}))
        send_sse(h, events)
