"""Cache every training text's token ids and per-token hidden states (after layer SPLIT and after the last).

    OMP_NUM_THREADS=1 .venv/bin/python bench/prefilter_encoder/cache_states.py   # ~10 min on one core

Writes /work/ft-cache/states.npz: ids (concatenated int32), off (row offsets), h_split and h_last (float16 [tokens, 384]),
labels, langs, text digests.  Nothing of tests/memory/corpus/heldout* is read.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e5tok  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SPLIT = 9  # hidden states after 9 of the 12 layers: the input of the top three


def main() -> None:
    rows = e5tok.load_rows(ROOT)
    shim = e5tok.Shim()
    ids_all, off, hs, hl = [], [0], [], []
    start = time.time()
    for n, row in enumerate(rows):
        ids = shim.tokens(row["text"])
        mid = shim.forward(ids, 0, SPLIT)
        last = shim.forward(ids, SPLIT, shim.NL, mid)
        ids_all.append(ids)
        off.append(off[-1] + len(ids))
        hs.append(mid.astype(np.float16))
        hl.append(last.astype(np.float16))
        if n % 500 == 0:
            print(f"{n}/{len(rows)} {time.time() - start:.0f}s", file=sys.stderr, flush=True)
    out = e5tok.CACHE / "states.npz"
    np.savez(
        out,
        ids=np.concatenate(ids_all),
        off=np.array(off, dtype=np.int64),
        h_split=np.concatenate(hs),
        h_last=np.concatenate(hl),
        labels=np.array([r["label"] for r in rows]),
        langs=np.array([r["lang"] for r in rows]),
        digest=np.array([hashlib.sha1(r["text"].encode()).hexdigest() for r in rows]),
        split=np.array(SPLIT),
    )
    print(f"{len(rows)} texts, {off[-1]} tokens, {time.time() - start:.0f}s -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
