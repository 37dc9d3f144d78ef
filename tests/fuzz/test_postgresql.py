"""The invariant fuzzer on PostgreSQL with two brokers (alpha: alice, bob, carol; beta: carol, dave) on one database.

The cross-host rules: principals are HOST/agent:session, one trust domain per
agent name across hosts (carol on alpha and carol on beta never make a quorum
together), each broker revokes only its own host's principals, and each
host's lock table (paths, globs, git) and fencing tokens are its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.fuzz import campaign

#: One seed of three examples: a step across two brokers and a shared server costs about four times one on SQLite.
EXAMPLES = 3


def test_random_teams_on_two_brokers_keep_every_invariant(pg_cluster: Any, tmp_path: Path) -> None:
    # The first fixed seed: three examples of one random seed sometimes took too few kinds of step to prove
    # anything (the coverage check below failed on seed 937763894); SQLite runs the random ones.  FUZZ_SEED=N
    # replays a seed here too.
    seeds = campaign.budget_seeds()[-1:] if os.environ.get("FUZZ_SEED") else list(campaign.FIXED_SEEDS[:1])
    report = campaign.run(campaign.postgres_world(tmp_path, pg_cluster), backend="postgresql", seconds=0, seeds=seeds,
                          examples=EXAMPLES, out=tmp_path / "findings", shrink=False)
    campaign.assert_clean(report)
    assert report.seeds == seeds
    campaign.assert_exercised(report)
