"""verify's record walk runs in a short-lived child process of the broker's, and only a whole report from it is a pass.

The walk (the keyed chain and every table rebuilt from it) held about a
gigabyte at a million claims inside the broker; now the broker starts
``python -I -m memory.walk_child`` for it.  What is held here, on a real
broker and a real store (SQLite and PostgreSQL):

* the walk really runs in that process: caught and frozen (SIGSTOP), the
  verify's reply waits for it; let go, the reply names its pid;
* a walk killed midway, or a child that prints garbage, exits non-zero or
  outlives its timeout, is a verify that FAILED, said in a sentence -- never a
  pass -- while the same store's next walk passes (the control);
* the background verify counts a killed walk as a failed run, not as
  tampering (no event, no refusal);
* an operator who hangs up stops the walk, and the walk never outlives its
  broker.

The child is caught by watching the broker's children in ``/proc`` (it lives
for at least its interpreter's start); a walk missed that way is simply
tried again (tests/memory/walk_support.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import Run
from broker import composition
from memory import walk
from store import database, events
from store.backend import StoreUnavailable
from store.chainkey import ChainKey
from tests.memory.memory_support import FACT, vouch
from tests.memory.walk_support import WALKER, caught, cmdline, find_walker, gone, state_of

@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A broker (no background verify: every walk caught here is the operator's) with a trusted claim."""
    store = ""
    if request.param == "postgresql":
        cluster = request.getfixturevalue("pg_cluster")
        store = f'url = "{cluster.broker_url(cluster.database(), "solo")}"\n'
    team = [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}]
    with Run(tmp_path_factory.mktemp(f"apart-{request.param}"), team, extra_toml=f"\n[store]\n{store}verify_every = 0\n") as run:
        claim = run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("ledger"))["id"]
        vouch(run.puppet("bob"), claim)
        vouch(run.puppet("carol"), claim)
        yield run


def broker_pid(run: Run) -> int:
    assert run.process is not None
    return run.process.pid


def test_the_walk_runs_in_a_child_process_and_the_reply_waits_for_it(broker: Run) -> None:
    run, me = broker, broker_pid(broker)
    with caught(me, lambda: run.op("memory.verify")) as (child, pending):
        # The broker's own interpreter, isolated, its own child; nothing of the broker's environment but the plain names.
        assert cmdline(child) == WALKER
        with open(f"/proc/{child}/stat", "rb") as f:
            assert int(f.read().rsplit(b")", 1)[1].split()[1]) == me
        with open(f"/proc/{child}/environ", "rb") as f:
            names = {item.split(b"=", 1)[0].decode() for item in f.read().split(b"\0") if item}
        assert names <= set(walk.ENVIRONMENT), names - set(walk.ENVIRONMENT)
        time.sleep(0.5)
        assert not pending.done(), "verify answered while the process that walks was frozen"
    report = pending.result(timeout=120)
    assert report["ok"], report["problems"]
    assert report["walk"]["pid"] == child != me and report["walk"]["failed"] is None
    assert report["walk"]["peak_rss_mb"] > 0 and report["events"] > 0
    assert gone(child)  # short-lived: it ended with its walk


def test_a_walk_killed_midway_is_a_failed_verify_never_a_pass(broker: Run) -> None:
    """The attack on the new seam: the process whose word the broker takes is killed mid-walk (OOM, a stray
    signal).  Nothing was checked, so the report must not say ok.  Control: the same store's next walk passes."""
    run, me = broker, broker_pid(broker)
    with caught(me, lambda: run.cli("memory", "verify", "--json")) as (child, pending):
        os.kill(child, signal.SIGKILL)
    done = pending.result(timeout=120)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["ok"] is False
    assert f"the walk (process {child}) was killed by SIGKILL before it finished" in report["walk"]["failed"]
    assert report["problems"][0]["problem"].startswith(report["walk"]["failed"])
    assert "the chain and the tables were not checked" in report["problems"][0]["problem"]
    assert report["not_rebuilt"] and report["first_bad_event"] is None
    assert "verify could not check the database" in done.stderr and "behind the broker's back" not in done.stderr
    again = run.op("memory.verify")
    assert again["ok"] and again["walk"]["failed"] is None  # control


def test_an_operator_who_hangs_up_stops_the_walk(broker: Run) -> None:
    """Cancelling the operator's verify (its client gone: Ctrl-C, a closed terminal) kills the walk with it.
    Control: while the client waits, the frozen walk stays (the test above lets it finish)."""
    run, me = broker, broker_pid(broker)
    import subprocess

    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    argv = [sys.executable, "-I", "-m", "broker.cli", "memory", "verify", "--repo", str(run.repo), "--state-dir", str(run.state)]
    client = subprocess.Popen(argv, env=base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child = find_walker(me)
        while child is None:  # missed: ask again
            client.wait(timeout=120)
            client = subprocess.Popen(argv, env=base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            child = find_walker(me)
        time.sleep(0.3)
        assert state_of(child) in ("T", "t")  # control: a client that waits keeps its walk
        client.kill()
        client.wait()
        deadline = time.monotonic() + 20
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child), "the walk went on after the operator hung up"
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert run.op("memory.verify")["ok"]  # the broker is fine


def test_the_background_verify_counts_a_killed_walk_as_a_failure_not_as_tampering(start_run) -> None:  # type: ignore[no-untyped-def]
    run: Run = start_run([{"name": "alice"}], extra_toml="\n[store]\nverify_every = 1\n")
    run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("billing"))
    me = broker_pid(run)
    run.wait_until(lambda: run.op("memory.stats")["background_verify"]["runs"] >= 1, timeout=30, what="a first background verify")
    first = run.op("memory.stats")["background_verify"]
    # Control: a whole walk, done by a child of the broker, found nothing.
    assert first["problems"] == 0 and first["failed"] == 0 and first["walker_pid"] not in (None, me) and first["walker_peak_rss_mb"] > 0
    child = None
    while child is None:  # a walk missed comes round again within the interval
        child = find_walker(me)
    os.kill(child, signal.SIGKILL)
    run.wait_until(lambda: run.op("memory.stats")["background_verify"]["failed"] >= 1, timeout=30, what="the killed walk counted")
    after = run.op("memory.stats")["background_verify"]
    assert after["problems"] == 1 and after["walker_pid"] == child and after["walker_peak_rss_mb"] is None
    assert after["first_problem"] == f"the background verify failed: the walk (process {child}) was killed by SIGKILL before it finished"
    assert run.op("memory.log", kind="store.tampering_found") == []
    assert run.op("broker.stats")["chain_refusing"] is None
    run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("search"))  # appends go on


def test_the_walk_ends_with_its_broker(pg_cluster: Any, tmp_path: Path) -> None:
    """A broker SIGKILLed mid-walk must not leave the walk running (a gigabyte, for nothing).  Here the walk is
    held inside the store -- the table owner locks a table it reads -- so it cannot end by finishing.
    Control: while the broker lives, the held walk stays."""
    database = pg_cluster.database()
    url = pg_cluster.broker_url(database, "solo")
    run = Run(tmp_path, [{"name": "alice"}], extra_toml=f'\n[store]\nurl = "{url}"\nverify_every = 0\n')
    try:
        run.start()
        run.puppet("alice").call("memory.remember", kind="discovery", text=FACT.format("ledger"))
        me = broker_pid(run)
        with pg_cluster.admin(database) as owner, ThreadPoolExecutor(1) as pool:
            owner.execute("BEGIN")
            owner.execute("LOCK TABLE groom_runs IN ACCESS EXCLUSIVE MODE")
            pending = pool.submit(run.cli, "memory", "verify", "--json")
            child = find_walker(me, freeze=False)
            assert child is not None
            time.sleep(1.0)
            assert not gone(child) and not pending.done()  # control: held, and its broker waits for it
            run.kill()
            deadline = time.monotonic() + 20
            while not gone(child) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert gone(child), "the walk outlived its broker"
            owner.execute("ROLLBACK")
            pending.result(timeout=60)
    finally:
        run.close()


# -- the broker's side of the seam, against real processes that do not walk -------------------------------------


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A keyed SQLite store with a few events, as a broker leaves it, and what the broker tells a walker about it."""
    root = tmp_path_factory.mktemp("small-store")
    key = ChainKey.create(root / "chain-key")
    conn = database.open_store(root / "conclave.db", composition.schemas())
    events.key_chain(conn, key)
    with conn:
        events.append(conn, "broker.note", actor=events.BROKER_ACTOR, payload={"n": 1})
    conn.close()
    return {
        "store": {"sqlite": str(root / "conclave.db")},
        "key": str(root / "chain-key"),
        "committed": None,
        "expect": None,
        "features": list(composition.projectors()),
        "libpq": {},
    }


def stand_in(code: str) -> list[str]:
    """A real process in the walker's place (the broker never starts one: its command is fixed)."""
    return [sys.executable, "-I", "-c", code]


REPORT = "{'seconds': 0.1, 'chain': {'walked': 3, 'head': [3, 'ab'], 'findings': [], 'facts': {}}, " \
         "'problems': [], 'not_rebuilt': [], 'pid': os.getpid(), 'peak_rss_kb': 1000}"
WHOLE = f"import json, os; print(json.dumps({REPORT}))"

BROKEN = {
    "not JSON": ("print('all good, trust me')", "printed what is not a walk report"),
    "a JSON list": ("print('[]')", "printed what is not a walk report (a JSON list, not an object"),
    "a report missing its problems": (WHOLE.replace("'problems': [], ", ""), "do not belong or are missing"),
    "a report with an extra field": (WHOLE.replace("'problems': []", "'problems': [], 'ok': True"), "do not belong or are missing"),
    "a problem of the wrong shape": (WHOLE.replace("'problems': []", "'problems': [{'problem': 'x', 'verdict': 'fine'}]"), "printed what is not a walk report"),
    "a walked count that is not a number": (WHOLE.replace("'walked': 3", "'walked': 'many'"), "is not a whole number"),
    "another process's report": (WHOLE.replace("os.getpid()", "1"), "a report that names another process (1) as its author"),
    "a cut report": (f"import json, os, sys; sys.stdout.write(json.dumps({REPORT})[:-9])", "printed what is not a walk report"),
    "nothing at all": ("pass", "printed what is not a walk report"),
    "a crash": ("raise SystemExit('the projector fell over')", "failed with exit status 1: the projector fell over"),
    "a kill": ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "was killed by SIGKILL before it finished"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_anything_but_a_whole_report_is_a_failed_walk(small_store: dict[str, Any], case: str) -> None:
    code, said = BROKEN[case]
    with pytest.raises(walk.WalkFailed) as failed:
        await walk.run(small_store, timeout=60, command=stand_in(code))
    assert said in str(failed.value) and str(failed.value).startswith("the walk (process ")
    # Control: the same reader, given a whole report, takes it.
    ok = await walk.run(small_store, timeout=60, command=stand_in(WHOLE))
    assert ok.chain.walked == 3 and ok.problems == []


async def test_a_walk_past_its_timeout_is_killed_and_failed(small_store: dict[str, Any]) -> None:
    with pytest.raises(walk.WalkFailed, match=r"did not finish: it did not finish within 1 s, so it was killed"):
        await walk.run(small_store, timeout=1, command=stand_in("import time; time.sleep(600)"))


async def test_the_real_walker_on_a_real_store_and_on_an_unreachable_server(small_store: dict[str, Any]) -> None:
    walked = await walk.run(small_store, timeout=120)
    assert walked.problems == [] and walked.chain.walked >= 2 and walked.pid != os.getpid() and walked.peak_rss_kb > 0
    told = {**small_store, "store": {"postgresql": "postgresql://nobody@/nowhere?host=/nonexistent-conclave-socket"}}
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        await walk.run(told, timeout=120)


def test_the_walkers_projectors_are_the_features_own() -> None:
    """The child takes the projectors from ``composition.projectors()`` (cheap to import); they must be exactly
    the ones the features declare, or a table would silently go unchecked."""
    declared = {f.name: f.projector for f in composition.features() if f.projector is not None}
    assert composition.projectors() == declared
