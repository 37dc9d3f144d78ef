"""The mail schema.  Filled in by the messaging issue."""

from __future__ import annotations

COMPONENT = "mail"
MIGRATIONS: list[str] = []
