"""Reading a state directory's event log from a test (read-only, beside a broker that may be running)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from store.database import connect


def events_of(state: Path, kind: str) -> list[dict[str, Any]]:
    """Every event of ``kind``, oldest first: its ``subject`` and its payload's fields."""
    conn = connect(state / "conclave.db", readonly=True)
    try:
        rows = conn.execute("SELECT subject, payload FROM events WHERE kind = ? ORDER BY seq", (kind,)).fetchall()
    finally:
        conn.close()
    return [{"subject": s, **json.loads(p)} for s, p in rows]
