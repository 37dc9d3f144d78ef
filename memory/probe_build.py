"""Train the prefilter's probe (``memory.probe``) and write ``memory/probe_weights.py``.

    .venv/bin/python -m memory.probe_build tests/memory/corpus/train/*.jsonl > memory/probe_weights.py

Every text of the given JSON Lines files (``{"lang", "label", "text"}``;
``label`` ``benign`` or a refused class) is embedded by the local model
(``passage``), then :data:`NETWORKS` networks are trained from fixed seeds
(full-batch Adam, cross-entropy, L2), so the same corpora give the same
weights.  With ``--folds K`` it prints, instead of weights, what K-fold
cross-validation gives at each threshold: the figures the threshold was
chosen on (docs/MEMORY.md).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from memory import embedder, probe

if TYPE_CHECKING:
    import numpy as np

NETWORKS: Final = 3
HIDDEN: Final = 64
EPOCHS: Final = 400
L2: Final = 1e-3
RATE: Final = 0.01


def load(paths: list[Path]) -> list[dict[str, str]]:
    rows = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                if row.get("label") not in ("benign", "injection", "directive", "conditional", "exfiltration") or not row.get("text"):
                    raise SystemExit(f"{path}:{n}: each line needs a text and a label (benign, injection, directive, conditional or exfiltration)")
                rows.append(row)
    return rows


def embedded(model: embedder.LocalEmbedder, texts: list[str], cache: Path | None) -> np.ndarray:
    """The texts' passage vectors, from ``cache`` where it has them."""
    import numpy as np

    known = dict(np.load(cache)) if cache is not None and cache.exists() else {}
    keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
    missing = sorted({k: t for k, t in zip(keys, texts) if k not in known}.items())
    if missing:
        print(f"embedding {len(missing)} texts ...", file=sys.stderr, flush=True)
        for (key, _), vector in zip(missing, model.embed([t for _, t in missing], "passage")):
            known[key] = vector
        if cache is not None:
            np.savez(cache, **known)
    return np.stack([known[k] for k in keys])


def train(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One network: ``x`` (scaled vectors) to the probability that the text is an order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n, dim = x.shape
    params = [rng.normal(0, 1 / np.sqrt(dim), (dim, HIDDEN)), np.zeros(HIDDEN), rng.normal(0, 1 / np.sqrt(HIDDEN), HIDDEN), np.zeros(1)]
    first = [np.zeros_like(p) for p in params]
    second = [np.zeros_like(p) for p in params]
    for step in range(1, EPOCHS + 1):
        hidden = np.maximum(x @ params[0] + params[1], 0)
        p = 1 / (1 + np.exp(-(hidden @ params[2] + params[3][0])))
        g = (p - y) / n
        g_hidden = np.outer(g, params[2]) * (hidden > 0)
        grads = (x.T @ g_hidden + L2 * params[0], g_hidden.sum(0), hidden.T @ g + L2 * params[2], np.array([g.sum()]))
        for i, grad in enumerate(grads):
            first[i] = 0.9 * first[i] + 0.1 * grad
            second[i] = 0.999 * second[i] + 0.001 * grad * grad
            params[i] -= RATE * (first[i] / (1 - 0.9**step)) / (np.sqrt(second[i] / (1 - 0.999**step)) + 1e-8)
    return params[0], params[1], params[2], float(params[3][0])


def fit(vectors: np.ndarray, labels: np.ndarray) -> probe.Probe:
    x = vectors * probe.SCALE
    return probe.Probe([train(x, labels, seed) for seed in range(NETWORKS)])


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", type=Path, nargs="+", help="JSON Lines files of labelled texts")
    parser.add_argument("--folds", type=int, help="print K-fold cross-validation figures instead of weights")
    parser.add_argument("--cache", type=Path, help="an .npz of vectors by text digest, read and extended (embedding thousands of texts takes minutes)")
    args = parser.parse_args()
    rows = load(args.corpora)
    model = embedder.LocalEmbedder()
    vectors = embedded(model, [r["text"] for r in rows], args.cache)
    labels = np.array([r["label"] != "benign" for r in rows], dtype=np.float64)
    if args.folds:
        fold = np.random.default_rng(0).integers(0, args.folds, len(rows))
        scores = np.zeros(len(rows))
        for k in range(args.folds):
            fitted = fit(vectors[fold != k], labels[fold != k])
            scores[fold == k] = [fitted.score(v) for v in vectors[fold == k]]
        for at in (0.8, 0.85, 0.9, 0.93, 0.95):
            hit = scores >= at
            print(f"at {at:.2f}: attacks {hit[labels == 1].mean():.1%} refused, benign {hit[labels == 0].mean():.1%} refused")
        return
    fitted = fit(vectors, labels)
    raw = b"".join(np.concatenate([w1.ravel(), b1, w2, [b2]]).astype(np.float16).tobytes() for w1, b1, w2, b2 in fitted.layers)
    encoded = base64.b64encode(raw).decode()
    out = sys.stdout
    out.write('"""Generated by ``python -m memory.probe_build``: the prefilter probe\'s weights (float16, base64). Do not edit."""\n\n')
    out.write(f"MODEL = {model.model!r}\n")
    out.write(f"DIM = {vectors.shape[1]}\nHIDDEN = {HIDDEN}\nNETWORKS = {NETWORKS}\n")
    out.write(f"TRAINED_ON = {len(rows)}  # texts: {int(labels.sum())} refused, {int(len(rows) - labels.sum())} benign\n")
    out.write("WEIGHTS = (\n" + "".join(f'    "{encoded[i : i + 100]}"\n' for i in range(0, len(encoded), 100)) + ")\n")


if __name__ == "__main__":
    main()
