"""The invariant fuzzer on SQLite, on make test's short budget (docs/FUZZING.md).

The fixed seeds (the same sequences every run), then one random seed; every
seed is printed with the command that replays it (and shrinks what it finds
to a scenario file).  FUZZ_SEED=N reruns a random seed a failure printed.
"""

from __future__ import annotations

from pathlib import Path

from tests.fuzz import campaign

#: Examples per seed in make test (a seed's examples run on the same brokers, up to 30 steps each).
EXAMPLES = 2


def test_random_teams_on_sqlite_keep_every_invariant(tmp_path: Path) -> None:
    seeds = campaign.budget_seeds()
    report = campaign.run(campaign.sqlite_world(tmp_path), backend="sqlite", seconds=0, seeds=seeds, examples=EXAMPLES,
                          out=tmp_path / "findings", shrink=False)
    campaign.assert_clean(report)
    assert report.seeds == seeds
    # A clean run is worth something only if it ran: the common rules, and every invariant checked.
    campaign.assert_exercised(report)
