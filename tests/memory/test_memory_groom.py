"""The lifecycle pass: retires and never deletes, never trades a trusted claim for an unverified one."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import apsw
from tests.memory.memory_support import FACT, memory_events, remember, trust

from agents.harness import Run
from memory import groom
from memory.groom import GroomPolicy

PATTERNS = [
    "The sharding router pins each tenant to one shard.",
    "Handlers in the gateway never block on disk reads.",
    "Every migration ships with a matching rollback script.",
    "Feature flags default to off in the staging cluster.",
]




def groom_now(job: Callable[..., Any], policy: GroomPolicy, now: datetime | None = None) -> groom.GroomPlan:
    plan = job(groom.plan, policy, now=now)
    done = skipped = 0
    for chunk in groom.chunks(plan.retire):
        d, s = job(groom.apply_chunk, chunk, actor="operator:uid0", run="test")
        done, skipped = done + d, skipped + s
    job(groom.finish, plan, actor="operator:uid0", run="test", retired=done, skipped=skipped)
    return plan


def tiers(store: apsw.Connection) -> dict[int, str]:
    return dict(store.execute("SELECT id, tier FROM claims"))


def age(store: apsw.Connection, claim: int, days: float) -> None:
    """Test set-up: pretend a claim was written (and last used) ``days`` ago."""
    stamp = (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()
    with store:
        store.execute("UPDATE claims SET created_at = ?, last_used_at = NULL WHERE id = ?", (stamp, claim))
        # A witness's reply shows the claim (an exposure), which is use too.
        store.execute("UPDATE exposures SET at = ? WHERE claim = ?", (stamp, claim))


def counts(store: apsw.Connection) -> dict[str, int]:
    return {t: store.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("claims", "corroborations", "events", "exposures")}


def test_groom_never_deletes_a_row(job: Callable[..., Any], store: apsw.Connection) -> None:
    """CLIO's decay, dedup, caps and prune all deleted rows without a trace."""
    stale = remember(job, "alice", FACT.format("mailer"))
    age(store, stale, days=45)
    original = remember(job, "alice", "The ledger snapshot runs every ten minutes on the primary.")
    copy = remember(job, "mallory", "the ledger snapshot runs every ten minutes on the primary")
    over = [remember(job, "alice", text, kind="pattern") for text in PATTERNS]
    before = counts(store)
    plan = groom_now(job, GroomPolicy(caps=(("pattern", 2),)))
    assert {r.claim: r.rule for r in plan.retire} == {stale: "decay", copy: "duplicate", over[0]: "cap", over[1]: "cap"}
    after = counts(store)
    assert after["claims"] == before["claims"] and after["corroborations"] == before["corroborations"]
    assert after["events"] == before["events"] + len(plan.retire) + 1  # one memory.retire each, one memory.groom
    for claim_id, tier, retired_at, reason in store.execute("SELECT id, tier, retired_at, retired_reason FROM claims WHERE tier = 'retired'"):
        assert retired_at and reason.startswith("groom:"), (claim_id, reason)
        assert [e.kind for e in _events(store, claim_id)][-1] == "memory.retire"
    # Control: what was not planned is untouched.
    assert tiers(store)[original] == "unverified" and tiers(store)[over[3]] == "unverified"


def _events(store: apsw.Connection, claim_id: int) -> list[Any]:
    from store import events

    return events.read(store, subject=str(claim_id))


def test_paraphrased_duplicate_is_not_merged_into_a_trusted_claim(job: Callable[..., Any], store: apsw.Connection) -> None:
    """A near-copy of a trusted claim with a twist must not be folded into it, nor ride on its trust."""
    trusted = remember(job, "alice", "The payments worker retries a failed charge three times with a ten second backoff.")
    trust(job, trusted)
    paraphrase = remember(job, "mallory", "The payments worker retries a failed charge three times with a ten second backoff disabled.")
    plan = groom_now(job, GroomPolicy())
    assert tiers(store)[trusted] == "trusted" and tiers(store)[paraphrase] == "unverified"
    assert store.execute("SELECT text FROM claims WHERE id = ?", (trusted,)).fetchone()[0].endswith("ten second backoff.")
    assert [r["claims"] for r in plan.review] == [[trusted, paraphrase]]
    # Control: an exact copy of the trusted claim is retired, naming the survivor; two unverified
    # near-copies merge into the older one.
    exact = remember(job, "mallory", "the payments worker retries a failed charge three times with a ten second backoff")
    older = remember(job, "dave", "The search cursor expires after five idle minutes on the replica nodes.")
    newer = remember(job, "erin", "The search cursor expires after five idle minutes on the replica nodes today.")
    plan = groom_now(job, GroomPolicy())
    retired = {r.claim: (r.keep, r.reason) for r in plan.retire}
    assert retired[exact][0] == trusted and "trusted claim" in retired[exact][1]
    assert retired[newer][0] == older and older not in retired
    assert tiers(store)[paraphrase] == "unverified" and tiers(store)[trusted] == "trusted"


def test_caps_never_retire_a_trusted_claim_to_make_room_for_an_unverified_one(job: Callable[..., Any], store: apsw.Connection) -> None:
    trusted = []
    for n in range(2):
        claim = remember(job, "alice", f"Workflow {n}: releases are cut from the main branch on Tuesdays.", kind="workflow")
        trust(job, claim)
        trusted.append(claim)
    unverified = [remember(job, "mallory", f"Workflow note {n}: hotfixes skip the staging soak.", kind="workflow") for n in range(3)]
    plan = groom_now(job, GroomPolicy(caps=(("workflow", 3),)))
    assert sorted(r.claim for r in plan.retire) == unverified[:2]  # least recently used unverified first
    assert all(tiers(store)[c] == "trusted" for c in trusted)
    # Control: when trusted claims alone exceed the cap, the cap does bind them.
    extra = [remember(job, "alice", f"Workflow {n}: tags are signed by the release bot.", kind="workflow") for n in range(2, 4)]
    for claim in extra:
        trust(job, claim)
    plan = groom_now(job, GroomPolicy(caps=(("workflow", 3),)))
    assert [r.rule for r in plan.retire] == ["cap", "cap"] and {r.tier for r in plan.retire} == {"unverified", "trusted"}


def test_decay_is_tier_aware(job: Callable[..., Any], store: apsw.Connection) -> None:
    old_unverified = remember(job, "alice", "The importer rejects files larger than two gigabytes.")
    old_trusted = remember(job, "alice", "The exporter writes parquet files with snappy compression.")
    trust(job, old_trusted)
    fresh = remember(job, "alice", "The catalog caches prices for one minute.")
    for claim in (old_unverified, old_trusted):
        age(store, claim, days=60)
    plan = groom_now(job, GroomPolicy())
    assert [(r.claim, r.rule) for r in plan.retire] == [(old_unverified, "decay")]
    assert tiers(store)[old_trusted] == "trusted" and tiers(store)[fresh] == "unverified"
    # Control: past the trusted window (365 days by default) a trusted claim decays too.
    age(store, old_trusted, days=400)
    assert [r.claim for r in groom_now(job, GroomPolicy()).retire] == [old_trusted]


def test_automatic_groom_needs_both_enough_claims_and_enough_time() -> None:
    policy = GroomPolicy(after_claims=10, after_seconds=3600)
    now = datetime.now(timezone.utc)
    hour_ago = (now - timedelta(hours=2)).isoformat()
    assert groom.GroomState(last_at=hour_ago, high_water=0, new_claims=10, first_new_at=hour_ago).due(policy, now)
    assert not groom.GroomState(last_at=hour_ago, high_water=0, new_claims=9, first_new_at=hour_ago).due(policy, now)
    recent = (now - timedelta(minutes=5)).isoformat()
    assert not groom.GroomState(last_at=recent, high_water=0, new_claims=5000, first_new_at=recent).due(policy, now)
    assert groom.GroomState(last_at=None, high_water=0, new_claims=10, first_new_at=hour_ago).due(policy, now)


def test_groom_runs_by_itself_only_once_both_thresholds_are_met(start_run) -> None:  # type: ignore[no-untyped-def]
    run: Run = start_run([{"name": "alice"}], extra_toml="\n[memory]\ngroom_after_claims = 3\ngroom_after_seconds = 1.0\n")
    alice = run.puppet("alice")
    for n in range(2):
        alice.call("memory.remember", kind="discovery", text=f"The notifier batches {n + 2} messages per flush.")
    time.sleep(2.0)  # the time condition is met, the claims condition is not
    assert memory_events(run.state, kind="memory.groom") == []
    alice.call("memory.remember", kind="discovery", text="The notifier drops messages older than a day.")
    run.wait_until(lambda: memory_events(run.state, kind="memory.groom"), timeout=15, what="the automatic groom")
    groomed = memory_events(run.state, kind="memory.groom")
    assert len(groomed) == 1 and groomed[0].actor == "broker" and groomed[0].payload["live"] == 3


def test_dry_run_shows_the_plan_and_changes_nothing(start_run) -> None:  # type: ignore[no-untyped-def]
    # No background verify and no embedder: their counters are in memory.stats too, and on a loaded machine the first
    # background verify (5 s after the start) or an embedded batch landed between the two reads compared below.
    quiet = '\n[store]\nverify_every = 0\n[memory]\nembedder = "none"\n[memory.caps]\nfailure = 1\n'
    run: Run = start_run([{"name": "alice"}, {"name": "bob"}], extra_toml=quiet)
    for n in range(3):
        run.puppet("alice").call("memory.remember", kind="failure", text=f"Build {n} of the gateway failed on a stale lockfile.")
    before = run.op("memory.stats")
    plan = run.op("memory.groom", dry_run=True)
    assert plan["dry_run"] is True and plan["counts"]["retire"] == 2
    assert run.op("memory.stats") == before and memory_events(run.state, kind="memory.retire") == []
    cli = run.cli("memory", "groom", "--dry-run")
    assert cli.returncode == 0 and "2 to retire" in cli.stdout
    # Control: without --dry-run the same plan is carried out.
    done = run.op("memory.groom")
    assert done["retired"] == 2 and run.op("memory.stats")["by_tier"]["retired"] == 2
