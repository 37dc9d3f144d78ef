"""Shared slots: named counting resources declared in the team file.

A slot is for a limit outside the repository -- a provider's rate limit, a
licence seat, a GPU -- so that eight agents never exceed it::

    [[slot]]
    name = "llm-api"
    capacity = 3            # at most 3 holders at once
    min_interval_ms = 200   # and at least 200 ms between two grants (optional)

Agents take one with ``conclave lock acquire slot://llm-api --wait 30`` (or
the ``slot.acquire`` op) and give it back with ``release``; a holder that
exits gives its slot back.  Waits are FIFO, like every lock.  A principal
holds at most one unit of a slot.
"""

from __future__ import annotations

import re
from typing import Any, Final, Iterable, final

import attrs

SLOT_KEYS: Final = frozenset({"name", "capacity", "min_interval_ms"})
NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MAX_CAPACITY: Final = 10_000
MAX_INTERVAL_MS: Final = 3_600_000


class SlotError(ValueError):
    """A ``[[slot]]`` table is wrong; the message names the slot and the key."""


@final
@attrs.frozen
class SlotSpec:
    name: str
    capacity: int
    min_interval_ms: int = 0

    @property
    def min_interval(self) -> float:
        return self.min_interval_ms / 1000.0


def parse_slots(tables: Iterable[Any], where: str = "team") -> tuple[SlotSpec, ...]:
    """Validate the team file's ``[[slot]]`` tables.

    Raises:
        SlotError: naming the slot (or its position) and what to fix.
    """
    specs: list[SlotSpec] = []
    seen: set[str] = set()
    for index, table in enumerate(tables, start=1):
        at = f"{where}: slot #{index}"
        if not isinstance(table, dict):
            raise SlotError(f"{at}: must be a table with name and capacity")
        name = table.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise SlotError(
                f"{at}: name {name!r} must start with a letter and use only letters, digits, '.', '_' or '-' (64 at most)"
            )
        at = f"{where}: slot {name!r}"
        unknown = set(table) - SLOT_KEYS
        if unknown:
            raise SlotError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(SLOT_KEYS))}")
        if name in seen:
            raise SlotError(f"{at}: declared twice; slot names must be unique")
        seen.add(name)
        capacity = table.get("capacity")
        if not _whole(capacity) or not 1 <= capacity <= MAX_CAPACITY:
            raise SlotError(f"{at}: capacity must be a whole number from 1 to {MAX_CAPACITY} (how many may hold it at once)")
        interval = table.get("min_interval_ms", 0)
        if not _whole(interval) or not 0 <= interval <= MAX_INTERVAL_MS:
            raise SlotError(f"{at}: min_interval_ms must be a whole number of milliseconds from 0 to {MAX_INTERVAL_MS}")
        specs.append(SlotSpec(name, capacity, interval))
    return tuple(specs)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
