"""Two brokers, two clones of one repository, one PostgreSQL server: the multi-host fixtures."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

from agents.harness import Run, make_repo
from tests.pgtools import copy_chain_key


@pytest.fixture
def two_hosts(pg_cluster: Any, tmp_path: Path) -> Iterator[Callable[..., tuple[Run, Run]]]:
    """``two_hosts(agents_a, agents_b)``: brokers ``alpha`` and ``beta``, each on its own clone, one database.

    ``alpha`` starts first and keys the event log; its chain key is copied to
    ``beta``'s state directory before ``beta`` starts (unless ``share_key=False``).
    """
    runs: list[Run] = []

    def start(
        agents_a: Sequence[dict[str, Any]], agents_b: Sequence[dict[str, Any]], *, extra_toml: str = "", share_key: bool = True
    ) -> tuple[Run, Run]:
        database = pg_cluster.database()
        origin = make_repo(tmp_path / "origin")
        clones = []
        for host in ("alpha", "beta"):
            clone = tmp_path / host / "repo"
            subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
            clones.append(clone)
        out = []
        for host, clone, agents in (("alpha", clones[0], agents_a), ("beta", clones[1], agents_b)):
            url = pg_cluster.broker_url(database, host)
            run = Run(tmp_path / host, agents, repo=clone, extra_toml=f'\n[store]\nurl = "{url}"\n{extra_toml}')
            run.database = database  # type: ignore[attr-defined]
            runs.append(run)
            if out and share_key:
                copy_chain_key(out[0], run)
            out.append(run.start())
        return out[0], out[1]

    start.runs = runs  # type: ignore[attr-defined]  # the runs made, started or not
    yield start
    for run in runs:
        run.close()
