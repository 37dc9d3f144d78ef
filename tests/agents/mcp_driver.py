"""Scripts the agent tests run *inside* an agent's process tree.

``python mcp_driver.py serve``
    Start ``conclave mcp`` with the MCP SDK's own stdio client -- the way an
    agent does, passing on its CONCLAVE_* variables -- and answer plans: read
    one plan (JSON) per line on stdin, list the tools, make the calls in the
    plan, print one JSON document per line.  The server started for the first
    plan is kept for every later one (an agent keeps its MCP server for its
    whole life); a plan with ``"fresh": true`` gets a server of its own that
    has exited when its answer is printed.  The test's puppet runs this with
    its ``open``/``ask`` commands, so it stays in that agent's tree and the
    SDK client is imported once per agent rather than once per question.

``python mcp_driver.py fake claude|codex|aider ARGS...``
    A stand-in for a coding agent: no model, no network.  It reads the
    command line and configuration the preset generated, starts the MCP
    server exactly as that configuration says (with the SDK client's
    environment Codex gives it), calls whoami and
    memory_context, runs the lock hook from the generated settings, and
    writes what happened to ``$FAKE_AGENT_REPORT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator


async def session(command: str, args: list[str], env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(params) as (read, write):
        async with connected(read, write) as (s, instructions):
            return await ask(s, instructions, calls)


@asynccontextmanager
async def connected(read: Any, write: Any) -> AsyncIterator[tuple[Any, str | None]]:
    """An initialized SDK client session on the server's streams, and the server's instructions."""
    from mcp import ClientSession

    async with ClientSession(read, write) as s:
        init = await s.initialize()
        yield s, init.instructions


async def ask(s: Any, instructions: str | None, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """List the tools and make ``calls`` on an initialized session."""
    out: dict[str, Any] = {"calls": [], "instructions": instructions}
    listed = await s.list_tools()
    out["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in listed.tools]
    names = {t.name for t in listed.tools}
    for name, arguments in calls:
        if name.endswith("?"):  # optional: only when the server offers it
            name = name[:-1]
            if name not in names:
                continue
        result = await s.call_tool(name, arguments)
        text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        out["calls"].append({"name": name, "args": arguments, "is_error": result.is_error, "text": text, "structured": result.structured_content})
    return out


def conclave_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("CONCLAVE_")}


def server_argv(plan: dict[str, Any]) -> list[str]:
    return ["-m", "broker.cli", "mcp", *plan.get("server_args", [])]


async def serve_plans() -> None:
    """``serve``: one plan per stdin line, one answer per stdout line, on one kept server."""
    import anyio
    from mcp import StdioServerParameters, stdio_client

    async with AsyncExitStack() as kept:
        current: tuple[Any, str | None] | None = None
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            plan = json.loads(line)
            calls = [(c[0], c[1]) for c in plan.get("calls", [])]
            if plan.get("fresh") or plan.get("server_args"):
                out = await session(sys.executable, server_argv(plan), conclave_env(), calls)
            else:
                if current is None:
                    params = StdioServerParameters(command=sys.executable, args=server_argv(plan), env=conclave_env())
                    read, write = await kept.enter_async_context(stdio_client(params))
                    current = await kept.enter_async_context(connected(read, write))
                out = await ask(*current, calls)
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()


# -- the fake agents ------------------------------------------------------------------


def wait_at_gate() -> None:
    """With FAKE_AGENT_GATE set, the first launch waits for the gate file, then fails
    (the broker restarts us); later launches go on.  The first launch always fails,
    so the launch that reports was prepared after the test opened the gate."""
    import time

    gate = os.environ.get("FAKE_AGENT_GATE")
    if not gate:
        return
    seen = Path(gate + ".first-launch")
    if seen.exists():
        return
    seen.write_text("")
    deadline = time.monotonic() + 120
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)


def hold_until_gate() -> None:
    """With FAKE_AGENT_HOLD set, wait for that file before doing anything (no restart): the fakes' MCP
    sessions then start after the puppets the test needs first are up, not competing with them."""
    import time

    gate = os.environ.get("FAKE_AGENT_HOLD")
    deadline = time.monotonic() + 120
    while gate and not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


#: What each fake answers to --version (conclave's preflight asks).
FAKE_VERSIONS = {"claude": "2.1.332 (Claude Code)", "codex": "codex-cli 0.171.0", "aider": "aider 0.86.1"}


def fake(kind: str, argv: list[str]) -> dict[str, Any]:
    wait_at_gate()
    hold_until_gate()
    report: dict[str, Any] = {"kind": kind, "argv": argv, "env_has_ticket": bool(os.environ.get("CONCLAVE_TICKET"))}
    if kind == "claude":
        prompt = argv[argv.index("--") + 1]
        settings = json.loads(Path(argv[argv.index("--settings") + 1]).read_text())
        config = json.loads(Path(argv[argv.index("--mcp-config") + 1]).read_text())
        server = config["mcpServers"]["conclave"]
        report["settings"] = settings
        report["config_dir"] = os.environ.get("CLAUDE_CONFIG_DIR")
        report["claude_env"] = {k: os.environ.get(k) for k in ("ENABLE_TOOL_SEARCH", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "MCP_TIMEOUT")}
    elif kind == "codex":
        assert argv[0] == "exec", argv
        home = Path(os.environ["CODEX_HOME"])
        config = tomllib.loads((home / "config.toml").read_text())
        report["codex_home"] = str(home)
        report["codex_config"] = config
        entry = config["mcp_servers"]["conclave"]
        # Codex starts MCP servers with a scrubbed environment plus the variables env_vars names.
        scrubbed = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG") or k in entry.get("env_vars", [])}
        server = {"command": entry["command"], "args": entry["args"], "env": scrubbed}
        prompt = argv[argv.index("--") + 1]
        report["stdin_is_devnull"] = os.path.samestat(os.fstat(0), os.stat(os.devnull))
    else:
        prompt = Path(argv[argv.index("--message-file") + 1]).read_text()
        whoami = subprocess.run([sys.executable, "-m", "broker.cli", "whoami", "--json"], capture_output=True, text=True)
        report.update(prompt=prompt, whoami=json.loads(whoami.stdout))
        return report
    report["prompt"] = prompt
    report["server"] = server
    owned = f"src/owned_by_{kind}.py"  # one path per fake: they run at once
    calls = [("whoami", {}), ("memory_context?", {"query": "parser"}), ("lock_acquire?", {"resources": [owned]})]
    import anyio  # here, not at the top: a fake asked only for its --version (conclave's preflight) starts at once

    report["mcp"] = anyio.run(session, server["command"], server["args"], server.get("env") or {}, calls, backend="trio")
    if kind == "claude":
        report["hook"] = run_hooks(settings, owned)
    return report


def run_hooks(settings: dict[str, Any], owned: str) -> dict[str, Any]:
    """Run the PreToolUse hook the settings install, as Claude Code would (``sh -c``, its environment), on a few edits."""
    (entry,) = settings["hooks"]["PreToolUse"]
    command = entry["hooks"][0]["command"]
    repo = os.environ["CONCLAVE_REPO"]
    results = {}
    for label, path in (("unlocked", "src/free.py"), ("locked", owned)):
        event = {
            "session_id": "fake-session",
            "transcript_path": "/dev/null",
            "cwd": repo,
            "hook_event_name": "PreToolUse",
            "tool_name": "Edit",
            "tool_input": {"file_path": f"{repo}/{path}", "old_string": "a", "new_string": "b"},
        }
        done = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(event), capture_output=True, text=True, timeout=60)
        results[label] = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    results["matcher"] = entry["matcher"]
    return results


def main() -> int:
    mode = sys.argv[1]
    if mode == "serve":
        import anyio

        anyio.run(serve_plans, backend="trio")
        return 0
    if mode == "fake":
        if sys.argv[3:] == ["--version"]:
            print(FAKE_VERSIONS[sys.argv[2]])
            return 0
        report = fake(sys.argv[2], sys.argv[3:])
        Path(os.environ["FAKE_AGENT_REPORT"]).write_text(json.dumps(report))
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
