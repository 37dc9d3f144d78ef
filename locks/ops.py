"""Wire ops of this package (filled in by its issue)."""

from __future__ import annotations

from broker.router import OpTable

OPS = OpTable()
