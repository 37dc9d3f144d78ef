"""Connect once and run one op: ``python -m agents.probe OP [ARGS_JSON] [--operator]``.

Prints the broker's reply (or its refusal) as one JSON object and exits 0;
the scenario runner and tests use it to act from an exact process -- with a
stolen ticket in the environment, or with none -- and read what happened.
``--operator`` tries what an agent posing as the operator would: the
operator key if this process can read it (``CONCLAVE_STATE_DIR``), and a
bare hello with no proof if it cannot, so the broker's answer is what is
reported either way.
"""

from __future__ import annotations

import json
import os
import sys

import socket
from pathlib import Path
from typing import Any

from broker.client import BlockingClient, BrokerUnavailable, agent_credentials
from broker.errors import ConclaveError
from broker.paths import OPERATOR_KEY_NAME


def main(argv: list[str]) -> int:
    operator = "--operator" in argv
    argv = [a for a in argv if a != "--operator"]
    op = argv[0] if argv else "whoami"
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        if operator:
            socket_path = Path(os.environ["CONCLAVE_SOCKET"])
            try:
                key = (Path(os.environ["CONCLAVE_STATE_DIR"]) / OPERATOR_KEY_NAME).read_text().strip()
            except (KeyError, OSError):
                print(json.dumps(_bare_hello(socket_path)))
                return 0
            client = BlockingClient.for_operator(socket_path, operator_key=key)
        else:
            path, ticket = agent_credentials()
            client = BlockingClient(path, ticket=ticket)
        with client:
            reply = {"ok": True, "result": client.call(op, args)}
    except ConclaveError as exc:
        reply = {"ok": False, "error": exc.to_wire()}
    except BrokerUnavailable as exc:
        reply = {"ok": False, "error": {"code": "unavailable", "message": str(exc)}}
    print(json.dumps(reply))
    return 0


def _bare_hello(socket_path: Path) -> dict[str, Any]:
    """A hello with no proof at all: what is left to a process that cannot read the operator key."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(socket_path))
        sock.sendall(b'{"id": 1, "op": "hello", "args": {}}\n')
        reply = json.loads(sock.makefile("rb").readline())
    return {"ok": bool(reply.get("ok")), **({"result": reply["result"]} if reply.get("ok") else {"error": reply.get("error")})}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
