"""conclave's rules, stated again from the docs alone: the fuzzer's reference model.

Written from docs/MEMORY.md, docs/LOCKS.md, docs/MESSAGING.md and
docs/DEPLOYMENT.md, and importing nothing of conclave (``tests/fuzz`` holds
that with a test): if the model shared code with the broker, a bug in that
code would agree with itself.  Each class is one area's promises as a small
state machine the fuzzer advances step by step beside the real broker:

* :class:`Registry` -- principals, trust domains, restarts, children;
* :class:`Memory` -- claims, editions, witnesses, exposures, the trust policy;
* :class:`Locks` -- paths, globs and named resources, the FIFO line, deadlock
  refusal, fencing tokens;
* :class:`Mail` -- mailboxes, recipients, threads, read and acknowledged.

A method that models an operation returns an :class:`Expect`: the error codes
the docs allow, or success with the fields the reply must carry.  It changes
the model only on success, and the fuzzer applies it only after the broker
agreed.  Where the docs leave a choice open (which of two refusals wins when
both apply) the model accepts either, and says so where it does.
"""

from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

OPERATOR = "operator"
ALL = "all"

# -- expectations --------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What one operation must answer: ``errors`` (any of these codes) or success with ``fields``."""

    errors: frozenset[str] = frozenset()
    fields: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors

    @classmethod
    def error(cls, *codes: str, why: str = "") -> Expect:
        return cls(errors=frozenset(codes), why=why)

    @classmethod
    def success(cls, why: str = "", **fields: Any) -> Expect:
        return cls(fields=fields, why=why)


# -- principals ----------------------------------------------------------------------


@dataclass
class Principal:
    key: str  # [HOST/]agent:session
    agent: str  # alice, alice/k1, alice/k1/g1
    host: str
    parent: str | None  # the parent's key
    live: bool = True
    revoked: bool = False

    @property
    def domain(self) -> str:
        # The trust domain is the team agent a principal descends from; the host is not part of it
        # (docs/DEPLOYMENT.md: the same agent name on two hosts is one trust domain).
        return self.agent.split("/")[0]

    @property
    def mailbox(self) -> str:
        return self.agent


@dataclass
class TeamAgent:
    name: str
    host: str
    may_spawn: int
    max_restarts: int
    attempts: int = 0  # restarts used in this broker run


class Registry:
    """Who exists: the team, every principal ever issued, which are live.

    Rules (DESIGN.md, docs/ARCHITECTURE.md, docs/MEMORY.md): an agent's restarts and
    every child it spawned share its trust domain; ``may_spawn`` caps the live
    children of a domain; a child is never restarted; ``restart = "on-failure"``
    restarts a team agent that exited non-zero (a kill included) up to
    ``max_restarts`` times per run, unless it was revoked.
    """

    def __init__(self) -> None:
        self.team: dict[tuple[str, str], TeamAgent] = {}
        self.principals: dict[str, Principal] = {}
        self.ever_named: set[str] = set()  # agent names issued by any broker (mail can reach them)

    def add_team(self, name: str, host: str, *, may_spawn: int, max_restarts: int) -> None:
        self.team[(host, name)] = TeamAgent(name, host, may_spawn, max_restarts)
        self.ever_named.add(name)

    def issue(self, key: str, agent: str, host: str, parent: str | None) -> Principal:
        assert key not in self.principals, f"session {key} issued twice"
        principal = Principal(key=key, agent=agent, host=host, parent=parent)
        self.principals[key] = principal
        self.ever_named.add(agent)
        return principal

    def live(self, host: str | None = None) -> list[Principal]:
        return [p for p in self.principals.values() if p.live and (host is None or p.host == host)]

    def live_as(self, agent: str, host: str) -> Principal | None:
        found = [p for p in self.principals.values() if p.live and p.agent == agent and p.host == host]
        assert len(found) <= 1, f"two live sessions of {agent} on {host}: {[p.key for p in found]}"
        return found[0] if found else None

    def spawn(self, parent: Principal, child: str) -> Expect:
        """May ``parent`` spawn a child named ``child`` now?  (quota first, then the name)."""
        agent = self.team[(parent.host, parent.domain)]
        children = [p for p in self.live(parent.host) if p.domain == parent.domain and p.parent is not None]
        if len(children) >= agent.may_spawn:
            return Expect.error("quota", why=f"domain {parent.domain} already runs {len(children)} of {agent.may_spawn} children")
        if self.live_as(f"{parent.agent}/{child}", parent.host) is not None:
            return Expect.error("conflict", why="a child of that name is running")
        return Expect.success(agent=f"{parent.agent}/{child}", domain=parent.domain, parent=parent.key)

    def ended(self, principal: Principal, *, code: int) -> bool:
        """The process of ``principal`` ended with ``code``; returns True when the broker restarts it."""
        principal.live = False
        if principal.parent is not None or principal.revoked:
            return False
        agent = self.team[(principal.host, principal.agent)]
        if code != 0 and agent.attempts < agent.max_restarts:
            agent.attempts += 1
            return True
        return False

    def broker_stopped(self, host: str) -> None:
        """Every principal of ``host`` ends with its broker; the next broker starts the team afresh."""
        for p in self.live(host):
            p.live = False
        for (h, _), agent in self.team.items():
            if h == host:
                agent.attempts = 0


# -- memory --------------------------------------------------------------------------

LIVE = ("unverified", "trusted", "disputed")


@dataclass(frozen=True)
class Policy:
    quorum: int = 2
    require_blind: bool = False


@dataclass
class Witness:
    row: int  # order of recording, across the whole store
    principal: str
    domain: str
    at: int  # the model's clock
    blind: bool = False
    kind: str = "informed"  # informed | blind | unread (witness kinds; "unread" never counts)


@dataclass
class Claim:
    id: int
    lineage: int
    edition: int
    author: str
    author_domain: str
    kind: str
    scope: str
    text: str
    tag: str  # a word no other claim has: recall of it finds exactly this lineage's editions
    superseded_by: int | None = None
    retired: bool = False
    promotions: list[int] = field(default_factory=list)
    corroborations: list[Witness] = field(default_factory=list)
    disputes: list[Witness] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    counted: bool
    reason: str | None


@dataclass(frozen=True)
class Standing:
    tier: str
    corroborations: dict[int, Verdict]
    disputes: dict[int, Verdict]
    counted_domains: tuple[str, ...]
    has_blind: bool


class Memory:
    """Claims and the trust policy (docs/MEMORY.md, "The model" and "The trust policy").

    * A claim is **trusted** when the operator promoted it (and no counted
      dispute came after the last promotion), or when counted corroborations
      come from ``quorum`` distinct trust domains -- never the author's, at
      most one per domain, never from a revoked principal -- and, with
      ``require_blind``, at least one counted witness is blind.
    * Per domain the witness that counts is its earliest blind one, else its
      earliest.  Disputes count the same way (no blind preference); a
      counted dispute makes the claim **disputed**, unless a later promotion
      covers it.
    * A witness is **blind** when its domain is not the author's and no
      principal of its domain was ever shown any edition of the claim
      (recall, context, an agent's show, the reply to its own corroboration
      or dispute).
    * A revision is a new edition of the lineage, unverified, with no
      witnesses or promotions; only the author's domain may revise; the old
      edition is superseded.  Retired and superseded claims take no
      witnesses, revisions or promotions.
    """

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.claims: dict[int, Claim] = {}
        self.exposed: set[tuple[str, int]] = set()  # (domain, lineage)
        self.revoked: set[str] = set()
        self.clock = itertools.count(1)
        self.rows = itertools.count(1)
        self.witness_kinds = True  # witnesses are informed, blind (never shown, evidence matches) or unread (never counts)

    # -- the policy, stated once --------------------------------------------------

    def standing(self, claim: Claim) -> Standing:
        votes = self._count(claim.corroborations, claim.author_domain, prefer_blind=True)
        counted = [w for w in claim.corroborations if votes[w.row].counted]
        domains = tuple(dict.fromkeys(w.domain for w in counted))
        has_blind = any(w.blind for w in counted)
        objections = self._count(claim.disputes, claim.author_domain, prefer_blind=False)
        last_promotion = max(claim.promotions) if claim.promotions else None
        if last_promotion is not None:
            for w in claim.disputes:
                if objections[w.row].counted and w.at < last_promotion:
                    objections[w.row] = Verdict(False, "covered_by_promotion")
        disputed = any(v.counted for v in objections.values())
        if claim.retired:
            tier = "retired"
        elif claim.superseded_by is not None:
            tier = "superseded"
        elif disputed:
            tier = "disputed"
        elif last_promotion is not None:
            tier = "trusted"
        elif len(domains) >= self.policy.quorum and (has_blind or not self.policy.require_blind):
            tier = "trusted"
        else:
            tier = "unverified"
        return Standing(tier, votes, objections, domains, has_blind)

    def _count(self, witnesses: list[Witness], author_domain: str, *, prefer_blind: bool) -> dict[int, Verdict]:
        out: dict[int, Verdict] = {}
        chosen: dict[str, Witness] = {}
        for w in witnesses:
            if w.principal in self.revoked:
                out[w.row] = Verdict(False, "revoked")
            elif w.domain == author_domain:
                out[w.row] = Verdict(False, "author_domain")
            elif w.kind == "unread":
                out[w.row] = Verdict(False, "unread")
            elif w.domain not in chosen or (prefer_blind and w.blind and not chosen[w.domain].blind):
                chosen[w.domain] = w
        winners = {w.row for w in chosen.values()}
        for w in witnesses:
            if w.row not in out:
                out[w.row] = Verdict(True, None) if w.row in winners else Verdict(False, "domain_already_counted")
        return out

    def tier(self, claim_id: int) -> str:
        return self.standing(self.claims[claim_id]).tier

    def live_claims(self) -> list[Claim]:
        return [c for c in self.claims.values() if self.standing(c).tier in LIVE]

    # -- agents' operations ---------------------------------------------------------

    def _target(self, claim_id: int, op: str) -> tuple[Claim | None, Expect | None]:
        claim = self.claims.get(claim_id)
        if claim is None:
            return None, Expect.error("not_found", why=f"{op}: no claim {claim_id}")
        if self.standing(claim).tier not in LIVE:
            return claim, Expect.error("conflict", why=f"{op}: claim {claim_id} is {self.standing(claim).tier}")
        return claim, None

    def remember(self, author: Principal, claim_id: int, *, kind: str, scope: str, text: str, tag: str) -> Claim:
        """A new claim, unverified, no witnesses (the id is the broker's, read from its reply)."""
        claim = Claim(id=claim_id, lineage=claim_id, edition=1, author=author.key, author_domain=author.domain,
                      kind=kind, scope=scope, text=text, tag=tag)
        self.claims[claim_id] = claim
        return claim

    def expect_revise(self, author: Principal, claim_id: int) -> Expect:
        claim, refused = self._target(claim_id, "revise")
        if refused is not None:
            return refused
        assert claim is not None
        if claim.author_domain != author.domain:
            return Expect.error("forbidden", why=f"only domain {claim.author_domain} may revise claim {claim_id}")
        return Expect.success(tier="unverified", lineage=claim.lineage, edition=claim.edition + 1, supersedes=claim.id)

    def revise(self, author: Principal, old_id: int, new_id: int, *, text: str) -> Claim:
        old = self.claims[old_id]
        new = Claim(id=new_id, lineage=old.lineage, edition=old.edition + 1, author=author.key, author_domain=author.domain,
                    kind=old.kind, scope=old.scope, text=text, tag=old.tag)
        old.superseded_by = new_id
        self.claims[new_id] = new
        return new

    def expect_witness(self, witness: Principal, claim_id: int, *, dispute: bool, evidence_matches: bool | None = None) -> Expect:
        """What a corroboration (or dispute) by ``witness`` must answer: the verdict on its row and the tier after."""
        claim, refused = self._target(claim_id, "dispute" if dispute else "corroborate")
        if refused is not None:
            return refused
        assert claim is not None
        trial = self._with_witness(claim, witness, dispute=dispute, evidence_matches=evidence_matches)
        standing = self.standing(trial)
        row = (trial.disputes if dispute else trial.corroborations)[-1]
        verdict = (standing.disputes if dispute else standing.corroborations)[row.row]
        fields: dict[str, Any] = {"tier": standing.tier, "counted": verdict.counted, "reason_not_counted": verdict.reason}
        if not dispute:
            fields["blind"] = row.blind
        return Expect.success(**fields)

    def _blind(self, witness: Principal, claim: Claim) -> bool:
        return witness.domain != claim.author_domain and (witness.domain, claim.lineage) not in self.exposed

    def _with_witness(self, claim: Claim, witness: Principal, *, dispute: bool, evidence_matches: bool | None) -> Claim:
        never_shown = self._blind(witness, claim)
        if self.witness_kinds and not dispute:
            kind = "informed" if not never_shown else ("blind" if evidence_matches else "unread")
        else:
            kind = "blind" if never_shown else "informed"
        # The trial row is the newest of all: its time is after every promotion made so far.
        w = Witness(row=-1, principal=witness.key, domain=witness.domain, at=10**12, blind=kind == "blind" if not dispute else False, kind=kind)
        copy = Claim(**{**claim.__dict__, "corroborations": list(claim.corroborations), "disputes": list(claim.disputes)})
        (copy.disputes if dispute else copy.corroborations).append(w)
        return copy

    def witness(self, witness: Principal, claim_id: int, *, dispute: bool, evidence_matches: bool | None = None) -> Witness:
        """Record the corroboration (or dispute); its reply shows the claim, so the domain is informed from now on."""
        claim = self.claims[claim_id]
        never_shown = self._blind(witness, claim)
        if self.witness_kinds and not dispute:
            kind = "informed" if not never_shown else ("blind" if evidence_matches else "unread")
        else:
            kind = "blind" if never_shown else "informed"
        w = Witness(row=next(self.rows), principal=witness.key, domain=witness.domain, at=next(self.clock),
                    blind=(kind == "blind") and not dispute, kind=kind)
        (claim.disputes if dispute else claim.corroborations).append(w)
        self.shown(witness, [claim_id])
        return w

    def shown(self, principal: Principal, claim_ids: Iterable[int]) -> None:
        """recall, context, an agent's show, a witness's reply: the domain was shown the lineage."""
        if principal.agent == OPERATOR:
            return  # the operator's reads are not exposures: the operator never witnesses
        for claim_id in claim_ids:
            claim = self.claims.get(claim_id)
            if claim is not None:
                self.exposed.add((principal.domain, claim.lineage))

    def expect_show(self, claim_id: int) -> Expect:
        if claim_id not in self.claims:
            return Expect.error("not_found")
        return Expect.success(tier=self.tier(claim_id))

    def recall_must_find(self, tag: str) -> set[int]:
        """A recall of a claim's own tag word must return every live edition carrying it (one, the newest)."""
        return {c.id for c in self.claims.values() if c.tag == tag and self.standing(c).tier in LIVE}

    def may_push(self, claim_id: int, *, include_unverified: bool) -> bool:
        """``context`` pushes trusted claims only, unless asked to widen to every live tier."""
        tier = self.tier(claim_id)
        return tier == "trusted" or (include_unverified and tier in LIVE)

    # -- the operator's ------------------------------------------------------------

    def expect_promote(self, claim_id: int) -> Expect:
        claim, refused = self._target(claim_id, "promote")
        if refused is not None:
            return refused
        assert claim is not None
        trial = Claim(**{**claim.__dict__, "promotions": [*claim.promotions, 10**12]})
        return Expect.success(tier=self.standing(trial).tier)

    def promote(self, claim_id: int) -> None:
        self.claims[claim_id].promotions.append(next(self.clock))

    def expect_retire(self, claim_id: int) -> Expect:
        _, refused = self._target(claim_id, "retire")
        return refused or Expect.success(tier="retired")

    def retire(self, claim_id: int) -> None:
        self.claims[claim_id].retired = True

    def expect_unretire(self, claim_id: int) -> Expect:
        claim = self.claims.get(claim_id)
        if claim is None:
            return Expect.error("not_found")
        if not claim.retired:
            return Expect.error("conflict", why=f"claim {claim_id} is not retired")
        trial = Claim(**{**claim.__dict__, "retired": False})
        return Expect.success(tier=self.standing(trial).tier)

    def unretire(self, claim_id: int) -> None:
        self.claims[claim_id].retired = False

    def expect_revoke(self, registry: Registry, key: str, *, host: str | None = None) -> Expect:
        target = registry.principals.get(key)
        if target is None:
            return Expect.error("not_found")
        if host is not None and target.host != host:
            # A broker revokes only its own host's principals (docs/DEPLOYMENT.md); the code is not named there.
            return Expect.error("forbidden", "not_found", "invalid_args")
        if key in self.revoked:
            return Expect.error("conflict")
        return Expect.success(principal=key)

    def revoke(self, key: str) -> list[int]:
        """Revoke ``key``: its witnesses stop counting; returns the claims whose tier moved."""
        before = {c.id: self.standing(c).tier for c in self.claims.values()}
        self.revoked.add(key)
        return [cid for cid, tier in before.items() if self.standing(self.claims[cid]).tier != tier]

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy


# -- locks ---------------------------------------------------------------------------


def is_named(resource: str) -> bool:
    return resource == "git" or "://" in resource


def _matches(pattern: str, path: str) -> bool:
    """Does glob ``pattern`` match ``path``?  ``*`` stays in one segment, ``**`` is whole segments (docs/LOCKS.md)."""

    def match(ps: list[str], ss: list[str]) -> bool:
        if not ps:
            return not ss
        if ps[0] == "**":
            return any(match(ps[1:], ss[i:]) for i in range(len(ss) + 1))
        return bool(ss) and fnmatch.fnmatchcase(ss[0], ps[0]) and match(ps[1:], ss[1:])

    return match(pattern.split("/"), path.split("/"))


class Overlap:
    """Whether two lockable names can cover one path, decided by examples.

    Every pattern the fuzzer uses is built from the directories and file names
    in ``dirs`` and ``names``, so two patterns that overlap at all overlap on
    one of the paths made from them: checking those paths is exact for this
    universe (and needs none of locks/'s automata).  Named resources overlap
    only with the same name.
    """

    def __init__(self, dirs: Iterable[str], names: Iterable[str]) -> None:
        self.paths = [f"{d}{n}" for d in dirs for n in names]
        self._memo: dict[tuple[str, str], bool] = {}

    def __call__(self, a: str, b: str) -> bool:
        if is_named(a) or is_named(b):
            return a == b
        key = (a, b) if a <= b else (b, a)
        if key not in self._memo:
            self._memo[key] = a == b or any(_matches(a, p) and _matches(b, p) for p in self.paths)
        return self._memo[key]


@dataclass
class Hold:
    principal: str
    resource: str
    shared: bool
    token: int


@dataclass
class Request:
    principal: str
    resources: tuple[str, ...]
    shared: bool


class LockTable:
    """One broker's lock table (docs/LOCKS.md), in the order things happen.

    * An acquire takes all its resources or none.  It conflicts with a hold of
      another principal on an overlapping resource unless both are shared,
      and with a conflicting request of another principal already in line
      (FIFO among conflicting requests, fail-fast ones included).
    * Fail fast: ``locked``.  Waiting: queued, unless the wait would close a
      cycle in the wait-for graph (edges to conflicting holders and to
      conflicting requests ahead in line): ``deadlock``, nothing queued.
    * Whenever something is given back the line is reconsidered in order; a
      request is granted when nothing held conflicts with it and no
      conflicting request ahead of it is still in line.
    * Only the holder releases (all or nothing); the operator holds nothing
      and force-releases a resource (by its spelling) from every holder.
      A principal's holds and its place in line end with its process.
    """

    def __init__(self, overlap: Overlap) -> None:
        self.overlap = overlap
        self.holds: list[Hold] = []
        self.line: list[Request] = []

    def _conflict(self, who: str, resource: str, shared: bool, hold_who: str, hold_resource: str, hold_shared: bool) -> bool:
        return who != hold_who and self.overlap(resource, hold_resource) and not (shared and hold_shared)

    def held_conflicts(self, request: Request) -> list[Hold]:
        return [h for h in self.holds for r in request.resources
                if self._conflict(request.principal, r, request.shared, h.principal, h.resource, h.shared)]

    def line_conflicts(self, request: Request, ahead: list[Request]) -> list[Request]:
        return [q for q in ahead if any(self._conflict(request.principal, r, request.shared, q.principal, s, q.shared)
                                        for r in request.resources for s in q.resources)]

    def expect_acquire(self, principal: str, resources: tuple[str, ...], *, shared: bool, wait: bool) -> Expect:
        if principal.startswith(OPERATOR) or "/operator:" in principal:
            return Expect.error("forbidden", why="the operator holds no locks")
        if len(set(resources)) != len(resources) or not resources:
            return Expect.error("invalid_args", why="a resource listed twice")
        mine = {h.resource for h in self.holds if h.principal == principal}
        if mine & set(resources) or any(q.principal == principal for q in self.line):
            return Expect.error("conflict", why="already held or waited for")
        request = Request(principal, resources, shared)
        if not self.held_conflicts(request) and not self.line_conflicts(request, self.line):
            return Expect.success(granted=True)
        if not wait:
            return Expect.error("locked")
        if self._closes_cycle(request):
            return Expect.error("deadlock")
        return Expect.success(granted=False)

    def _edges(self, request: Request, ahead: list[Request]) -> set[str]:
        return {h.principal for h in self.held_conflicts(request)} | {q.principal for q in self.line_conflicts(request, ahead)}

    def _closes_cycle(self, request: Request) -> bool:
        waits = {q.principal: (q, self.line[:i]) for i, q in enumerate(self.line)}
        seen: set[str] = set()
        todo = list(self._edges(request, self.line))
        while todo:
            who = todo.pop()
            if who == request.principal:
                return True
            if who in seen or who not in waits:
                continue
            seen.add(who)
            q, ahead = waits[who]
            todo.extend(self._edges(q, ahead))
        return False

    def grant(self, principal: str, resources: tuple[str, ...], shared: bool, tokens: list[int]) -> None:
        for resource, token in zip(resources, tokens, strict=True):
            self.holds.append(Hold(principal, resource, shared, token))

    def enqueue(self, principal: str, resources: tuple[str, ...], shared: bool) -> None:
        self.line.append(Request(principal, resources, shared))

    def reconsider(self) -> list[Request]:
        """The requests in line that are granted now, in order (the caller reads their tokens from the replies)."""
        granted: list[Request] = []
        still: list[Request] = []
        for q in self.line:
            if not self.held_conflicts(q) and not self.line_conflicts(q, still):
                granted.append(q)
                for r in q.resources:
                    self.holds.append(Hold(q.principal, r, q.shared, token=-1))  # the token is filled in from the reply
            else:
                still.append(q)
        self.line = still
        return granted

    def expect_release(self, principal: str, resources: tuple[str, ...]) -> Expect:
        mine = {h.resource for h in self.holds if h.principal == principal}
        others = {h.resource for h in self.holds if h.principal != principal}
        missing = [r for r in resources if r not in mine]
        if not missing:
            return Expect.success(released=sorted(resources))
        codes = {"forbidden" if r in others else "not_found" for r in missing}
        return Expect.error(*codes, why=f"not holding {missing}")  # which of the two wins when both apply: the docs do not say

    def release(self, principal: str, resources: Iterable[str]) -> None:
        gone = set(resources)
        self.holds = [h for h in self.holds if not (h.principal == principal and h.resource in gone)]

    def expect_force_release(self, resource: str) -> Expect:
        if any(h.resource == resource for h in self.holds):
            return Expect.success()
        return Expect.error("not_found")

    def force_release(self, resource: str) -> None:
        self.holds = [h for h in self.holds if h.resource != resource]

    def ended(self, principal: str) -> None:
        self.holds = [h for h in self.holds if h.principal != principal]
        self.line = [q for q in self.line if q.principal != principal]

    def clear(self) -> None:
        self.holds, self.line = [], []

    def exclusive_violations(self) -> list[str]:
        """Pairs of holds that should never coexist (the model checks its own consistency too)."""
        out = []
        for a, b in itertools.combinations(self.holds, 2):
            if self._conflict(a.principal, a.resource, a.shared, b.principal, b.resource, b.shared):
                out.append(f"{a.principal} {a.resource} / {b.principal} {b.resource}")
        return out


# -- mail ----------------------------------------------------------------------------


@dataclass
class Message:
    id: int
    thread: str
    sender: str  # principal key
    sender_box: str
    to: str
    recipients: tuple[str, ...]
    read: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)


class Mail:
    """Mailboxes (docs/MESSAGING.md).

    A mailbox is an agent name (restarts share it; a child has its own) or
    ``operator``.  The sender is the connection's principal.  ``to`` is a
    team agent, any agent name ever issued, ``all`` (every live agent of the
    sending broker except the sender's own mailbox) or ``operator``; anything
    else is ``not_found``.  A reply needs a thread the sender's mailbox sent or
    received in (``not_found`` otherwise; the operator sees every thread).
    ``inbox`` lists the caller's unacknowledged mail, oldest first, and marks
    it read; ``ack`` touches only the caller's own copies (``not_found`` for
    an id no message has, ``forbidden`` for one not in the caller's mailbox,
    all or nothing).
    """

    def __init__(self) -> None:
        self.messages: dict[int, Message] = {}

    def visible(self, box: str, message: Message) -> bool:
        """Mail a mailbox sent or received (the operator reads any thread, for audit: see :meth:`thread_visible`)."""
        return message.sender_box == box or box in message.recipients

    def thread_visible(self, box: str, thread: str) -> bool:
        in_thread = [m for m in self.messages.values() if m.thread == thread]
        if box == OPERATOR:
            return bool(in_thread)
        return any(self.visible(box, m) for m in in_thread)

    def expect_send(self, registry: Registry, sender: Principal | None, to: str, *, host: str, thread: str | None) -> Expect:
        sender_box = OPERATOR if sender is None else sender.mailbox
        if to == ALL:
            recipients = sorted({p.mailbox for p in registry.live(host)} - {sender_box})
        elif to == OPERATOR:
            recipients = [OPERATOR]
        elif to in registry.ever_named:
            recipients = [to]
        else:
            return Expect.error("not_found", why=f"no agent named {to!r}")
        if thread is not None and not self.thread_visible(sender_box, thread):
            return Expect.error("not_found", why=f"thread {thread} is not visible to {sender_box}")
        return Expect.success(recipients=recipients, to=to)

    def send(self, message_id: int, thread: str, sender_key: str, sender_box: str, to: str, recipients: Iterable[str]) -> Message:
        message = Message(message_id, thread, sender_key, sender_box, to, tuple(recipients))
        self.messages[message_id] = message
        return message

    def inbox(self, box: str) -> list[Message]:
        """What ``msg.inbox`` must list for ``box`` (unacknowledged, oldest first)."""
        return sorted((m for m in self.messages.values() if box in m.recipients and box not in m.acked), key=lambda m: m.id)

    def mark_read(self, box: str, ids: Iterable[int]) -> None:
        for i in ids:
            self.messages[i].read.add(box)

    def expect_ack(self, box: str, ids: Iterable[int]) -> Expect:
        ids = list(ids)
        unknown = [i for i in ids if i not in self.messages]
        if unknown:
            return Expect.error("not_found", why=f"no message {unknown}")
        foreign = [i for i in ids if box not in self.messages[i].recipients]
        if foreign:
            return Expect.error("forbidden", why=f"messages {foreign} are not in {box}'s mailbox")
        return Expect.success(acked=sorted(i for i in set(ids) if box not in self.messages[i].acked),
                              already_acked=sorted(i for i in set(ids) if box in self.messages[i].acked))

    def ack(self, box: str, ids: Iterable[int]) -> None:
        for i in ids:
            self.messages[i].acked.add(box)
            self.messages[i].read.add(box)

    def expect_thread(self, box: str, thread: str) -> Expect:
        if not self.thread_visible(box, thread):
            return Expect.error("not_found")
        ids = sorted(m.id for m in self.messages.values() if m.thread == thread and (box == OPERATOR or self.visible(box, m)))
        return Expect.success(ids=ids)
