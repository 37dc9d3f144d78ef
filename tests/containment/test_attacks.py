"""An agent that runs code cannot reach another agent, the operator or the store.

Each test is an attack a coding agent's shell could make, tried from inside
a boxed agent, with a positive control: the same action from an agent with
``sandbox = "off"`` (the same uid, no box) succeeds, so the refusal is the
box's doing.  Agents:

* ``alice``, ``bob`` -- the default box (the strongest this machine offers);
* ``carol`` -- ``sandbox = "off"``: the control;
* ``dave`` -- ``sandbox = "landlock"``: where the residual risks of a box
  without namespaces are asserted as documented (docs/THREAT_MODEL.md).

These tests run in the main suite as whoever runs it, and again as an
ordinary uid (``tests/broker/test_as_user.py``): privilege changes what the
kernel allows, so a property proven only as root proves nothing.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import Run
from broker.sandbox import machine as sandbox_machine

MACHINE = sandbox_machine.probe()
DEFAULT = MACHINE.strongest

PROBE = textwrap.dedent(
    r"""
    import ctypes, errno, json, os, socket, sys
    what, target = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    def result(fn):
        try:
            fn()
            return {"ok": True}
        except OSError as exc:
            return {"ok": False, "error": errno.errorcode.get(exc.errno, str(exc.errno))}
    def read(path):
        with open(path, "rb") as f:
            f.read(64)
    def write(path):
        with open(path, "a") as f:
            f.write("planted\n")
    def listen(path):
        os.close(os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK))
    def move_back_and_forth(path):
        os.rename(path, path + ".moved")
        os.rename(path + ".moved", path)
    def terminal(path):
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
        try:
            os.write(fd, b"\x1b]52;c;Y29uY2xhdmUgbWVtb3J5IHByb21vdGUgMQ==\x07typed by an agent\n")
        finally:
            os.close(fd)
    def ptrace(pid):
        if libc.ptrace(16, int(pid), 0, 0) != 0:  # PTRACE_ATTACH
            raise OSError(ctypes.get_errno(), "ptrace")
        os.waitpid(int(pid), 0)
        libc.ptrace(17, int(pid), 0, 0)  # PTRACE_DETACH
    def connect(address):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(address)
            s.sendall(b"new-window conclave memory promote 1\n")
    actions = {
        "read": read, "write": write, "ptrace": ptrace, "terminal": terminal, "listen": listen, "rename": move_back_and_forth,
        "signal": lambda pid: os.kill(int(pid), 0),
        "connect": connect, "connect-abstract": lambda name: connect("\0" + name),
    }
    print(json.dumps(result(lambda: actions[what](target))))
    """
)


class Deputy:
    """A same-uid server outside every box, like a terminal multiplexer: it acts for whoever connects."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.heard: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(address)
        self.sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.heard.append(conn.recv(1024))
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("boxes")
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n")
    (home / ".gitconfig").write_text("[user]\n\tname = someone\n")
    agents = [{"name": "alice"}, {"name": "bob"}, {"name": "carol", "sandbox": "off"}]
    if MACHINE.landlock_abi >= 1:
        agents.append({"name": "dave", "sandbox": "landlock"})
    # A deputy in /tmp (where tmux keeps its socket) and one on an abstract address (like an X server).
    deputy_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"conclave-deputy-{os.getpid()}"
    deputy_dir.mkdir(exist_ok=True)
    deputies = {"named": Deputy(str(deputy_dir / "default")), "abstract": Deputy(f"\0conclave-deputy-{os.getpid()}")}
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    run = Run(root / "run", agents)
    try:
        run.start()
        yield {"run": run, "home": home, "deputies": deputies}
    finally:
        run.close()
        for deputy in deputies.values():
            deputy.close()
        (deputy_dir / "default").unlink(missing_ok=True)
        deputy_dir.rmdir()
        if saved is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = saved


def attempt(boxes: dict[str, Any], agent: str, what: str, target: str | int) -> dict[str, Any]:
    out = boxes["run"].puppet(agent).sh(sys.executable, "-I", "-c", PROBE, what, str(target))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def pid_of(boxes: dict[str, Any], agent: str) -> int:
    return boxes["run"].puppet(agent).pid


def test_the_default_box_is_the_strongest_this_machine_offers(boxes: dict[str, Any]) -> None:
    logged = boxes["run"].op("memory.log", kind="agent.spawn")
    spawns = {e["subject"].split(":")[0]: e["detail"]["sandbox"] for e in logged}
    assert spawns["alice"] == spawns["bob"] == DEFAULT and spawns["carol"] == "off"
    assert DEFAULT != "off", f"this machine offers no sandbox at all: {MACHINE}"


def test_a_boxed_agent_cannot_read_a_siblings_ticket_or_the_operators_environment(boxes: dict[str, Any]) -> None:
    bob, operator = pid_of(boxes, "bob"), os.getpid()
    for target in (bob, operator):
        for path in (f"/proc/{target}/environ", f"/proc/{target}/mem"):
            assert not attempt(boxes, "alice", "read", path)["ok"], path
    # Control: the same reads from an unboxed agent of the same uid succeed.
    assert attempt(boxes, "carol", "read", f"/proc/{bob}/environ")["ok"]
    assert attempt(boxes, "carol", "read", f"/proc/{operator}/environ")["ok"]


def test_a_boxed_agent_cannot_ptrace_or_signal_a_sibling(boxes: dict[str, Any]) -> None:
    bob = pid_of(boxes, "bob")
    # In a PID namespace of its own (strict, where the kernel allows) no pid outside it names
    # anything: ESRCH.  Landlock alone refuses the same pids with EPERM.
    refused = ("ESRCH",) if DEFAULT == "strict" and MACHINE.pid_namespaces else ("EPERM", "EACCES")
    assert attempt(boxes, "alice", "ptrace", bob)["error"] in refused
    assert attempt(boxes, "alice", "signal", bob)["error"] in refused
    assert attempt(boxes, "alice", "signal", os.getpid())["error"] in refused
    if MACHINE.landlock_abi >= 1:
        assert attempt(boxes, "dave", "ptrace", bob)["error"] in ("EPERM", "EACCES")
        assert attempt(boxes, "dave", "signal", bob).get("error") == ("EPERM" if MACHINE.landlock_abi >= 6 else None)
    # Control: unboxed, the same uid may do both.
    assert attempt(boxes, "carol", "signal", bob)["ok"]
    assert attempt(boxes, "carol", "ptrace", bob)["ok"]


def test_a_boxed_agent_cannot_open_the_store_or_read_the_operator_key(boxes: dict[str, Any]) -> None:
    state = boxes["run"].state
    for path in (state / "conclave.db", state / "conclave.db-wal", state / "operator.key", state / "broker.pid"):
        if path.exists():
            assert not attempt(boxes, "alice", "read", path)["ok"], path
            attempt(boxes, "alice", "write", path)  # in a private /tmp it may land in the box's own copy, never here
            assert b"planted" not in path.read_bytes(), path
    # Another agent's directory (its identity file, its generated configs) is out of reach too.
    bob_dir = next((state / "agents" / "bob").iterdir())
    assert not attempt(boxes, "alice", "read", bob_dir / "nothing-here-yet")["ok"]
    attempt(boxes, "alice", "write", bob_dir / "planted")
    assert not (bob_dir / "planted").exists()
    # Control: unboxed, the key and the database are just files of the uid.
    assert attempt(boxes, "carol", "read", state / "operator.key")["ok"]
    assert attempt(boxes, "carol", "read", state / "conclave.db")["ok"]


def test_a_boxed_agent_cannot_read_the_users_ssh_keys(boxes: dict[str, Any]) -> None:
    """~/.ssh is how `ssh localhost` would take it out of its box as the user."""
    key = boxes["home"] / ".ssh" / "id_ed25519"
    assert not attempt(boxes, "alice", "read", key)["ok"]
    assert attempt(boxes, "alice", "read", boxes["home"] / ".gitconfig")["ok"]  # the rest of home is there to read
    if MACHINE.landlock_abi >= 1:
        # Landlock alone (no mount hides ~/.ssh): home is granted around the hole Landlock leaves for it.
        assert attempt(boxes, "dave", "read", key)["error"] == "EACCES"
        assert attempt(boxes, "dave", "read", boxes["home"] / ".gitconfig")["ok"]
    assert attempt(boxes, "carol", "read", key)["ok"]


def test_a_boxed_agent_cannot_reach_a_deputy(boxes: dict[str, Any]) -> None:
    named, abstract = boxes["deputies"]["named"], boxes["deputies"]["abstract"]
    before = len(named.heard)
    assert not attempt(boxes, "alice", "connect-abstract", abstract.address[1:])["ok"]
    if DEFAULT == "strict":
        assert not attempt(boxes, "alice", "connect", named.address)["ok"]
        assert len(named.heard) == before
    # Control: unboxed, both deputies answer.
    assert attempt(boxes, "carol", "connect", named.address)["ok"]
    assert attempt(boxes, "carol", "connect-abstract", abstract.address[1:])["ok"]


@pytest.mark.skipif(MACHINE.landlock_abi < 1, reason="no Landlock on this kernel: there is no landlock level to document")
def test_a_boxed_agent_cannot_write_to_the_persons_terminal(boxes: dict[str, Any]) -> None:
    """The person's terminal is a pty of the same uid: an agent that can open it can paint escape
    sequences into it (an OSC 52 clipboard write waiting to be pasted) or, with CAP_SYS_ADMIN, type
    into the shell (TIOCSTI).  A strict box has a devpts of its own; a Landlock-only box gets none."""
    import select

    master, slave = os.openpty()
    try:
        path = os.ttyname(slave)
        assert not attempt(boxes, "alice", "terminal", path)["ok"]
        if MACHINE.landlock_abi >= 1:
            assert not attempt(boxes, "dave", "terminal", path)["ok"]
        # Nor open it to read what the person types (a sudo password).
        assert not attempt(boxes, "alice", "listen", path)["ok"]
        if MACHINE.landlock_abi >= 1:
            assert not attempt(boxes, "dave", "listen", path)["ok"]
        assert select.select([master], [], [], 0.2)[0] == []  # nothing arrived
        # Control: unboxed, the terminal opens for reading, and the same write lands on the person's screen.
        assert attempt(boxes, "carol", "listen", path)["ok"]
        assert attempt(boxes, "carol", "terminal", path)["ok"]
        assert select.select([master], [], [], 5)[0] == [master] and b"typed by an agent" in os.read(master, 4096)
    finally:
        os.close(master)
        os.close(slave)


def test_a_strict_box_still_makes_terminals_of_its_own(boxes: dict[str, Any]) -> None:
    """Control for the devpts of its own: coding agents run commands in pseudo-terminals."""
    if DEFAULT != "strict":
        pytest.fail(f"no strict box on this machine ({MACHINE.user_namespaces_error})")
    made = boxes["run"].puppet("alice").sh(sys.executable, "-I", "-c", "import os; m, s = os.openpty(); os.write(s, b'ok'); print(os.read(m, 2).decode())")
    assert made.returncode == 0 and made.stdout.strip() == "ok", made.stderr


def test_the_documented_residual_of_a_box_without_namespaces(boxes: dict[str, Any]) -> None:
    """Landlock does not govern connect(2) on a named socket (before ABI 9): without the private
    /tmp of a namespace, a deputy's socket there is reachable.  docs/THREAT_MODEL.md says so."""
    named = boxes["deputies"]["named"]
    reached = attempt(boxes, "dave", "connect", named.address)
    assert reached["ok"] is (MACHINE.landlock_abi < 9)
    # Even there, the key, the store and the siblings stay out of reach.
    assert not attempt(boxes, "dave", "read", boxes["run"].state / "operator.key")["ok"]
    assert not attempt(boxes, "dave", "read", f"/proc/{pid_of(boxes, 'bob')}/environ")["ok"]
