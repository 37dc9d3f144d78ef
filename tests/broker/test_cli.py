"""The CLI: --json documents, errors on stderr with exit codes, local mode with no broker."""

from __future__ import annotations

import json
import subprocess
from typing import Iterator

import pytest

from agents.harness import Run
from tests.conclave_run import conclave as conclave_command


def conclave(*args: str) -> subprocess.CompletedProcess[str]:
    """The operator's `conclave` in a process of its own (forked warm: tests/conclave_run.py)."""
    return conclave_command(*args, timeout=60)


@pytest.fixture(scope="module")
def alice_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One broker with one agent, for the tests that only ask it questions."""
    run = Run(tmp_path_factory.mktemp("cli"), [{"name": "alice"}])
    try:  # closed even when it fails to start: no broker outlives the module
        yield run.start()
    finally:
        run.close()


def test_without_a_broker_or_state_commands_say_so(tmp_path):
    out = conclave("agents", "--state-dir", str(tmp_path / "nothing"), "--repo", str(tmp_path))
    assert out.returncode == 3
    assert "no conclave state" in out.stderr and out.stdout == ""


def test_after_the_run_the_operator_reads_history_without_a_broker(tmp_path):
    run = Run(tmp_path, [{"name": "alice", "command": ["sh", "-c", "exit 0"]}])
    run.start(wait_for=[])
    run.wait_exit()
    run.close()
    out = conclave("agents", "--json", "--state-dir", str(run.state), "--repo", str(run.repo))
    assert out.returncode == 0, out.stderr
    [alice] = json.loads(out.stdout)
    assert alice["agent"] == "alice" and alice["exit_code"] == 0 and alice["live"] is False
    # Human output is a tree naming the same principal.
    human = conclave("agents", "--state-dir", str(run.state), "--repo", str(run.repo))
    assert alice["principal"] in human.stdout
    # With no broker, agent-only commands are refused to the operator.
    spawn = conclave("spawn", "--name", "x", "--state-dir", str(run.state), "--repo", str(run.repo), "--", "true")
    assert spawn.returncode == 1 and "inside an agent" in spawn.stderr


def test_agents_cli_json_and_human_agree_inside_a_run(alice_run):
    run = alice_run
    whoami = run.puppet("alice").conclave("whoami", "--json")
    assert json.loads(whoami.stdout)["agent"] == "alice"
    human = run.puppet("alice").conclave("whoami")
    assert human.stdout.startswith("alice:")
    listing = json.loads(run.cli("agents", "--json").stdout)
    assert [a["agent"] for a in listing] == ["alice"]


def test_help_lists_the_commands():
    out = conclave("--help")
    assert out.returncode == 0
    for command in ("run", "demo", "whoami", "agents", "spawn"):
        assert command in out.stdout


def test_stop_ends_the_run_as_the_operator(start_run):
    run = start_run([{"name": "alice"}])
    out = run.cli("stop", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {"stopping": True}
    summary = run.wait_exit()
    assert summary["stopped_by"] == "operator"


def test_ops_lists_every_op_with_or_without_a_broker(alice_run, tmp_path):
    offline = conclave("ops", "--json", "--state-dir", str(tmp_path / "none"), "--repo", str(tmp_path))
    assert offline.returncode == 0, offline.stderr
    names = {o["op"] for o in json.loads(offline.stdout)}
    assert {"whoami", "memory.remember", "lock.acquire", "msg.send"} <= names
    # Control: a running broker answers the same list.
    assert {o["op"] for o in json.loads(alice_run.cli("ops", "--json").stdout)} == names


def test_with_json_an_error_is_a_json_object_on_stderr(tmp_path):
    """Scripts pass --json and parse what comes back, errors included: code, message, fix, exit."""
    run = Run(tmp_path, [{"name": "alice", "command": ["sh", "-c", "exit 0"]}])
    run.start(wait_for=[])
    run.wait_exit()
    run.close()
    where = ["--state-dir", str(run.state), "--repo", str(run.repo)]
    out = conclave("memory", "show", "999", "--json", *where)
    assert out.returncode == 1 and out.stdout == ""
    error = json.loads(out.stderr)["error"]
    assert error["code"] == "not_found" and "999" in error["message"] and error["exit"] == 1
    assert not error["message"].endswith("[not_found]")
    usage = json.loads(conclave("agents", "--json", "--state-dir", str(tmp_path / "nothing"), "--repo", str(tmp_path)).stderr)["error"]
    assert usage["code"] == "no_broker" and usage["fix"] and usage["exit"] == 3
    # Control: without --json the same failure is one sentence for people.
    human = conclave("memory", "show", "999", *where)
    assert human.returncode == 1 and human.stderr.startswith("conclave: ") and "[not_found]" in human.stderr


def test_each_command_word_mounts_only_the_package_that_owns_it_and_the_table_says_which():
    """broker.composition.COMMANDS decides which package a process imports for its command: held here to
    what each package's own registration really adds, so a new command cannot be left out of it."""
    import typer

    from broker import composition
    from broker.cli import pruned

    def words(app: typer.Typer) -> set[str]:
        from typer.main import get_command_name

        return {c.name or get_command_name(c.callback.__name__) for c in app.registered_commands} | {
            g.name for g in app.registered_groups
        }

    owned: dict[str, set[str]] = {}
    for package in dict.fromkeys(composition.COMMANDS.values()):
        app = typer.Typer()
        composition._mount_package(app, package)
        owned[package] = words(app)
    assert {w: p for p, ws in owned.items() for w in ws} == composition.COMMANDS

    # Pruned: the command named, one level down in a group; a word it does not know keeps the level whole;
    # the app it was given is left as it was (a copy is pruned).
    app = typer.Typer()
    for package in owned:
        composition._mount_package(app, package)
    whole = words(app)
    kept = pruned(app, ["memory", "recall", "--json"])
    assert words(kept) == {"memory"}
    assert words(kept.registered_groups[0].typer_instance) == {"recall"}
    memory = next(g.typer_instance for g in app.registered_groups if g.name == "memory")
    assert words(app) == whole and len(words(memory)) > 10
    unknown = pruned(app, ["memory", "no-such-command"])
    assert words(unknown) == {"memory"} and words(unknown.registered_groups[0].typer_instance) == words(memory)
    assert words(pruned(app, ["--help"])) == whole and words(pruned(app, ["no-such-command"])) == whole


def test_a_pruned_command_line_still_runs_and_errs_as_the_whole_tree_does(tmp_path):
    # The subcommand runs (its own errors), an unknown one gets typer's usage error, the group's help lists all.
    recall = conclave("memory", "recall", "x", "--json", "--state-dir", str(tmp_path / "none"))
    assert recall.returncode == 3 and json.loads(recall.stderr)["error"]["code"] == "no_broker"
    unknown = conclave("memory", "no-such-command")
    assert unknown.returncode == 2 and "No such command 'no-such-command'" in unknown.stderr
    listing = conclave("memory", "--help")
    assert listing.returncode == 0 and "corroborate" in listing.stdout and "recall" in listing.stdout
    top = conclave("no-such-command")
    assert top.returncode == 2 and "No such command" in top.stderr
