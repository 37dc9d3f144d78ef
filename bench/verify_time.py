"""How long ``conclave memory verify`` takes: the keyed chain walked and every table rebuilt and compared.

    .venv/bin/python bench/verify_time.py --claims 100000 [--postgresql] [--repeat 2]

The store is built by ``bench/memory_load.py`` (10% trusted by two
corroborations, 2% disputed; cached under ``--workdir``).  With
``--postgresql`` the same rows -- events, claims, witnesses, every table --
are copied into a fresh database on a server of its own
(``tests/pgtools.py``), and verified as host ``bench``'s broker role.
Then the same check ``verify`` runs (``memory.verify.check_records``: the
chain, every projector's tables) on a read connection, ``--repeat`` times;
wall and CPU seconds of each are printed as JSON.  (The FTS5
``integrity-check`` verify also runs on SQLite is timed apart: it is
SQLite's own, under the writer.)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_load  # noqa: E402

from broker import composition  # noqa: E402
from memory import verify  # noqa: E402
from store import database  # noqa: E402
from store.chainkey import ChainKey  # noqa: E402


def timed(conn_of: Callable[[], Any], key: ChainKey, repeat: int) -> list[dict[str, Any]]:
    projectors = [f.projector for f in composition.features() if f.projector is not None]
    runs = []
    for _ in range(repeat):
        conn = conn_of()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            chain, problems, unrebuilt = verify.check_records(conn, key=key, projectors=projectors)
            runs.append({"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2),
                         "events": chain.walked, "problems": len(problems), "not_rebuilt": unrebuilt})
        finally:
            conn.close()
    return runs


#: The tables copied into PostgreSQL, with the columns both schemas write (not PostgreSQL's generated ones).
COPIED = {
    "events": "seq, at, kind, actor, subject, payload, prev_hash, hash",
    "claims": "id, lineage, edition, supersedes, superseded_by, kind, scope, text, text_key, evidence, author, author_domain, tier, "
              "created_at, last_used_at, retired_at, retired_by, retired_reason",
    "corroborations": "id, claim, principal, domain, at, evidence, blind, counted, reason_not_counted",
    "disputes": "id, claim, principal, domain, at, reason, counted, reason_not_counted",
    "promotions": "id, claim, at, by, reason",
    "exposures": "id, claim, lineage, principal, domain, via, at",
    "memory_settings": "key, value",
    "groom_runs": "id, at, actor, high_water, summary",
}


def copy_into(store: Path, owner_url: str) -> dict[str, int]:
    """Every row of the SQLite store into the PostgreSQL database, as its owner (no row security in the way)."""
    import psycopg

    source = database.connect(store, readonly=True)
    counts = {}
    with psycopg.connect(owner_url) as target:
        for table, columns in COPIED.items():
            with target.cursor().copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                n = 0
                for row in source.execute(f"SELECT {columns} FROM {table} ORDER BY 1"):
                    copy.write_row(row)
                    n += 1
            counts[table] = n
        target.commit()
    source.close()
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--postgresql", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "conclave-bench")
    args = parser.parse_args()
    out: dict[str, Any] = {"claims": args.claims, "backend": "postgresql" if args.postgresql else "sqlite"}
    if not args.postgresql:
        store = memory_load.cached_store(args.workdir, args.claims)
        key = ChainKey.load(memory_load.chain_files(store)[0])
        assert key is not None
        out["runs"] = timed(lambda: database.connect(store, readonly=True), key, args.repeat)
        conn = database.connect(store)
        wall, cpu = time.perf_counter(), time.process_time()
        problems = verify.check_indexes(conn)
        out["fts_integrity_check"] = {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2), "problems": len(problems)}
        conn.close()
    else:
        from tests.pgtools import Cluster

        from store.postgres import PgConnection, connect

        store = memory_load.cached_store(args.workdir, args.claims)
        key = ChainKey.load(memory_load.chain_files(store)[0])
        assert key is not None
        cluster = Cluster().start()
        try:
            name = cluster.database()
            url = cluster.broker_url(name, "bench")
            out["copied_rows"] = copy_into(store, cluster.url(name))
            out["runs"] = timed(lambda: PgConnection(connect(url), host="bench", writer=False), key, args.repeat)
        finally:
            cluster.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
