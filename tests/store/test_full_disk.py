"""A full file system under the store: writes are refused by name, nothing acknowledged is lost, the broker recovers by itself.

The broker runs in a user and mount namespace of its own (``unshare -Urm``,
so this works as an ordinary uid: ``tests/broker/test_as_user.py`` runs it as
uid 65534 too) where a 1 MiB tmpfs is mounted; the database, its WAL, the
anchor and the high-water record live on it (the state directory names them
through symbolic links).  The test fills that file system from inside the
namespace (``nsenter``), has an agent keep remembering until the store is
full, then frees the space.  Before this change the first ``apsw.FullError``
reached the callers as an internal error and the lock journal and the
supervisor's writes died with it (the run was over, issue 22); the checks
below -- the refusal's words, the broker still answering, every
acknowledged claim there, the next write succeeding -- each fail on main.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.harness import Run
from tests.memory.memory_support import FACT, remember_until_refused

pytestmark = pytest.mark.uid_independent("a tmpfs in a user and mount namespace of its own: the same for root and uid 65534")

SIZE = "1m"
#: Mount a tmpfs on $0 of size $1 inside a new user and mount namespace, then run the rest.
MOUNT = 'mount -t tmpfs -o "size=$1" tmpfs "$0" && shift && exec "$@"'


def tools() -> None:
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} (util-linux) is needed to give the broker a small file system of its own; install util-linux")


def inside(run: Run, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the broker's user and mount namespaces (where the small file system is)."""
    assert run.process is not None
    return subprocess.run(["nsenter", "-t", str(run.process.pid), "-U", "-m", "--preserve-credentials", *argv],
                          capture_output=True, text=True, timeout=60)


#: One operator call from inside the broker's namespaces, its answer printed as JSON.
CALL = (
    "import json, sys; from broker.client import BlockingClient\n"
    "with BlockingClient.for_operator(sys.argv[1], operator_key=sys.argv[2]) as c: print(json.dumps(c.call(sys.argv[3], json.loads(sys.argv[4]))))"
)


def op(run: Run, name: str, **args: object) -> Any:
    """``run.op`` from inside the broker's user namespace.

    The broker accepts the operator key only from a process in its own user namespace (a strict box is one of
    its own; a namespace it cannot read is refused too), so the test's process outside is refused, rightly.
    """
    done = inside(run, sys.executable, "-I", "-c", CALL, str(run.socket_path()), run.operator_key(), name, json.dumps(args))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def listed(run: Run) -> set[int]:
    return {c["id"] for c in op(run, "memory.list", limit=1000)}


def test_a_full_disk_refuses_writes_by_name_keeps_what_was_acknowledged_and_recovers(tmp_path: Path) -> None:
    tools()
    fs = tmp_path / "fs"
    fs.mkdir()
    run = Run(tmp_path, [{"name": "alice"}, {"name": "bob"}], wrap=["unshare", "-Urm", "sh", "-c", MOUNT, str(fs), SIZE])
    run.state.mkdir(mode=0o700)
    for name in ("conclave.db", "chain-anchor", "chain-high-water"):
        (run.state / name).symlink_to(fs / name)
    with run:
        alice = run.puppet("alice")
        mounted = inside(run, "df", "-k", str(fs))
        assert mounted.returncode == 0 and "tmpfs" in mounted.stdout, mounted.stderr
        acknowledged = [alice.call("memory.remember", kind="discovery", text=FACT.format(f"ledger{n}"))["id"] for n in range(3)]
        filled = inside(run, "sh", "-c", f"dd if=/dev/zero of={fs / 'filler'} bs=4k 2>/dev/null; test -s {fs / 'filler'}")
        assert filled.returncode == 0, filled.stderr
        refusal = remember_until_refused(alice, acknowledged)
        assert refusal["code"] == "unavailable" and refusal["message"].startswith("disk full:")
        assert str(run.state / "conclave.db") in refusal["message"]
        # The broker is alive and reads what it acknowledged; a lock is still granted (its event waits to be
        # written) and an agent that ends meanwhile is recorded once there is room.
        assert alice.call("whoami")["agent"] == "alice"
        assert set(acknowledged) <= listed(run)
        bob = run.puppet("bob")
        token = bob.call("lock.acquire", resources=["notes.txt"])["grants"][0]["token"]
        bob.call("lock.release", resources=["notes.txt"])
        bob_key = bob.key
        bob.exit(0)
        # Space returns: the next write goes through, by itself.
        assert inside(run, "rm", str(fs / "filler")).returncode == 0
        after = alice.call("memory.remember", kind="discovery", text=FACT.format("kernel"))
        assert after["tier"] == "unverified"
        report = op(run, "memory.verify")
        assert report["ok"], report["problems"]
        assert set(acknowledged) | {after["id"]} <= listed(run)
        grants = op(run, "memory.log", kind="lock.grant")
        assert any(token in g["detail"].get("tokens", ()) for g in grants), grants
        run.wait_until(lambda: any(e["subject"] == bob_key for e in op(run, "memory.log", kind="agent.exit")), timeout=20, what="bob's exit recorded")
        assert op(run, "broker.stats")["lost_events"] == 0
