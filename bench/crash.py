"""Crash consistency: SIGKILL the broker under load, restart it, and hold the store to what it acknowledged.

    .venv/bin/python bench/crash.py [--rounds 5] [--agents 8] [--load 1.0:3.0] [--postgresql]

Each round starts ``conclave run`` on the same state directory with
``--agents`` writer agents (``crash_worker``) that remember, corroborate
each other's claims, take and release a lock and send mail as fast as the
broker answers; after a random stretch of load (``--load MIN:MAX`` seconds)
the broker gets SIGKILL.  Then a new broker starts on the state directory
and the round is checked:

* every ``remember``, ``corroborate`` and ``msg.send`` that got an ``ok`` is in
  the store (the claim with the text it was given, the witness row, the
  message);
* nothing is half-applied: ``conclave memory verify`` (keyed chain, anchor,
  every claim and witness against its event, the search indexes) is clean, and
  every message has its ``msg.send`` event and the reverse;
* lock history is written behind (docs/LOCKS.md): grants acknowledged but not
  in the log must all come after every grant that is (the lost part is a
  tail, never a hole), and the *window* -- how long before the kill the
  oldest lost grant was acknowledged -- is what a crash can cost.

Prints one row per round and the worst window; exits 1 if any round broke a
promise.  ``tests/store/test_crash_consistency.py`` runs one short round on
each backend.  ``--postgresql`` runs the broker on a PostgreSQL store instead
of the SQLite file (a server of its own, started by ``tests/pgtools.py``): the
server lives on, only the broker is killed.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.harness import Run  # noqa: E402
from store.database import connect  # noqa: E402

HERE = Path(__file__).resolve().parent
#: No automatic groom in the middle of a round (it would retire claims the check looks for), and a
#: mail budget out of reach (the agents send flat out; the budget's refusals are not what is measured).
SETTINGS = "\n[memory]\ngroom_after_seconds = 1000000000\n\n[mail]\ndeliveries_per_minute = 1000000000\nbytes_per_minute = 1000000000000\n"


def team(agents: int, out: Path, go: Path, seconds: float) -> list[dict[str, Any]]:
    # Each agent runs in its box: it may read the worker's scripts, and read and write the round's directory.
    return [
        {
            "name": f"crash{i}",
            "command": [sys.executable, str(HERE / "crash_worker.py"), "--index", str(i), "--agents", str(agents),
                        "--out", str(out), "--go", str(go), "--seconds", str(seconds)],
            "allow_read": [str(HERE), str(out)],
            "allow_write": [str(out)],
        }
        for i in range(agents)
    ]


def store_toml(url: str | None) -> str:
    """The team file's ``[store]`` table for a PostgreSQL store (nothing for the SQLite file)."""
    return f'\n[store]\nurl = "{url}"\n' if url else ""


def load_and_kill(root: Path, agents: int, load_seconds: float, *, round_no: int, probe: Callable[[Run], Any] | None = None,
                  url: str | None = None, at_least: int = 0) -> dict[str, Any]:
    """One round up to the kill: start (or restart) the broker with the writers, load, SIGKILL. Returns the round's facts.

    ``probe(run)``, when given, runs once under the load (its result is in the facts as ``probe``).
    ``url``: the broker's PostgreSQL store (None: the SQLite file in the state directory).
    ``at_least``: after ``load_seconds``, the kill also waits (up to 60 s) until the writers hold that many
    acknowledgements, so a slow machine still kills the broker in the middle of real load.
    """
    out = root / f"round{round_no}"
    out.mkdir()
    go = out / "go"
    run = Run(root, team(agents, out, go, seconds=load_seconds + 30), reuse=round_no > 0, extra_toml=SETTINGS + store_toml(url))
    run.start(wait_for=[], timeout=60)
    try:
        run.wait_until(lambda: len(list(out.glob("*.ready"))) == agents, timeout=120, what="writers to connect")
        go.touch()
        began = time.monotonic()
        probed = probe(run) if probe is not None else None
        time.sleep(max(0.0, load_seconds - (time.monotonic() - began)))
        if at_least:
            run.wait_until(lambda: acks_so_far(out) >= at_least, timeout=60, what=f"{at_least} acknowledged changes")
        assert run.process is not None
        killed_at = time.time()
        run.process.send_signal(signal.SIGKILL)
        run.process.wait(timeout=30)
    finally:
        run.stop()  # reaps the killed broker (or stops one that never got that far)
        shutil.rmtree(run.control, ignore_errors=True)
    # The writers notice the broker is gone and write their summaries -- or end with it, when their box ties
    # them to it: wait until each has done one or the other (its lock on its ack file is free once it ended).
    deadline = time.monotonic() + 30
    while not all((out / f"crash{i}.done").exists() or ended(out / f"crash{i}.acks") for i in range(agents)):
        if time.monotonic() > deadline:
            raise AssertionError(f"writers still running 30 s after the broker was killed: {sorted(p.name for p in out.glob('*.done'))} are done")
        time.sleep(0.02)
    refused = sum(json.loads(done.read_text())["refused"] for done in out.glob("*.done"))
    return {"out": out, "killed_at": killed_at, "load_seconds": load_seconds, "probe": probed, "refused": refused, "url": url}


def ended(acks: Path) -> bool:
    """Whether the writer of ``acks`` has ended (it holds an exclusive lock on the file while it runs)."""
    try:
        fd = os.open(acks, os.O_RDONLY)
    except FileNotFoundError:
        return True  # it never got as far as opening it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def restart_and_check(root: Path, facts: dict[str, Any], *, reader: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Start a fresh broker on the state directory, verify through it, and hold the store to the acks.

    ``reader()`` opens a read connection to the store (default: the SQLite file in the state directory).
    """
    started = time.monotonic()
    run = Run(root, [{"name": "idle"}], reuse=True, extra_toml=SETTINGS + store_toml(facts.get("url")))
    with run:
        run.puppet("idle")
        ready = time.monotonic() - started
        verified = run.cli("memory", "verify", "--json")
        stats = run.op("broker.stats")
    report = json.loads(verified.stdout) if verified.stdout.strip() else {"ok": False, "problems": [{"problem": verified.stderr.strip()}]}
    found = check_acks(run.state, facts["out"], facts["killed_at"], reader=reader)
    found.update(
        restart_seconds=ready,
        verify_ok=verified.returncode == 0 and report.get("ok") is True,
        verify_problems=[p["problem"] for p in report.get("problems", [])][:5],
        lost_events_reported=stats["lost_events"],
        load_seconds=facts["load_seconds"],
    )
    return found


def acks_so_far(out: Path) -> int:
    """How many acknowledgements the writers have recorded so far (whole lines only)."""
    return sum(path.read_bytes().count(b"\n") for path in out.glob("*.acks"))


def read_acks(out: Path) -> list[dict[str, Any]]:
    acks = []
    for path in sorted(out.glob("*.acks")):
        for line in path.read_text().splitlines():
            acks.append(json.loads(line))
    return acks


def check_acks(state: Path, out: Path, killed_at: float, *, reader: Callable[[], Any] | None = None) -> dict[str, Any]:
    """What the store holds against what the writers were told (``reader``: as in :func:`restart_and_check`)."""
    acks = read_acks(out)
    conn = reader() if reader is not None else connect(state / "conclave.db", readonly=True)
    try:
        import hashlib

        texts = {cid: hashlib.sha256(text.encode()).hexdigest() for cid, text in conn.execute("SELECT id, text FROM claims")}
        witnesses = set(conn.execute("SELECT claim, principal FROM corroborations").fetchall())
        messages = {mid for (mid,) in conn.execute("SELECT id FROM mail_messages")}
        send_events = {int(s.split(":", 1)[1]) for (s,) in conn.execute("SELECT subject FROM events WHERE kind = 'msg.send'")}
        tokens: set[int] = set()
        for (payload,) in conn.execute("SELECT payload FROM events WHERE kind = 'lock.grant'"):
            tokens.update(json.loads(payload).get("tokens", []))
    finally:
        conn.close()
    by_op: dict[str, list[dict[str, Any]]] = {}
    for a in acks:
        by_op.setdefault(a["op"], []).append(a)
    lost_claims = [a for a in by_op.get("remember", []) if texts.get(a["id"]) != a["sha"]]
    lost_witnesses = [a for a in by_op.get("corroborate", []) if (a["id"], a["by"]) not in witnesses]
    lost_mail = [a for a in by_op.get("mail", []) if a["id"] not in messages]
    grants = by_op.get("lock", [])
    written = [g for g in grants if g["token"] in tokens]
    lost_grants = [g for g in grants if g["token"] not in tokens]
    last_written = max((g["token"] for g in written), default=0)
    hole = [g for g in lost_grants if g["token"] < last_written]  # a lost grant *before* one that was written
    window = (killed_at - min(g["t"] for g in lost_grants)) if lost_grants else 0.0
    return {
        "acked": {op: len(v) for op, v in sorted(by_op.items())},
        "lost_claims": len(lost_claims),
        "lost_corroborations": len(lost_witnesses),
        "lost_mail": len(lost_mail),
        "half_sent_mail": len(messages ^ send_events),
        "lost_grants": len(lost_grants),
        "grants_lost_out_of_order": len(hole),
        "window_ms": window * 1000,
    }


def pg_reader(owner_url: str) -> Callable[[], Any]:
    """Read connections to a PostgreSQL store as its owner (every host's rows, no row security in the way)."""
    from store.postgres import PgConnection, connect as pg_connect

    return lambda: PgConnection(pg_connect(owner_url), host=None, writer=False)


def promises_kept(r: dict[str, Any]) -> bool:
    return (
        r["verify_ok"] and r["lost_claims"] == 0 and r["lost_corroborations"] == 0 and r["lost_mail"] == 0
        and r["half_sent_mail"] == 0 and r["grants_lost_out_of_order"] == 0 and r["lost_events_reported"] == 0
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--load", default="1.0:3.0", help="seconds of load before the kill, MIN:MAX (drawn per round)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--postgresql", action="store_true", help="a PostgreSQL store (a server of its own, tests/pgtools.py) instead of the SQLite file")
    args = parser.parse_args()
    low, high = (float(x) for x in args.load.split(":"))
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="crash-", dir=args.workdir))
    rows = []
    cluster = url = reader = None
    if args.postgresql:
        from tests.pgtools import Cluster

        cluster = Cluster().start()
        database = cluster.database()
        url = cluster.broker_url(database, "crash")
        reader = pg_reader(cluster.url(database))
    print(f"{'round':>5} {'load s':>6} {'remember':>8} {'corrob.':>7} {'locks':>6} {'mail':>6} {'lost acked':>10} {'lost grants':>11} {'window ms':>9} {'restart s':>9} {'verify':>6}")
    try:
        for n in range(args.rounds):
            facts = load_and_kill(root, args.agents, rng.uniform(low, high), round_no=n, url=url)
            r = restart_and_check(root, facts, reader=reader)
            rows.append(r)
            acked = r["acked"]
            lost = r["lost_claims"] + r["lost_corroborations"] + r["lost_mail"]
            print(f"{n:>5} {r['load_seconds']:>6.2f} {acked.get('remember', 0):>8} {acked.get('corroborate', 0):>7} {acked.get('lock', 0):>6} "
                  f"{acked.get('mail', 0):>6} {lost:>10} {r['lost_grants']:>11} {r['window_ms']:>9.1f} {r['restart_seconds']:>9.2f} "
                  f"{'ok' if r['verify_ok'] else 'FAIL':>6}", flush=True)
            if not r["verify_ok"]:
                print("   " + "\n   ".join(r["verify_problems"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if cluster is not None:
            cluster.stop()
    windows = [r["window_ms"] for r in rows]
    print(f"lock-history window: max {max(windows):.1f} ms, median {statistics.median(windows):.1f} ms over {len(rows)} kills "
          f"(grants acknowledged this long before the kill were not yet written)")
    kept = all(promises_kept(r) for r in rows)
    print("every acknowledged change survived, nothing half-applied, verify clean" if kept else "A PROMISE WAS BROKEN (see the rows above)")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2, default=str))
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
