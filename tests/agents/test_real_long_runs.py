"""Long runs with the real Claude Code and Codex binaries (issue 23), against loopback stand-ins.

* **Preflight**: a missing key, an endpoint that does not answer and a binary
  outside the tested versions are found before any agent starts, each named on
  a line of its own with its fix; ``conclave team check --online`` finds the same
  and starts nothing.  Control: the team with its keys and a live endpoint passes.
* **One run** with five agents, its view written to a file (every line, in order):

  ==========  ===========  ======================================================
  agent       binary       what it shows
  ==========  ===========  ======================================================
  ann         Claude Code  usage and cost read from stream-json; a readable view
  cole        Codex        usage read from ``exec --json``; a readable view
  bud         Claude Code  ``max_tokens = 5000``: stopped after its first message
  tim         Codex        ``timeout = "8s"``, its model never answers: timed out
  ida         Claude Code  ``idle_timeout = "5s"``, its model never answers: idle
  ==========  ===========  ======================================================

  ann and cole finish their scripts: the controls for the three stops.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agents.harness import make_repo, toml_value
from broker.entry import conclave_argv
from store.database import connect
from tests.agents import realbin
from tests.agents.standins import AnthropicStandin, ResponsesStandin
from tests.eventlog import events_of
from tests.conclave_run import conclave_run
from tests.agents.standins.responses import codex_overrides

SESSION = r"[0-9a-f]{12}"


def base_env(binaries: realbin.Binaries) -> dict[str, str]:
    """The test's environment for `conclave run`, with no key of its own (each agent's comes from the team file)."""
    keys = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_") and k not in keys}
    env["PATH"] = f"{binaries.bin}{os.pathsep}{env['PATH']}"
    return env


def write_team(path: Path, agents: list[dict[str, Any]]) -> Path:
    lines = []
    for agent in agents:
        lines.append("[[agent]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in agent.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


def test_preflight_names_a_missing_key_a_dead_endpoint_and_an_untested_version_before_anything_starts(binaries, tmp_path):
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    old = tmp_path / "old-claude"
    old.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "1.0.0 (Claude Code)"; exit 0; fi\nexec {binaries.claude} "$@"\n')
    old.chmod(0o755)
    dead = f"http://127.0.0.1:{closed_port()}"
    with AnthropicStandin([]) as api, ResponsesStandin([]) as codex_api:
        good = {"ANTHROPIC_API_KEY": "sk-standin", "ANTHROPIC_BASE_URL": api.url, "HOME": str(home)}
        team = [
            {"name": "nokey", "preset": "claude-code", "prompt": "p", "env": {"ANTHROPIC_BASE_URL": api.url, "HOME": str(home)}},
            {"name": "nowhere", "preset": "claude-code", "prompt": "p", "env": {**good, "ANTHROPIC_BASE_URL": dead}},
            {"name": "oldie", "preset": "claude-code", "prompt": "p", "command": [str(old)], "env": good},
            {"name": "cx", "preset": "codex", "prompt": "p", "command": ["codex", *codex_overrides(codex_api.url)], "env": {"HOME": str(home)}},
        ]
        team_file = write_team(tmp_path / "team.toml", team)
        state = tmp_path / "state"
        env = base_env(binaries)
        started = time.monotonic()
        refused = conclave_run("--team", str(team_file), "--repo", str(repo), "--state-dir", str(state), env=env)
        took = time.monotonic() - started
        checked = subprocess.run(conclave_argv("team", "check", str(team_file), "--online", "--repo", str(repo), "--state-dir", str(state), "--json"),
                                 capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
        # Control: the same team with its keys in place and a live endpoint passes; the old version only warns.
        for agent in team:
            agent["env"] = {**agent["env"], **({"STANDIN_API_KEY": "sk-standin"} if agent["preset"] == "codex" else good)}
        write_team(team_file, team)
        passed = subprocess.run(conclave_argv("team", "check", str(team_file), "--online", "--repo", str(repo), "--state-dir", str(state)),
                                capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    problems = [ln for ln in refused.stderr.splitlines() if ln.startswith("preflight: ")]
    assert problems == [
        "preflight: nokey: ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_AUTH_TOKEN is not set (looked in the environment of "
        "`conclave run` and in nokey's env in the team file); fix: export ANTHROPIC_API_KEY=... (or CLAUDE_CODE_OAUTH_TOKEN from "
        "`claude setup-token`) in the environment of the shell that runs `conclave run` (agents inherit it; a login at your own terminal "
        "does not reach them: each agent has its own configuration directory)",
        f"preflight: nowhere: the model endpoint {dead} (ANTHROPIC_BASE_URL) does not answer: Connection refused; fix: check the network "
        "and ANTHROPIC_BASE_URL, or unset it for the default",
        "preflight: cx: STANDIN_API_KEY is not set (looked in the environment of `conclave run` and in cx's env in the team file); fix: "
        "export STANDIN_API_KEY=... in the environment of the shell that runs `conclave run` (agents inherit it; a login at your own "
        "terminal does not reach them: each agent has its own configuration directory)",
    ], refused.stderr
    assert f"oldie: {old} is version 1.0.0, outside the versions conclave was tested with (2.1.332 up to, not including, 2.2.0)" in refused.stderr
    # Bounded, not fast (what preflight costs is bench/preflight.py's): a check that waited on the system's own
    # timeouts would take minutes; the checks have 5 s in all, and a loaded machine must not fail this.
    assert took < 60, f"preflight took {took:.1f} s (the checks have 5 s in all; the rest is starting Python)"
    # Nothing started: no run was recorded, no agent spawned.
    assert not list((state / "logs").glob("run-*.jsonl")) if (state / "logs").exists() else True
    if (state / "conclave.db").exists():
        conn = connect(state / "conclave.db", readonly=True)
        try:
            assert conn.execute("SELECT count(*) FROM events WHERE kind IN ('broker.start', 'agent.spawn')").fetchone()[0] == 0
        finally:
            conn.close()
    assert checked.returncode == 2
    error = json.loads(checked.stderr)["error"]
    assert error["code"] == "preflight" and [(p["agent"], p["check"]) for p in error["problems"]] == [
        ("nokey", "credentials"), ("nowhere", "endpoint"), ("cx", "credentials")
    ]
    assert [(w["agent"], w["check"]) for w in error["warnings"]] == [("oldie", "version")]
    assert passed.returncode == 0, passed.stderr
    assert "preflight: every check passed" in passed.stdout and "outside the versions conclave was tested with" in passed.stderr


def anthropic_usage(requests: list[dict[str, Any]]) -> int:
    """The tokens the Anthropic stand-in reported for these requests (input as it computes it, 10 out)."""
    return sum(max(1, len(json.dumps(r["body"])) // 4) + 10 for r in requests if r["method"] == "POST" and r["path"].startswith("/v1/messages") and "count_tokens" not in r["path"])


def responses_usage(requests: list[dict[str, Any]]) -> int:
    return sum(max(1, len(json.dumps(r["body"])) // 4) + 10 for r in requests if r["method"] == "POST" and r["path"].rstrip("/").endswith("/responses"))


@pytest.fixture(scope="module")
def long_run(binaries, tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    repo = make_repo(root)
    home = root / "home"
    home.mkdir()
    ann = AnthropicStandin([{"tool_calls": [{"name": "Bash", "input": {"command": "echo hi from ann", "description": "say hi"}}]},
                            {"text": "ann is done\nsecond line of the answer"}]).start()  # fmt: skip
    bud = AnthropicStandin([{"text": "thinking about it", "tool_calls": [{"name": "Bash", "input": {"command": "echo one", "description": "one"}}]},
                            {"gate": "never", "text": "unreachable"}]).start()  # fmt: skip
    ida = AnthropicStandin([{"gate": "never", "text": "unreachable"}]).start()
    cole = ResponsesStandin([{"tool_calls": [{"name": "exec_command", "input": {"cmd": "echo hi from cole"}}]}, {"text": "cole is done"}]).start()
    tim = ResponsesStandin([{"gate": "never", "text": "unreachable"}]).start()
    key = {"ANTHROPIC_API_KEY": "sk-standin", "HOME": str(home)}
    team = [
        {"name": "ann", "preset": "claude-code", "prompt": "say hi", "command": ["claude", "--allowedTools", "Bash"], "model": "claude-standin-1",
         "env": {**key, "ANTHROPIC_BASE_URL": ann.url}},
        {"name": "cole", "preset": "codex", "prompt": "say hi", "command": ["codex", *codex_overrides(cole.url)],
         "env": {"STANDIN_API_KEY": "sk-standin", "HOME": str(home)}},
        {"name": "bud", "preset": "claude-code", "prompt": "count", "command": ["claude", "--allowedTools", "Bash"], "max_tokens": 5000,
         "env": {**key, "ANTHROPIC_BASE_URL": bud.url}},
        {"name": "tim", "preset": "codex", "prompt": "wait", "command": ["codex", *codex_overrides(tim.url)], "timeout": "8s",
         "env": {"STANDIN_API_KEY": "sk-standin", "HOME": str(home)}},
        {"name": "ida", "preset": "claude-code", "prompt": "wait", "idle_timeout": "5s", "env": {**key, "ANTHROPIC_BASE_URL": ida.url}},
    ]  # fmt: skip
    team_file = write_team(root / "team.toml", team)
    state = root / "state"
    out_file = root / "view.txt"
    try:
        done = conclave_run("--team", str(team_file), "--repo", str(repo), "--state-dir", str(state), "--grace", "2", env=base_env(binaries), timeout=240)
        out_file.write_text(done.stdout)  # the view as a pipe gets it (a file gets the same: neither is a terminal)
        yield {"done": done, "view": out_file.read_text(), "state": state, "apis": {"ann": ann, "bud": bud, "ida": ida, "cole": cole, "tim": tim}}
    finally:
        for api in (ann, bud, ida, cole, tim):
            api.close()


def exit_of(long_run: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [e for e in events_of(long_run["state"], "agent.exit") if e["subject"].split(":")[0] == name]
    return found


def summary_line(view: str, name: str) -> str:
    found = re.search(rf"^.*{name}:{SESSION}.*$", view.split(" summary", 1)[1], re.MULTILINE)
    assert found, view[-3000:]
    return found.group(0)


def test_usage_and_cost_are_read_from_claude_codes_stream(long_run):
    """ann's tokens are exactly what its model API reported (summed over its messages), and its cost
    is what Claude Code computed; both reach the exit event, the summary and the run's usage."""
    usage = exit_of(long_run, "ann")["usage"]
    assert usage["tokens"] == anthropic_usage(long_run["apis"]["ann"].main), usage
    assert usage["output_tokens"] == 10 * len(long_run["apis"]["ann"].main)
    assert usage["cost_usd"] is not None and usage["cost_usd"] > 0
    recorded = [e for e in events_of(long_run["state"], "agent.usage") if e["subject"].startswith("ann:")]
    assert recorded and recorded[-1]["tokens"] == usage["tokens"] and recorded[-1]["cost_usd"] == usage["cost_usd"]
    assert f"{usage['tokens']:,} tokens, ${usage['cost_usd']:.4f}" in summary_line(long_run["view"], "ann")
    # `conclave agents --json` (here with no broker: the operator opens the store) says the same.
    listed = subprocess.run(conclave_argv("agents", "--json", "--state-dir", str(long_run["state"]), "--repo", str(long_run["state"].parent / "repo")),
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["agent"] == "ann"]
    assert row["usage"] == usage
    # The model asked for is the one the team file named, passed with Claude Code's own flag.
    assert {r["body"]["model"] for r in long_run["apis"]["ann"].main} == {"claude-standin-1"}


def test_usage_is_read_from_codexs_stream(long_run):
    usage = exit_of(long_run, "cole")["usage"]
    assert usage["tokens"] == responses_usage(long_run["apis"]["cole"].main), usage
    assert usage["cost_usd"] is None  # Codex reports no cost
    assert f"{usage['tokens']:,} tokens" in summary_line(long_run["view"], "cole")


def test_an_agent_over_its_token_budget_is_stopped_with_the_reason(long_run):
    bud = exit_of(long_run, "bud")
    assert bud["stopped"] == "budget" and bud["error"] == f"over budget: max_tokens = 5,000 for bud crossed, {bud['usage']['tokens']:,} tokens used"
    assert bud["usage"]["tokens"] > 5000
    assert len(long_run["apis"]["bud"].main) <= 2  # stopped after its first answer: the second request never got one
    line = summary_line(long_run["view"], "bud")
    assert "over budget: max_tokens = 5,000 for bud crossed" in line and "[FAILED]" in line
    assert re.search(rf"^bud:{SESSION} +> over budget: max_tokens = 5,000 for bud crossed, [\d,]+ tokens used; stopping it$", long_run["view"], re.MULTILINE)


def test_a_real_agent_past_its_timeout_and_one_idle_are_stopped_like_ctrl_c(long_run):
    tim, ida = exit_of(long_run, "tim"), exit_of(long_run, "ida")
    assert tim["stopped"] == "timeout" and tim["error"] == "timed out: timeout = 8s ran out"
    assert ida["stopped"] == "idle" and ida["error"] == "idle: no output and no broker call for idle_timeout = 5s"
    for name in ("tim", "ida"):
        assert "killed by SIG" in summary_line(long_run["view"], name) or "exit " in summary_line(long_run["view"], name)
    # Controls: ann and cole, with no limits, finished their scripts.
    assert exit_of(long_run, "ann")["exit_code"] == 0 and exit_of(long_run, "cole")["exit_code"] == 0
    assert long_run["done"].returncode == 1  # three agents failed (stopped by their limits)


def test_the_run_view_and_the_logs_are_readable_text_not_json(long_run):
    view = long_run["view"]
    line = lambda who, text: re.search(rf"^{who}:{SESSION} +\| {re.escape(text)}", view, re.MULTILINE)  # noqa: E731
    assert line("ann", "claude code 2.1.332, model claude-standin-1, session ")
    assert line("ann", "-> Bash echo hi from ann")
    assert line("ann", "<- hi from ann")
    assert line("ann", "ann is done") and line("ann", "second line of the answer")
    assert line("ann", "result (success): 2 turn(s), ")
    assert line("cole", "$ /bin/bash -lc 'echo hi from cole'  -> exit 0")
    assert line("cole", "cole is done")
    assert line("cole", "turn done: ")
    assert not re.search(r"\| \{\"type\":", view), "raw stream JSON reached the view"
    logs = long_run["state"] / "logs"
    (ann_log,) = logs.glob("ann-*.log")
    text = ann_log.read_text()
    assert "-> Bash echo hi from ann" in text and "ann is done" in text and '{"type":' not in text
    # The run's events are there too, in order: each agent's last line before its exit.
    ended = re.search(rf"^ann:{SESSION} +> exit 0", view, re.MULTILINE)
    assert ended and line("ann", "result (success)").start() < ended.start()
