"""The store's files swapped under a live broker, and an older copy put back whole: refused and named, live and at the next start.

Threat T3 without the key: the attacker copies the database and its anchor
aside (both verify: they are a real earlier state), lets the operator retire
a trusted claim, then puts the copy back.  Before this change the running
broker went on with the descriptors it held while new readers opened the
copy: the retirement was gone, context pushed the claim as TRUSTED again,
and verify and the anchor agreed (both tests below fail on main; the
controls are the same requests before the swap, and a restored copy the
operator accepts on purpose).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
import apsw
import trio

from agents.harness import Run
from broker.entry import conclave_argv
from store import events
from store.backend import SqliteBackend
from store.owner import ChainFiles, StoreOwner
from tests.conclave_run import conclave_run
from tests.memory.memory_support import FACT, vouch

TEAM = [{"name": n} for n in ("alice", "bob", "carol")]


def trusted_claim(run: Run) -> int:
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("ledger"))["id"]
    vouch(run.puppet("bob"), claim)
    assert vouch(run.puppet("carol"), claim)["tier"] == "trusted"
    return claim


def snapshot(state: Path, into: Path) -> None:
    """A consistent copy of the live database (SQLite's backup API) and of its anchor, as they are now."""
    into.mkdir()
    source = apsw.Connection(str(state / "conclave.db"), flags=apsw.SQLITE_OPEN_READONLY)
    target = apsw.Connection(str(into / "conclave.db"))
    with target.backup("main", source, "main") as backup:
        backup.step(-1)
    target.close()
    source.close()
    shutil.copy(state / "chain-anchor", into / "chain-anchor")


def put_back(state: Path, copy: Path) -> None:
    """Rename the copy over the live files and unlink the WAL and SHM names, as the attack did."""
    os.rename(copy / "conclave.db", state / "conclave.db")
    os.rename(copy / "chain-anchor", state / "chain-anchor")
    for name in ("conclave.db-wal", "conclave.db-shm"):
        (state / name).unlink(missing_ok=True)


def start(run: Run, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``conclave run`` on the run's state directory with an agent that exits at once."""
    team = tmp_path / "idle.toml"
    team.write_text('[[agent]]\nname = "idle"\ncommand = ["true"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    return conclave_run("--team", str(team), "--repo", str(run.repo), "--state-dir", str(run.state), "--json", env=env)


def operator(run: Run, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    return subprocess.run(conclave_argv(*args, "--repo", str(run.repo), "--state-dir", str(run.state)), capture_output=True, text=True, timeout=60, env=env)


def test_a_snapshot_renamed_over_the_live_files_is_refused_and_named_live_and_at_the_next_start(start_run, tmp_path: Path) -> None:
    run: Run = start_run(TEAM)
    claim = trusted_claim(run)
    bob = run.puppet("bob")
    assert f"[TRUSTED] #{claim} " in bob.call("memory.context", query="ledger tests flaky arm64")["block"]  # control
    snapshot(run.state, tmp_path / "copy")
    run.op("memory.retire", id=claim, reason="the flake was fixed upstream")
    assert f"#{claim} " not in bob.call("memory.context", query="ledger tests flaky arm64")["block"]
    time.sleep(0.3)  # the high-water record follows within 50 ms of a commit
    put_back(run.state, tmp_path / "copy")
    # Live: nothing is served from the copy, and the refusal names the file.
    pushed = bob.try_call("memory.context", query="ledger tests flaky arm64")
    assert pushed["ok"] is False and pushed["error"]["code"] == "unavailable"
    assert f"{run.state / 'conclave.db'} is not the file this broker opened" in pushed["error"]["message"]
    written = bob.try_call("memory.remember", kind="discovery", text=FACT.format("billing"))
    assert written["ok"] is False and "is not the file this broker opened" in written["error"]["message"]
    assert "is not the file this broker opened" in run.op("broker.stats")["chain_refusing"]
    # SIGTERM still stops it, at once: the agents' exits it cannot record are counted lost, not waited on for
    # minutes (the harness SIGKILLs a broker still running after 30 s, and then there is no summary).
    summary = run.stop()
    assert summary is not None and summary["stopped_by"] == "SIGTERM", run.stderr
    # The next start: the copy ends before what this state directory has seen.
    refused = start(run, tmp_path)
    assert refused.returncode != 0
    assert "but this state directory has seen it reach event" in refused.stderr and "chain-high-water" in refused.stderr
    assert "conclave store accept-restore" in refused.stderr
    offline = operator(run, "memory", "verify", "--json")
    assert offline.returncode == 1 and "this state directory has seen it reach event" in offline.stdout


def test_an_older_copy_put_back_whole_is_refused_until_the_operator_accepts_it(start_run, tmp_path: Path) -> None:
    """Database, WAL and anchor copied while the broker was stopped, put back after more history: all three
    agree with each other, so only the high-water record names it.  Accepting is the operator's act, recorded.
    Control: the same state directory, as it was left, started a broker (``again``)."""
    run: Run = start_run(TEAM)
    claim = trusted_claim(run)
    run.stop()
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("conclave.db", "conclave.db-wal", "chain-anchor"):
        if (run.state / name).exists():
            shutil.copy(run.state / name, saved / name)
    again = Run(run.root, TEAM, reuse=True).start()
    again.op("memory.retire", id=claim, reason="the flake was fixed upstream")
    again.stop()
    for name in ("conclave.db", "conclave.db-wal", "conclave.db-shm", "chain-anchor"):
        (again.state / name).unlink(missing_ok=True)
        if (saved / name).exists():
            shutil.copy(saved / name, again.state / name)
    refused = start(again, tmp_path)
    assert refused.returncode != 0 and "an older copy of the database was put back" in refused.stderr
    accepted = operator(again, "store", "accept-restore", "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert "this state directory has seen it reach event" in json.loads(accepted.stdout)["accepted"]
    assert start(again, tmp_path).returncode == 0
    conn = apsw.Connection(str(again.state / "conclave.db"), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("SELECT count(*) FROM events WHERE kind = 'store.restore_accepted'").fetchone()[0] == 1
    conn.close()


async def reopen(state: Path, *, accept: bool = False) -> tuple[str | None, str | None]:
    """Open the store as a broker would, write one event if it lets us, close: (why it refused, what it accepted)."""
    owner = StoreOwner(SqliteBackend(state / "conclave.db"), [], chain=ChainFiles(state / "chain-key", state / "chain-anchor"), accept_restore=accept)
    async with trio.open_nursery() as nursery:
        await nursery.start(owner.run)
        if owner.refusing is None:
            await owner.call(lambda conn: events.append(conn, "test.write", actor=events.BROKER_ACTOR))
        owner.close()
    return owner.refusing, owner.accepted


async def test_a_high_water_record_deleted_or_replaced_by_the_anchor_is_named(tmp_path: Path) -> None:
    """Deleting the record (to hide a restore), or copying the anchor over it (a record MAC'd with the same key,
    but for another purpose), is refused at the next open; so is the older copy itself.  Control: the untouched
    state opens, every time."""
    state = tmp_path / "state"
    state.mkdir()
    assert await reopen(state) == (None, None)
    saved = tmp_path / "saved.db"
    shutil.copy(state / "conclave.db", saved)  # the owner checkpointed at close: the file is whole
    shutil.copy(state / "chain-anchor", tmp_path / "saved-anchor")
    assert await reopen(state) == (None, None)  # control, and one more event past the copy
    water = state / "chain-high-water"
    kept = water.read_bytes()
    shutil.copy(state / "chain-anchor", water)
    refusing, _ = await reopen(state)
    assert refusing is not None and f"the high-water record {water} cannot be used" in refusing
    water.unlink()
    refusing, _ = await reopen(state)
    assert refusing is not None and f"the high-water record {water} is gone" in refusing
    water.write_bytes(kept)
    assert await reopen(state) == (None, None)
    shutil.copy(saved, state / "conclave.db")
    shutil.copy(tmp_path / "saved-anchor", state / "chain-anchor")
    refusing, _ = await reopen(state)
    assert refusing is not None and "an older copy of the database was put back" in refusing
    refusing, accepted = await reopen(state, accept=True)
    assert refusing is None and accepted is not None
    assert await reopen(state) == (None, None)
