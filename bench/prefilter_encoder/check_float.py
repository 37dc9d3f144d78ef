"""heads.py's float encoder layer (jax, dequantised weights) against the shim's int8 x 4-bit layers:
layers 10-12 run in jax from the cached layer-9 states must give nearly the cached last layer.

    XLA_FLAGS=... /work/ft-venv/bin/python bench/prefilter_encoder/check_float.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import heads  # noqa: E402

z = np.load(heads.e5tok.CACHE / "states.npz")
off, hs, hl, split = z["off"], z["h_split"], z["h_last"], int(z["split"])
idx = np.random.default_rng(2).choice(len(off) - 1, 64, replace=False)
sub_off = np.concatenate([[0], np.cumsum(off[idx + 1] - off[idx])])
sub = np.concatenate([hs[off[i] : off[i + 1]] for i in idx])
want = np.concatenate([hl[off[i] : off[i + 1]] for i in idx]).astype(np.float32)
got = heads.advance(sub, sub_off, heads.e5_layers(split, 12), 12).astype(np.float32)
cos_tok = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
pooled = []
for j in range(len(idx)):
    a, b = sub_off[j], sub_off[j + 1]
    g, w = got[a:b].mean(0), want[a:b].mean(0)
    pooled.append(g @ w / np.linalg.norm(g) / np.linalg.norm(w))
print(f"64 texts: token cosine min {cos_tok.min():.4f} mean {cos_tok.mean():.4f}; pooled cosine min {min(pooled):.5f}")
