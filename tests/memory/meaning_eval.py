"""The labelled retrieval set for meaning: keyword, paraphrase and non-English queries over claims with distractors.

Claims: the 20 answers and 40 fillers of ``retrieval_eval`` (fillers share
the answers' vocabulary).  Queries: the 26 keyword queries of that set
(``keyword``: the answer's own words), its 10 "harder" queries worded
mostly with fillers' words (``hard``), 30 new paraphrases that share almost
no word with their answer (``paraphrase``), and 24 queries in French,
German, Spanish, Russian, Chinese and Japanese (``other_language``) -- 90
in all.  :func:`recall_at` runs it on any store connection.

The local model's vectors of these texts are kept in ``meaning_eval.vectors.npz``
(keyed by each text's SHA-256 and its role), so the suite does not embed 150
texts each run; the test re-embeds a sample of every kind and language and fails
unless it matches.  Rewrite them with ``.venv/bin/python -m tests.memory.meaning_eval --save-vectors``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tests.memory.retrieval_eval import ANSWERS, FILLER, QUERIES

if TYPE_CHECKING:
    import numpy as np

KEYWORD = [(q, a, "keyword") for q, a in QUERIES[:26]]
HARD = [(q, a, "hard") for q, a in QUERIES[26:]]
PARAPHRASE = [
    ("tests on ARM machines break now and then because parallel jobs use the same scratch folder", "flaky-arm64"),
    ("release compile for 64-bit ARM exhausts RAM at the final step", "gold-linker"),
    ("the database has to be up before the suite's processes open connections", "pg-service"),
    ("Rust dependency downloads are kept inside the project build folder on CI", "cargo-cache"),
    ("bills show the wrong day for customers outside Greenwich time", "tz-dates"),
    ("idle clients get disconnected from the cache server after half a minute", "redis-timeout"),
    ("altering tables locks them, so do it before the app servers come up", "migration-lock"),
    ("spreadsheet uploads show mangled accents unless they declare their charset", "utf8-csv"),
    ("containers remember a failed lookup of the image host for sixty seconds", "docker-dns"),
    ("an old package manager version changes every checksum in the dependency pin file", "npm-lockfile"),
    ("failed file transfers are attempted again with growing waits between tries", "retry-backoff"),
    ("switching a toggle only takes effect after the service processes restart", "feature-flags"),
    ("the picture scaling service keeps growing in RAM for moving images", "memory-leak"),
    ("build outputs are stored in Ireland, so American machines pay for transfer", "s3-region"),
    ("login tokens are refused when a machine's time is off by over a minute", "auth-clock"),
    ("remote procedure calls to the quote backend must have a time limit", "grpc-deadline"),
    ("when the log file is swapped out mid-read some entries never arrive", "log-rotation"),
    ("bookkeeping checks only pass in one particular sequence", "test-order"),
    ("the bundler for the web app needs a bigger JavaScript heap", "webpack-memory"),
    ("looking up purchases by client and date is sluggish without the right key", "sql-index"),
    ("why does the suite sometimes fail on the ARM CI machines", "flaky-arm64"),
    ("what stops the schema changes from blocking the application", "migration-lock"),
    ("what makes authentication fail on some build machines", "auth-clock"),
    ("how does the file sender cope with temporary failures", "retry-backoff"),
    ("why are characters with accents broken after importing a spreadsheet", "utf8-csv"),
    ("why do toggles not change anything until a redeploy", "feature-flags"),
    ("which region holds our build outputs", "s3-region"),
    ("why are calls to the quote backend hanging", "grpc-deadline"),
    ("what heap size does the front-end bundle need", "webpack-memory"),
    ("what keeps the cache client connection alive", "redis-timeout"),
]
OTHER_LANGUAGE = [
    ("pourquoi les tests de paiement échouent-ils au hasard sur arm64", "flaky-arm64"),
    ("l'importation CSV abîme les caractères accentués", "utf8-csv"),
    ("les factures sont décalées d'un jour à cause du fuseau horaire", "tz-dates"),
    ("le service de redimensionnement d'images fuit de la mémoire avec les GIF animés", "memory-leak"),
    ("warum schlägt die Token-Prüfung wegen Uhrzeitabweichung fehl", "auth-clock"),
    ("Migrationen sperren die Tabelle und blockieren die Web-Worker", "migration-lock"),
    ("der Webpack-Build braucht mehr Heap-Speicher", "webpack-memory"),
    ("Protokollzeilen gehen bei der Rotation verloren", "log-rotation"),
    ("la búsqueda de pedidos es lenta sin un índice compuesto", "sql-index"),
    ("las banderas de funciones necesitan reiniciar los pods", "feature-flags"),
    ("cuántos reintentos hace el cliente de subida", "retry-backoff"),
    ("las pruebas de contabilidad dependen del orden de ejecución", "test-order"),
    ("почему падают интеграционные тесты без запущенного postgres", "pg-service"),
    ("соединения с redis обрываются после простоя", "redis-timeout"),
    ("вызовы gRPC к сервису цен зависают без дедлайна", "grpc-deadline"),
    ("где хранится кэш реестра cargo в CI", "cargo-cache"),
    ("为什么 arm64 的发布构建在链接时内存不足", "gold-linker"),
    ("构建容器里解析镜像仓库的域名失败", "docker-dns"),
    ("旧版 npm 会改写锁文件里的完整性哈希", "npm-lockfile"),
    ("从美国东部上传构件很慢而且要付流量费", "s3-region"),
    ("支払いテストが arm64 でランダムに失敗するのはなぜ", "flaky-arm64"),
    ("アップロードのリトライ回数とバックオフ", "retry-backoff"),
    ("タイムゾーンのせいで請求書の日付が一日ずれる", "tz-dates"),
    ("画像リサイズがアニメーション GIF でメモリを食う", "memory-leak"),
]
ALL = KEYWORD + HARD + [(q, a, "paraphrase") for q, a in PARAPHRASE] + [(q, a, "other_language") for q, a in OTHER_LANGUAGE]
CLAIMS = list(ANSWERS.values()) + FILLER


def recall_at(ids: dict[str, int], search: Callable[[str], list[int]], k: int = 5) -> dict[str, float]:
    """Recall@k per query kind (and ``all``), given each answer's claim id and a search returning ids."""
    found: dict[str, list[bool]] = {}
    for query, name, kind in ALL:
        hit = ids[name] in search(query)[:k]
        found.setdefault(kind, []).append(hit)
        found.setdefault("all", []).append(hit)
    return {kind: round(sum(h) / len(h), 3) for kind, h in found.items()}


VECTORS = Path(__file__).with_name("meaning_eval.vectors.npz")
REGENERATE = ".venv/bin/python -m tests.memory.meaning_eval --save-vectors"


def _key(role: str, text: str) -> str:
    return f"{role}:{hashlib.sha256(text.encode()).hexdigest()}"


def _wanted() -> list[tuple[str, str]]:
    """(role, text) of every vector the eval needs: the claims as passages, the queries as queries."""
    return [("passage", t) for t in CLAIMS] + [("query", q) for q, _, _ in ALL]


def saved_vectors(model: str) -> tuple[np.ndarray, np.ndarray]:
    """The saved vectors of :data:`CLAIMS` (passages) and of every query in :data:`ALL`, in their order.

    Raises:
        AssertionError: the file is missing, of another model, or lacks a text (a text was added or edited).
    """
    import numpy as np

    assert VECTORS.exists(), f"{VECTORS} is missing; write it: {REGENERATE}"
    with np.load(VECTORS) as saved:
        assert str(saved["model"]) == model, f"{VECTORS.name} holds {saved['model']}'s vectors, not {model}'s; regenerate: {REGENERATE}"
        keys = [str(k) for k in saved["keys"]]
        rows = saved["vectors"]
    where = {k: i for i, k in enumerate(keys)}
    missing = [text for role, text in _wanted() if _key(role, text) not in where]
    assert not missing, f"{VECTORS.name} has no vector for {len(missing)} text(s), the first {missing[0]!r}; regenerate: {REGENERATE}"
    claims = rows[[where[_key("passage", t)] for t in CLAIMS]]
    queries = rows[[where[_key("query", q)] for q, _, _ in ALL]]
    return claims, queries


def save_vectors() -> None:
    """Embed every text with the real local model and write :data:`VECTORS`."""
    import numpy as np

    from memory import embedder

    model = embedder.LocalEmbedder()
    wanted = _wanted()
    claims = model.embed([t for r, t in wanted if r == "passage"], "passage")
    queries = model.embed([t for r, t in wanted if r == "query"], "query")
    np.savez_compressed(
        VECTORS,
        model=np.array(model.model),
        keys=np.array([_key(r, t) for r, t in wanted]),
        vectors=np.concatenate([claims, queries]).astype(np.float32),
    )
    print(f"wrote {len(wanted)} vectors of {model.model} to {VECTORS}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--save-vectors"]:
        sys.exit(f"usage: {REGENERATE}")
    save_vectors()
