"""``conclave exec --lock PATH -- CMD``: hold locks for exactly one command.

The locks are taken with scope ``connection`` on a connection this process
keeps open while the command runs, then released explicitly.  If this
process dies -- even by SIGKILL -- the connection closes and the broker
releases them anyway; if the command fails or is killed, they are released
before ``exec`` exits with the command's own exit code (128+N for a signal).
SIGINT, SIGTERM and SIGHUP are passed on to the command, not obeyed, so the
locks outlive the command by no more than the release round trip.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any, Sequence

from broker.clikit import EXIT_NO_BROKER, EXIT_REFUSED, EXIT_USAGE, Target, connect, die

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: What exec exits with when the command cannot be started at all (as a shell does).
NOT_FOUND = 127
#: ... and when Ctrl-C stops it while it waits for its locks (128 + SIGINT).
INTERRUPTED = 130


def acquire_args(resources: Sequence[str], *, shared: bool, wait: float | None, ttl: float | None, scope: str = "agent") -> dict[str, Any]:
    """``lock.acquire`` arguments from command-line options (unset ones left out)."""
    args: dict[str, Any] = {"resources": list(resources), "shared": shared, "scope": scope}
    if wait is not None:
        args["wait"] = wait
    if ttl is not None:
        args["ttl"] = ttl
    return args


def run_locked(
    target: Target,
    resources: Sequence[str],
    command: Sequence[str],
    *,
    shared: bool = False,
    wait: float | None = None,
    ttl: float | None = None,
) -> int:
    """Acquire, run, release; return the exit code ``conclave exec`` should exit with."""
    from broker.errors import ConclaveError

    if not resources:
        die("exec needs at least one --lock PATH", EXIT_USAGE)
    if not command:
        die("exec needs a command after --: conclave exec --lock PATH -- CMD...", EXIT_USAGE)
    client = connect(target)
    if client is None:
        die("no broker is running: exec holds locks only through a running broker", EXIT_NO_BROKER)
    with client:
        try:
            grants = client.call("lock.acquire", acquire_args(resources, shared=shared, wait=wait, ttl=ttl, scope="connection"))["grants"]
        except ConclaveError as exc:
            die(f"{exc.message} [{exc.code.value}]", EXIT_NO_BROKER if exc.code.value == "unavailable" else EXIT_REFUSED, error=exc.code.value)
        except KeyboardInterrupt:
            # Ctrl-C while waiting in line: the broker sees the hang-up and drops the wait.
            die("interrupted while waiting for the locks; nothing was run", INTERRUPTED)
        code = _run(command)
        released: list[dict[str, Any]] = []
        try:
            released = client.call("lock.release", {"resources": [g["resource"] for g in grants]})["released"]
        except ConclaveError as exc:
            # Expired or force-released while the command ran; nothing left to give back.
            sys.stderr.write(f"conclave: exec: {exc.message}\n")
    if target.json:
        sys.stdout.write(json.dumps({"exit_code": code, "grants": grants, "released": released}) + "\n")
    return code


def _run(command: Sequence[str]) -> int:
    try:
        child = subprocess.Popen(list(command))
    except OSError as exc:
        sys.stderr.write(f"conclave: exec: cannot run {command[0]!r}: {exc.strerror or exc}\n")
        return NOT_FOUND

    def forward(signum: int, _frame: Any) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code
