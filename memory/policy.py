"""The trust policy: the one place that decides a claim's tier.

CLIO promoted a claim at two distinct ``agent:session`` strings that the
model itself supplied; a restarted agent or a spawned child counted as a
second witness.  Here a witness is the *connection's* principal, and what
counts is its **trust domain**: the team agent it descends from.  An agent,
every restart of it and everything it spawned -- children, grandchildren,
siblings among them -- form one domain.  So:

* a corroboration counts at most once per domain, and never from the
  author's domain (restarts, children, parents, siblings vouching for their
  own family do not count);
* a claim is promoted to ``trusted`` when corroborations from ``quorum``
  distinct domains count, and -- when ``require_blind`` is set -- at least
  one of them is *blind* (that domain was never shown the claim);
* an independent dispute (same counting rules) makes it ``disputed``;
* the operator's promotion makes it ``trusted`` regardless, and covers the
  disputes made before it -- a later independent dispute reopens it;
* a revoked principal's corroborations and disputes stop counting;
* an **unread** corroboration -- a vouch by id from a domain never shown the
  claim, whose own evidence does not restate it -- vouches for text it never
  saw, and never counts.

Rows that do not count are still recorded, with the reason, and the caller
is told.  :func:`judge` is pure: ``memory.standing`` feeds it the rows and
writes the verdicts back in the same transaction.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Iterable, Mapping, Sequence, final

import attrs

DEFAULT_QUORUM: Final = 2
MAX_QUORUM: Final = 64
#: The keys of the team file's ``[policy]`` table (all of them are the trust policy's).
POLICY_KEYS: Final = ("quorum", "require_blind")


class Tier(str, enum.Enum):
    UNVERIFIED = "unverified"
    TRUSTED = "trusted"
    DISPUTED = "disputed"
    SUPERSEDED = "superseded"
    RETIRED = "retired"

    @property
    def live(self) -> bool:
        return self in LIVE_TIERS


LIVE_TIERS: Final = frozenset({Tier.UNVERIFIED, Tier.TRUSTED, Tier.DISPUTED})


class NotCounted(str, enum.Enum):
    """Why a corroboration or dispute did not count.  Stable strings (scenarios match them)."""

    AUTHOR_DOMAIN = "author_domain"  # the author, its restarts, its parent, children or siblings
    DOMAIN_ALREADY_COUNTED = "domain_already_counted"  # that domain already has a witness that counts
    REVOKED = "revoked"  # the operator revoked this principal
    COVERED_BY_PROMOTION = "covered_by_promotion"  # a dispute the operator saw when promoting
    UNREAD = "unread"  # never shown the claim, and its evidence does not say what the claim says


class PolicyError(ValueError):
    """The ``[policy]`` table is wrong; the message names the key."""


@final
@attrs.frozen
class TrustPolicy:
    """How many independent witnesses make a claim trusted, and of what kind.

    ``quorum`` distinct trust domains, none of them the author's, must
    corroborate; with ``require_blind`` at least one of those counted
    witnesses must be blind (its domain was never shown the claim before).
    Configured in the team file's ``[policy]`` table; the broker records the
    policy in force in the database so operator commands run with no broker
    apply the same rule (see ``memory.settings``).
    """

    quorum: int = DEFAULT_QUORUM
    require_blind: bool = False

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "[policy]") -> TrustPolicy:
        """Read ``quorum`` and ``require_blind`` from a TOML table.

        Raises:
            PolicyError: naming the key and the accepted values.
        """
        unknown = set(table) - set(POLICY_KEYS)
        if unknown:
            raise PolicyError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(POLICY_KEYS)}")
        quorum = table.get("quorum", DEFAULT_QUORUM)
        if not isinstance(quorum, int) or isinstance(quorum, bool) or not 1 <= quorum <= MAX_QUORUM:
            raise PolicyError(f"{where}: quorum must be a whole number from 1 to {MAX_QUORUM}, not {quorum!r}")
        blind = table.get("require_blind", False)
        if not isinstance(blind, bool):
            raise PolicyError(f"{where}: require_blind must be true or false, not {blind!r}")
        return cls(quorum=quorum, require_blind=blind)

    def as_dict(self) -> dict[str, Any]:
        return {"quorum": self.quorum, "require_blind": self.require_blind}


@final
@attrs.frozen
class Witness:
    """A corroboration or a dispute, as the policy sees it (rows in time order)."""

    row: int
    principal: str
    domain: str
    at: str
    blind: bool = False
    revoked: bool = False
    unread: bool = False


@final
@attrs.frozen
class Verdict:
    row: int
    counted: bool
    reason: NotCounted | None = None


@final
@attrs.frozen
class Standing:
    """What the policy concluded about one claim."""

    tier: Tier
    corroborations: tuple[Verdict, ...]
    disputes: tuple[Verdict, ...]
    counted_domains: tuple[str, ...]
    has_blind: bool
    #: Why the claim is not trusted (None when it is, or when it is not live).
    short_of_trust: str | None

    def verdict(self, row: int) -> Verdict:
        return next(v for v in self.corroborations if v.row == row)


def judge(
    policy: TrustPolicy,
    *,
    author_domain: str,
    corroborations: Sequence[Witness],
    disputes: Sequence[Witness] = (),
    promoted_at: str | None = None,
    retired: bool = False,
    superseded: bool = False,
) -> Standing:
    """Decide a claim's tier and whether each witness counts.

    Per domain, the witness that counts is the earliest *blind* one if the
    domain has any, else its earliest: a domain that first read the claim
    and later rediscovered it independently still supplies the blind witness.
    """
    votes = _count(corroborations, author_domain, prefer_blind=True)
    counted = [w for w in corroborations if votes[w.row].counted]
    domains = tuple(dict.fromkeys(w.domain for w in counted))
    has_blind = any(w.blind for w in counted)

    objections = _count(disputes, author_domain, prefer_blind=False)
    if promoted_at is not None:
        for w in disputes:
            if objections[w.row].counted and w.at <= promoted_at:
                objections[w.row] = Verdict(w.row, False, NotCounted.COVERED_BY_PROMOTION)
    disputed = any(v.counted for v in objections.values())

    if retired:
        tier = Tier.RETIRED
    elif superseded:
        tier = Tier.SUPERSEDED
    elif disputed:
        tier = Tier.DISPUTED
    elif promoted_at is not None:
        tier = Tier.TRUSTED
    else:
        tier = Tier.UNVERIFIED if shortfall(policy, Tier.UNVERIFIED, len(domains), has_blind) else Tier.TRUSTED
    return Standing(
        tier=tier,
        corroborations=tuple(votes[w.row] for w in corroborations),
        disputes=tuple(objections[w.row] for w in disputes),
        counted_domains=domains,
        has_blind=has_blind,
        short_of_trust=shortfall(policy, tier, len(domains), has_blind),
    )


def shortfall(policy: TrustPolicy, tier: Tier, counted_domains: int, has_blind: bool) -> str | None:
    """Why a live claim is not trusted, in words (None when it is, or is not live)."""
    if tier is Tier.DISPUTED:
        return "an independent witness disputes it"
    if tier is not Tier.UNVERIFIED:
        return None
    if counted_domains < policy.quorum:
        return f"needs {policy.quorum - counted_domains} more corroboration(s) from independent trust domains (quorum {policy.quorum})"
    if policy.require_blind and not has_blind:
        return "quorum reached, but the policy requires a blind witness and every counted one had been shown the claim"
    return None


def _count(witnesses: Iterable[Witness], author_domain: str, *, prefer_blind: bool) -> dict[int, Verdict]:
    verdicts: dict[int, Verdict] = {}
    chosen: dict[str, Witness] = {}
    for w in witnesses:
        if w.revoked:
            verdicts[w.row] = Verdict(w.row, False, NotCounted.REVOKED)
        elif w.unread:
            verdicts[w.row] = Verdict(w.row, False, NotCounted.UNREAD)
        elif w.domain == author_domain:
            verdicts[w.row] = Verdict(w.row, False, NotCounted.AUTHOR_DOMAIN)
        else:
            current = chosen.get(w.domain)
            if current is None or (prefer_blind and w.blind and not current.blind):
                chosen[w.domain] = w
    winners = {w.row for w in chosen.values()}
    for w in witnesses:
        if w.row not in verdicts:
            verdicts[w.row] = Verdict(w.row, True) if w.row in winners else Verdict(w.row, False, NotCounted.DOMAIN_ALREADY_COUNTED)
    return verdicts
