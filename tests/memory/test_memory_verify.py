"""``conclave memory verify`` against someone editing the database file behind the broker's back (threat T3).

Words only (``embedder = "none"``): the rows attacked here are claims, witnesses, disputes and events; the
vectors' rows have their own attacks (tests/memory/test_memory_meaning.py, test_decisions_from_events.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import apsw
import pytest
from tests.memory.memory_support import FACT, WORDS_ONLY, vouch

from agents.harness import Run
from broker.clikit import Target, call_local
from store import database


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, dict[str, int]]]:
    """A finished run with a trusted claim, an unverified one, a dispute and a retirement."""
    with Run(tmp_path_factory.mktemp("verify"), [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}], extra_toml=WORDS_ONLY) as run:
        alice = run.puppet("alice")
        trusted = alice.call("memory.remember", kind="discovery", text=FACT.format("ledger"))["id"]
        unverified = alice.call("memory.remember", kind="solution", text="The ledger compaction needs 2 GB of scratch space.")["id"]
        doomed = alice.call("memory.remember", kind="pattern", text="The ledger writes are batched by tenant.")["id"]
        vouch(run.puppet("bob"), trusted)
        vouch(run.puppet("carol"), trusted)
        run.puppet("bob").call("memory.dispute", id=unverified, reason="it needs 4 GB since the last release")
        run.op("memory.retire", id=doomed, reason="superseded by the design doc")
        run.stop()
        yield run, {"trusted": trusted, "unverified": unverified}


def verify(repo: Path, state: Path) -> subprocess.CompletedProcess[str]:
    """The operator's command, with no broker running: it opens the store itself."""
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "memory", "verify", "--json", "--repo", str(repo), "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60,
    )


def check(repo: Path, state: Path) -> dict[str, Any]:
    """What that command reports, from the op it runs with no broker up, in this process (no new interpreter)."""
    return call_local(Target(True, repo, state), "memory.verify", {})


def tamper(state: Path, sql: str) -> None:
    conn = database.connect(state / "conclave.db")
    try:
        with conn:
            conn.execute(sql)
    finally:
        conn.close()


def copy_of(run: Run, tmp_path: Path) -> Path:
    state = tmp_path / "state"
    shutil.copytree(run.state, state)
    return state


TAMPERING: dict[str, Callable[[dict[str, int]], str]] = {
    "edit_claim_text": lambda ids: f"UPDATE claims SET text = 'The ledger tests pass everywhere.' WHERE id = {ids['trusted']}",
    "promote_by_hand": lambda ids: f"UPDATE claims SET tier = 'trusted' WHERE id = {ids['unverified']}",
    "forge_a_witness": lambda ids: (
        "INSERT INTO corroborations(claim, principal, domain, at, blind, counted) "
        f"VALUES ({ids['unverified']}, 'carol:forged', 'carol', '2026-01-01T00:00:00+00:00', 1, 1)"
    ),
    "rewrite_an_event": lambda ids: (
        "DROP TRIGGER events_append_only_update; "
        "UPDATE events SET payload = replace(payload, '\"counted\":true', '\"counted\":false') WHERE kind = 'memory.dispute'"
    ),
    "drop_a_dispute": lambda ids: f"DELETE FROM disputes WHERE claim = {ids['unverified']}",
    "unretire_by_hand": lambda ids: "UPDATE claims SET retired_at = NULL, retired_reason = NULL WHERE tier = 'retired'",
}


@pytest.mark.parametrize("attack", sorted(TAMPERING))
def test_verify_catches_a_direct_database_edit(history: tuple[Run, dict[str, int]], tmp_path: Path, attack: str) -> None:
    run, ids = history
    state = copy_of(run, tmp_path)
    # Control: the untouched copy verifies (the command's exit 0 is held in test_verify_through_a_live_broker...).
    clean = check(run.repo, state)
    assert clean["ok"] is True and clean["problems"] == [], clean["problems"]
    tamper(state, TAMPERING[attack](ids))
    result = verify(run.repo, state)
    assert result.returncode == 1, (attack, result.stdout)
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["problems"]
    assert "changed behind the broker's back" in result.stderr


def test_verify_names_the_first_bad_event(history: tuple[Run, dict[str, int]], tmp_path: Path) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    conn = database.connect(state / "conclave.db", readonly=True)
    seq = conn.execute("SELECT seq FROM events WHERE kind = 'memory.corroborate' ORDER BY seq LIMIT 1").fetchone()[0]
    conn.close()
    tamper(state, f"DROP TRIGGER events_append_only_update; UPDATE events SET actor = 'dave:1' WHERE seq = {seq}")
    result = verify(run.repo, state)
    assert result.returncode == 1
    assert json.loads(result.stdout)["first_bad_event"] == seq
    assert f"first bad event: {seq}" in result.stderr and f"event {seq}" in result.stderr


def test_verify_through_a_live_broker_sees_an_edit_made_while_it_runs(start_run) -> None:  # type: ignore[no-untyped-def]
    run: Run = start_run([{"name": "alice"}], extra_toml=WORDS_ONLY)
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("vm"))["id"]
    ok = run.cli("memory", "verify")
    assert ok.returncode == 0 and ok.stdout.startswith("ok:")
    # T3: an agent's shell opens the file itself (WAL lets it write while the broker idles).
    conn = apsw.Connection(str(run.state / "conclave.db"))
    conn.set_busy_timeout(5000)
    with conn:
        conn.execute("UPDATE claims SET text = 'The vm tests never flake.' WHERE id = ?", (claim,))
    conn.close()
    bad = run.cli("memory", "verify")
    assert bad.returncode == 1 and f"claim {claim}" in bad.stderr
