"""Figures from out-of-fold scores: orders refused at thresholds giving ~1%, ~2%, ~3% of benign texts refused.

    python bench/prefilter_encoder/report.py probe attn [...]      # names of /work/ft-cache/oof-<name>.npy

A model's score is the mean over its seeds.  The threshold is chosen on ALL out-of-fold benign scores
(the smallest threshold at which at most 1/2/3% of benign texts are refused), then applied per language.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e5tok  # noqa: E402

RATES = (0.01, 0.02, 0.03)


def threshold(benign: np.ndarray, rate: float) -> float:
    s = np.sort(benign)[::-1]
    allowed = int(np.floor(rate * len(s)))
    return float(s[allowed]) + 1e-9 if allowed < len(s) else -np.inf


def main() -> None:
    z = np.load(e5tok.CACHE / "states.npz")
    y = z["labels"] != "benign"
    langs = z["langs"]
    names = sys.argv[1:]
    scores = {n: np.load(e5tok.CACHE / f"oof-{n}.npy").mean(0) for n in names}
    print("Overall (5-fold CV, 6,425 texts):\n")
    print("| model | " + " | ".join(f"orders @ ~{r:.0%} benign" for r in RATES) + " |")
    print("| --- | " + " | ".join("---:" for _ in RATES) + " |")
    thr = {}
    for n, s in scores.items():
        cells = []
        for r in RATES:
            t = threshold(s[~y], r)
            thr[n, r] = t
            cells.append(f"{np.mean(s[y] >= t):.1%} at {np.mean(s[~y] >= t):.1%}")
        print(f"| {n} | " + " | ".join(cells) + " |")
    for r in RATES:
        print(f"\nPer language, threshold at ~{r:.0%} of all benign texts (orders refused / benign refused):\n")
        print("| language | orders | benign | " + " | ".join(names) + " |")
        print("| --- | ---: | ---: | " + " | ".join("---" for _ in names) + " |")
        for lang in sorted(set(langs)) + ["all"]:
            sel = np.ones(len(y), bool) if lang == "all" else langs == lang
            cells = [f"{np.mean(scores[n][sel & y] >= thr[n, r]):.1%} / {np.mean(scores[n][sel & ~y] >= thr[n, r]):.1%}" for n in names]
            print(f"| {lang} | {int((sel & y).sum())} | {int((sel & ~y).sum())} | " + " | ".join(cells) + " |")
    print("\nEach language with its own threshold at 3% of its benign texts (the issue's per-language target):")
    for n, s in scores.items():
        best = []
        for lang in sorted(set(langs)):
            sel = langs == lang
            t = threshold(s[sel & ~y], 0.03)
            best.append(f"{lang} {np.mean(s[sel & y] >= t):.0%}")
        print(f"  {n}: per-language threshold at 3% of that language's benign: " + ", ".join(best))


if __name__ == "__main__":
    main()
