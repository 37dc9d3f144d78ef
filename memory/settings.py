"""The memory's settings: the trust policy and the lifecycle, and where they live.

One source: the team file.  ``[policy]`` holds the trust policy (``quorum``,
``require_blind``); ``[memory]`` holds the lifecycle (groom thresholds,
decay, caps) and the embedder (``memory.embedder``).  When a broker starts it records the settings in force in the
database (``memory_settings``, with a ``memory.policy`` event when they
change, and every claim's standing recomputed under the new rule).  An
operator command run with no broker reads them back from there, so it
applies the rule of the last run instead of silently falling back to
defaults.  With neither a team file nor a recorded run, the defaults apply.
"""

from __future__ import annotations

import json
from typing import Any, Final, Mapping, final

import apsw
import attrs

from store import events
from memory.embedder import EMBEDDER_KEYS, EmbedderConfig
from memory.groom import GroomPolicy
from memory.policy import PolicyError, TrustPolicy
from memory.retrieval import MAX_BUDGET

#: ``context``'s budget in tokens when neither the call nor the team file names one.
DEFAULT_CONTEXT_BUDGET: Final = 500

__all__ = ["MemorySettings", "TrustPolicy", "GroomPolicy", "recorded", "record"]


@final
@attrs.frozen
class MemorySettings:
    trust: TrustPolicy = TrustPolicy()
    groom: GroomPolicy = GroomPolicy()
    embedder: EmbedderConfig = EmbedderConfig()
    #: ``context``'s token budget when a call names none (``[memory] context_budget_tokens``).
    context_budget_tokens: int = DEFAULT_CONTEXT_BUDGET

    @classmethod
    def from_tables(cls, policy: Mapping[str, Any] | None, memory: Mapping[str, Any] | None, where: str = "team") -> MemorySettings:
        """Read the team file's ``[policy]`` and ``[memory]`` tables.

        Raises:
            PolicyError: naming the table and key that are wrong.
        """
        table = dict(memory or {})
        meaning = {k: table.pop(k) for k in EMBEDDER_KEYS if k in table}
        budget = table.pop("context_budget_tokens", DEFAULT_CONTEXT_BUDGET)
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_BUDGET:
            raise PolicyError(f"{where}: [memory]: context_budget_tokens must be a whole number of tokens from 1 to {MAX_BUDGET}, not {budget!r}")
        return cls(
            context_budget_tokens=budget,
            trust=TrustPolicy.from_table(policy or {}, f"{where}: [policy]"),
            groom=GroomPolicy.from_table(table, f"{where}: [memory]"),
            embedder=EmbedderConfig.from_table(meaning, f"{where}: [memory]"),
        )

    def as_dict(self) -> dict[str, Any]:
        memory = {**self.groom.as_dict(), **self.embedder.as_dict()}
        if self.context_budget_tokens != DEFAULT_CONTEXT_BUDGET:  # settings recorded before it existed read the same
            memory["context_budget_tokens"] = self.context_budget_tokens
        return {"policy": self.trust.as_dict(), "memory": memory}


def recorded(conn: apsw.Connection) -> MemorySettings | None:
    """The settings the last broker recorded, or None if none ever ran here."""
    row = conn.execute("SELECT value FROM memory_settings WHERE key = 'settings'").fetchone()
    if row is None:
        return None
    stored = json.loads(row[0])
    try:
        return MemorySettings.from_tables(stored.get("policy"), stored.get("memory"), "recorded settings")
    except PolicyError:
        return None


def record(conn: apsw.Connection, settings: MemorySettings, *, actor: str) -> MemorySettings | None:
    """Store ``settings`` as the ones in force (with an event when they changed); return the previous ones."""
    before = recorded(conn)
    if before == settings:
        return before
    value = events.canonical(settings.as_dict())
    conn.execute(
        "INSERT INTO memory_settings(key, value) VALUES ('settings', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", (value,)
    )
    events.append(conn, "memory.policy", actor=actor, payload={"before": before.as_dict() if before else None, "after": settings.as_dict()})
    return before
