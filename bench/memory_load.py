"""Build a memory corpus of N claims in a state directory, through the memory's own code.

Claims are written with the same functions the broker's ops call
(``memory.authoring``): every claim gets its row, its FTS entry and its
hash-chained event; 10% are made trusted by two corroborations from
independent domains, 2% disputed, and 2% are exact copies of an earlier
claim by another author (groom's duplicates).  The principals are made up
by the benchmark (no broker runs while loading); everything measured later
goes through a real broker.

Built stores are cached by size under the work directory, so the retrieval
and groom benchmarks can share them.

    python bench/memory_load.py --claims 100000 --workdir /tmp/conclave-bench
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402

from broker.identity import Principal, Role  # noqa: E402
from memory import authoring, claims, exposures  # noqa: E402
from broker import composition  # noqa: E402
from store import database, events  # noqa: E402
from store.anchor import AnchorFile  # noqa: E402
from store.chainkey import ChainKey  # noqa: E402
from memory.policy import TrustPolicy  # noqa: E402

TRUSTED_SHARE = 0.10
DISPUTED_SHARE = 0.02
DUPLICATE_SHARE = 0.02
AUTHORS = 40
WITNESSES = 40
BATCH = 5000


def bench_principal(agent: str, n: int, host: str | None = None) -> Principal:
    return Principal(agent=agent, session=f"bench{n:06d}", role=Role.AGENT, domain=agent, host=host)


def build(path: Path, count: int, *, seed: int = 3, progress: bool = True) -> dict[str, float]:
    """Write ``count`` claims into a fresh database at ``path``; return load figures."""
    conn = database.open_store(path, composition.schemas())
    # The store is keyed and anchored as a broker would leave it; install() copies both files beside it.
    key_file, anchor_file = chain_files(path)
    for leftover in (key_file, anchor_file):
        leftover.unlink(missing_ok=True)
    key = ChainKey.create(key_file)
    figures = load(conn, key, count, seed=seed, progress=progress)
    conn.pragma("wal_checkpoint", "TRUNCATE")
    anchor = AnchorFile(anchor_file, key)
    head = events.head(conn)
    anchor.write(head, head)
    anchor.close()
    conn.close()
    return figures


def load(conn: Any, key: ChainKey, count: int, *, seed: int = 3, progress: bool = True, host: str | None = None) -> dict[str, float]:
    """Write ``count`` claims through ``conn`` (SQLite, or a PostgreSQL writer whose role is ``host``'s), keyed with ``key``."""
    policy = TrustPolicy()
    rng = random.Random(seed)
    source = ClaimText(seed)
    authors = [bench_principal(f"author{i}", i, host) for i in range(AUTHORS)]
    witnesses = [bench_principal(f"witness{i}", i, host) for i in range(WITNESSES)]
    events.key_chain(conn, key)
    with conn:
        exposures.start_log(conn)  # as a broker's first start does: blindness is rebuilt from the showings
    started = time.perf_counter()
    written: list[str] = []
    tiers = {"trusted": 0, "disputed": 0, "unverified": 0}
    done = 0
    while done < count:
        with conn:
            for _ in range(min(BATCH, count - done)):
                kind, text = source.kind(), source.text()
                if written and rng.random() < DUPLICATE_SHARE:
                    text = rng.choice(written)
                author = rng.choice(authors)
                claim = claims.insert(conn, author, kind=kind, scope="repo", text=text, evidence=None)
                written.append(text) if len(written) < 50_000 else None
                roll = rng.random()
                if roll < TRUSTED_SHARE:
                    for w in rng.sample(witnesses, 2):
                        authoring.corroborate(conn, policy, w, claim.id, evidence=None)
                    tiers["trusted"] += 1
                elif roll < TRUSTED_SHARE + DISPUTED_SHARE:
                    authoring.dispute(conn, policy, rng.choice(witnesses), claim.id, reason="it no longer reproduces")
                    tiers["disputed"] += 1
                else:
                    tiers["unverified"] += 1
                done += 1
        if progress and done % 50_000 < BATCH:
            rate = done / (time.perf_counter() - started)
            print(f"  loaded {done:,} claims ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    return {"claims": count, "seconds": time.perf_counter() - started, **tiers}


def cached_store(workdir: Path, count: int) -> Path:
    """The database file for ``count`` claims, built once per work directory."""
    target = workdir / f"memory-{count}.db"
    if not target.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        partial = workdir / f"memory-{count}.partial.db"
        for leftover in workdir.glob(f"memory-{count}.partial.db*"):
            leftover.unlink()
        print(f"building a {count:,}-claim store in {target}", file=sys.stderr, flush=True)
        figures = build(partial, count)
        print(f"  built in {figures['seconds']:.0f} s: {figures}", file=sys.stderr, flush=True)
        for made, final in zip(chain_files(partial), chain_files(target)):
            made.rename(final)
        partial.rename(target)
    return target


def chain_files(store: Path) -> tuple[Path, Path]:
    """The chain key and anchor kept beside a cached store."""
    return store.with_name(store.name + ".chain-key"), store.with_name(store.name + ".chain-anchor")


def install(store: Path, state: Path) -> None:
    """Copy a cached database into a run's state directory (before the broker starts)."""
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copyfile(store, state / "conclave.db")
    key_file, anchor_file = chain_files(store)
    if key_file.exists():  # a store cached before the chain was keyed has neither: the broker keys it
        shutil.copyfile(key_file, state / "chain-key")
        (state / "chain-key").chmod(0o600)
        shutil.copyfile(anchor_file, state / "chain-anchor")


def fresh_run(workdir: Path, count: int, name: str, extra_toml: str, agent: str = "keeper"):  # type: ignore[no-untyped-def]
    """A broker run (not started) at ``workdir/NAME-COUNT`` whose state holds a copy of the cached store."""
    from agents.harness import Run

    store = cached_store(workdir, count)
    root = workdir / f"{name}-{count}"
    if root.exists():
        shutil.rmtree(root)
    run = Run(root, [{"name": agent}], extra_toml=extra_toml)
    install(store, run.state)
    return run


def size_args(description: str) -> argparse.Namespace:
    """The options every corpus benchmark takes: --sizes, --workdir, --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conclave-bench"))
    parser.add_argument("--out", type=Path)
    return parser.parse_args()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, required=True)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conclave-bench"))
    args = parser.parse_args()
    print(cached_store(args.workdir, args.claims))


if __name__ == "__main__":
    main()
