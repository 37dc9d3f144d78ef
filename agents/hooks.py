"""The Claude Code PreToolUse hook: no Edit or Write without the lock.

Claude Code runs ``conclave hook pre-tool-use`` before each file-editing
tool call and sends it one JSON object on stdin (the documented hook input)::

    {"session_id": "...", "transcript_path": "...", "cwd": "/repo",
     "hook_event_name": "PreToolUse", "tool_name": "Edit",
     "tool_input": {"file_path": "/repo/src/parser.py", ...}}

The hook asks the broker -- as the agent whose process tree it runs in --
whether that agent holds an exclusive lock covering the path.  If not, it
exits with code 2 and the reason on stderr, which Claude Code documents as
"block the tool call and show stderr to Claude".  Any failure to decide
(no identity, no broker, a malformed event) also blocks: an enforcement hook
that fails open enforces nothing.  Writes through the shell are not seen
here; the git pre-commit guard covers those.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Final, final

import attrs

#: Claude Code's file-editing tools and the input field that names the file.
EDIT_TOOLS: Final = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}
MATCHER: Final = "|".join(EDIT_TOOLS)
GIT_RESOURCE: Final = "git"
EXIT_BLOCK: Final = 2


@final
@attrs.frozen
class Verdict:
    """Whether one tool call may go ahead, and if not, a reason the model can act on."""

    allow: bool
    reason: str = ""
    path: str | None = None


Ask = Callable[[str, dict[str, Any]], Any]


def concerns_edits(event: Any) -> bool:
    """Whether deciding ``event`` needs the broker (an edit, or something malformed to refuse)."""
    if not isinstance(event, dict) or not isinstance(event.get("tool_name"), str):
        return True
    return event["tool_name"] in EDIT_TOOLS and event.get("hook_event_name", "PreToolUse") == "PreToolUse"


def pre_tool_use(event: Any, *, repo: Path, state: Path, agent: str, ask: Ask) -> Verdict:
    """Decide one PreToolUse event.

    ``ask(op, args)`` sends an op to the broker as this agent and raises
    ``ConclaveError`` on a refusal.
    """
    from broker.errors import ConclaveError

    if not isinstance(event, dict) or not isinstance(event.get("tool_name"), str):
        return Verdict(False, "conclave: the PreToolUse event is not a JSON object with a tool_name; refusing to guess")
    if not concerns_edits(event):
        return Verdict(True)
    tool = event["tool_name"]
    field = EDIT_TOOLS[tool]
    tool_input = event.get("tool_input")
    raw = tool_input.get(field) if isinstance(tool_input, dict) else None
    if not isinstance(raw, str) or not raw:
        return Verdict(False, f"conclave: {tool} names no {field}; cannot check its lock")
    where = _locate(raw, event.get("cwd"), repo, state)
    if where is not None and not isinstance(where, str):
        return where
    if where is None:
        return Verdict(True, path=raw)  # outside the repository: no lock covers it, none is needed
    try:
        report = ask("lock.check_commit", {"paths": [where]})
    except ConclaveError as exc:
        return Verdict(
            False,
            f"conclave could not check the lock on {where}: {exc.message} [{exc.code.value}]; "
            "edits stay blocked until it can",
            where,
        )
    # An edit needs no git lock; a repository file that happens to be named `git` still does.
    missing = [m for m in report.get("missing", []) if not (m.get("kind") == "named" and m.get("resource") == GIT_RESOURCE)]
    if not missing:
        return Verdict(True, path=where)
    return Verdict(False, _reason(agent, tool, where, missing[0]), where)


def _locate(raw: str, cwd: Any, repo: Path, state: Path) -> str | Verdict | None:
    """The repository-relative path, None when outside the repository, or a refusal."""
    path = Path(raw)
    if not path.is_absolute():
        path = Path(cwd if isinstance(cwd, str) and cwd else os.getcwd()) / path
    real = Path(os.path.realpath(path))
    if real.is_relative_to(os.path.realpath(state)):
        return Verdict(False, f"conclave: {raw} is in conclave's state directory, which agents never write", raw)
    root = Path(os.path.realpath(repo))
    if not real.is_relative_to(root):
        return None
    rel = real.relative_to(root).as_posix()
    if rel == ".git" or rel.startswith(".git/"):
        return Verdict(
            False,
            f"conclave: {rel} is inside .git, where the commit guard lives; use git commands, not file edits",
            rel,
        )
    return rel


def _reason(agent: str, tool: str, path: str, missing: dict[str, Any]) -> str:
    holders = missing.get("held_by") or []
    held = f" (locked by {', '.join(holders)})" if holders else ""
    why = missing.get("why") or "no exclusive lock of yours covers it"
    return (
        f"conclave: {agent} may not {tool} {path}: {why}{held}. Take an exclusive lock first -- the "
        f'lock_acquire tool with resources ["{path}"] (or `conclave lock acquire {path}`) -- then retry, '
        "and release it when you are done."
    )
