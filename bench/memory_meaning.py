"""Retrieval by meaning through a real broker: ``context`` and ``recall`` latency, words only against words + meaning.

For each corpus size a cached store (``memory_load``) gets a vector for
every claim, then two brokers run on copies of it, one after the other, in
the same run: ``embedder = "none"`` (the words-only path) and the default
local embedder.  The operator sends ``memory.context`` and ``memory.recall``
for queries drawn from the corpus.  With the embedder, each query is
measured twice: *cold* (the query's vector is computed: the model runs) and
*warm* (the broker's query cache has it: only the search runs).  Then it
waits for the broker's first background verify to end (it starts 5 s after
the broker; ``--verify-wait 0`` does not wait) and reports the broker's peak
resident memory (``VmHWM``, the whole run), its vector index's size, and
the peak of the verify's walk, which runs in a child process of its own
(``memory.walk``: ``background_verify.walker_peak_rss_mb``) -- two processes,
two figures, never added into one.

The vectors: embedding 100k claims with the real model takes about an hour
on this machine, so the real model embeds ``--pool`` distinct corpus texts
and every claim gets one of those vectors plus a little noise (normalised).
Search cost depends on the number of vectors, not on their content; recall
figures come from the labelled set (tests/memory/test_memory_meaning_eval.py).

    python bench/memory_meaning.py --sizes 10000 100000 --queries 200
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402
from memory_load import cached_store, chain_files, install  # noqa: E402
from memory_retrieval import broker_memory, figures  # noqa: E402

from agents.harness import Run  # noqa: E402
from broker import composition  # noqa: E402
from memory import embedder, vectors  # noqa: E402
from broker.errors import ConclaveError  # noqa: E402
from store import database  # noqa: E402

QUIET = "\n[memory]\ngroom_after_seconds = 1000000000\n"


def with_vectors(workdir: Path, size: int, pool: int) -> Path:
    """A copy of the cached store, migrated, with a vector for every claim (cached too)."""
    import numpy as np

    target = workdir / f"meaning-{size}.db"
    if target.exists():
        return target
    source = cached_store(workdir, size)
    partial = workdir / f"meaning-{size}.partial.db"
    shutil.copyfile(source, partial)
    for made, final in zip(chain_files(source), chain_files(target)):
        shutil.copyfile(made, final)
    conn = database.open_store(partial, composition.schemas())
    ids_texts = list(conn.execute("SELECT id, text FROM claims ORDER BY id"))
    cache = workdir / f"meaning-pool-{size}-{pool}.npy"
    if cache.exists():
        base = np.load(cache)
    else:
        model = embedder.LocalEmbedder()
        step = max(1, len(ids_texts) // pool)
        started = time.perf_counter()
        base = model.embed([t for _, t in ids_texts[::step][:pool]], "passage")
        print(f"  embedded {len(base)} pool texts in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        np.save(cache, base)
    rng = np.random.default_rng(7)
    with conn:
        for start in range(0, len(ids_texts), 10_000):
            chunk = ids_texts[start : start + 10_000]
            noisy = base[np.arange(start, start + len(chunk)) % len(base)] + rng.normal(0, 0.01, (len(chunk), base.shape[1])).astype(np.float32)
            noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
            conn.executemany(
                "INSERT INTO claim_vectors(claim, model, vector, at) VALUES (?, ?, ?, '2026-12-01T00:00:00+00:00')",
                [(claim_id, embedder.LOCAL_MODEL, vectors.encode(v)) for (claim_id, _), v in zip(chunk, noisy)],
            )
    conn.close()
    partial.rename(target)
    return target


def make_trusted(client: object, size: int, every: int) -> int:
    """Every ``every``-th claim promoted by the operator (``memory.promote``, as a person would: recorded).

    ``context`` looks at trusted claims; the cached corpus has none (it was written by agents with no
    witnesses), so without this both paths would search nothing."""
    promoted = 0
    for claim in range(every, size + 1, every):
        try:
            client.call("memory.promote", {"id": claim, "reason": "bench: a trusted share for context to search"})  # type: ignore[attr-defined]
            promoted += 1
        except ConclaveError:
            pass  # retired or disputed in the corpus: left as it is
    return promoted


def run_one(store: Path, root: Path, chosen: str, asked: list[str], verify_wait: float = 3600, trusted_every: int = 0, size: int = 0) -> dict[str, object]:
    if root.exists():
        shutil.rmtree(root)
    run = Run(root, [{"name": "reader"}], extra_toml=QUIET + f'embedder = "{chosen}"\n')
    install(store, run.state)
    out: dict[str, object] = {"embedder": chosen}
    try:
        run.start(timeout=300)
        with run.operator() as client:
            out["trusted"] = make_trusted(client, size, trusted_every) if trusted_every else 0
            for q in asked[:10]:  # warm the page cache, load the index
                client.call("memory.context", {"query": q + " warmup"})
            passes = [("cold", asked)] if chosen == "none" else [("cold", asked), ("warm", asked)]
            for label, queries in passes:
                for op, args in (("context", {}), ("recall", {"limit": 10})):
                    samples = []
                    for q in queries:
                        # cold: a query the broker has not seen (its vector is computed); warm: the same again
                        text = q if label == "warm" or op == "context" else q + " ?"
                        t0 = time.perf_counter()
                        client.call(f"memory.{op}", {"query": text, **args})
                        samples.append(time.perf_counter() - t0)
                    out[f"{op}_{label}"] = figures(samples)
            stats = client.call("memory.stats", {})
            deadline = time.monotonic() + verify_wait
            while verify_wait and stats["background_verify"]["runs"] < 1 and time.monotonic() < deadline:
                time.sleep(1)
                stats = client.call("memory.stats", {})
        assert run.process is not None
        out["verify"] = stats["background_verify"]
        out["broker"] = broker_memory(run.process.pid)
        out["index"] = (stats.get("meaning") or {}).get("index")
    finally:
        run.close()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool", type=int, default=300, help="distinct texts the real model embeds")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conclave-bench"))
    parser.add_argument("--embedders", nargs="+", choices=("none", "local"), default=["none", "local"])
    parser.add_argument("--verify-wait", type=float, default=3600, help="seconds to wait for the first background verify (0: do not)")
    parser.add_argument("--trusted-every", type=int, default=50, help="make every Nth claim trusted in each run's copy (0: none, as cached)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    source = ClaimText(99)
    asked = [source.query() for _ in range(args.queries)]
    rows = []
    print(f"trusted in each run's copy: every {args.trusted_every}th claim" if args.trusted_every else "trusted: none (the cached corpus as it is)")
    print(f"{'claims':>9} {'embedder':>8} {'context p50':>12} {'warm p50':>9} {'recall p50':>11} {'warm p50':>9} {'broker MB':>10} {'index MB':>9} "
          f"{'walk MB':>8} {'walk s':>7}")
    for size in args.sizes:
        store = with_vectors(args.workdir, size, args.pool)
        for chosen in args.embedders:
            r = run_one(store, args.workdir / f"meaning-run-{size}", chosen, asked, args.verify_wait, args.trusted_every, size)
            r["claims"] = size
            rows.append(r)
            warm_c = r.get("context_warm", {}).get("p50_ms", float("nan"))  # type: ignore[union-attr]
            warm_r = r.get("recall_warm", {}).get("p50_ms", float("nan"))  # type: ignore[union-attr]
            index = r.get("index") or {}
            verified = r.get("verify") or {}
            print(
                f"{size:>9,} {chosen:>8} {r['context_cold']['p50_ms']:>10.2f}ms {warm_c:>7.2f}ms {r['recall_cold']['p50_ms']:>9.2f}ms {warm_r:>7.2f}ms "  # type: ignore[index]
                f"{r['broker']['peak_rss_mb']:>9.0f} {index.get('bytes', 0) / 1e6:>9.1f} "  # type: ignore[index, union-attr]
                f"{verified.get('walker_peak_rss_mb') or float('nan'):>8.0f} {verified.get('last_seconds') or float('nan'):>7.0f}",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
