"""The trust policy as a pure function, and its configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.memory.memory_support import vouch

from memory.policy import NotCounted, PolicyError, Tier, TrustPolicy, Witness, judge


def w(row: int, domain: str, *, blind: bool = False, revoked: bool = False, at: str = "2026-01-01T00:00:00") -> Witness:
    return Witness(row=row, principal=f"{domain}:s{row}", domain=domain, at=at, blind=blind, revoked=revoked)


def test_quorum_counts_distinct_domains_never_the_authors() -> None:
    standing = judge(TrustPolicy(), author_domain="alice", corroborations=[w(1, "alice"), w(2, "bob"), w(3, "bob")])
    assert standing.tier is Tier.UNVERIFIED
    assert [(v.counted, v.reason) for v in standing.corroborations] == [
        (False, NotCounted.AUTHOR_DOMAIN), (True, None), (False, NotCounted.DOMAIN_ALREADY_COUNTED)
    ]
    # Control: a second independent domain reaches the default quorum of 2.
    assert judge(TrustPolicy(), author_domain="alice", corroborations=[w(2, "bob"), w(4, "carol")]).tier is Tier.TRUSTED


def test_require_blind_prefers_a_domains_blind_witness() -> None:
    """bob first agreed after reading, later rediscovered it blind: bob's blind row is the one that counts."""
    policy = TrustPolicy(require_blind=True)
    rows = [w(1, "bob"), w(2, "carol"), w(3, "bob", blind=True)]
    standing = judge(policy, author_domain="alice", corroborations=rows)
    assert standing.tier is Tier.TRUSTED and standing.has_blind
    assert [v.counted for v in standing.corroborations] == [False, True, True]
    # Control: informed witnesses only are refused, whatever their number.
    assert judge(policy, author_domain="alice", corroborations=[w(1, "bob"), w(2, "carol"), w(3, "dave")]).tier is Tier.UNVERIFIED


def test_revoked_witnesses_and_disputes_stop_counting() -> None:
    rows = [w(1, "bob", revoked=True), w(2, "carol")]
    standing = judge(TrustPolicy(), author_domain="alice", corroborations=rows)
    assert standing.tier is Tier.UNVERIFIED and standing.corroborations[0].reason is NotCounted.REVOKED
    disputed = judge(TrustPolicy(), author_domain="alice", corroborations=[w(2, "carol"), w(3, "dave")], disputes=[w(4, "bob", revoked=True)])
    assert disputed.tier is Tier.TRUSTED
    # Control: the same dispute from a live independent principal disputes it.
    assert judge(TrustPolicy(), author_domain="alice", corroborations=[w(2, "carol"), w(3, "dave")], disputes=[w(4, "bob")]).tier is Tier.DISPUTED


def test_promotion_covers_earlier_disputes_but_not_later_ones() -> None:
    early, late = "2026-01-01T00:00:00", "2026-03-01T00:00:00"
    promoted = "2026-02-01T00:00:00"
    assert judge(TrustPolicy(), author_domain="alice", corroborations=[], disputes=[w(1, "bob", at=early)], promoted_at=promoted).tier is Tier.TRUSTED
    assert judge(TrustPolicy(), author_domain="alice", corroborations=[], disputes=[w(1, "bob", at=late)], promoted_at=promoted).tier is Tier.DISPUTED
    # The author's own domain cannot dispute its way anywhere either.
    assert judge(TrustPolicy(), author_domain="alice", corroborations=[], disputes=[w(1, "alice")]).tier is Tier.UNVERIFIED


@pytest.mark.parametrize(
    "table,fragment",
    [({"quorum": 0}, "quorum"), ({"quorum": "2"}, "quorum"), ({"require_blind": "yes"}, "require_blind"), ({"qorum": 3}, "qorum")],
)
def test_policy_table_is_validated(table: dict[str, object], fragment: str) -> None:
    with pytest.raises(PolicyError, match=fragment):
        TrustPolicy.from_table(table)
    assert TrustPolicy.from_table({"quorum": 3, "require_blind": True}) == TrustPolicy(3, True)


def test_a_team_file_with_a_bad_policy_is_refused_before_anything_runs(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[[agent]]\nname = "alice"\ncommand = ["true"]\n\n[policy]\nquorum = 0\n')
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "run", "--team", str(team), "--repo", str(tmp_path), "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2 and "[policy]: quorum must be" in result.stderr
    assert not (tmp_path / "s" / "conclave.db").exists()


async def test_raising_the_quorum_demotes_claims_that_no_longer_reach_it(start_run) -> None:  # type: ignore[no-untyped-def]
    """The team file's [policy] changes between runs: standings follow the rule in force, with events."""
    from broker import composition
    from broker.core import open_core
    from broker.paths import StatePaths
    from broker.team import parse
    from store import events
    from memory.ops import SERVICE

    run = start_run([{"name": "alice"}, {"name": "bob"}, {"name": "carol"}])
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text="The cache warms in ninety seconds after a deploy.")["id"]
    vouch(run.puppet("bob"), claim)
    assert vouch(run.puppet("carol"), claim)["tier"] == "trusted"
    run.stop()
    paths = StatePaths(repo=run.repo, state=run.state)
    stricter = parse({"agent": [{"name": "alice", "command": ["true"]}], "policy": {"quorum": 3}}, repo=run.repo, rules=composition.team_rules(), check_commands=False)
    async with open_core(paths, team=stricter, live=False, features=composition.features()) as core:
        svc = core.extensions[SERVICE]
        assert svc.policy == TrustPolicy(quorum=3)
        tier = await core.store.call(lambda conn: conn.execute("SELECT tier FROM claims WHERE id = ?", (claim,)).fetchone()[0])
        changes = await core.store.call(lambda conn: events.read(conn, kind_prefix="memory.tier", subject=str(claim)))
    assert tier == "unverified" and changes[-1].payload["cause"] == "the trust policy changed"
    # With no team file (an operator command, no broker), the recorded policy applies -- not the default.
    async with open_core(paths, team=None, live=False, features=composition.features()) as core:
        assert core.extensions[SERVICE].policy == TrustPolicy(quorum=3)
        assert (await core.extensions[SERVICE].verify())["ok"] is True
