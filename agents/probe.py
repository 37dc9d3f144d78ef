"""Connect once and run one op: ``python -m agents.probe OP [ARGS_JSON] [--operator]``.

Prints the broker's reply (or its refusal) as one JSON object and exits 0;
the scenario runner and tests use it to act from an exact process -- with a
stolen ticket in the environment, or with none -- and read what happened.
"""

from __future__ import annotations

import json
import os
import sys

from broker.client import BlockingClient, BrokerUnavailable, agent_credentials
from broker.errors import ConclaveError


def main(argv: list[str]) -> int:
    operator = "--operator" in argv
    argv = [a for a in argv if a != "--operator"]
    op = argv[0] if argv else "whoami"
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        if operator:
            client = BlockingClient.for_operator(os.environ["CONCLAVE_SOCKET"])
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
