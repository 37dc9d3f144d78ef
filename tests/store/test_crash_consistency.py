"""Nothing acknowledged is lost: the broker SIGKILLed under load, restarted, and held to every ``ok`` it gave.

Eight agents remember, corroborate each other's claims, take and release
locks and send mail as fast as the broker answers; a second and a half in
(and not before the agents hold over a hundred acknowledgements: a slow
machine gets there later), the broker is killed with SIGKILL (no cleanup,
no last anchor write), and ``conclave run`` starts again on the same state directory.  One round of
``bench/crash.py`` (which runs more, and prints the lock-history window), on
each backend: the SQLite file, and a PostgreSQL store (the server lives on;
only the broker is killed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import crash  # noqa: E402


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_acknowledged_change_survives_a_sigkill_and_nothing_is_half_applied(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = reader = None
    seconds = 1.5
    if backend == "postgresql":
        seconds = 3.0  # every write is a few round trips to a server: the same hundred-odd ops take longer
        cluster: Any = request.getfixturevalue("pg_cluster")
        database = cluster.database()
        url = cluster.broker_url(database, "crash")
        reader = crash.pg_reader(cluster.url(database))
    # While the load runs, verify through the broker: the head moves under it, and it must still say ok.
    facts = crash.load_and_kill(tmp_path, 8, seconds, round_no=0, probe=lambda run: run.cli("memory", "verify", "--json"), url=url,
                                at_least=101)
    assert facts["probe"].returncode == 0, facts["probe"].stdout[-2000:]
    acked = crash.read_acks(facts["out"])
    assert len({a["op"] for a in acked}) == 5 and len(acked) > 100, "the load never got going"
    assert facts["refused"] == 0  # every op the agents tried was carried out (no budget or rule got in the way)
    result = crash.restart_and_check(tmp_path, facts, reader=reader)
    # Control for the check itself: it finds a claim that is not there.
    forged = {"op": "remember", "id": 10**9, "sha": "0" * 64, "t": 0.0}
    (facts["out"] / "control.acks").write_text(__import__("json").dumps(forged) + "\n")
    assert crash.check_acks(tmp_path / "state", facts["out"], facts["killed_at"], reader=reader)["lost_claims"] == 1
    assert result["verify_ok"], result["verify_problems"]
    assert (result["lost_claims"], result["lost_corroborations"], result["lost_mail"], result["half_sent_mail"]) == (0, 0, 0, 0), result
    # Lock history is written behind: a crash may cost its tail, never a grant before one that was written.
    assert result["grants_lost_out_of_order"] == 0, result
    assert result["lost_events_reported"] == 0
