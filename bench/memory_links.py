"""``context`` with links followed (``expand``, the default) against ``context`` without, in the same run.

A cached store (``memory_load``: N claims) is copied into a fresh run and
``conclave run`` starts on it.  Then, as the operator over the broker's
socket, the best ``--hits`` claims each benchmark query finds are promoted
(``context`` pushes trusted claims only, and the cached store's witnesses
make none trusted under today's witness rules), ``--extra`` random claims
are promoted too (link targets), and every direct hit is linked
(``memory.link``, ``depends-on``) to ``--fanout`` random trusted claims.
So a block holds a few direct hits and room for what their links reach:
the case where following links does work.  (When the direct hits fill the
budget, links are not followed at all and the two cost the same.)  Each query is then
asked twice per round, ``expand`` off and on, alternating which goes first,
and the figure is the ratio of the two medians (target: at most 1.5x).

    python bench/memory_links.py --size 100000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402
from memory_load import cached_store, install  # noqa: E402
from memory_retrieval import QUIET, figures  # noqa: E402

from agents.harness import Run  # noqa: E402
from store import database  # noqa: E402


def measure(size: int, workdir: Path, queries: int, fanout: int, budget: int, extra: int, hits: int) -> dict[str, object]:
    store = cached_store(workdir, size)
    conn = database.connect(store, readonly=True)
    live = [r[0] for r in conn.execute("SELECT id FROM claims WHERE tier IN ('unverified', 'disputed')")]
    conn.close()
    root = workdir / f"links-{size}"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    run = Run(root, [{"name": "reader"}], extra_toml=QUIET + 'embedder = "none"\n')
    install(store, run.state)
    source, pick = ClaimText(99), random.Random(7)
    asked = [source.query() for _ in range(queries)]
    out: dict[str, object] = {"claims": size, "queries": queries, "budget": budget}
    try:
        run.start(timeout=300)
        with run.operator() as client:
            trusted: set[int] = set()
            for q in asked:
                found = client.call("memory.context", {"query": q, "budget": budget, "expand": False, "include_unverified": True})["claims"]
                trusted.update(hit["id"] for hit in found[:hits])
            trusted |= set(pick.sample(live, extra))
            for claim in sorted(trusted):
                client.call("memory.promote", {"id": claim, "reason": "benchmark"})
            out["trusted"] = len(trusted)
            pool = sorted(trusted)
            links = 0
            for q in asked:
                for hit in client.call("memory.context", {"query": q, "budget": budget, "expand": False})["claims"]:
                    for target in pick.sample(pool, fanout):
                        if target == hit["id"]:
                            continue
                        try:
                            client.call("memory.link", {"source": hit["id"], "target": target, "kind": "depends-on"})
                            links += 1
                        except Exception:  # the same pair drawn twice: a conflict, skipped
                            pass
            out["links"] = links
            samples: dict[bool, list[float]] = {False: [], True: []}
            reached: list[int] = []
            direct: list[int] = []
            for _ in range(3):  # warm, then two measured rounds
                for n, q in enumerate(asked):
                    for expand in ((False, True) if n % 2 else (True, False)):
                        t0 = time.perf_counter()
                        reply = client.call("memory.context", {"query": q, "budget": budget, "expand": expand})
                        samples[expand].append(time.perf_counter() - t0)
                        if expand:
                            reached.append(sum(1 for c in reply["claims"] if c.get("linked")))
                            direct.append(sum(1 for c in reply["claims"] if not c.get("linked")))
            for key in samples:
                samples[key] = samples[key][len(asked):]  # the warm-up round is not counted
            out["without"] = figures(samples[False])
            out["with"] = figures(samples[True])
            out["linked_per_block"] = statistics.mean(reached[len(asked):])
            out["direct_per_block"] = statistics.mean(direct[len(asked):])
    finally:
        run.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=2, help="Links drawn from each direct hit.")
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--hits", type=int, default=2, help="Claims promoted per query (its direct hits in context).")
    parser.add_argument("--extra", type=int, default=2000, help="Random claims promoted besides the queries' hits (link targets).")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conclave-bench"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    r = measure(args.size, args.workdir, args.queries, args.fanout, args.budget, args.extra, args.hits)
    without, with_ = r["without"], r["with"]  # type: ignore[assignment]
    print(f"{'claims':>9} {'trusted':>8} {'links':>7} {'without p50':>12} {'with p50':>10} {'ratio':>6} {'without p99':>12} {'with p99':>10} {'direct/block':>13} {'linked/block':>13}")
    print(
        f"{args.size:>9,} {r['trusted']:>8,} {r['links']:>7,} {without['p50_ms']:>10.2f}ms {with_['p50_ms']:>8.2f}ms {with_['p50_ms'] / without['p50_ms']:>5.2f}x "  # type: ignore[index]
        f"{without['p99_ms']:>10.2f}ms {with_['p99_ms']:>8.2f}ms {r['direct_per_block']:>13.1f} {r['linked_per_block']:>13.1f}"  # type: ignore[index]
    )
    if args.out:
        args.out.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
