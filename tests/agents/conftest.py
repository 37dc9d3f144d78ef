"""Helpers for the real-agent tests: drive MCP and hooks from inside an agent's tree."""

from __future__ import annotations

import json
import sys
import weakref
from pathlib import Path
from typing import Any, Iterable

import pytest

from agents.harness import Puppet, Run
from tests.agents import realbin

DRIVER = Path(__file__).with_name("mcp_driver.py")


#: Each puppet's MCP client (``mcp_driver.py serve``, a child of the puppet), by puppet handle.
_clients: weakref.WeakKeyDictionary[Puppet, int] = weakref.WeakKeyDictionary()


def _tell(puppet: Puppet, command: dict[str, Any], timeout: float) -> dict[str, Any]:
    puppet.send_nowait(command)
    reply = puppet.receive(timeout + 10)
    if not reply["ok"]:
        _clients.pop(puppet, None)  # the puppet killed it: the next probe starts another
        raise AssertionError(f"the MCP client in {puppet.key}'s tree failed: {reply['error']['message']}")
    return reply


def probe(puppet: Puppet, calls: Iterable[tuple[str, dict[str, Any]]] = (), *, server_args: Iterable[str] = (), fresh: bool = False) -> dict[str, Any]:
    """Have ``puppet`` ask ``conclave mcp`` over the MCP SDK's stdio client to make ``calls``.

    The client runs in the puppet's tree, one per puppet for its whole life, and keeps one
    server, as an agent keeps its MCP server; ``fresh`` (or ``server_args``) starts a server
    for this probe alone, which has exited when this returns."""
    plan = {"calls": [list(c) for c in calls], "server_args": list(server_args), "fresh": fresh}
    if puppet not in _clients:
        _clients[puppet] = _tell(puppet, {"open": [sys.executable, str(DRIVER), "serve"]}, 10)["handle"]
    return json.loads(_tell(puppet, {"ask": _clients[puppet], "line": json.dumps(plan), "timeout": 120}, 120)["line"])


def close_probes(*puppets: Puppet) -> None:
    """Stop the MCP clients (and their servers) of ``puppets``."""
    for puppet in puppets:
        handle = _clients.pop(puppet, None)
        if handle is not None:
            closed = _tell(puppet, {"close": handle}, 40)
            assert closed["returncode"] == 0, f"the MCP client in {puppet.key}'s tree exited {closed['returncode']}: {closed['stderr']}"


def available_ops(run: Run) -> dict[str, list[str]]:
    """op -> argument names, from the running broker's own ``ops`` listing."""
    return {row["op"]: row["args"] for row in run.op("ops")}


def require(run: Run, *ops: str) -> None:
    """Skip, naming the missing ops, unless the broker serves every one of ``ops``."""
    missing = [op for op in ops if op not in available_ops(run)]
    if missing:
        pytest.skip(f"needs op(s) {', '.join(missing)}, which this broker's `ops` listing does not have yet")


def hook(puppet: Puppet, event: Any, kind: str = "pre-tool-use") -> Any:
    """Run hook ``kind`` as ``puppet``, exactly as the preset's settings run it (``sh -c`` the command line)."""
    from agents.hooks import command

    stdin = event if isinstance(event, str) else json.dumps(event)
    return puppet.sh("/bin/sh", "-c", command(kind), stdin=stdin, timeout=60)


def cli_hook(puppet: Puppet, event: Any, *extra: str) -> Any:
    """Run ``conclave hook pre-tool-use`` (the CLI alias of the same hook) as ``puppet``."""
    stdin = event if isinstance(event, str) else json.dumps(event)
    return puppet.sh(sys.executable, "-m", "broker.cli", "hook", "pre-tool-use", *extra, stdin=stdin, timeout=60)


def denial(done: Any) -> str | None:
    """The reason of a hook's JSON deny, or None when it printed nothing (the call goes ahead).

    Fails on anything an agent would *not* read as one of those two (it would fail open)."""
    assert done.returncode == 0, f"a hook must exit 0 (anything else fails open): {done.returncode} {done.stderr}"
    if not done.stdout.strip():
        return None
    answer = json.loads(done.stdout)
    out = answer["hookSpecificOutput"]
    assert (out["hookEventName"], out["permissionDecision"]) == ("PreToolUse", "deny"), answer
    return out["permissionDecisionReason"]


def edit_event(repo: Path, path: str, tool: str = "Edit") -> dict[str, Any]:
    """The JSON Claude Code sends a PreToolUse hook before an edit (documented input format)."""
    field = "notebook_path" if tool == "NotebookEdit" else "file_path"
    target = path if path.startswith("/") else f"{repo}/{path}"
    return {
        "session_id": "abc123",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": str(repo),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {field: target, "old_string": "x", "new_string": "y"},
        "tool_use_id": "toolu_01ABC123",
    }


def result_of(call: dict[str, Any]) -> Any:
    """The broker's reply as the model reads it: the tool's text (JSON after any reference header)."""
    assert not call["is_error"], call["text"]
    assert call["structured"] is None, "conclave mcp returns text only"
    text = call["text"]
    if text.startswith("Reference material"):
        text = text.split("\n\n", 1)[1]
    return json.loads(text)


def error_of(call: dict[str, Any]) -> dict[str, str]:
    """``{"code", "message"}`` out of a refusal's text (``refused [code]: message``)."""
    import re

    assert call["is_error"], f"expected a refusal, got {call['text']}"
    assert call["structured"] is None, "conclave mcp returns text only"
    match = re.match(r"refused \[([a-z_]+)\]: (.*)", call["text"], re.S)
    assert match, call["text"]
    return {"code": match.group(1), "message": match.group(2)}


def model_view(call: dict[str, Any]) -> str:
    """What Claude Code and Codex hand the model for a tool result: the structuredContent as JSON
    when there is one (the text is then dropped), else the text."""
    if call["structured"] is not None:
        return json.dumps(call["structured"])
    return call["text"]


@pytest.fixture(scope="module")
def binaries() -> realbin.Binaries:
    """The pinned Claude Code and Codex CLI binaries (fetched into the cache when missing)."""
    try:
        return realbin.ensure()
    except realbin.AgentBinariesError as exc:
        pytest.fail(f"the real-agent tests need Claude Code and Codex CLI: {exc}", pytrace=False)
