"""The supervisor: spawn quotas, parents, restarts, logs, and a run that ends by itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import Run, puppet_command
from broker.errors import ConclaveError, ErrorCode

#: The shared run's team: each test drives agents of its own (a quota one test fills is not
#: another's), so none depends on what ran before it.
TEAM = [
    {"name": "alice", "may_spawn": 1}, {"name": "bob"},  # quotas and parents
    {"name": "ann", "may_spawn": 2},  # spawn names
    {"name": "gus", "may_spawn": 1},  # a child whose program does not exist
    {"name": "carol", "restart": "on-failure"}, {"name": "dave"},  # restarts
]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One broker for the tests that do not end it (a test alone with ``-k`` starts it the same way)."""
    run = Run(tmp_path_factory.mktemp("supervisor"), TEAM)
    try:  # closed even when it fails to start: no broker outlives the module
        yield run.start()
    finally:
        run.close()


def test_spawn_is_limited_to_may_spawn_and_records_the_parent(run):
    kid = run.spawn_puppet("alice", "kid")
    assert kid.identity["parent"] == run.puppet("alice").key
    assert kid.identity["domain"] == "alice"
    # The quota is reached: a second live child is refused.
    with pytest.raises(ConclaveError) as refused:
        run.puppet("alice").call("spawn", name="kid2", command=puppet_command(run.control))
    assert refused.value.code is ErrorCode.QUOTA and "may_spawn" in refused.value.message
    # bob has no quota at all.
    with pytest.raises(ConclaveError) as refused:
        run.puppet("bob").call("spawn", name="k", command=["true"])
    assert refused.value.code is ErrorCode.QUOTA
    # The child may spawn a grandchild only within the family's quota (used up by itself).
    with pytest.raises(ConclaveError):
        kid.call("spawn", name="g", command=["true"])
    # Control: once the child has exited, the slot is free again.
    kid.exit(0)
    run.wait_until(lambda: not any(a["live"] for a in run.op("agents") if a["agent"] == "alice/kid"), what="kid exit")
    again = run.spawn_puppet("alice", "kid2")
    assert again.identity["agent"] == "alice/kid2"
    tree = {a["principal"]: a["parent"] for a in run.op("agents")}
    assert tree[again.key] == run.puppet("alice").key


def test_spawn_names_are_checked(run):
    ann = run.puppet("ann")
    assert ann.try_call("spawn", name="../x", command=["true"])["error"]["code"] == "invalid_args"
    assert ann.try_call("spawn", name="ok", command=[])["error"]["code"] == "invalid_args"
    assert ann.try_call("spawn", name="operator", command=["true"])["error"]["code"] == "invalid_args"
    # The operator is not an agent and cannot spawn.
    with pytest.raises(ConclaveError) as refused:
        run.op("spawn", name="x", command=["true"])
    assert refused.value.code is ErrorCode.FORBIDDEN


def test_a_child_command_that_does_not_exist_is_reported_and_the_broker_goes_on(run):
    gus = run.puppet("gus")
    child = gus.call("spawn", name="ghost", command=["/no/such/program"])
    assert child["live"] is False
    ghost = next(a for a in run.op("agents") if a["agent"] == "gus/ghost")
    assert ghost["exit_code"] == 127
    assert gus.call("whoami")["agent"] == "gus"


def test_restart_on_failure_gives_a_new_session_in_the_same_domain(run):
    first = run.puppet("carol").identity
    run.puppet("carol").exit(3)
    run.forget("carol")
    second = run.wait_until(lambda: _new_session(run, "carol", first["session"]), timeout=20, what="carol's restart")
    assert second["agent"] == "carol" and second["domain"] == "carol" and second["session"] != first["session"]
    history = [a for a in run.op("agents") if a["agent"] == "carol"]
    assert [h["exit_code"] for h in history] == [3, None]
    # Control: dave (restart = never) that exits 0 is not restarted.
    run.puppet("dave").exit(0)
    run.wait_until(lambda: not any(a["live"] for a in run.op("agents") if a["agent"] == "dave"), what="dave exit")
    assert len([a for a in run.op("agents") if a["agent"] == "dave"]) == 1


def _new_session(run, name, old):
    try:
        ident = run.puppet(name, fresh=True, timeout=1).identity
    except (TimeoutError, ConnectionError, OSError):
        return None
    return ident if ident["session"] != old else None


def test_the_run_ends_when_every_agent_has_exited_and_reports_exit_codes(tmp_path):
    agents = [
        {"name": "ok", "command": ["sh", "-c", "echo hello from ok"]},
        {"name": "bad", "command": ["sh", "-c", "echo oops >&2; exit 4"]},
    ]
    run = Run(tmp_path, agents)
    try:
        run.start(wait_for=[])
        summary = run.wait_exit(timeout=30)
    finally:
        run.close()
    codes = {o["agent"]: o["exit_code"] for o in summary["agents"]}
    assert codes == {"ok": 0, "bad": 4}
    logs = {o["agent"]: Path(o["log"]).read_text() for o in summary["agents"]}
    assert logs["ok"] == "hello from ok\n" and logs["bad"] == "oops\n"
    assert summary["stopped_by"] is None


def test_a_deep_state_directory_still_gets_a_socket(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    run = Run(deep, [{"name": "alice"}])
    try:
        run.start()
        sock = run.socket_path()
        assert not str(sock).startswith(str(run.state))
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        assert run.puppet("alice").call("whoami")["agent"] == "alice"
        assert json.loads(run.cli("whoami", "--json").stdout)["role"] == "operator"
    finally:
        run.close()
    assert not sock.exists()


def test_a_deep_state_directory_under_a_deep_tmpdir_gets_its_socket_under_tmp(tmp_path, monkeypatch):
    """The short private directory for a socket that does not fit in the state directory is not made under
    a $TMPDIR that is itself too deep (a test's, a scenario runner's): the broker failed to start
    ("AF_UNIX path too long") where /tmp had room."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    scratch = tmp_path / ("t" * 90)
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    run = Run(deep, [{"name": "alice"}])
    try:
        run.start()
        sock = run.socket_path()
        assert str(sock.parent.parent) == "/tmp" and len(str(sock)) <= 100, sock
        assert run.puppet("alice").call("whoami")["agent"] == "alice"
    finally:
        run.close()
    assert not sock.exists()


def test_one_broker_per_state_directory(run):
    second = run.cli("run", "--team", str(run.team_file))
    assert second.returncode == 4  # could not start: distinct from 1, an agent failed
    assert "is in use by a broker" in second.stderr
    assert run.puppet("bob").call("whoami")["agent"] == "bob"
