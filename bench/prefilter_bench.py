"""What the multilingual word rules add to the prefilter, per claim, against the English rules alone in the same run.

    .venv/bin/python bench/prefilter_bench.py --claims 4000 --repeat 5 --json

Every text goes through :func:`memory.prefilter.check_claim` -- what
``memory.remember`` runs before it stores anything -- twice per round, in
turn: with the multilingual rules (``memory.multilingual``), and with them
switched off in this process (the English rules alone, as before issue 24's
second round).  Texts: the benchmark corpus (English claims that all pass,
``bench/memory_corpus.py``) and the labelled sets in eight languages (half of
them refused).  Printed: CPU microseconds per claim for each (CPU time, so that
other processes on a loaded machine do not count), and their ratio.
The broker's whole ``remember`` is measured by ``bench/memory_write.py``
(docs/BENCHMARKS.md puts the two side by side).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_corpus import ClaimText  # noqa: E402
from memory import multilingual, prefilter  # noqa: E402
from tests.memory import prefilter_training, semantic_cases, semantic_heldout  # noqa: E402


def per_claim_us(texts: list[str]) -> float:
    start = time.process_time()
    for text in texts:
        prefilter.check_claim(text, "repo")
    return (time.process_time() - start) / len(texts) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus = [text for _, text in ClaimText().claims(args.claims)]
    labelled = [c.text for c in (*semantic_cases.CASES, *prefilter_training.CASES, *semantic_heldout.CASES)]
    real = multilingual.check
    prefilter.check_claim("warm up", "repo")
    results: dict[str, dict[str, list[float]]] = {"corpus": {"english_only": [], "multilingual": []}, "labelled": {"english_only": [], "multilingual": []}}
    for _ in range(args.repeat):
        for name, texts in (("corpus", corpus), ("labelled", labelled)):
            multilingual.check = lambda text, **_: None  # type: ignore[assignment]
            results[name]["english_only"].append(per_claim_us(texts))
            multilingual.check = real
            results[name]["multilingual"].append(per_claim_us(texts))
    out = {
        name: {
            "texts": len(corpus if name == "corpus" else labelled),
            "english_only_us": round(statistics.median(r["english_only"]), 1),
            "multilingual_us": round(statistics.median(r["multilingual"]), 1),
            "ratio": round(statistics.median(r["multilingual"]) / statistics.median(r["english_only"]), 2),
        }
        for name, r in results.items()
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name, r in out.items():
            print(f"{name} ({r['texts']} texts): English rules {r['english_only_us']} us CPU/claim, with the multilingual rules {r['multilingual_us']} us CPU/claim ({r['ratio']}x)")


if __name__ == "__main__":
    main()
