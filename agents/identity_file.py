"""How an agent's ticket reaches helpers its agent starts with a scrubbed environment.

Some agents start their MCP servers and hooks with a *whitelisted*
environment (the MCP SDK's stdio client and Codex pass on only PATH, HOME
and a few more), so ``CONCLAVE_TICKET`` would not arrive.  The launcher,
running as the agent, writes the agent's own connection details to
``<state>/agents/<name>/<session>/identity.json`` (mode 0600) and the
generated configuration points ``conclave mcp`` and ``conclave hook`` at it.

This gives away nothing the ticket's design relies on keeping: the broker
accepts a ticket only from a process that descends from the agent it was
issued to (``SO_PEERCRED`` plus the ``/proc`` parent chain), and revokes it
when the agent exits.  A sibling that reads the file still cannot use it;
the tests try exactly that.  The environment, when it has a ticket, wins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final, MutableMapping

from broker.client import ENV_BROKER_PROCESS, NoIdentityError
from broker.paths import ENV_REPO, ENV_SOCKET, ENV_STATE_DIR, ENV_TICKET

#: ENV_BROKER_PROCESS too: in a PID namespace it is how a helper recognises its broker.
IDENTITY_KEYS: Final = (ENV_SOCKET, ENV_TICKET, ENV_STATE_DIR, ENV_REPO, ENV_BROKER_PROCESS)
FILE_NAME: Final = "identity.json"


def write_identity_file(path: Path, environ: MutableMapping[str, str] | None = None) -> Path:
    """Write this agent's connection details to ``path`` (mode 0600).

    Raises:
        NoIdentityError: the environment has no socket or ticket to write.
    """
    env = os.environ if environ is None else environ
    if not env.get(ENV_SOCKET) or not env.get(ENV_TICKET):
        raise NoIdentityError("no agent identity to write: this process was not spawned by a conclave broker")
    payload = {key: env[key] for key in IDENTITY_KEYS if env.get(key)}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
    return path


def adopt_identity_file(path: Path | None, environ: MutableMapping[str, str] | None = None) -> None:
    """Fill in missing ``CONCLAVE_*`` variables from ``path``; an inherited ticket wins.

    Raises:
        NoIdentityError: the file is needed but cannot be read or is not an identity file.
    """
    env = os.environ if environ is None else environ
    if path is None or env.get(ENV_TICKET):
        return
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise NoIdentityError(f"cannot read the identity file {path}: {exc}") from None
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), str) for k in (ENV_SOCKET, ENV_TICKET)):
        raise NoIdentityError(f"{path} is not a conclave identity file")
    for key in IDENTITY_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value and not env.get(key):
            env[key] = value
