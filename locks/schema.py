"""The locks schema.  Lock state lives in memory; only history is stored (as events)."""

from __future__ import annotations

COMPONENT = "locks"
MIGRATIONS: list[str] = []
