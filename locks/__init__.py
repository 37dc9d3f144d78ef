"""Locks on paths, globs and named resources, owned by broker-issued principals.

A reader learns the package here:

* :class:`~locks.table.LockTable` -- the broker's one lock table (FIFO waits,
  all-or-nothing acquires, deadlock refusal, fencing tokens, TTLs, slots);
  in a running broker it is ``core.extensions["locks"]``;
* :class:`~locks.resources.Resource`, :class:`~locks.resources.Normalizer`,
  :func:`~locks.resources.overlaps` -- what can be locked, and when two
  resources are the same thing;
* :mod:`locks.bringin` -- the commit guard (agents' commits brought in); :mod:`locks.ops` -- the
  wire ops; :mod:`locks.cli` -- ``conclave lock`` and ``conclave exec``.

Names are imported on first use, so the CLI does not pay for trio when a
command does not need it.
"""

from __future__ import annotations

from store._lazy import lazy_getattr


_EXPORTS = {
    "LockTable": "locks.table",
    "LockStatistics": "locks.table",
    "Mode": "locks.table",
    "Scope": "locks.table",
    "Resource": "locks.resources",
    "ResourceError": "locks.resources",
    "Normalizer": "locks.resources",
    "Kind": "locks.resources",
    "overlaps": "locks.resources",
    "covers": "locks.resources",
    "SlotSpec": "locks.slots",
    "parse_slots": "locks.slots",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
