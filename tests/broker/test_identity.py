"""Identity is issued by the broker and cannot be forged (DESIGN.md "Identity", threat T2)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import Run

from broker.client import BlockingClient, NoIdentityError
from broker.errors import ConclaveError, ErrorCode
from broker.sandbox import machine as sandbox_machine

MACHINE = sandbox_machine.probe()

#: The shared run's team.  ``alice`` and ``bob`` are boxed (the default, the strongest box this
#: machine offers); ``olive`` is unboxed (``sandbox = "off"``: she reads every file of her uid, the
#: operator key included).  ``leaver``, ``orphaner`` and ``hider`` each belong to the one test that
#: makes them exit, so no other test loses an agent it uses.
TEAM = [
    {"name": "alice"}, {"name": "bob"}, {"name": "olive", "sandbox": "off"},
    {"name": "leaver"}, {"name": "orphaner", "sandbox": "off"}, {"name": "hider", "sandbox": "off"},
]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One broker for the tests that neither stop it nor need a team of their own.  Each test uses
    its own agents, claim texts and files, and passes alone (``-k``) on a broker started the same way."""
    run = Run(tmp_path_factory.mktemp("identity"), TEAM)
    try:  # closed even when it fails to start: no broker outlives the module
        yield run.start()
    finally:
        run.close()


def outside_pid(agent_pid: int, inner: int) -> int:
    """The pid this process sees for the process an agent calls ``inner`` (``$!`` in its shell):
    in a PID namespace of its own the numbers differ.  Found by the namespace and ``NSpid``."""
    namespace = os.readlink(f"/proc/{agent_pid}/ns/pid")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") != namespace:
                continue
            nspid = next(line for line in Path(f"/proc/{name}/status").read_text().splitlines() if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if int(nspid.split()[-1]) == inner:
            return int(name)
    raise LookupError(f"no process {inner} in the PID namespace of {agent_pid}")


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


@pytest.mark.uid_independent("tickets and the registry's lineage: no cgroup, process limit or capability on the path")
def test_identity_is_what_the_broker_issued_even_from_a_grandchild(run):
    alice = run.puppet("alice")
    issued = {r["principal"]: r for r in run.op("agents")}
    # The broker registered alice's launcher, which keeps her (in a PID namespace of her own where
    # the machine allows): her process descends from it, as the broker sees pids.
    from broker.identity import ancestry

    assert alice.key in issued and issued[alice.key]["pid"] in ancestry(alice.pid)
    assert issued[alice.key]["pid"] not in ancestry(run.puppet("bob").pid)

    # puppet -> sh -> python: the CLI two levels below the agent's process.
    grandchild = alice.sh("sh", "-c", f"{sys.executable} -m broker.cli whoami --json")
    assert grandchild.returncode == 0, grandchild.stderr
    me = json.loads(grandchild.stdout)
    assert (me["agent"], me["session"], me["parent"]) == ("alice", alice.identity["session"], None)
    # Control: bob's grandchild is bob, not alice.
    assert json.loads(run.puppet("bob").sh("sh", "-c", f"{sys.executable} -m broker.cli whoami --json").stdout)["agent"] == "bob"


@pytest.mark.uid_independent("tickets and the registry's lineage: no cgroup, process limit or capability on the path")
def test_sibling_presenting_a_stolen_ticket_is_refused(run):
    alice, bob = run.puppet("alice"), run.puppet("bob")
    stolen = environ_of(alice.pid)["CONCLAVE_TICKET"]
    assert stolen != environ_of(bob.pid)["CONCLAVE_TICKET"]

    # The attack: bob's shell copies alice's ticket out of /proc and presents it.
    attack = bob.sh("env", f"CONCLAVE_TICKET={stolen}", sys.executable, "-m", "broker.cli", "whoami", "--json")
    assert attack.returncode != 0
    assert "not that agent's process" in attack.stderr and "auth_failed" in attack.stderr
    assert attack.stdout == ""
    # Control: the same ticket from inside alice's tree works.
    assert json.loads(alice.conclave("whoami", "--json").stdout)["agent"] == "alice"
    # And the test process (not in alice's tree) cannot use it either.
    with pytest.raises(ConclaveError) as refused:
        BlockingClient(run.socket_path(), ticket=stolen)
    assert refused.value.code is ErrorCode.AUTH_FAILED


@pytest.mark.parametrize(
    "name, refusal",
    [
        # Unsandboxed (olive), the agent reads the operator key like any file of its uid: its lineage refuses it.
        ("olive", "cannot act as the operator"),
        # In its box (alice: the default) it cannot even see the key.
        ("alice", "cannot see it (an agent in a sandbox cannot)"),
    ],
)
def test_agent_dropping_its_ticket_is_not_the_operator(run, name, refusal):
    agent = run.puppet(name)
    # The attack: unset the ticket and point the CLI at the socket, hoping to be taken for the operator.
    attack = agent.sh(
        "env", "-u", "CONCLAVE_TICKET", "-u", "CONCLAVE_SOCKET",
        sys.executable, "-m", "broker.cli", "stop", "--json", "--state-dir", str(run.state), "--repo", str(run.repo),
    )
    assert attack.returncode != 0
    assert refusal in attack.stderr, attack.stderr
    # Operator-only ops are refused to the agent through its own identity too.
    assert agent.try_call("broker.stats")["error"]["code"] == "forbidden"
    # Control: this test process, outside every agent's tree and holding the key, is the operator.
    assert run.op("whoami")["role"] == "operator"
    assert run.op("broker.stats")["live_agents"] == len([a for a in run.op("agents") if a["live"]]) >= 1


ORPHAN = """
import json, os, sys, time
sys.path[:0] = {path!r}
from broker.client import BlockingClient
from broker.errors import ConclaveError
open({pid_file!r}, "w").write(str(os.getpid()))
time.sleep({delay})
results = {{}}
key = open(os.path.join(os.environ["CONCLAVE_STATE_DIR"], "operator.key")).read().strip()  # unsandboxed: readable
for label, proof in (("ticket", {{"ticket": os.environ["CONCLAVE_TICKET"]}}), ("operator", {{"operator_key": key}})):
    try:
        results[label] = BlockingClient(os.environ["CONCLAVE_SOCKET"], **proof).identity["role"]
    except ConclaveError as exc:
        results[label] = exc.code.value
open({out!r}, "w").write(json.dumps(results))
"""


def _leave_orphan(alice, tmp_path, delay: float) -> tuple[Path, Path]:
    """alice leaves a daemon behind (new session, so it escapes her process group) that tries both doors after ``delay``."""
    out, pid_file, script = tmp_path / "orphan.json", tmp_path / "orphan.pid", tmp_path / "orphan.py"
    script.write_text(ORPHAN.format(path=sys.path, pid_file=str(pid_file), delay=delay, out=str(out)))
    launched = alice.sh("sh", "-c", f"setsid {sys.executable} {script} </dev/null >/dev/null 2>&1 &")
    assert launched.returncode == 0
    return out, pid_file


def test_an_orphan_inside_a_live_agent_has_its_ticket_but_never_the_operator(run, tmp_path):
    """While olive lives, her setsid'd daemon stays in her tree (she adopts her orphans): her ticket
    works for it, as for any of her processes; the operator key, which it can read unsandboxed, does not."""
    out, _ = _leave_orphan(run.puppet("olive"), tmp_path, delay=0)
    result = run.wait_for_json(out, timeout=15, what="orphan result")
    assert result == {"ticket": "agent", "operator": "auth_failed"}


def test_nothing_an_agent_left_behind_outlives_it(run, tmp_path):
    """The attack: a daemon that waits for orphaner (unboxed) to exit, then tries both doors as an orphan.
    It never gets to: everything orphaner started is killed when she exits, and counted."""
    out, pid_file = _leave_orphan(run.puppet("orphaner"), tmp_path, delay=1.5)
    pid = int(run.wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the daemon to start"))
    run.puppet("orphaner").exit(0)
    run.wait_until(lambda: not Path(f"/proc/{pid}").exists() or _is_zombie(pid), timeout=10, what="the daemon to be killed")
    time.sleep(2)  # past the daemon's own wake-up: it must not have written anything
    assert not out.exists()
    from store.database import connect

    conn = connect(run.state / "conclave.db", readonly=True)
    [payload] = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM events WHERE kind = 'agent.exit' AND subject LIKE 'orphaner:%'")]
    assert payload["leftovers_killed"] >= 1
    # Control: bob, who left nothing behind, is untouched and still answers.
    assert run.puppet("bob").call("whoami")["agent"] == "bob"


def test_a_daemon_hidden_in_a_cgroup_named_like_an_agents_still_dies_with_its_agent(run, tmp_path):
    """Where the broker kills agents by cgroup, an exit's sweep leaves alone what sits in another live
    agent's cgroup.  An unboxed agent (hider) can make directories in the delegated hierarchy: its daemon,
    moved into one *named* like an agent's cgroup, is still killed when the agent exits."""
    out, pid_file = _leave_orphan(run.puppet("hider"), tmp_path, delay=1.5)
    pid = int(run.wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the daemon to start"))
    decoy = None
    if MACHINE.cgroup is not None:  # without a delegated cgroup there is nothing to hide in; the sweep alone decides
        decoy = MACHINE.cgroup / f"decoy-{os.getpid()}" / "conclave-1" / "agent-0123456789ab"
        moved = run.puppet("hider").sh("sh", "-c", f"mkdir -p {decoy} && echo {pid} > {decoy}/cgroup.procs")
        assert moved.returncode == 0, moved.stderr
        assert str(decoy.relative_to(MACHINE.cgroup)) in Path(f"/proc/{pid}/cgroup").read_text()  # it is in the decoy
    try:
        assert Path(f"/proc/{pid}").exists() and not _is_zombie(pid)  # control: alive while hider lives
        run.puppet("hider").exit(0)
        run.wait_until(lambda: not Path(f"/proc/{pid}").exists() or _is_zombie(pid), timeout=10, what="the hidden daemon to be killed")
        time.sleep(2)
        assert not out.exists()
    finally:
        if decoy is not None:
            for level in (decoy, decoy.parent, decoy.parent.parent):
                run.wait_until(lambda: _rmdir(level), timeout=10, what=f"{level} to empty")


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] == b"Z"


@pytest.mark.uid_independent("the wire's identity rule: nothing privileged on the path")
def test_request_naming_an_identity_is_refused_and_logged(run):
    alice = run.puppet("alice")
    reply = alice.raw('{"id": 7, "op": "whoami", "args": {"source_agent": "bob", "session": "x"}}\n')
    assert reply["id"] == 7 and not reply["ok"]
    assert reply["error"]["code"] == "identity_field"
    assert "identity comes from the connection" in reply["error"]["message"]
    # Control: the same request without the fields is answered.
    assert alice.raw('{"id": 8, "op": "whoami", "args": {}}\n')["result"]["agent"] == "alice"
    from store.database import connect

    def logged() -> list[tuple]:
        conn = connect(run.state / "conclave.db", readonly=True)
        try:
            return list(conn.execute("SELECT actor, subject, payload FROM events WHERE kind = 'wire.identity_field_refused'"))
        finally:
            conn.close()

    rows = run.wait_until(logged, what="the refusal's event")
    assert rows == [(alice.key, "whoami", json.dumps({"fields": ["session", "source_agent"]}, separators=(",", ":")))]


def test_ticket_stops_working_when_its_agent_exits(run):
    leaver = run.puppet("leaver")
    ticket = environ_of(leaver.pid)["CONCLAVE_TICKET"]
    # Control: while leaver lives, her tree authenticates with it.
    assert json.loads(leaver.conclave("whoami", "--json").stdout)["agent"] == "leaver"
    leaver.exit(0)
    run.wait_until(lambda: not any(a["live"] for a in run.op("agents") if a["agent"] == "leaver"), what="leaver to end")
    with pytest.raises(ConclaveError) as refused:
        BlockingClient(run.socket_path(), ticket=ticket)
    assert refused.value.code is ErrorCode.REVOKED
    ended = next(a for a in run.op("agents") if a["agent"] == "leaver")
    assert ended["exit_code"] == 0 and ended["ended_at"]


def test_sigterm_to_the_broker_leaves_no_agent_process_behind(start_run):
    run = start_run([{"name": "alice", "may_spawn": 1}, {"name": "bob"}])
    alice = run.puppet("alice")
    kid = run.spawn_puppet("alice", "kid")
    # Background work inside alice's group, and a child that ignores SIGTERM.
    alice.sh("sh", "-c", "sleep 300 >/dev/null 2>&1 &")
    stubborn = kid.sh("sh", "-c", "trap '' TERM; sleep 300 >/dev/null 2>&1 & echo $!")
    pids = {alice.pid, kid.pid, run.puppet("bob").pid, outside_pid(kid.pid, int(stubborn.stdout.strip()))}
    summary = run.stop(signal.SIGTERM)
    assert summary is not None and summary["stopped_by"] == "SIGTERM"
    assert {o["agent"] for o in summary["agents"]} == {"alice", "alice/kid", "bob"}

    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        return state != "Z"

    assert [p for p in pids if alive(p)] == []


@pytest.mark.uid_independent("the client library alone: nothing privileged on the path")
def test_library_refuses_to_build_a_client_without_an_identity(tmp_path):
    with pytest.raises(NoIdentityError, match="no default identity"):
        BlockingClient.for_agent(environ={})
    with pytest.raises(NoIdentityError):
        BlockingClient.for_agent(environ={"CONCLAVE_SOCKET": str(tmp_path / "s.sock")})
    with pytest.raises(NoIdentityError):
        BlockingClient(tmp_path / "s.sock", ticket=None)
    with pytest.raises(NoIdentityError):
        BlockingClient(tmp_path / "s.sock", ticket="")


@pytest.mark.uid_independent("a value's validation: nothing privileged on the path")
def test_principal_requires_both_halves():
    from broker.identity import Principal, Role

    with pytest.raises(ValueError, match="no default"):
        Principal(agent="", session="abc", role=Role.AGENT, domain="x")
    assert Principal(agent="a", session="s", role=Role.AGENT, domain="a").key == "a:s"


def test_a_connection_whose_opener_exited_is_not_the_operator(run, tmp_path):
    # The attack: a child connects (the kernel records the child's pid), exits and is
    # reaped; the parent, still inside olive's tree (unsandboxed: she can read the operator key),
    # then says hello without a ticket, hoping the broker finds no ancestry for the dead pid and
    # takes it for the operator.
    script = tmp_path / "fork_connect.py"
    script.write_text(textwrap.dedent(
        f"""
        import json, os, socket, sys
        sys.path[:0] = {sys.path!r}
        results = {{}}
        # What an unsandboxed agent could read: the operator key itself.
        key = open(os.path.join(os.environ["CONCLAVE_STATE_DIR"], "operator.key")).read().strip()
        hello = json.dumps({{"id": 1, "op": "hello", "args": {{"operator_key": key}}}}).encode() + b"\\n"
        for label, exits_first in (("attack", True), ("control", False)):
            s = socket.socket(socket.AF_UNIX)
            if exits_first:
                pid = os.fork()
                if pid == 0:
                    s.connect(os.environ["CONCLAVE_SOCKET"])
                    os._exit(0)
                os.waitpid(pid, 0)
            else:
                s.connect(os.environ["CONCLAVE_SOCKET"])
            s.sendall(hello)
            reply = json.loads(s.makefile("rb").readline())
            results[label] = reply["result"]["role"] if reply["ok"] else reply["error"]["code"]
        print(json.dumps(results))
        """
    ))
    out = run.puppet("olive").sh(sys.executable, str(script))
    assert json.loads(out.stdout) == {"attack": "auth_failed", "control": "auth_failed"}
    # Control: the same hello from the test process (outside every agent's tree) is the operator.
    assert run.op("whoami")["role"] == "operator"


@pytest.mark.uid_independent("the lineage check of a same-uid process: root's run is the same check")
def test_hiding_the_broker_socket_does_not_open_the_store_to_an_agent(run):
    # The attack: olive points <state>/socket-path at nothing, drops her ticket, and runs an
    # operator command, hoping the CLI concludes "no broker" and opens the store as the operator.
    # Unsandboxed (in a box she could neither see the state nor read the key), lineage refuses her.
    olive = run.puppet("olive")
    claim = olive.call("memory.remember", kind="discovery", text="The linker needs the gold flag on arm64 builds.")
    pointer = run.state / "socket-path"
    real = pointer.read_text()
    promote = ["memory", "promote", str(claim["id"]), "--json", "--state-dir", str(run.state), "--repo", str(run.repo)]
    try:
        pointer.write_text("/nonexistent/broker.sock")
        attack = olive.sh("env", "-u", "CONCLAVE_TICKET", "-u", "CONCLAVE_SOCKET", sys.executable, "-m", "broker.cli", *promote)
        assert attack.returncode != 0 and "descends from a running conclave broker" in attack.stderr
        # Even the real operator's command refuses to open the store behind a live broker.
        hidden = run.cli(*promote[:3], "--json")
        assert hidden.returncode == 3 and "does not answer" in hidden.stderr
    finally:
        pointer.write_text(real)
    assert run.op("memory.show", id=claim["id"])["tier"] == "unverified"
    # Control: through the real socket the operator may promote.
    assert json.loads(run.cli(*promote[:3], "--json").stdout)["tier"] == "trusted"


@pytest.mark.uid_independent("the pidfd comparison of a same-uid server: root's run is the same check")
def test_an_agent_will_not_talk_to_a_fake_broker(run, tmp_path):
    # The attack: bob serves a socket of his own and alice's client is pointed at it
    # (as if bob had replaced the broker's socket file), hoping to collect her ticket
    # and feed her forged answers.  Both are boxed.
    # The one place both may write, even in their boxes: the shared work tree.
    fake = run.repo / "fake.sock"
    seen = run.repo / "seen"
    server = run.repo / "fake_broker.py"
    server.write_text(textwrap.dedent(
        f"""
        import socket
        s = socket.socket(socket.AF_UNIX); s.bind({str(fake)!r}); s.listen(1)
        conn, _ = s.accept()
        conn.settimeout(5)
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        open({str(seen)!r}, "wb").write(data)
        conn.sendall(b'{{"id": 1, "ok": true, "result": {{"agent": "operator", "session": "x", "parent": null, "role": "operator", "domain": "operator"}}}}\\n')
        """
    ))
    run.puppet("bob").sh("sh", "-c", f"{sys.executable} {server} >/dev/null 2>&1 &")
    run.wait_until(fake.exists, what="the fake broker")
    out = run.puppet("alice").sh("env", f"CONCLAVE_SOCKET={fake}", sys.executable, "-m", "broker.cli", "whoami", "--json")
    assert out.returncode != 0 and "not the broker that started this agent" in out.stderr
    run.wait_until(seen.exists, what="the fake broker to finish")
    assert seen.read_bytes() == b""  # the ticket never left alice's process
    # Control: the real broker's socket answers alice as alice.
    assert json.loads(run.puppet("alice").conclave("whoami", "--json").stdout)["agent"] == "alice"


def _operator_cli(run, state, *args: str):
    """``conclave ARGS`` from this process (outside every agent's tree) on another state directory."""
    import os
    import subprocess

    from broker.entry import conclave_argv

    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    argv = conclave_argv(*args, "--repo", str(run.repo), "--state-dir", str(state))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def _hello(run, args: dict) -> dict:
    """One hello, said by hand (with the operator's probe token, as the client says it, when it presents a key)."""
    import socket

    from broker.client import say_probe_token

    if "operator_key" in args:
        args = {**args, "probe": say_probe_token(args["operator_key"])}
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(run.socket_path()))
        s.sendall(json.dumps({"id": 1, "op": "hello", "args": args}).encode() + b"\n")
        return json.loads(s.makefile("rb").readline())


@pytest.mark.uid_independent("the operator key's check on the wire: nothing privileged on the path")
def test_the_operator_proves_it_with_the_key_and_nothing_else_will_do(run):
    """A process outside every agent's tree is *not* the operator by that alone: it must present the key."""
    key = run.operator_key()
    assert len(key) >= 32 and (run.state / "operator.key").stat().st_mode & 0o777 == 0o600
    no_proof = _hello(run, {})
    assert no_proof["error"]["code"] == "auth_failed" and "exactly one proof" in no_proof["error"]["message"]
    wrong = _hello(run, {"operator_key": "f" * len(key)})
    assert wrong["error"]["code"] == "auth_failed" and "not this broker's operator key" in wrong["error"]["message"]
    both = _hello(run, {"operator_key": key, "ticket": "x"})
    assert both["error"]["code"] == "auth_failed"
    with pytest.raises(NoIdentityError):
        BlockingClient(run.socket_path())  # the client will not even try without a proof
    # Control: the key from the state directory makes this process the operator.
    assert _hello(run, {"operator_key": key})["result"]["role"] == "operator"
    assert run.op("whoami")["role"] == "operator"


@pytest.mark.uid_independent("the lock on the database file, through links the test's own uid makes: the same for root")
def test_a_second_state_dir_linking_the_live_database_finds_it_held(start_run, tmp_path):
    """The attack: a fresh --state-dir whose conclave.db is a link (symbolic or hard) to the live
    database, so that an operator command takes its lock per directory and opens the store behind
    the broker.  The lock is on the database file itself."""
    run = start_run([{"name": "alice"}])
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text="The parser keeps BOMs in UTF-8 input.")
    live = run.state / "conclave.db"
    linked = {"symlink": tmp_path / "sym", "hardlink": tmp_path / "hard"}
    for how, state in linked.items():
        state.mkdir()
        # The real key too (what an unsandboxed agent could copy): only the lock is left to refuse.
        (state / "operator.key").write_text(run.operator_key())
        # And the event chain's key, anchor and high-water record, which belong with the database (without them
        # it appends nothing).
        for name in ("chain-key", "chain-anchor", "chain-high-water"):
            (state / name).symlink_to(run.state / name)
    (linked["symlink"] / "conclave.db").symlink_to(live)
    (linked["hardlink"] / "conclave.db").hardlink_to(live)
    for how, state in linked.items():
        promote = _operator_cli(run, state, "memory", "promote", str(claim["id"]), "--json")
        assert promote.returncode != 0 and "is in use by a broker" in promote.stderr, (how, promote.stderr)
    assert run.op("memory.show", id=claim["id"])["tier"] == "unverified"
    # Once the broker has stopped, a directory that links the database with a key of its own is refused ...
    run.stop()
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "conclave.db").symlink_to(live)
    (forged / "operator.key").write_text("0" * 64)
    refused = _operator_cli(run, forged, "memory", "promote", str(claim["id"]), "--json")
    assert refused.returncode != 0 and "answers to another operator key" in refused.stderr, refused.stderr
    # ... and control: with the store's own key, the same command through the link opens it.
    promoted = _operator_cli(run, linked["symlink"], "memory", "promote", str(claim["id"]), "--json")
    assert promoted.returncode == 0, promoted.stderr
    assert json.loads(promoted.stdout)["tier"] == "trusted"


def test_an_agent_that_execs_itself_clean_and_daemonizes_is_still_not_the_operator(run, tmp_path):
    """The attack (sandbox off: the agent can read every file of its uid): drop the ticket by exec'ing
    with an empty environment, double-fork a daemon in a new session, copy the operator key into a
    fresh state directory whose database links to the live one, and run an operator command there.
    Lineage decides, not the environment: the daemon still descends from the broker.  (olive: unboxed.)"""
    olive = run.puppet("olive")
    claim = olive.call("memory.remember", kind="discovery", text="The cache key must include the locale.")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "conclave.db").symlink_to(run.state / "conclave.db")
    (fresh / "operator.key").write_text(run.operator_key())
    out = tmp_path / "daemon.out"
    command = " ".join([
        *(f"'{a}'" for a in (sys.executable, "-I", "-m", "broker.cli")),
        "memory", "promote", str(claim["id"]), "--json", "--repo", f"'{run.repo}'", "--state-dir", f"'{fresh}'",
    ])
    olive.sh("sh", "-c", f"setsid env -i PATH=/usr/bin:/bin sh -c \"{command} >'{out}' 2>&1; echo rc=\\$? >>'{out}'\" </dev/null >/dev/null 2>&1 &")
    text = run.wait_until(lambda: out.exists() and "rc=" in out.read_text() and out.read_text(), timeout=30, what="the daemon's attempt")
    assert "rc=0" not in text and "descends from a running conclave broker" in text, text
    assert run.op("memory.show", id=claim["id"])["tier"] == "unverified"


def test_an_exit_sweep_never_takes_an_agent_being_spawned(start_run):
    """Agents that exit while others are being started: each exit sweeps the
    broker's orphans, and an agent whose process exists but is not yet
    registered is not an orphan.  (Before the fix a restart or a start racing
    an exit's sweep was killed by it, with SIGKILL, and counted as the exiting
    agent's leftover.)"""
    churn = [
        {"name": f"churn{i}", "command": ["sh", "-c", f"sleep 0.0{i}; exit 1"], "restart": "on-failure", "max_restarts": 2}
        for i in range(10)
    ]
    run = start_run([{"name": "keeper"}, *churn], wait_for=["keeper"])
    from store.database import connect

    def exits() -> list[dict]:
        conn = connect(run.state / "conclave.db", readonly=True)
        try:
            rows = conn.execute("SELECT subject, payload FROM events WHERE kind = 'agent.exit' AND subject LIKE 'churn%'").fetchall()
        finally:
            conn.close()
        return [{"subject": s, **json.loads(p)} for s, p in rows]

    # Waited for exit by exit (30 boxed starts take a loaded machine a while): failing only when they stop coming.
    seen = 0
    while seen < 30:
        try:
            seen = run.wait_until(lambda: (n := len(exits())) > seen and n, timeout=30, what=f"an agent exit after the {seen} recorded (of 30)")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{_churn_diagnosis(run, exits())}") from None
    found = exits()
    # Positive control: every attempt ran its command and exited with its own code.
    assert sorted(e["exit_code"] for e in found) == [1] * 30, found
    assert sum(e["leftovers_killed"] for e in found) == 0, found
    assert run.puppet("keeper").call("whoami")["agent"] == "keeper"


def _churn_diagnosis(run, found: list[dict]) -> str:  # type: ignore[no-untyped-def]
    """What a stalled churn left to read: each agent's spawns and exits in the log, what the broker says is
    live, the broker's own log, and the broker's stderr if it has ended (a rare failure under load)."""
    from store.database import connect

    conn = connect(run.state / "conclave.db", readonly=True)
    try:
        spawns = conn.execute("SELECT subject FROM events WHERE kind = 'agent.spawn' AND subject LIKE 'churn%'").fetchall()
    finally:
        conn.close()
    lines = [f"spawned: {sorted(s for (s,) in spawns)}", f"exited: {sorted((e['subject'], e.get('exit_code'), e.get('leftovers_killed')) for e in found)}"]
    try:
        lines.append(f"live: {[(a['agent'], a['session'], a.get('pid')) for a in run.op('agents', live_only=True)]}")
    except Exception as exc:  # noqa: BLE001 -- the broker itself may be what stalled
        lines.append(f"the broker did not answer `agents`: {type(exc).__name__}: {exc}")
    if run.process is not None and run.process.poll() is not None:
        out, err = run.process.communicate()
        lines.append(f"the broker exited with {run.process.returncode}; stderr:\n{err[-4000:]}\nstdout:\n{out[-2000:]}")
    log = run.state / "logs" / "broker.log"
    lines.append(f"{log} (last 80 lines):\n" + ("\n".join(log.read_text(errors="replace").splitlines()[-80:]) if log.exists() else "(none)"))
    return "\n".join(lines)


def test_the_operator_key_from_a_process_under_the_broker_but_in_no_agent_is_refused() -> None:
    """An agent's orphan that escaped every agent's tree (before the sweep reaches it) still
    descends from the broker: the operator key does not make it the operator.  Here the test
    process plays the broker, and its child presents the key."""
    import subprocess

    from broker.identity import PeerCredentials, process_start_time
    from broker.operator_probe import ProbeSeen
    from broker.registry import PrincipalRegistry

    child = subprocess.Popen(["sleep", "30"])
    elsewhere = subprocess.Popen(["sleep", "30"])  # a process the child does not descend from
    try:
        peer = PeerCredentials(pid=child.pid, uid=os.getuid(), gid=os.getgid(), started=process_start_time(child.pid))
        # The child passed the abstract-socket probe (it is in no box): only its lineage speaks against it.
        seen = ProbeSeen(pid=peer.pid, uid=peer.uid, started=peer.started)
        under_broker = PrincipalRegistry(uid=os.getuid(), broker_pid=os.getpid(), operator_key="k" * 64, box_probe=True)
        with pytest.raises(ConclaveError, match="descends from the broker"):
            under_broker.authenticate(peer, ticket=None, operator_key="k" * 64, probe=seen)
        # Control: the same process and key, with a broker it does not descend from, is the operator.
        other_broker = PrincipalRegistry(uid=os.getuid(), broker_pid=elsewhere.pid, operator_key="k" * 64, box_probe=True)
        assert other_broker.authenticate(peer, ticket=None, operator_key="k" * 64, probe=seen).is_operator
    finally:
        for process in (child, elsewhere):
            process.kill()
            process.wait()
