"""Scripted stand-ins for the model APIs real coding agents call, on 127.0.0.1.

A stand-in plays a fixed script of assistant turns (tool calls, then text) to a
real Claude Code or Codex CLI binary, records every request it receives, and
stops answering when the test closes it.  Nothing leaves the machine.

    server = AnthropicStandin(turns).start()     # or ResponsesStandin(turns)
    ... point the agent at server.url ...
    server.wait_for_turn(3)                      # the agent asked for turn 3
    server.open("seeded")                        # release a turn that waits on a gate
    server.main[0]["body"]                       # the first request that took a turn

A turn is a dict: ``{"text": "..."}`` and/or ``{"tool_calls": [{"name", "input"}]}``,
optionally ``"gate": NAME`` (answer only once the test opened that gate).
A request that is not the agent's own loop (Anthropic: no ``tools``) gets a
one-word filler and takes no turn; a request after the last turn gets the
filler too, and is recorded as ``extra``.

Our own code (derived from the research prototype in the project notes).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

GATE_TIMEOUT = 120.0


class Standin:
    """The protocol-independent part: script, gates, recording, the HTTP server."""

    name = "standin"

    def __init__(self, turns: list[dict[str, Any]], *, record: Path | None = None) -> None:
        self.turns = turns
        self.requests: list[dict[str, Any]] = []
        self._next = 0
        self._lock = threading.Condition()
        self._gates: dict[str, threading.Event] = {}
        self._record = record
        self._server: ThreadingHTTPServer | None = None

    # -- the test's side -------------------------------------------------------------------

    def start(self) -> "Standin":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                standin._dispatch(self, "POST")

            def do_GET(self) -> None:  # noqa: N802
                standin._dispatch(self, "GET")

            def do_HEAD(self) -> None:  # noqa: N802
                standin._dispatch(self, "HEAD")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def main(self) -> list[dict[str, Any]]:
        """The requests that took a scripted turn, in order."""
        return [r for r in self.requests if r["kind"] == "main"]

    @property
    def played(self) -> int:
        return self._next

    def open(self, gate: str) -> None:
        self._gate(gate).set()

    def wait_for_turn(self, index: int, timeout: float = 120, check: Callable[[], None] | None = None) -> dict[str, Any]:
        """Block until the agent has asked for turn ``index`` (0-based); return that request.

        ``check()`` runs every half second and may raise to stop waiting early
        (say, because the agent already exited).
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._next > index:
                    return self.main[index]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: the agent asked for {self._next} of {len(self.turns)} turns, not turn {index}")
                self._lock.wait(min(left, 0.5))
            if check is not None:
                check()

    def close(self) -> None:
        for gate in list(self._gates.values()):
            gate.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "Standin":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the agent's side ----------------------------------------------------------------

    def _gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def _take(self, main: bool) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            if not main or self._next >= len(self.turns):
                return None
            index = self._next
            self._next += 1
            self._lock.notify_all()
            return index, self.turns[index]

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        text = raw.decode("utf-8", "replace")
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = text
        main = self.is_main(method, h.path, body)
        turn = self._take(main)
        record = {
            "t": time.time(),
            "method": method,
            "path": h.path,
            "headers": {k.lower(): v for k, v in h.headers.items() if k.lower() not in ("authorization", "x-api-key")},
            "kind": "main" if turn else ("extra" if main else "other"),
            "turn": turn[0] if turn else None,
            "body": body,
        }
        with self._lock:
            self.requests.append(record)
        if self._record is not None:
            with open(self._record, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        if turn and turn[1].get("gate"):
            self._gate(turn[1]["gate"]).wait(GATE_TIMEOUT)
        try:
            if method == "HEAD":
                h.send_response(200)
                h.send_header("Content-Length", "0")
                h.end_headers()
            else:
                self.answer(h, method, h.path, body, turn[1] if turn else None)
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- per protocol ----------------------------------------------------------------------

    def is_main(self, method: str, path: str, body: Any) -> bool:
        raise NotImplementedError

    def answer(self, h: BaseHTTPRequestHandler, method: str, path: str, body: Any, turn: dict[str, Any] | None) -> None:
        raise NotImplementedError


def send_json(h: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def send_sse(h: BaseHTTPRequestHandler, events: list[tuple[str, Any]]) -> None:
    """A whole SSE stream (``event:`` + ``data:`` per event), then close the connection."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream; charset=utf-8")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("Connection", "close")
    h.end_headers()
    for name, data in events:
        h.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
    h.wfile.flush()
    h.close_connection = True


def route(path: str) -> str:
    return path.split("?", 1)[0].rstrip("/")


from tests.agents.standins.anthropic import AnthropicStandin  # noqa: E402
from tests.agents.standins.responses import CATALOG, ResponsesStandin  # noqa: E402

__all__ = ["CATALOG", "AnthropicStandin", "ResponsesStandin", "Standin"]
