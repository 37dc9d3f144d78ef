"""Threat T3, carried out: someone with the database file rewrites history, and verify names it.

Each attack works on a copy of a finished run's state directory, with plain
SQL on the file and the append-only triggers dropped first, the way an agent's
shell (or any process with the user's uid) would.  Then ``conclave memory
verify`` runs as the operator with no broker (it opens the store itself).
Every attack is paired with the untouched copy verifying clean.

The command itself -- its exit codes, its JSON, its sentences on stderr, its
human form -- is checked through a real ``conclave memory verify`` process in a
few tests; the rest ask the same ``memory.verify`` op the command runs when no
broker is up (``clikit.call_local``: the store opened by this process, the
walk in its own child) without a new interpreter per check.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import apsw
import pytest

from agents.harness import Run
from broker.clikit import Target, call_local
from broker.errors import ConclaveError
from store import anchor, events
from store.chainkey import ChainKey
from store.database import connect
from tests.conclave_run import conclave_run

FACT = "The {} tests are flaky on arm64 CI because two workers share one temp directory."
Digest = Callable[[int, str, str, str, "str | None", str, str], str]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, dict[str, Any]]]:
    """A finished run: an unverified claim, a claim the operator retired, some lock history."""
    with Run(tmp_path_factory.mktemp("chain"), [{"name": "alice"}, {"name": "bob"}]) as run:
        alice = run.puppet("alice")
        target = alice.call("memory.remember", kind="discovery", text=FACT.format("ledger"))["id"]
        doomed = alice.call("memory.remember", kind="pattern", text="The ledger writes are batched by tenant.")["id"]
        run.puppet("bob").call("lock.acquire", resources=["notes.txt"])
        run.op("memory.retire", id=doomed, reason="superseded by the design doc")
        run.puppet("bob").call("lock.release", resources=["notes.txt"])
        run.stop()
        yield run, {"target": target, "doomed": doomed}


def verify(run: Run, state: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    """``conclave memory verify --json`` as the operator, no broker running: (exit code, report, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "broker.cli", "memory", "verify", "--json", *extra, "--repo", str(run.repo), "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60,
    )
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, report, done.stderr


def check(repo: Path, state: Path, expect_head: str | None = None) -> dict[str, Any]:
    """The report ``conclave memory verify`` prints, from the op it calls with no broker running, in this process."""
    report = call_local(Target(True, repo, state), "memory.verify", {} if expect_head is None else {"expect_head": expect_head})
    assert isinstance(report, dict) and "ok" in report, report
    return report


def copy_of(run: Run, tmp_path: Path) -> Path:
    state = tmp_path / "state"
    shutil.copytree(run.state, state)
    return state


def attacker(state: Path) -> apsw.Connection:
    """The attacker's own connection to the file, with the append-only triggers dropped."""
    conn = connect(state / "conclave.db")
    conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
    conn.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
    return conn


def rows(conn: apsw.Connection, where: str = "1") -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT seq, at, kind, actor, subject, payload, prev_hash, hash FROM events WHERE {where} ORDER BY seq").fetchall()


def forge_promotion(state: Path, claim: int, digest: Digest) -> int:
    """Promote ``claim`` as the operator did it: the row, the tier, and a correctly linked memory.promote event."""
    conn = attacker(state)
    try:
        operator = conn.execute("SELECT actor FROM events WHERE kind = 'memory.retire'").fetchone()[0]
        seq, prev = events.head(conn)
        at = events.now()
        payload = events.canonical({"reason": "verified by hand", "from": "unverified"})
        with conn:
            conn.execute("INSERT INTO promotions(claim, at, by, reason) VALUES (?,?,?,?)", (claim, at, operator, "verified by hand"))
            conn.execute("UPDATE claims SET tier = 'trusted' WHERE id = ?", (claim,))
            conn.execute(
                "INSERT INTO events(seq, at, kind, actor, subject, payload, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?)",
                (seq + 1, at, "memory.promote", operator, str(claim), payload, prev,
                 digest(seq + 1, at, "memory.promote", operator, str(claim), payload, prev)),
            )
        return seq + 1
    finally:
        conn.close()


def rehash_from(conn: apsw.Connection, first: int, digest: Digest) -> None:
    """Renumber every event from seq ``first`` on to close a gap, and relink them with ``digest``."""
    rest = rows(conn, f"seq > {first}")
    prev = conn.execute("SELECT hash FROM events WHERE seq = ?", (first - 1,)).fetchone()[0]
    conn.execute(f"DELETE FROM events WHERE seq >= {first}")
    for seq, at, kind, actor, subject, payload, _prev, _hash in rest:
        new = digest(seq - 1, at, kind, actor, subject, payload, prev)
        conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", (seq - 1, at, kind, actor, subject, payload, prev, new))
        prev = new


def problems(report: dict[str, Any]) -> str:
    return "\n".join(p["problem"] for p in report["problems"])


def the_key(state: Path) -> ChainKey:
    key = ChainKey.load(state / "chain-key")
    assert key is not None
    return key


# -- the controls --------------------------------------------------------------


def test_an_untouched_store_verifies_and_prints_its_head(history, tmp_path: Path) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    code, report, _ = verify(run, state)
    assert code == 0 and report["ok"] is True, report
    assert report["chain"]["keyed_from"] == 1 and report["chain"]["unkeyed_events"] == 0
    conn = connect(state / "conclave.db", readonly=True)
    assert report["head"] == dict(zip(("seq", "hash"), events.head(conn)))
    conn.close()
    assert report["chain"]["anchor"] == report["head"]
    human = subprocess.run(
        [sys.executable, "-m", "broker.cli", "memory", "verify", "--repo", str(run.repo), "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60,
    )
    assert human.returncode == 0 and human.stdout.startswith("ok:")
    assert f"head: {report['head']['seq']}:{report['head']['hash']}" in human.stdout


def test_the_chain_key_is_a_private_file_outside_the_database(history) -> None:
    run, _ = history
    key_file = run.state / "chain-key"
    assert oct(os.stat(key_file).st_mode & 0o777) == "0o600"
    secret = key_file.read_text().strip()
    assert len(bytes.fromhex(secret)) == 32
    db = (run.state / "conclave.db").read_bytes()
    assert secret.encode() not in db and bytes.fromhex(secret) not in db


def test_the_key_is_an_hmac_sha256() -> None:
    import hmac

    key = ChainKey(b"k" * 32)
    for message in (b"", b"x", b"y" * 1000):
        assert key.mac(message) == hmac.new(b"k" * 32, message, "sha256").hexdigest()


# -- forging a promotion -----------------------------------------------------------


def test_a_forged_promotion_chained_with_plain_sha256_is_named(history, tmp_path: Path) -> None:
    run, ids = history
    state = copy_of(run, tmp_path)
    assert check(run.repo, state)["ok"] is True  # control
    forged = forge_promotion(state, ids["target"], events.unkeyed_digest)
    code, report, stderr = verify(run, state)
    assert code == 1 and report["ok"] is False
    assert report["first_bad_event"] == forged
    assert f"event {forged} (memory.promote) is hashed with plain SHA-256, not the chain key" in problems(report)
    assert "first bad event" in stderr


def test_a_forged_promotion_keyed_with_a_guessed_key_is_named(history, tmp_path: Path) -> None:
    """The attacker knows the scheme but not the key: it makes one up."""
    run, ids = history
    state = copy_of(run, tmp_path)
    assert check(run.repo, state)["ok"] is True  # control
    forged = forge_promotion(state, ids["target"], functools.partial(events.keyed_digest, ChainKey.generate()))
    report = check(run.repo, state)
    assert report["ok"] is False and report["first_bad_event"] == forged
    assert f"event {forged} (memory.promote) fails its keyed hash: it was forged or altered without the chain key" in problems(report)


def test_a_promotion_forged_with_the_stolen_key_is_named_by_the_anchor(history, tmp_path: Path) -> None:
    """A same-uid process outside every sandbox can read the key: the chain holds, the anchor does not."""
    run, ids = history
    state = copy_of(run, tmp_path)
    forged = forge_promotion(state, ids["target"], functools.partial(events.keyed_digest, the_key(state)))
    report = check(run.repo, state)
    assert report["ok"] is False
    text = problems(report)
    assert "fails its keyed hash" not in text and "plain SHA-256" not in text  # every link verifies
    assert f"past the anchored head (event {forged - 1}): 1 event(s) were appended behind the broker's back" in text


# -- deleting the operator's retirement ----------------------------------------------


def test_deleting_the_operators_retirement_and_rehashing_the_rest_is_named(history, tmp_path: Path) -> None:
    run, ids = history
    state = copy_of(run, tmp_path)
    assert check(run.repo, state)["ok"] is True  # control
    conn = attacker(state)
    with conn:
        retire = conn.execute("SELECT seq FROM events WHERE kind = 'memory.retire'").fetchone()[0]
        # Un-retire the claim and erase the event that says the operator retired it.
        conn.execute("UPDATE claims SET retired_at = NULL, retired_by = NULL, retired_reason = NULL, tier = 'unverified' WHERE id = ?", (ids["doomed"],))
        conn.execute("DELETE FROM events WHERE seq = ?", (retire,))
        rehash_from(conn, retire, events.unkeyed_digest)
    conn.close()
    report = check(run.repo, state)
    assert report["ok"] is False and report["first_bad_event"] == retire
    assert f"event {retire} " in problems(report) and "not the chain key" in problems(report)
    assert "the last 1 event(s) were cut" in problems(report)  # and the anchor saw the log shrink


def test_deleting_the_retirement_with_the_stolen_key_is_named_by_the_anchor(history, tmp_path: Path) -> None:
    run, ids = history
    state = copy_of(run, tmp_path)
    conn = attacker(state)
    with conn:
        retire = conn.execute("SELECT seq FROM events WHERE kind = 'memory.retire'").fetchone()[0]
        conn.execute("UPDATE claims SET retired_at = NULL, retired_by = NULL, retired_reason = NULL, tier = 'unverified' WHERE id = ?", (ids["doomed"],))
        conn.execute("DELETE FROM events WHERE seq = ?", (retire,))
        rehash_from(conn, retire, functools.partial(events.keyed_digest, the_key(state)))
    conn.close()
    report = check(run.repo, state)
    assert report["ok"] is False
    assert "keyed hash" not in problems(report)
    assert "the last 1 event(s) were cut" in problems(report)


# -- cutting the end off -------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 3])
def test_cutting_the_last_events_is_named(history, tmp_path: Path, cut: int) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    before = check(run.repo, state)
    assert before["ok"] is True  # control
    head = before["head"]["seq"]
    conn = attacker(state)
    with conn:
        conn.execute("DELETE FROM events WHERE seq > ?", (head - cut,))
    conn.close()
    code, report, stderr = verify(run, state)
    assert code == 1
    assert f"the event log ends at event {head - cut}, but the anchor recorded event {head}: the last {cut} event(s) were cut" in problems(report)
    assert "changed behind the broker's back" in stderr


def test_a_cut_covered_up_by_rewriting_the_anchor_without_the_key_is_named(history, tmp_path: Path) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    conn = attacker(state)
    with conn:
        conn.execute("DELETE FROM events WHERE seq > (SELECT max(seq) - 2 FROM events)")
        shorter = events.head(conn)
    conn.close()
    # The attacker writes an anchor for the shorter log under a key of its own.
    (state / "chain-anchor").unlink()
    forged = anchor.AnchorFile(state / "chain-anchor", ChainKey.generate())
    forged.write(shorter, shorter)
    forged.close()
    report = check(run.repo, state)
    assert report["ok"] is False
    assert "the anchor file was written under key" in problems(report)


def test_a_cut_covered_up_with_the_stolen_key_is_named_only_by_a_head_kept_elsewhere(history, tmp_path: Path) -> None:
    """The limit, shown: with the key, both the chain and the anchor can be rewritten; a person's note cannot."""
    run, _ = history
    state = copy_of(run, tmp_path)
    before = check(run.repo, state)
    noted = f"{before['head']['seq']}:{before['head']['hash']}"
    assert before["ok"] is True and check(run.repo, state, noted)["ok"] is True  # control: the note matches
    conn = attacker(state)
    with conn:
        cut = conn.execute("SELECT kind, subject, payload FROM events WHERE seq > ?", (before["head"]["seq"] - 2,)).fetchall()
        conn.execute("DELETE FROM events WHERE seq > ?", (before["head"]["seq"] - 2,))
        # ... and puts the rows those events wrote back as the shorter log says (verify rebuilds every table from it):
        # an agent's exit, and the vectors the broker embedded in the background (when that landed last).
        ended = [(s,) for kind, s, _ in cut if kind == "agent.exit"]
        conn.executemany("UPDATE principals SET ended_at = NULL, exit_code = NULL WHERE key = ?", ended)
        for kind, _, payload in cut:
            if kind == "memory.embed":
                embedded = json.loads(payload)
                conn.executemany("DELETE FROM claim_vectors WHERE claim = ? AND model = ?", [(int(c), embedded["model"]) for c in embedded["vectors"]])
        shorter = events.head(conn)
    conn.close()
    # With the key, both records outside the database are rewritten to match: the anchor and the high-water.
    for path, tag in ((state / "chain-anchor", anchor.ANCHOR), (state / "chain-high-water", anchor.HIGH_WATER)):
        path.unlink()
        rewritten = anchor.AnchorFile(path, the_key(state), tag=tag)
        rewritten.write(shorter, shorter)
        rewritten.close()
    report = check(run.repo, state)
    assert report["ok"] is True, report["problems"]  # the attack succeeds against the chain, the anchor and the high-water ...
    report = check(run.repo, state, noted)
    assert report["ok"] is False  # ... and the head the person kept names it
    assert f"the head you expected (event {before['head']['seq']}) is not in the log" in problems(report)


# -- --expect-head -----------------------------------------------------------------


def test_expect_head_accepts_the_printed_head_and_names_a_rewritten_one(history, tmp_path: Path) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    report = check(run.repo, state)
    seq, digest = report["head"]["seq"], report["head"]["hash"]
    ok = check(run.repo, state, f"{seq - 2}:{rows(connect(state / 'conclave.db', readonly=True), f'seq = {seq - 2}')[0][-1][:16]}")
    assert ok["ok"] is True and ok["chain"]["expected_head"] == {"seq": seq - 2, "hash": ok["chain"]["expected_head"]["hash"], "found": True, "events_after": 2}
    bad = check(run.repo, state, f"{seq}:{'0' * 64}")
    assert bad["ok"] is False and f"event {seq} is not the head you expected" in problems(bad)
    # A malformed head is refused saying what --expect-head wants: by the command (its exit code, its stderr) ...
    done = subprocess.run(
        [sys.executable, "-m", "broker.cli", "memory", "verify", "--expect-head", "12", "--repo", str(run.repo), "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "--expect-head" in done.stderr, done.stderr
    # ... and by the op it runs, for each way of getting it wrong.
    for malformed in ("12", "x:abc", f"{seq}:{digest[:8]}"):
        with pytest.raises(ConclaveError) as refused:
            check(run.repo, state, malformed)
        assert refused.value.code.value == "invalid_args" and "--expect-head" in refused.value.message, (malformed, refused.value)


# -- the key itself --------------------------------------------------------------------


def test_a_replaced_key_file_is_named(history, tmp_path: Path) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    old = the_key(state)
    (state / "chain-key").unlink()
    new = ChainKey.create(state / "chain-key")
    report = check(run.repo, state)
    assert report["ok"] is False
    assert f"keyed with key {old.id}, but the chain key file holds key {new.id}" in problems(report)


def test_a_missing_key_is_named_and_the_broker_will_not_append_without_it(history, tmp_path: Path) -> None:
    run, _ = history
    state = copy_of(run, tmp_path)
    (state / "chain-key").unlink()
    report = check(run.repo, state)
    assert report["ok"] is False and "chain key" in problems(report) and "is missing" in problems(report)
    assert not (state / "chain-key").exists()  # no new key was made up over the old chain
    # A broker on this state directory refuses to run rather than append under no key (or a new one).
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "idle"\ncommand = ["true"]\n')
    started = conclave_run("--team", str(team), "--repo", str(run.repo), "--state-dir", str(state), "--json",
                           env={k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")})
    assert started.returncode != 0 and "chain key" in started.stderr and "is missing" in started.stderr, started.stderr
    assert not (state / "chain-key").exists()


# -- a database an older conclave wrote --------------------------------------------------


def test_an_unkeyed_log_is_keyed_from_a_switch_over_event_that_pins_its_history(tmp_path: Path) -> None:
    """Migration: events hashed with plain SHA-256 stay as they are; a keyed store.chain_keyed event follows them."""
    from store.database import open_store

    def unkeyed_store(path: Path) -> None:
        conn = open_store(path, [])
        prev = events.GENESIS
        with conn:
            for seq in range(1, 6):
                at, payload = events.now(), events.canonical({"n": seq})
                digest = events.unkeyed_digest(seq, at, "test.old", "alice:1", None, payload, prev)
                conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", (seq, at, "test.old", "alice:1", None, payload, prev, digest))
                prev = digest
        conn.close()

    from broker.paths import StatePaths

    state, repo = tmp_path / "state", tmp_path / "repo"
    repo.mkdir()
    StatePaths(repo=repo, state=state).ensure()  # the state directory as a broker of that older conclave left it
    unkeyed_store(state / "conclave.db")
    report = check(repo, state)  # the first open keys it
    assert report["ok"] is True, report
    assert report["chain"]["keyed_from"] == 6 and report["chain"]["unkeyed_events"] == 5
    conn = connect(state / "conclave.db", readonly=True)
    switch = rows(conn, f"kind = '{events.KEYED}'")
    conn.close()
    assert len(switch) == 1 and json.loads(switch[0][5])["unkeyed_before"] == 5
    # The attacker rewrites an old, unkeyed event and rehashes the unkeyed prefix after it.
    conn = attacker(state)
    with conn:
        conn.execute("UPDATE events SET payload = '{\"n\":99}' WHERE seq = 3")
        prev = conn.execute("SELECT hash FROM events WHERE seq = 2").fetchone()[0]
        for seq, at, kind, actor, subject, payload, _p, _h in rows(conn, "seq BETWEEN 3 AND 5"):
            new = events.unkeyed_digest(seq, at, kind, actor, subject, payload, prev)
            conn.execute("UPDATE events SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, new, seq))
            prev = new
    conn.close()
    report = check(repo, state)
    assert report["ok"] is False and report["first_bad_event"] == 6
    assert "event 6 does not link to event 5" in problems(report)


def test_a_log_rewritten_without_the_key_and_stripped_of_its_keying_is_named(history, tmp_path: Path) -> None:
    """The attacker rewrites the whole log with plain SHA-256, leaves out the event that keyed it (and the
    operator's retirement), and deletes the anchor: the log now looks like one an older conclave wrote.
    But the key file was there: the store is not re-keyed over the forgery in silence."""
    run, _ = history
    state = copy_of(run, tmp_path)
    assert check(run.repo, state)["ok"] is True  # control
    conn = attacker(state)
    with conn:
        kept = [r for r in rows(conn) if r[2] not in ("store.chain_keyed", "memory.retire")]
        conn.execute("DELETE FROM events")
        prev = events.GENESIS
        for seq, (_, at, kind, actor, subject, payload, _prev, _hash) in enumerate(kept, start=1):
            digest = events.unkeyed_digest(seq, at, kind, actor, subject, payload, prev)
            conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", (seq, at, kind, actor, subject, payload, prev, digest))
            prev = digest
    conn.close()
    (state / "chain-anchor").unlink()
    report = check(run.repo, state)
    assert report["ok"] is False
    assert "exists but the event log has no record of being keyed" in problems(report)
