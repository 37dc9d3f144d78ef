"""A scripted agent that does what its controller tells it, as itself.

Tests and the scenario runner need agents that are *real* processes with
*real* broker-issued identities, yet act step by step on command.  A puppet
is such an agent: the broker spawns it like any other (``python -m
agents.puppet --control-dir DIR``); it listens on an abstract Unix socket
named after ``DIR`` and its agent name (:func:`control_address` -- abstract,
so a puppet needs no file outside its sandbox, and its own sandbox may not
connect out to anyone else's) and carries out one JSON command per line,
replying with one JSON line:

``{"call": OP, "args": {...}, "fresh": false}``
    send an op to the broker over the puppet's own authenticated connection
    (``fresh`` opens a new one); reply ``{"ok": true, "result": ...}`` or
    ``{"ok": false, "error": {"code", "message"}}``.
``{"raw": "<bytes as text>"}``
    write the text to a fresh, authenticated broker connection as it is and
    return the broker's reply (to send forbidden fields or malformed JSON).
``{"sh": [ARGV...], "stdin": "..."}``
    run a command as a child of the puppet (so it is in the agent's process
    tree) and return ``returncode``, ``stdout``, ``stderr``.
``{"open": [ARGV...]}``
    start a command as a child of the puppet that stays running (a client
    a test asks many questions of, without a new interpreter per question);
    reply ``{"ok": true, "handle": N}``.  Its stderr goes to a scratch file.
``{"ask": N, "line": "...", "timeout": T}``
    write one line to that command's stdin and reply with the next line it
    prints, ``{"ok": true, "line": "..."}``; when it prints none within
    ``T`` seconds or exits, it is killed and the reply is ``{"ok": false, ...}``
    with the end of its stderr.
``{"close": N}``
    close that command's stdin and wait for it (kill it after 30 s); reply
    ``returncode`` and ``stderr``.
``{"whoami": true}``
    the identity the broker gave this process.
``{"exit": CODE}``
    reply, then exit with that code.

The controller is a process of the same uid that knows ``DIR`` (a directory
the test made); other uids are refused.  The puppet adds no identity of its
own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

# subprocess, tempfile and select are imported by the commands that run a program: a puppet starts with every
# agent of every test, and most never run one (the three are about 15 ms of CPU at each start here).

from broker.client import BlockingClient, agent_credentials
from broker.errors import ConclaveError


def control_address(control_dir: Path, agent: str) -> str:
    """The abstract socket address of ``agent``'s puppet for this controller."""
    return "\0conclave-puppet-" + hashlib.sha256(f"{control_dir}\0{agent}".encode()).hexdigest()[:32]


class Puppet:
    def __init__(self) -> None:
        self.client = BlockingClient.for_agent()
        self.me = self.client.identity
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def open(self, argv: list[str]) -> dict[str, Any]:
        """Start ``argv`` as a long-running child with pipes on stdin and stdout."""
        import subprocess
        import tempfile

        stderr = tempfile.TemporaryFile()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        proc.stderr = stderr  # read back by ask (on a failure) and close
        self.children[proc.pid] = proc
        return {"ok": True, "handle": proc.pid}

    def ask(self, handle: int, line: str, timeout: float) -> dict[str, Any]:
        """One line in, one line out; a child that fails to answer is killed (a late answer would be read as the next one's)."""
        import select

        proc = self.children[handle]
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
            answer = proc.stdout.readline() if ready else b""
        except BrokenPipeError:
            ready, answer = True, b""
        if answer.endswith(b"\n"):
            return {"ok": True, "line": answer.decode()}
        del self.children[handle]
        proc.kill()
        code = proc.wait()
        why = f"printed no line within {timeout} s" if not ready else f"exited ({code})"
        return {"ok": False, "error": {"code": "internal", "message": f"puppet: child {handle} {why}: {self.stderr_of(proc)}"}}

    def close_child(self, handle: int) -> dict[str, Any]:
        import subprocess

        proc = self.children.pop(handle)
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        return {"ok": True, "returncode": code, "stderr": self.stderr_of(proc)}

    @staticmethod
    def stderr_of(proc: subprocess.Popen[bytes]) -> str:
        stderr: Any = proc.stderr
        stderr.seek(0)
        return stderr.read().decode(errors="replace")[-4000:]

    def handle(self, command: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        if "call" in command:
            client = BlockingClient.for_agent() if command.get("fresh") else self.client
            try:
                return {"ok": True, "result": client.call(command["call"], command.get("args") or {})}, None
            except ConclaveError as exc:
                return {"ok": False, "error": exc.to_wire()}, None
            finally:
                if client is not self.client:
                    client.close()
        if "raw" in command:
            socket_path, ticket = agent_credentials()
            with BlockingClient(socket_path, ticket=ticket) as raw:
                return {"ok": True, "reply": raw.send_raw(command["raw"].encode())}, None
        if "sh" in command:
            import subprocess

            proc = subprocess.run(command["sh"], input=command.get("stdin", ""), capture_output=True, text=True, timeout=command.get("timeout", 60))
            return {"ok": True, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}, None
        if "open" in command:
            return self.open(list(command["open"])), None
        if "ask" in command:
            return self.ask(int(command["ask"]), command["line"], float(command.get("timeout", 60))), None
        if "close" in command:
            return self.close_child(int(command["close"])), None
        if "whoami" in command:
            return {"ok": True, "result": self.me, "pid": os.getpid()}, None
        if "exit" in command:
            return {"ok": True}, int(command["exit"])
        return {"ok": False, "error": {"code": "bad_request", "message": f"puppet: unknown command {sorted(command)}"}}, None


def serve(control_dir: Path) -> int:
    puppet = Puppet()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(control_address(control_dir, puppet.me["agent"]))
    server.listen(8)  # connectable only now: the controller polls for it
    while True:
        conn, _ = server.accept()
        peer_uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        if peer_uid != os.getuid():  # an abstract socket has no file mode: check who connects
            conn.close()
            continue
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                try:
                    reply, code = puppet.handle(json.loads(line))
                except Exception as exc:  # the controller gets the failure; the agent lives on
                    reply, code = {"ok": False, "error": {"code": "internal", "message": f"puppet: {type(exc).__name__}: {exc}"}}, None
                if code is not None:
                    # Stop listening before saying so: a controller waiting for the next
                    # session of this agent must never reach this one on its way out.
                    server.close()
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()
                if code is not None:
                    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.puppet", description=__doc__.splitlines()[0])
    parser.add_argument("--control-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    return serve(args.control_dir)


if __name__ == "__main__":
    sys.exit(main())
