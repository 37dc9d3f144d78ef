"""Launch presets end to end: a real broker spawns fake `claude`, `codex` and `aider` binaries
(no model, no network) that use exactly the command line and configuration the preset built.

The claude-code agent is held at a gate on its first start while the test seeds the shared
memory, then fails so the broker restarts it; its second launch fetches the context block
for its task, so the test can see which claims reached its prompt.  The codex and aider fakes
wait for the same gate (no restart), so their MCP sessions do not compete with the puppets'
start for the CPU.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.harness import Run, make_repo
from agents.hooks import command
from tests.agents.conftest import DRIVER, available_ops
from tests.agents.standins import AnthropicStandin
from tests.conclave_run import conclave_run

TASK = "Speed up the tokenizer in src/a.py without changing its output"
TRUSTED = "The tokenizer in src/a.py compiles its regular expressions once at import time."
UNVERIFIED = "The tokenizer in src/a.py is scheduled for a rewrite in another language."
MEMORY_OPS = ("memory.remember", "memory.corroborate", "memory.context")

COMMAND_AGENT = """\
import json, os, sys
from pathlib import Path
Path(os.environ["FAKE_AGENT_REPORT"]).write_text(json.dumps({
    "argv": sys.argv[1:],
    "env": {k: os.environ.get(k) for k in ("CONCLAVE_PROMPT_FILE", "CONCLAVE_MCP_CONFIG", "CONCLAVE_AGENT_DIR")},
    "prompt": Path(sys.argv[1]).read_text(),
}))
"""


def fake_bin(root: Path) -> Path:
    bindir = root / "bin"
    bindir.mkdir()
    for kind, name in (("claude", "claude"), ("codex", "codex"), ("aider", "aider")):
        script = bindir / name
        script.write_text(f'#!/bin/sh\nexec {sys.executable} {DRIVER} fake {kind} "$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir


def wait_for(path: Path, run: Run, timeout: float = 90) -> dict[str, Any]:
    return run.wait_for_json(path, timeout=timeout, what=f"report {path.name}")


def seed_memory(run: Run) -> dict[str, Any] | None:
    """A trusted claim (two independent witnesses, else the operator) and an unverified one."""
    if not all(op in available_ops(run) for op in MEMORY_OPS):
        return None
    bob, carol, dave = run.puppet("bob"), run.puppet("carol"), run.puppet("dave")
    trusted = bob.call("memory.remember", kind="discovery", text=TRUSTED, evidence="src/a.py")
    carol.call("memory.corroborate", id=trusted["id"], evidence="read src/a.py")
    trusted = dave.call("memory.corroborate", id=trusted["id"], evidence="read src/a.py")
    if trusted["tier"] != "trusted":
        promoted = run.cli("memory", "promote", str(trusted["id"]), "--json")
        assert promoted.returncode == 0, promoted.stderr
    unverified = bob.call("memory.remember", kind="discovery", text=UNVERIFIED)
    return {"trusted": trusted["id"], "unverified": unverified["id"]}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    root = tmp_path_factory.mktemp("presets")
    bindir = fake_bin(root)
    reports = root / "reports"
    reports.mkdir()
    gate = reports / "gate"
    (root / "cmd_agent.py").write_text(COMMAND_AGENT)
    # The fake binaries live in the test's directory: their boxes may read it and write the reports.
    box = {"allow_read": [str(bindir), str(root / "cmd_agent.py")], "allow_write": [str(reports)]}
    # Preflight wants a key and a model endpoint that answers: a stand-in on loopback (never asked for a turn).
    api = AnthropicStandin([]).start()
    keys = {"alice": {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": api.url}, "cody": {"OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": api.url + "/v1"}}
    # The puppets first: the broker spawns in this order, and the fixture waits for them (20 s) while the presets start.
    team = [
        {"name": "bob"}, {"name": "carol"}, {"name": "dave"},
        {"name": "alice", "preset": "claude-code", "prompt": TASK, "restart": "on-failure", "max_restarts": 1,
         "env": {"FAKE_AGENT_REPORT": str(reports / "alice.json"), "FAKE_AGENT_GATE": str(gate), **keys["alice"]}, **box},
        {"name": "cody", "preset": "codex", "prompt": TASK, "env": {"FAKE_AGENT_REPORT": str(reports / "cody.json"), "FAKE_AGENT_HOLD": str(gate), **keys["cody"]}, **box},
        {"name": "ada", "preset": "aider", "prompt": TASK, "env": {"FAKE_AGENT_REPORT": str(reports / "ada.json"), "FAKE_AGENT_HOLD": str(gate)}, **box},
        {"name": "cmd", "preset": "command", "prompt": TASK, "command": [sys.executable, str(root / "cmd_agent.py"), "{prompt_file}", "{mcp_config}"],
         "env": {"FAKE_AGENT_REPORT": str(reports / "cmd.json")}, **box},
    ]
    run = Run(root / "run", team, files={"src/a.py": "a = 1\n"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
        run.start(wait_for=["bob", "carol", "dave"])
    try:
        seeded = seed_memory(run)
        gate.write_text("go")
        out = {name: wait_for(reports / f"{name}.json", run) for name in ("alice", "cody", "ada", "cmd")}
        yield {"run": run, "reports": out, "seeded": seeded}
    finally:
        run.close()
        api.close()


def session_of(launched: dict[str, Any], name: str) -> str:
    rows = [row for row in launched["run"].op("agents") if row["agent"] == name]
    return rows[-1]["session"]  # the latest spawn (alice was restarted once)


def test_claude_code_preset_runs_claude_with_its_mcp_config_and_settings(launched):
    run, report = launched["run"], launched["reports"]["alice"]
    session = session_of(launched, "alice")
    directory = run.state / "agents" / "alice" / session
    argv = report["argv"]
    assert argv == [
        "-p", "--permission-mode", "acceptEdits", "--setting-sources", "user",
        "--settings", str(directory / "settings.json"), "--strict-mcp-config", "--mcp-config", str(directory / "mcp.json"),
        "--output-format", "stream-json", "--verbose", "--", argv[-1],
    ]
    assert argv[-1].startswith(TASK)
    # Its own config directory, never the user's ~/.claude; the MCP tools up front; no phoning home.
    assert report["config_dir"] == str(directory / "claude")
    assert stat.S_IMODE((directory / "claude").stat().st_mode) == 0o700
    assert report["claude_env"] == {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "MCP_TIMEOUT": "60000"}
    server = report["server"]
    assert server["command"] == sys.executable
    assert server["args"] == ["-I", "-m", "broker.cli", "mcp", "--identity-file", str(directory / "identity.json")]
    assert report["env_has_ticket"]
    # The MCP server the fake started from that config acts as alice, this very spawn.
    whoami = json.loads(report["mcp"]["calls"][0]["text"])
    assert (whoami["agent"], whoami["session"]) == ("alice", session)
    assert report["settings"]["permissions"]["allow"] == ["mcp__conclave"]
    (stop,) = report["settings"]["hooks"]["Stop"]
    assert stop["hooks"][0]["command"] == command("stop")
    assert command("stop") == f"{sys.executable} -I -m agents.hooks stop"
    # The broker's record shows what it really ran: the launcher, which then became claude.
    (row,) = [r for r in run.op("agents") if r["session"] == session]
    assert row["command"] == [sys.executable, "-I", "-m", "broker.cli", "agent-launch", "--preset", "claude-code", "--dir", str(directory), "--prompt", TASK, "--", "claude"]


def test_preset_files_live_under_the_state_dir_and_never_in_the_repository(launched):
    run = launched["run"]
    session = session_of(launched, "alice")
    directory = run.state / "agents" / "alice" / session
    assert {p.name for p in directory.iterdir()} >= {"identity.json", "mcp.json", "settings.json", "prompt.md"}
    assert stat.S_IMODE((directory / "identity.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    status = subprocess.run(["git", "-C", str(run.repo), "status", "--porcelain", "--ignored"], capture_output=True, text=True, check=True)
    assert status.stdout == ""


def test_prompt_carries_the_task_the_agent_and_trusted_claims_only(launched):
    prompt = launched["reports"]["alice"]["argv"][-1]
    assert prompt.startswith(TASK)
    assert "You are agent `alice`" in prompt and "lock_acquire" in prompt
    seeded = launched["seeded"]
    over_mcp = [c for c in launched["reports"]["alice"]["mcp"]["calls"] if c["name"] == "memory_context"]
    if seeded is None:
        assert "What the team already knows" not in prompt
        pytest.skip(f"needs op(s) {', '.join(MEMORY_OPS)} to check the context block; the launch without it is checked above")
    assert "What the team already knows" in prompt and "not instructions" in prompt
    assert TRUSTED in prompt
    assert UNVERIFIED not in prompt  # trusted claims only, by default
    # The agent can ask again over MCP, as itself, and gets the same reference framing.
    (context,) = over_mcp
    assert not context["is_error"] and context["text"].startswith("Reference material from conclave's shared memory")


def test_claude_code_hook_blocks_an_unlocked_edit_and_allows_a_locked_one(launched):
    hook = launched["reports"]["alice"]["hook"]
    assert hook["matcher"] == "Edit|Write|MultiEdit|NotebookEdit"
    assert hook["unlocked"]["returncode"] == 0
    reason = json.loads(hook["unlocked"]["stdout"])["hookSpecificOutput"]["permissionDecisionReason"]
    assert "src/free.py" in reason and "lock_acquire" in reason
    assert hook["locked"] == {"returncode": 0, "stdout": "", "stderr": ""}


def test_codex_preset_gets_its_own_codex_home_with_the_server_required_and_approved(launched):
    run, report = launched["run"], launched["reports"]["cody"]
    session = session_of(launched, "cody")
    directory = run.state / "agents" / "cody" / session
    assert report["argv"] == ["exec", "-s", "danger-full-access", "--dangerously-bypass-hook-trust", "--strict-config", "--json", "--", report["argv"][-1]]
    assert report["argv"][-1].startswith(TASK)
    assert report["codex_home"] == str(directory / "codex")
    assert report["stdin_is_devnull"]
    config = report["codex_config"]
    server = config["mcp_servers"]["conclave"]
    assert (server["required"], server["default_tools_approval_mode"]) == (True, "approve")
    assert set(server["env_vars"]) >= {"CONCLAVE_SOCKET", "CONCLAVE_TICKET"}
    assert server["args"][-1] == str(directory / "identity.json")
    assert (config["check_for_update_on_startup"], config["analytics"]["enabled"], config["features"]["plugins"]) == (False, False, False)
    (pre,) = config["hooks"]["PreToolUse"]
    assert pre["matcher"] == "^apply_patch$" and pre["hooks"][0]["command"] == command("pre-tool-use")
    assert config["hooks"]["Stop"][0]["hooks"][0]["command"] == command("stop")
    # The server started the way Codex starts it (scrubbed environment + env_vars) acts as cody.
    whoami = json.loads(report["mcp"]["calls"][0]["text"])
    assert (whoami["agent"], whoami["session"]) == ("cody", session)


def test_aider_preset_gets_the_prompt_file_and_uses_the_cli(launched):
    run, report = launched["run"], launched["reports"]["ada"]
    session = session_of(launched, "ada")
    directory = run.state / "agents" / "ada" / session
    assert report["argv"] == ["--yes-always", "--no-auto-commits", "--message-file", str(directory / "prompt.md")]
    assert report["prompt"].startswith(TASK) and "conclave lock acquire PATH" in report["prompt"]
    assert (report["whoami"]["agent"], report["whoami"]["session"]) == ("ada", session)


def test_command_preset_fills_the_placeholders(launched):
    run, report = launched["run"], launched["reports"]["cmd"]
    directory = run.state / "agents" / "cmd" / session_of(launched, "cmd")
    assert report["argv"] == [str(directory / "prompt.md"), str(directory / "mcp.json")]
    assert report["env"] == {
        "CONCLAVE_PROMPT_FILE": str(directory / "prompt.md"),
        "CONCLAVE_MCP_CONFIG": str(directory / "mcp.json"),
        "CONCLAVE_AGENT_DIR": str(directory),
    }
    assert report["prompt"].startswith(TASK)


@pytest.mark.parametrize(
    ("entry", "needles"),
    [
        ({"preset": "claude-code", "prompt": TASK}, ["preset 'claude-code'", "'claude'", "not installed"]),
        ({"preset": "codex", "prompt": TASK, "command": ["/nonexistent/codex", "--model", "x"]}, ["preset 'codex'", "/nonexistent/codex", "not installed"]),
        ({"preset": "claude-code"}, ["preset 'claude-code' needs the task as prompt"]),
        ({"preset": "gemini", "prompt": TASK}, ["unknown preset 'gemini'", "claude-code, codex, aider, command"]),
    ],
)
def test_bad_preset_is_refused_at_team_load_naming_what_is_missing(tmp_path, entry, needles):
    repo = make_repo(tmp_path)
    team = tmp_path / "team.toml"
    lines = ["[[agent]]", 'name = "alice"'] + [f"{k} = {json.dumps(v)}" for k, v in entry.items()]
    team.write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env["PATH"] = os.path.dirname(sys.executable)  # conclave's own bin directory: no claude, no codex
    done = conclave_run("--team", str(team), "--repo", str(repo), "--state-dir", str(tmp_path / "state"), env=env)
    assert done.returncode == 2, done.stderr
    for needle in needles:
        assert needle in done.stderr
    assert not (tmp_path / "state" / "agents").exists()


def test_sandbox_needs_name_the_npm_tree_the_binary_runs_from(tmp_path):
    """The binaries live wherever they were installed; inside the agent's sandbox the preset asks
    to read that whole tree and to write nothing beyond the per-agent directory.  Two layouts:
    npm's (Codex's `codex` is a node script that runs a binary from a sibling package, so the
    whole node_modules) and the platform packages the tests fetch (the package the binary was
    unpacked from: Codex keeps its resources beside its bin/ directory)."""
    from agents.presets import REGISTRY
    from broker.spec import AgentSpec
    from tests.agents import realbin

    modules = tmp_path / "prefix" / "node_modules"
    (modules / ".bin").mkdir(parents=True)
    (modules / "@openai" / "codex" / "bin").mkdir(parents=True)
    (modules / "@openai" / "codex" / "bin" / "codex.js").write_text("#!/usr/bin/env node\n")
    (modules / ".bin" / "codex").symlink_to("../@openai/codex/bin/codex.js")
    needs = REGISTRY["codex"].sandbox_needs(AgentSpec(name="a", command=(str(modules / ".bin" / "codex"),), preset="codex", prompt="p"))
    assert needs.read == (str(modules),) and needs.write == ()

    found = realbin.ensure()
    for preset, binary in (("claude-code", found.claude), ("codex", found.codex)):
        needs = REGISTRY[preset].sandbox_needs(AgentSpec(name="a", command=(str(binary),), preset=preset, prompt="p"))
        package = next(p for p in Path(os.path.realpath(binary)).parents if (p / "package.json").is_file())
        assert needs.read == (str(found.bin), str(package)) and needs.write == (), (preset, needs)
    plain = REGISTRY["command"].sandbox_needs(AgentSpec(name="a", command=("/usr/bin/env",), preset="command"))
    assert plain.read == ("/usr/bin",) and plain.write == ()

