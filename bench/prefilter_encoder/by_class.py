"""Orders refused by class and by corpus file at the ~2% benign threshold; benign refused by file.

    .venv/bin/python bench/prefilter_encoder/by_class.py probe attn
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e5tok  # noqa: E402
from report import threshold  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
rows = []
for path in e5tok.corpus_paths(ROOT):
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append((path.stem, __import__("json").loads(line)["label"]))
files = np.array([f.split("-")[1] if "-" in f else ("earlier" if f == "earlier" else "1") for f, _ in rows])
label = np.array([lab for _, lab in rows])
y = label != "benign"
names = sys.argv[1:]
scores = {n: np.load(e5tok.CACHE / f"oof-{n}.npy").mean(0) for n in names}
thr = {n: threshold(s[~y], 0.02) for n, s in scores.items()}
print("| subset | n | " + " | ".join(names) + " |")
print("| --- | ---: | " + " | ".join("---:" for _ in names) + " |")
for cls in ("injection", "directive", "conditional", "exfiltration"):
    sel = label == cls
    print(f"| orders: {cls} | {sel.sum()} | " + " | ".join(f"{np.mean(scores[n][sel] >= thr[n]):.1%}" for n in names) + " |")
for f in ("1", "2", "3", "earlier"):
    for kind, sel in (("orders", y), ("benign", ~y)):
        s2 = sel & (files == f)
        print(f"| {kind}: batch {f} | {s2.sum()} | " + " | ".join(f"{np.mean(scores[n][s2] >= thr[n]):.1%}" for n in names) + " |")
