"""The ground floor: durable state and its audit log.

A reader learns the package here:

* :class:`~store.owner.StoreOwner` -- the one task that holds the writer
  connection; every change is a job it runs, batched into group commits;
* :mod:`store.events` -- the append-only, keyed, hash-chained event log
  every component writes in the same transaction as its change, and
  :func:`~store.events.verify_chain`; :class:`~store.chainkey.ChainKey`
  (the HMAC key, in a file outside the database), :mod:`store.anchor` (the
  head, kept outside the database) and :mod:`store.integrity` (what
  ``conclave memory verify`` checks of the chain, key and head);
* :class:`~store.schema.Schema` -- how a feature hands the store its tables;
  :mod:`store.database` applies them (numbered, idempotent migrations);
* :class:`~store.backend.Backend` -- the seam a second backend plugs into;
  :class:`~store.backend.SqliteBackend` is the embedded default.

``store`` imports nothing from the packages above it (``broker``,
``memory``, ``locks``, ``agents``).  Names load on first use, so the CLI
does not pay for apsw or trio when a command does not need them.
"""

from __future__ import annotations

from store._lazy import lazy_getattr

_EXPORTS = {
    "StoreOwner": "store.owner",
    "StoreStatistics": "store.owner",
    "Schema": "store.schema",
    "Backend": "store.backend",
    "SqliteBackend": "store.backend",
    "Event": "store.events",
    "ChainReport": "store.events",
    "ChainRefused": "store.events",
    "Head": "store.events",
    "BROKER_ACTOR": "store.events",
    "ChainKey": "store.chainkey",
    "ChainFiles": "store.owner",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
