"""Realistic claim text for the memory benchmarks.

Claims read like what coding agents learn about a repository: flaky suites,
timeouts, pinned dependencies, error strings and where they come from.  The
generator is deterministic (seeded) and every claim it produces passes the
prefilter, so the same corpus can go through ``memory.remember``.  Words are
drawn with a Zipf-like skew so BM25 sees common and rare terms the way it
would in a real store.
"""

from __future__ import annotations

import random
from typing import Iterator

KINDS = ("discovery", "solution", "pattern", "workflow", "failure")

_AREAS = (
    "store", "raft", "gateway", "scheduler", "billing", "auth", "search", "ingest", "cache", "router",
    "planner", "indexer", "mailer", "uploader", "metrics", "tracing", "config", "session", "payments",
    "catalog", "inventory", "ledger", "notifier", "exporter", "importer", "compactor", "replicator",
    "sharding", "quota", "webhooks", "graphql", "grpc", "cli", "daemon", "sandbox", "registry",
    "resolver", "linker", "bundler", "renderer", "parser", "lexer", "codegen", "vm", "gc", "allocator",
    "telemetry", "audit", "backup", "restore", "migrations", "fixtures", "reporting", "analytics",
)
_LAYERS = ("pkg", "internal", "cmd", "lib", "src", "services", "tools", "core", "modules", "crates")
_NOUNS = (
    "timeout", "retry", "lock", "queue", "buffer", "socket", "worker", "pool", "handler", "client",
    "snapshot", "index", "cursor", "batch", "token", "lease", "watcher", "checkpoint", "manifest",
    "schema", "fixture", "mock", "harness", "runner", "shard", "replica", "leader", "follower",
    "journal", "segment", "bloom", "filter", "codec", "frame", "stream", "channel", "semaphore",
    "mutex", "barrier", "epoch", "version", "cluster", "tenant", "bucket", "blob", "chunk", "offset",
)
_VERBS = ("flush", "compact", "retry", "merge", "split", "encode", "decode", "resolve", "rotate",
          "expire", "rebalance", "replay", "serialize", "validate", "hydrate", "prefetch", "evict")
_PLATFORMS = (
    "arm64 CI", "macOS runners", "Windows agents", "alpine containers", "the nightly build",
    "Python 3.12", "Go 1.22", "glibc 2.39", "the release pipeline", "ephemeral preview envs",
    "the self-hosted runners", "kernel 6.8", "ubuntu 24.04 images", "the GPU pool", "spot instances",
)
_CAUSES = (
    "the clock skews by a few seconds", "two workers race on the same temp directory",
    "DNS lookups time out under load", "the fixture reuses a fixed port", "the cache is shared between jobs",
    "file watchers hit the inotify limit", "the container has only 512 MB of memory",
    "tests depend on dictionary order", "the mock server starts after the client",
    "locale settings change number formatting", "the disk fills up with core dumps",
    "parallel jobs share one sqlite file", "garbage collection pauses exceed the deadline",
    "the retry budget is exhausted before the leader is elected", "timezone data is missing",
)
_ERRORS = (
    "context deadline exceeded", "EADDRINUSE", "database is locked", "connection reset by peer",
    "too many open files", "checksum mismatch", "unexpected EOF", "permission denied",
    "no space left on device", "certificate has expired", "lease not held", "stale epoch",
    "segment out of range", "version conflict", "duplicate key value", "schema drift detected",
)
_DEPS = ("protobuf", "grpcio", "openssl", "zstd", "rocksdb", "tokio", "pydantic", "sqlalchemy", "react",
         "webpack", "numpy", "libuv", "jemalloc", "boringssl", "hyper", "serde", "lz4", "icu")
_PROJECTS = ("CORE", "INFRA", "OPS", "BUG", "PERF", "SEC", "DATA", "WEB")
_TOOLS = ("pytest", "cargo test", "go test", "make check", "npm test", "the linter", "the formatter",
          "bazel", "gradle", "tox", "the codegen step", "the schema generator")
_EXTRA = (
    "under load", "during startup", "after a failover", "on cold caches", "with large payloads",
    "when the queue is full", "at shutdown", "after a schema change", "in debug builds",
    "only in release builds", "when tracing is enabled", "with more than 64 shards",
)

_TEMPLATES = (
    "The {area} tests are flaky on {platform} because {cause}.",
    "The {area} {noun} suite needs a {n} second timeout on {platform}.",
    "{func} in {path} returns an empty {noun} {extra} instead of raising.",
    "Builds of {path} fail with \"{error}\" when {tool} runs before the codegen step.",
    "A {noun} lock guards the {area} {noun2}; the {area2} {noun3} takes it before writing.",
    "The {area} {noun} caches {noun2} entries for {n} minutes, so config changes show up late.",
    "The fix for \"{error}\" in {path} was pinning {dep} to {version}.",
    "{path} depends on {dep} {version}; newer releases break the {area2} {noun}.",
    "Migrations in {path} run in numeric order and each one is idempotent.",
    "{error} from the {area} {noun} means the {noun2} was not released {extra}.",
    "The {area} {noun} retries {n} times with exponential backoff before giving up.",
    "{tool} skips the {area} {noun} tests unless the {noun2} fixture is available.",
    "Releasing the {noun} in {func} before the {verb} call avoids the deadlock seen {extra}.",
    "The {area} service reads its {noun} settings from {path}/config.toml at startup.",
    "On {platform} the {area} {noun} is slower by a factor of {n} {extra}.",
    "Calls to {func} are safe from several threads because the {noun} is immutable.",
    "The {area2} {noun2} must {verb} the {noun} before the {area} {noun3} reads it.",
    "Failures with \"{error}\" in {tool} went away after raising the {noun} limit to {n}.",
    "The {area} benchmark regressed by {n} percent when the {noun} size doubled.",
    "{func} and {func2} share one {noun}, so they cannot run in parallel {extra}.",
    "The {area} {noun} was rewritten to {verb} in batches of {n}, which halved the latency.",
    "Snapshots of the {area} {noun} are written every {n} seconds and kept for a week.",
    "The {area} team prefers small pull requests that touch one {noun} at a time.",
    "Errors reading the {noun} in {path} usually mean {cause}.",
)


class ClaimText:
    """A seeded source of claim texts (and queries drawn from the same words)."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self._weights = [1.0 / (i + 1) ** 0.9 for i in range(len(_AREAS))]

    def _zipf(self, items: tuple[str, ...]) -> str:
        weights = self._weights[: len(items)] if len(items) <= len(self._weights) else None
        return self.rng.choices(items, weights=weights)[0]

    def _path(self) -> str:
        return f"{self.rng.choice(_LAYERS)}/{self._zipf(_AREAS)}"

    def _func(self) -> str:
        return f"{self.rng.choice(_VERBS)}_{self._zipf(_NOUNS)}"

    def text(self) -> str:
        r = self.rng
        body = r.choice(_TEMPLATES).format(
            area=self._zipf(_AREAS), area2=self._zipf(_AREAS), noun=self._zipf(_NOUNS), noun2=self._zipf(_NOUNS),
            noun3=self._zipf(_NOUNS), verb=r.choice(_VERBS), platform=r.choice(_PLATFORMS), cause=r.choice(_CAUSES),
            error=r.choice(_ERRORS), dep=r.choice(_DEPS), tool=r.choice(_TOOLS), extra=r.choice(_EXTRA),
            path=self._path(), func=self._func(), func2=self._func(), n=r.randint(2, 600),
            version=f"{r.randint(0, 9)}.{r.randint(0, 40)}.{r.randint(0, 20)}",
        )
        # The long tail: ticket numbers and hosts make rare terms, as in a real store.
        roll = r.random()
        if roll < 0.3:
            body += f" Seen in {r.choice(_PROJECTS)}-{r.randint(100, 99999)}."
        elif roll < 0.4:
            body += f" Reproduced on host {r.choice(_AREAS)}-{r.randint(1, 4000)}."
        return body

    def kind(self) -> str:
        return self.rng.choice(KINDS)

    def claims(self, count: int) -> Iterator[tuple[str, str]]:
        for _ in range(count):
            yield self.kind(), self.text()

    def query(self) -> str:
        """A search an agent might make: two or three content words of one claim."""
        words = [w.strip('.,;"') for w in self.text().split()]
        content = [w for w in words if len(w) > 3 and w.lower() not in _STOP]
        return " ".join(self.rng.sample(content, k=min(len(content), self.rng.choice((2, 3)))))


_STOP = frozenset(
    "the and with from that this when then than into before after because only each were was are is "
    "for in on of to a an by be it its so".split()
)
