"""The mail budget: how much mail one trust domain may put in others' inboxes.

Mail is for coordination.  An agent that sends as fast as it can -- a loop
gone wrong, or a model told to bury the operator's instructions under noise
-- would otherwise fill every inbox it can address: the mail it sends is
listed oldest first, so a flood pushes everyone else's messages off the
first page, and every message is a write on the store's one writer thread.

Each trust domain (an agent, its restarts and everything it spawned: the
same unit the trust policy counts) has two buckets, refilled continuously:
**deliveries** (a message counts once per recipient, so ``--to all`` costs
as many as there are live agents) and **bytes** (body bytes times
recipients).  A bucket holds one minute's worth, so a domain may send a
minute's budget at once and then at the sustained rate.  A send that would
overdraw either bucket is refused with ``quota`` before anything is
written -- it costs the store nothing.  The operator (a person) has no budget.

The budget lives in memory: a restarted broker starts every domain full.
Set it in the team file (checked by :func:`check_team`):

```toml
[mail]
deliveries_per_minute = 120      # per trust domain; default 120
bytes_per_minute = 262144        # per trust domain; default 256 KiB
```
"""

from __future__ import annotations

import time
from typing import Any, Callable, Final, Mapping, final

import attrs

from broker.errors import ConclaveError, ErrorCode

DEFAULT_DELIVERIES: Final = 120
DEFAULT_BYTES: Final = 256 * 1024
KEYS: Final = frozenset({"deliveries_per_minute", "bytes_per_minute"})
#: How many domains' buckets are kept; a full bucket is forgotten first (it carries no debt).
MAX_DOMAINS: Final = 10_000


@final
@attrs.frozen
class MailLimits:
    """The ``[mail]`` table: per-domain budgets, per minute."""

    deliveries_per_minute: int = DEFAULT_DELIVERIES
    bytes_per_minute: int = DEFAULT_BYTES

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "team") -> MailLimits:
        """Read and check a team file's ``[mail]`` table.

        Raises:
            ValueError: naming the key and what to write instead.
        """
        unknown = set(table) - KEYS
        if unknown:
            raise ValueError(f"{where}: [mail] has unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(KEYS))}")
        values = {}
        for key in sorted(KEYS):
            if key not in table:
                continue
            value = table[key]
            if type(value) is not int or value < 1:
                raise ValueError(f"{where}: [mail] {key} must be a whole number of at least 1, not {value!r}")
            values[key] = value
        return cls(**values)


@attrs.define
class _Bucket:
    deliveries: float
    bytes: float
    at: float


@final
class MailBudget:
    """Per-domain token buckets, checked and charged in one synchronous call.

    Held by the mail service and called from op handlers on the event loop
    (which never awaits between the check and the charge), so no lock is
    needed.  ``clock`` is injectable for tests; it must be monotonic.
    """

    def __init__(self, limits: MailLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self.refused = 0

    def charge(self, domain: str, *, deliveries: int, size: int, op: str = "msg.send") -> None:
        """Take ``deliveries`` and ``deliveries * size`` bytes from ``domain``'s buckets, or refuse.

        Raises:
            ConclaveError: ``quota``, saying which budget, the team-file key,
                and how long until the send would fit.
        """
        limits = self.limits
        now = self._clock()
        bucket = self._buckets.get(domain)
        if bucket is None:
            if len(self._buckets) >= MAX_DOMAINS:
                self._forget_full(now)
            bucket = self._buckets[domain] = _Bucket(limits.deliveries_per_minute, limits.bytes_per_minute, now)
        else:
            elapsed = max(0.0, now - bucket.at)
            bucket.deliveries = min(limits.deliveries_per_minute, bucket.deliveries + elapsed * limits.deliveries_per_minute / 60)
            bucket.bytes = min(limits.bytes_per_minute, bucket.bytes + elapsed * limits.bytes_per_minute / 60)
            bucket.at = now
        cost = deliveries * size
        if deliveries > bucket.deliveries:
            self.refused += 1
            raise ConclaveError(ErrorCode.QUOTA, self._refusal(op, domain, "deliveries", deliveries, bucket.deliveries, limits.deliveries_per_minute))
        if cost > bucket.bytes:
            self.refused += 1
            raise ConclaveError(ErrorCode.QUOTA, self._refusal(op, domain, "bytes", cost, bucket.bytes, limits.bytes_per_minute))
        bucket.deliveries -= deliveries
        bucket.bytes -= cost

    @staticmethod
    def _refusal(op: str, domain: str, what: str, wanted: float, left: float, per_minute: int) -> str:
        if wanted > per_minute:
            wait = "it is more than a whole minute's budget: send it to fewer recipients, or shorter"
        else:
            wait = f"try again in {(wanted - left) * 60 / per_minute:.1f} s"
        noun = {"deliveries": "delivery", "bytes": "byte"}[what] if wanted == 1 else what
        return (
            f"{op}: over the mail budget of trust domain {domain}: this message needs {wanted:g} {noun}, "
            f"{int(left)} left of {per_minute} per minute (the team file's [mail] {what}_per_minute); {wait}. "
            "A message to all counts once per recipient; long text belongs in a file in the repository"
        )

    def _forget_full(self, now: float) -> None:
        limits = self.limits
        for domain, b in list(self._buckets.items()):
            if b.deliveries + (now - b.at) * limits.deliveries_per_minute / 60 >= limits.deliveries_per_minute and (
                b.bytes + (now - b.at) * limits.bytes_per_minute / 60 >= limits.bytes_per_minute
            ):
                del self._buckets[domain]
        if len(self._buckets) >= MAX_DOMAINS:  # everyone in debt: forget the oldest look (it has refilled the most)
            oldest = min(self._buckets, key=lambda d: self._buckets[d].at)
            del self._buckets[oldest]


def check_team(team: Any, where: str) -> None:
    """The team file's ``[mail]`` table (the mail feature's ``check_team``)."""
    MailLimits.from_table(team.mail, where)
