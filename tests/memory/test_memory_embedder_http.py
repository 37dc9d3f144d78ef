"""The OpenAI-compatible HTTP embedder, against a loopback stand-in that speaks the embeddings API.

The stand-in (a real HTTP server on 127.0.0.1 in this process) answers
``POST /v1/embeddings`` the way OpenAI, ollama, llama.cpp and vLLM do, with
vectors from the real local model, and refuses a request without the right
bearer key -- so what is tested is conclave's client and the broker's use
of it, end to end.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from memory import embedder, semantic
from memory.embedder import EmbedderConfig, EmbedderUnavailable, HttpEmbedder
from memory.policy import PolicyError

KEY = "sk-standin-0123456789abcdef"
MODEL = "standin-e5"


class StandIn:
    """An OpenAI-compatible embeddings endpoint on loopback, backed by the local model.

    A broker on an HTTP embedder sends the prefilter's exemplars (166 texts) in its first batch; the local
    model's own vectors of those very texts ship with conclave (memory/exemplar_vectors.py, made by
    ``model.embed(texts, "passage")``), so the stand-in answers them from there and embeds every other text
    with the model, live -- the same vectors, without embedding 166 texts again in every run.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.model = embedder.LocalEmbedder()
        shipped = semantic.shipped_vectors(embedder.LOCAL_MODEL)
        assert shipped is not None, "the shipped exemplar vectors are not the local model's of these texts"
        self.known = {e.text: vector for e, vector in zip(semantic.EXEMPLARS, shipped)}
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": {"message": "not found"}})
                if self.headers.get("Authorization") != f"Bearer {KEY}":
                    return self._send(401, {"error": {"message": "invalid api key"}})
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with outer._lock:
                    vectors = outer.embed(texts)
                data = [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]} for i, v in enumerate(vectors)]
                # Out of order on purpose: clients must sort by index.
                self._send(200, {"object": "list", "model": body["model"], "data": data[::-1], "usage": {"prompt_tokens": 0, "total_tokens": 0}})

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        fresh = [t for t in texts if t not in self.known]
        made = dict(zip(fresh, self.model.embed(fresh, "passage"))) if fresh else {}
        return np.stack([self.known[t] if t in self.known else made[t] for t in texts])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    """One stand-in (one load of the local model) for the module; each test reads only the requests it made."""
    server = StandIn()
    yield server
    server.close()


def test_the_http_embedder_speaks_the_openai_api_and_never_shows_the_key(standin: StandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBED_STANDIN_KEY", KEY)
    client = HttpEmbedder(EmbedderConfig(kind="http", url=standin.url, model=MODEL, key_env="EMBED_STANDIN_KEY"))
    texts = ["The cache warms in ninety seconds after a deploy.", "Le cache est chaud quatre-vingt-dix secondes après un déploiement."]
    vectors = client.embed(texts, "passage")
    local = standin.model.embed(texts, "passage")
    assert vectors.shape == (2, 384) and abs(float((vectors * local).sum(axis=1).min()) - 1.0) < 1e-4  # sorted by index, unit length
    assert standin.requests[-1]["body"] == {"model": MODEL, "input": texts, "encoding_format": "float"}
    assert standin.requests[-1]["auth"] == f"Bearer {KEY}"
    # The wrong key: refused by the endpoint; the error names the endpoint and the status, never the key.
    monkeypatch.setenv("EMBED_STANDIN_KEY", "sk-wrong")
    with pytest.raises(EmbedderUnavailable, match="answered 401") as refused:
        client.embed(texts, "passage")
    assert "sk-" not in str(refused.value)
    monkeypatch.delenv("EMBED_STANDIN_KEY")
    with pytest.raises(EmbedderUnavailable, match=r"\$EMBED_STANDIN_KEY is not set"):
        client.embed(texts, "passage")
    down = HttpEmbedder(EmbedderConfig(kind="http", url="http://127.0.0.1:9/v1", model=MODEL))
    with pytest.raises(EmbedderUnavailable, match="cannot be reached"):
        down.embed(texts, "passage")


@pytest.mark.parametrize(
    "table,fragment",
    [
        ({"embedder": "openai"}, "embedder must be one of"),
        ({"embedder": "http"}, "needs embedder_url"),
        ({"embedder": "http", "embedder_url": "ftp://x/v1", "embedder_model": "m"}, "needs embedder_url"),
        ({"embedder": "http", "embedder_url": "http://127.0.0.1:1/v1"}, "needs embedder_model"),
        ({"embedder": "local", "embedder_url": "http://127.0.0.1:1/v1"}, 'for embedder = "http" only'),
        ({"embedder": "http", "embedder_url": "http://h/v1", "embedder_model": "m", "embedder_key_env": "sk-live-key"}, "names an environment variable"),
    ],
)
def test_the_embedder_table_is_validated(table: dict[str, Any], fragment: str) -> None:
    with pytest.raises(PolicyError, match=fragment):
        EmbedderConfig.from_table(table)
    assert EmbedderConfig.from_table({"embedder": "none"}).enabled is False  # control
    assert EmbedderConfig.from_table({}).kind == "local"


def test_a_broker_with_the_http_embedder_retrieves_by_meaning(standin: StandIn, start_run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMBED_STANDIN_KEY", KEY)  # the broker inherits it; the team file names only the variable
    first = len(standin.requests)  # the requests before this test's are another test's
    team = f'\n[memory]\nembedder = "http"\nembedder_url = "{standin.url}"\nembedder_model = "{MODEL}"\nembedder_key_env = "EMBED_STANDIN_KEY"\n'
    run = start_run([{"name": "alice"}, {"name": "bob"}], extra_toml=team)
    target = run.puppet("alice").call("memory.remember", kind="discovery", text="The store tests are flaky on arm64 CI because two workers share one temp directory.")["id"]
    run.puppet("alice").call("memory.remember", kind="discovery", text="Database migrations run before the web workers start.")
    # The first batch also embeds the prefilter's 166 exemplars through the endpoint (only the local model's ship).
    settled = run.op("memory.settle", timeout=300)
    assert settled["settled"] and settled["model"] == f"http:{MODEL}" and settled["embedded"] == 2, settled
    found = run.puppet("bob").call("memory.recall", query="pourquoi les tests de stockage échouent-ils sur ARM", limit=1)
    assert [c["id"] for c in found] == [target]
    assert standin.requests[first:] and all(r["auth"] == f"Bearer {KEY}" for r in standin.requests[first:])
    recorded = run.op("memory.stats")["meaning"]
    assert recorded["embedder"].startswith(f"http: {MODEL} at {standin.url}") and KEY not in json.dumps(recorded)


def test_a_broker_whose_endpoint_is_down_still_finds_claims_by_their_words(start_run) -> None:  # type: ignore[no-untyped-def]
    team = '\n[memory]\nembedder = "http"\nembedder_url = "http://127.0.0.1:9/v1"\nembedder_model = "absent"\n'
    run = start_run([{"name": "alice"}, {"name": "bob"}], extra_toml=team)
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text="The cache warms in ninety seconds after a deploy.")["id"]
    assert [c["id"] for c in run.puppet("bob").call("memory.recall", query="cache warms deploy")] == [claim]
    deadline = time.monotonic() + 20
    while run.op("memory.stats")["meaning"]["error"] is None:
        assert time.monotonic() < deadline, "the broker never reported the endpoint down"
        time.sleep(0.1)
    assert "cannot be reached" in run.op("memory.stats")["meaning"]["error"]
