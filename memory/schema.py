"""The memory schema: claims, editions, corroborations, disputes, exposures.

Filled in by the memory issue; numbered migrations, appended, never edited.
"""

from __future__ import annotations

COMPONENT = "memory"
MIGRATIONS: list[str] = []
