"""A small retrieval eval set: claims, and queries each with the claim that answers it.

Queries are phrased the way an agent asks -- other words, other order, a
word or two the claim does not use -- so ranking has work to do; 40 filler
claims share vocabulary with the answers.  :func:`recall_at` runs it
against any store connection (SQLite or PostgreSQL); the test compares the
backends and docs/MEMORY.md records both figures.
"""

from __future__ import annotations

from typing import Any, Callable

ANSWERS: dict[str, str] = {
    "flaky-arm64": "The payment tests are flaky on arm64 runners because two workers share one temp directory.",
    "gold-linker": "Release builds on arm64 need the gold linker flag or the final link runs out of memory.",
    "pg-service": "The integration suite needs the postgres service started before the test workers connect.",
    "cargo-cache": "The CI cache for the cargo registry lives under the workspace target directory, not the home directory.",
    "tz-dates": "Date parsing in the report module assumes UTC; local timezones shift invoices by a day.",
    "redis-timeout": "The session store drops connections after thirty seconds idle; the redis client must send keepalives.",
    "migration-lock": "Schema migrations take an exclusive table lock, so run them before the web workers start.",
    "utf8-csv": "The CSV importer reads files as latin-1 unless the header declares utf-8 encoding.",
    "docker-dns": "Containers in the build network resolve the registry through the host resolver, which caches failures for a minute.",
    "npm-lockfile": "The frontend lockfile must be regenerated with npm 10; older npm rewrites every integrity hash.",
    "retry-backoff": "The upload client retries five times with exponential backoff starting at two hundred milliseconds.",
    "feature-flags": "Feature flags are read once at process start; toggling one needs a restart of the API pods.",
    "memory-leak": "The image resizer leaks memory when thumbnails are requested for animated GIF files.",
    "s3-region": "The artifact bucket is in eu-west-1; uploads from us-east runners are slow and cost egress.",
    "auth-clock": "Token validation fails when the runner clock drifts more than sixty seconds from the identity server.",
    "grpc-deadline": "Every gRPC call to the pricing service needs a deadline, or a stuck backend blocks the worker pool.",
    "log-rotation": "Application logs rotate at one gigabyte; the shipper loses lines if rotation happens mid-read.",
    "test-order": "The accounting tests depend on execution order; run them with a fixed random seed.",
    "webpack-memory": "The webpack production build needs four gigabytes of heap; set node max-old-space-size.",
    "sql-index": "The orders search is slow without the composite index on customer id and creation date.",
}

QUERIES: list[tuple[str, str]] = [
    ("why do payment tests fail randomly on arm64", "flaky-arm64"),
    ("shared temp directory between test workers", "flaky-arm64"),
    ("linker out of memory for arm64 release", "gold-linker"),
    ("integration tests cannot connect to postgres", "pg-service"),
    ("where is the cargo registry cached in CI", "cargo-cache"),
    ("invoices off by one day timezone", "tz-dates"),
    ("redis connection dropped when idle", "redis-timeout"),
    ("keepalive for the session store client", "redis-timeout"),
    ("migration blocks web workers with a table lock", "migration-lock"),
    ("csv import garbles utf-8 characters", "utf8-csv"),
    ("registry name resolution fails inside build containers", "docker-dns"),
    ("npm rewrote integrity hashes in the lockfile", "npm-lockfile"),
    ("how many retries does the upload client make", "retry-backoff"),
    ("exponential backoff for uploads", "retry-backoff"),
    ("feature flag change not picked up by the API", "feature-flags"),
    ("image resizer memory growth with animated gifs", "memory-leak"),
    ("slow artifact uploads from us-east runners", "s3-region"),
    ("token validation errors caused by clock drift", "auth-clock"),
    ("pricing service calls hang forever", "grpc-deadline"),
    ("worker pool blocked by a stuck gRPC backend", "grpc-deadline"),
    ("log lines lost during rotation", "log-rotation"),
    ("accounting tests pass alone but fail in the full run", "test-order"),
    ("webpack build runs out of heap", "webpack-memory"),
    ("node max-old-space-size for production build", "webpack-memory"),
    ("orders search query is slow", "sql-index"),
    ("composite index on customer and date", "sql-index"),
    # Harder: few of the answer's words, several of the fillers'.
    ("payment service workers on the build hosts keep failing", "flaky-arm64"),
    ("session cookies and redis shards lose clients", "redis-timeout"),
    ("database migrations hold up the web workers", "migration-lock"),
    ("tokens from the identity server rejected on CI runners", "auth-clock"),
    ("pods keep old settings after a toggle", "feature-flags"),
    ("frontend package install changes hashes", "npm-lockfile"),
    ("CDN thumbnails for animated files use too much RAM", "memory-leak"),
    ("json log shipper drops lines", "log-rotation"),
    ("exchange rates service calls never return", "grpc-deadline"),
    ("simulation seeds and accounting test flakiness", "test-order"),
]

FILLER: list[str] = [
    "The payment service exposes a health endpoint on port 8081 for the load balancer.",
    "Arm64 images are built nightly and pushed to the internal registry.",
    "The temp directory cleanup job runs every hour on the build hosts.",
    "Release notes are generated from merged pull request titles.",
    "The linker script for the bootloader lives in the firmware repository.",
    "Postgres backups run at midnight and are kept for two weeks.",
    "The test workers report results to the dashboard through a webhook.",
    "The CI runners mount the workspace from a network volume.",
    "Cargo features for the cli crate are documented in its readme.",
    "The report module renders PDFs with a headless browser.",
    "Invoices are numbered per customer and per year.",
    "The redis cluster has three shards and one replica each.",
    "Session cookies expire after two weeks of inactivity.",
    "Web workers are scaled by queue depth, not by CPU.",
    "The CSV exporter quotes every field and uses CRLF line endings.",
    "The build network uses a private subnet with its own gateway.",
    "The frontend uses a monorepo with one package per product area.",
    "The upload client streams files in eight megabyte chunks.",
    "API pods are deployed with a rolling update of one pod at a time.",
    "Thumbnails are cached in the CDN for thirty days.",
    "Animated GIF files are converted to video for the mobile app.",
    "The artifact bucket has versioning enabled and a lifecycle rule.",
    "The identity server issues tokens valid for one hour.",
    "The pricing service caches exchange rates for five minutes.",
    "Application logs are shipped as JSON lines to the central store.",
    "The accounting module exports ledgers in the SAF-T format.",
    "Random seeds for the simulation tests are printed in the test log.",
    "The production build minifies CSS with a separate plugin.",
    "Customer ids are UUIDs generated by the signup service.",
    "The orders table is partitioned by month.",
    "Memory limits for the API pods are set in the helm chart.",
    "The gRPC schemas are compiled in a separate build step.",
    "Keepalive settings for the load balancer are managed by the platform team.",
    "Database migrations are reviewed by the data team before merge.",
    "The staging environment resets its database every Sunday.",
    "Exponential growth of the events table is handled by archiving.",
    "Runner clocks are synced with the public NTP pool.",
    "The nightly job retries failed steps once before paging.",
    "Search results in the admin panel are paginated by fifty.",
    "The web frontend is served from the CDN with a one hour cache.",
]


def recall_at(job: Callable[..., Any], remember: Callable[[str], int], search: Callable[[str], list[int]], k: int = 5) -> float:
    """Store every claim with ``remember``, then the share of queries whose answer ``search`` ranks in its top ``k``."""
    ids = {name: remember(text) for name, text in ANSWERS.items()}
    for text in FILLER:
        remember(text)
    hits = sum(1 for query, name in QUERIES if ids[name] in search(query)[:k])
    return hits / len(QUERIES)
