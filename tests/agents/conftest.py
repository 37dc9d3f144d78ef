"""Helpers for the real-agent tests: drive MCP and hooks from inside an agent's tree."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterable

import pytest

from agents.harness import Puppet, Run

DRIVER = Path(__file__).with_name("mcp_driver.py")


def probe(puppet: Puppet, calls: Iterable[tuple[str, dict[str, Any]]] = (), *, server_args: Iterable[str] = ()) -> dict[str, Any]:
    """Have ``puppet`` start ``conclave mcp`` with the MCP SDK client and make ``calls``."""
    plan = {"calls": [list(c) for c in calls], "server_args": list(server_args)}
    done = puppet.sh(sys.executable, str(DRIVER), "probe", json.dumps(plan), timeout=120)
    assert done.returncode == 0, f"probe failed ({done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout)


def available_ops(run: Run) -> dict[str, list[str]]:
    """op -> argument names, from the running broker's own ``ops`` listing."""
    return {row["op"]: row["args"] for row in run.op("ops")}


def require(run: Run, *ops: str) -> None:
    """Skip, naming the missing ops, unless the broker serves every one of ``ops``."""
    missing = [op for op in ops if op not in available_ops(run)]
    if missing:
        pytest.skip(f"needs op(s) {', '.join(missing)}, which this broker's `ops` listing does not have yet")


def hook(puppet: Puppet, event: Any, *extra: str) -> Any:
    """Run ``conclave hook pre-tool-use`` as ``puppet`` with ``event`` on stdin."""
    stdin = event if isinstance(event, str) else json.dumps(event)
    return puppet.sh(sys.executable, "-m", "broker.cli", "hook", "pre-tool-use", *extra, stdin=stdin, timeout=60)


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
    assert not call["is_error"], call["text"]
    return call["structured"]["result"]


def error_of(call: dict[str, Any]) -> dict[str, str]:
    assert call["is_error"], f"expected a refusal, got {call['text']}"
    return call["structured"]["error"]
