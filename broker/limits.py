"""Time and cost budgets: how long an agent may run, how long it may sit idle, what it may spend.

The team file gives them per agent (or in ``[defaults]`` for every agent),
and ``[run]`` or ``conclave run --timeout ...`` for the whole run:

* ``timeout`` -- wall time from the agent's start (seconds, or ``"90m"``,
  ``"1h30m"``, ``"45s"``);
* ``idle_timeout`` -- no output and no broker call from the agent (or
  anything it spawned) for that long;
* ``max_tokens`` / ``max_cost_usd`` -- usage the agent's binary reports
  (:class:`Usage`; the presets read it from Claude Code's and Codex's
  structured output).  Per agent they add up over its restarts; per run,
  over every agent.

When one runs out, the agent is stopped the way Ctrl-C stops it (SIGTERM to
its group, SIGKILL after the grace period), and its exit says why; the
run's own limits stop the run.  :class:`Meter` adds usage up and says which
budget, if any, was crossed.

A usage report is a *cumulative* figure for one process and only ever goes
up here: an agent's own processes can write to its stdout, so a forged line
can make an agent look more expensive (stopping it sooner), never cheaper.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final, Mapping, final

import attrs

LIMIT_KEYS: Final = ("timeout", "idle_timeout", "max_tokens", "max_cost_usd")
#: Bytes of one principal's log kept on disk unless the team file says otherwise (``log_cap``; broker.capture).
DEFAULT_LOG_CAP: Final = 64 << 20
#: The smallest ``log_cap`` a team file may set.
MIN_LOG_CAP: Final = 256 << 10
_DURATION: Final = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$")


class LimitError(ValueError):
    """A limit in the team file or on the command line is not one; the message says how to write it."""


def parse_duration(value: Any, key: str) -> float:
    """Seconds from ``90``, ``90.5``, ``"90s"``, ``"15m"``, ``"1h30m"``.

    Raises:
        LimitError: anything else, or a duration that is not positive.
    """
    if isinstance(value, bool):
        raise LimitError(f'{key} must be a duration: seconds (90) or a string such as "90s", "15m", "1h30m"')
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        else:
            m = _DURATION.match(text)
            if not text or m is None or not any(m.groups()):
                raise LimitError(f'{key} = {value!r} is not a duration; write seconds (90) or a string such as "90s", "15m", "1h30m"')
            h, mins, s = (float(g) if g else 0.0 for g in m.groups())
            seconds = h * 3600 + mins * 60 + s
    else:
        raise LimitError(f'{key} must be a duration: seconds (90) or a string such as "90s", "15m", "1h30m"')
    if not math.isfinite(seconds) or seconds <= 0:
        raise LimitError(f"{key} must be more than 0 seconds, not {value!r}")
    return seconds


def words(seconds: float) -> str:
    """A duration as a person writes it: ``90m``, ``1h30m``, ``45s``, ``2.5s``."""
    if seconds < 60 or seconds != int(seconds):
        return f"{seconds:g}s"
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


@final
@attrs.frozen
class Limits:
    """One agent's (or the run's) limits; None means no limit."""

    timeout: float | None = None
    idle_timeout: float | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> Limits:
        """The limits among ``raw``'s keys (others are ignored).

        Raises:
            LimitError: naming ``where`` and the key.
        """
        try:
            timeout = parse_duration(raw["timeout"], "timeout") if "timeout" in raw else None
            idle = parse_duration(raw["idle_timeout"], "idle_timeout") if "idle_timeout" in raw else None
        except LimitError as exc:
            raise LimitError(f"{where}: {exc}") from None
        tokens = raw.get("max_tokens")
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0):
            raise LimitError(f"{where}: max_tokens must be a whole number above 0, e.g. max_tokens = 2000000")
        cost = raw.get("max_cost_usd")
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost <= 0):
            raise LimitError(f"{where}: max_cost_usd must be a number of dollars above 0, e.g. max_cost_usd = 5.0")
        return cls(timeout, idle, tokens, None if cost is None else float(cost))

    def over(self, other: Limits) -> Limits:
        """These limits, with ``other``'s filling the ones left unset (an agent's over ``[defaults]``)."""
        return Limits(*(mine if mine is not None else theirs for mine, theirs in zip(attrs.astuple(self), attrs.astuple(other))))

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}

    def __bool__(self) -> bool:
        return any(v is not None for v in attrs.astuple(self))


@final
@attrs.frozen
class Usage:
    """What a binary reports it used: tokens in (``cached_input_tokens`` of them read from its
    provider's cache) and out, and what it cost where it says (Claude Code does; Codex does not)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    @property
    def tokens(self) -> int:
        """Every token in and out (what ``max_tokens`` counts)."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None and other.cost_usd is None else (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(self.input_tokens + other.input_tokens, self.cached_input_tokens + other.cached_input_tokens, self.output_tokens + other.output_tokens, cost)

    def at_least(self, other: Usage) -> Usage:
        """Field by field the larger: a cumulative figure never goes down."""
        cost = other.cost_usd if self.cost_usd is None else self.cost_usd if other.cost_usd is None else max(self.cost_usd, other.cost_usd)
        return Usage(max(self.input_tokens, other.input_tokens), max(self.cached_input_tokens, other.cached_input_tokens), max(self.output_tokens, other.output_tokens), cost)

    def as_dict(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "cached_input_tokens": self.cached_input_tokens, "output_tokens": self.output_tokens,
                "tokens": self.tokens, "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6)}  # fmt: skip

    def describe(self) -> str:
        """``12,345 tokens (12,000 in, 345 out), $0.1234``."""
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        return f"{self.tokens:,} tokens ({self.input_tokens:,} in, {self.output_tokens:,} out){cost}"


@final
class Meter:
    """Adds up the usage each principal's binary reports, by agent and for the run, and says
    which budget a new report crossed.  Owned by the supervisor (the event loop)."""

    def __init__(self, run: Limits) -> None:
        self.run_limits = run
        self.by_principal: dict[str, Usage] = {}
        self._agent_of: dict[str, str] = {}

    def report(self, principal: str, agent: str, usage: Usage) -> Usage:
        """Record ``usage`` (cumulative for that principal's process); return what it now stands at."""
        self._agent_of[principal] = agent
        now = self.by_principal.get(principal, Usage()).at_least(usage)
        self.by_principal[principal] = now
        return now

    def agent(self, agent: str) -> Usage:
        return sum((u for p, u in self.by_principal.items() if self._agent_of[p] == agent), Usage())

    def run(self) -> Usage:
        return sum(self.by_principal.values(), Usage())

    def crossed(self, agent: str, limits: Limits) -> tuple[str, str] | None:
        """``(scope, reason)`` for the first budget crossed (``scope``: "agent" or "run"), or None."""
        for scope, used, budget in (("agent", self.agent(agent), limits), ("run", self.run(), self.run_limits)):
            whose = f"for {agent}" if scope == "agent" else "for the run"
            if budget.max_tokens is not None and used.tokens > budget.max_tokens:
                return scope, f"over budget: max_tokens = {budget.max_tokens:,} {whose} crossed, {used.tokens:,} tokens used"
            if budget.max_cost_usd is not None and used.cost_usd is not None and used.cost_usd > budget.max_cost_usd:
                return scope, f"over budget: max_cost_usd = {budget.max_cost_usd:g} {whose} crossed, ${used.cost_usd:.4f} spent"
        return None


@final
class Activity:
    """When each trust domain (an agent and everything it spawned) last did something: printed a
    line or called the broker -- a call still in progress (a lock wait, ``inbox --wait``) counts
    as activity all the time it lasts.  Written by the server and the supervisor, read by the
    idle timers; times are trio's clock."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._in_flight: dict[str, int] = {}

    def touch(self, domain: str, now: float) -> None:
        self._last[domain] = max(now, self._last.get(domain, now))

    def begin(self, domain: str, now: float) -> None:
        self._in_flight[domain] = self._in_flight.get(domain, 0) + 1
        self.touch(domain, now)

    def end(self, domain: str, now: float) -> None:
        left = self._in_flight.get(domain, 1) - 1
        if left:
            self._in_flight[domain] = left
        else:
            self._in_flight.pop(domain, None)
        self.touch(domain, now)

    def idle_since(self, domain: str, default: float) -> float | None:
        """When the domain went quiet (None while one of its calls is in progress)."""
        if self._in_flight.get(domain):
            return None
        return self._last.get(domain, default)

    def quiet_since(self, default: float) -> float | None:
        """When every domain went quiet (None while any call is in progress)."""
        if any(self._in_flight.values()):
            return None
        return max(self._last.values(), default=default)
