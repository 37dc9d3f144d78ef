"""The memory's tables rebuilt from the keyed log: what ``verify`` compares, and what decisions rest on.

:class:`MemoryLog` is fed memory events in order and keeps, per claim, what
they say: its edition, author and author's trust domain, its witnesses
(each with the domain and blindness the broker recorded when it judged
them), promotions, retirement, the last tier an event gave it.  The trust
policy (:func:`memory.policy.judge`) run on those facts gives the tier and
every witness's verdict -- the same rule the broker applies to the rows.

Two users:

* ``conclave memory verify`` feeds it *every* event (:meth:`MemoryLog.feed`
  from the chain walk) and compares each table, every row and column, with
  :func:`store.projection.compare`.  There the blindness of a corroboration
  is recomputed from the exposure events (was that domain shown any
  edition of the claim before?), never read back; where it differs from
  what the broker recorded, the broker was shown tampered exposure rows and
  verify says so.
* Decisions (``memory.facts``) feed it only one claim's events, checked
  under the key as they are read, and judge from those instead of the rows.

One place per table: each ``*_TABLE`` names the columns compared and
:meth:`MemoryLog.projections` builds that table's expected rows.  A column
added to a table gets its expected value there; if no event carries it, make
the event that writes the row carry it (docs/MEMORY.md, "Verify").
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Callable, Final, Iterable, Iterator, Mapping, TypeVar, final

import apsw
import attrs

from memory import claims as claim_rows
from memory import semantic, vectors
from memory.policy import Standing, Tier, TrustPolicy, Verdict, Witness, judge
from store.events import Event
from store.projection import UNKNOWN, Check, Difference, FromRow, Projection, Row, Table, Unrebuilt, shown

T = TypeVar("T")

#: The event that starts the exposure log (written once, by the first broker of this version to open a store).
EXPOSURES_LOGGED: Final = "memory.exposures_logged"
SHOWN: Final = "memory.shown"
#: Events that set a claim's tier (the last one of a claim is its tier).
TIER_KINDS: Final = frozenset({"memory.remember", "memory.revise", "memory.tier", "memory.retire"})
#: Every event about one claim (its subject is the claim's id).
CLAIM_KINDS: Final = frozenset({
    "memory.remember", "memory.revise", "memory.corroborate", "memory.dispute", "memory.promote",
    "memory.retire", "memory.unretire", "memory.tier", "memory.share",
})
#: A link people and agents draw between two claims (``memory.links``): its subject is the source claim.
LINK: Final = "memory.link"
KINDS: Final = CLAIM_KINDS | {"memory.revoke", SHOWN, EXPOSURES_LOGGED, "memory.policy", "memory.groom", "agent.spawn", "memory.embed", LINK}

CLAIMS_TABLE: Final = Table("claims", ("id",), (
    "lineage", "edition", "supersedes", "superseded_by", "kind", "scope", "text", "text_key", "evidence", "author",
    "author_domain", "tier", "created_at", "last_used_at", "retired_at", "retired_by", "retired_reason", "private_to",
), noun="claim", digests=("text", "evidence"))
CORROBORATIONS_TABLE: Final = Table("corroborations", ("id",), (
    "claim", "principal", "domain", "at", "evidence", "blind", "counted", "reason_not_counted", "witness", "similarity", "restatement",
), noun="corroboration", digests=("evidence",))
DISPUTES_TABLE: Final = Table("disputes", ("id",), (
    "claim", "principal", "domain", "at", "reason", "counted", "reason_not_counted",
), noun="dispute", digests=("reason",))
PROMOTIONS_TABLE: Final = Table("promotions", ("id",), ("claim", "at", "by", "reason"), noun="promotion")
EXPOSURES_TABLE: Final = Table("exposures", (), ("claim", "lineage", "principal", "domain", "via", "at"), ident="id", noun="exposure")
SETTINGS_TABLE: Final = Table("memory_settings", ("key",), ("value",), noun="setting")
GROOM_TABLE: Final = Table("groom_runs", ("id",), ("at", "actor", "high_water", "summary"), noun="groom run")
LINKS_TABLE: Final = Table("claim_links", ("id",), ("claim", "restates", "kind", "similarity", "at"), noun="link")
VECTORS_TABLE: Final = Table("claim_vectors", ("claim", "model"), ("vector", "at"), noun="vector")
RELATIONS_TABLE: Final = Table("claim_relations", ("id",), (
    "source", "target", "source_lineage", "target_lineage", "kind", "why", "author", "author_domain", "at",
), noun="link", digests=("why",))


@final
@attrs.define
class WitnessFacts:
    """A corroboration or dispute as its event recorded it."""

    row: int
    seq: int
    principal: str
    domain: str
    at: str
    #: Blind as the broker judged it when it wrote the event (always False for a dispute).
    blind: bool = False
    #: Blind as the exposure events say (None: not rebuilt -- made before exposures were logged, or not asked).
    rebuilt_blind: bool | None = None
    note: Any = UNKNOWN  # the evidence's (corroboration) or reason's (dispute) SHA-256, or None
    #: The witness's kind as the broker recorded it (blind, informed, unread; None: an event from before witnesses said what they saw).
    kind: str | None = None
    #: The kind by the broker's rule on the events (shown by the exposure events? evidence at its threshold?); None: not rebuilt.
    rebuilt_kind: str | None = None
    similarity: float | None = None
    restatement: int | None = None

    def witness(self, revoked: set[str], *, rebuilt: bool = False) -> Witness:
        blind = self.rebuilt_blind if rebuilt and self.rebuilt_blind is not None else self.blind
        kind = self.rebuilt_kind if rebuilt and self.rebuilt_kind is not None else self.kind
        return Witness(row=self.row, principal=self.principal, domain=self.domain, at=self.at, blind=blind, revoked=self.principal in revoked,
                       unread=kind == "unread")


@final
@attrs.define
class PromotionFacts:
    row: int | None  # None: written before promotions recorded their row
    seq: int
    at: str
    by: str
    reason: str | None


@final
@attrs.define
class ClaimFacts:
    """One edition as its events tell it."""

    id: int
    seq: int
    lineage: int
    edition: int
    supersedes: int | None
    kind: str
    scope: str
    text_sha256: str
    evidence_sha256: Any
    author: str
    author_domain: Any  # UNKNOWN when neither the event nor a spawn event says it
    created_at: str
    text_key: str | None = None  # None: an older event that did not record it
    superseded_by: int | None = None
    last_used_at: str | None = None
    retired_at: str | None = None
    retired_by: str | None = None
    retired_reason: str | None = None
    #: The agent whose private pool holds it (``memory.remember``'s ``private_to``; a ``memory.share`` clears it).
    private_to: str | None = None
    #: The last event that set the tier, and the tier it set.
    tier_seq: int = 0
    tier: Tier = Tier.UNVERIFIED
    # A shared empty tuple until the first witness (most claims have none: three empty lists a claim
    # would cost ~170 bytes each of a million claims in a verify); ``_added`` makes the list.
    corroborations: list[WitnessFacts] | tuple[()] = ()
    disputes: list[WitnessFacts] | tuple[()] = ()
    promotions: list[PromotionFacts] | tuple[()] = ()

    @property
    def live(self) -> bool:
        return self.tier.live

    def standing(self, policy: TrustPolicy, revoked: set[str], *, rebuilt: bool = False, extra: Witness | None = None,
                 extra_is_dispute: bool = False) -> Standing:
        """The trust policy on these facts (``extra``: a witness being added in this job, not yet an event)."""
        if extra is None and not self.corroborations and not self.disputes and not self.promotions:
            return _unwitnessed(policy, retired=self.retired_at is not None, superseded=self.superseded_by is not None)
        corroborations = [w.witness(revoked, rebuilt=rebuilt) for w in self.corroborations]
        disputes = [w.witness(revoked) for w in self.disputes]
        if extra is not None:
            (disputes if extra_is_dispute else corroborations).append(extra)
        promoted = max((p.at for p in self.promotions), default=None)
        return judge(
            policy,
            author_domain=self.author_domain if self.author_domain is not UNKNOWN else "",
            corroborations=corroborations,
            disputes=disputes,
            promoted_at=promoted,
            retired=self.retired_at is not None,
            superseded=self.superseded_by is not None,
        )


_UNWITNESSED: dict[tuple[TrustPolicy, bool, bool], Standing] = {}


def _unwitnessed(policy: TrustPolicy, *, retired: bool, superseded: bool) -> Standing:
    """What ``judge`` says of a claim nobody vouched for, disputed or promoted (most claims): computed once per case."""
    found = _UNWITNESSED.get((policy, retired, superseded))
    if found is None:
        found = _UNWITNESSED[(policy, retired, superseded)] = judge(policy, author_domain="", corroborations=(), retired=retired, superseded=superseded)
    return found


def domain_of_spawn(payload: dict[str, Any]) -> str | None:
    domain = payload.get("domain")
    return domain if isinstance(domain, str) else None


@final
class MemoryLog:
    """The memory's facts as the events tell them; a :class:`store.projection.Projector`.

    ``rebuild_blind``: recompute each corroboration's blindness from the
    exposure events (verify); decisions take the blindness the broker
    recorded in the keyed event instead (they read one claim's events, not
    the whole exposure log).
    """

    kinds = KINDS

    def __init__(self, *, rebuild_blind: bool = False) -> None:
        self.claims: dict[int, ClaimFacts] = {}
        self.revoked: set[str] = set()
        self.domains: dict[str, str] = {}
        self.policy: TrustPolicy | None = None
        self._settings: tuple[int, str] | None = None
        self._rebuild = rebuild_blind
        self._exposures_from: int | None = None  # seq of the event that started the exposure log
        self._before_logged: int = 0  # exposure rows written before it (ids up to this)
        self._seen: dict[tuple[str, int], int] = {}  # (domain, lineage) -> the first event that showed it
        self._exposures: Counter[tuple[Any, ...]] = Counter()
        self._groom: dict[tuple[Any, ...], Row] = {}
        self._groom_legacy = 0
        self._unbuilt_blind = 0
        self._findings: list[Difference] = []
        self._links: dict[tuple[Any, ...], Row] = {}
        self._links_found: list[Difference] = []
        # (claim, model) -> (event seq, the vector's SHA-256, at): the Check is made when its row is compared.
        self._vectors: dict[tuple[Any, ...], tuple[int, str, str]] = {}
        self._relations: dict[tuple[Any, ...], Row] = {}
        # One object per distinct author, domain, kind and scope: each event's JSON makes new strings,
        # and a million claims holding their own copies cost ~200 bytes a claim in a verify.
        self._words: dict[str, str] = {}

    def _word(self, text: Any) -> Any:
        return self._words.setdefault(text, text) if isinstance(text, str) else text

    # -- feeding ----------------------------------------------------------------

    def prepare(self, conn: apsw.Connection) -> None:
        """Before a full walk: the exposure rows written before exposures were logged (they stand as found)."""
        if not self._rebuild:
            return
        row = conn.execute(f"SELECT payload FROM events WHERE kind = '{EXPOSURES_LOGGED}' ORDER BY seq LIMIT 1").fetchone()
        if row is None:
            return
        before = int(json.loads(row[0]).get("before") or 0)
        self._before_logged = before
        for domain, lineage in conn.execute("SELECT domain, lineage FROM exposures WHERE id <= ?", (before,)):
            self._seen.setdefault((domain, lineage), 0)

    def feed(self, event: Event) -> None:
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event)

    def _remember(self, e: Event) -> None:
        p = e.payload
        claim_id = int(e.subject or 0)
        domain = self._word(self.domains.get(e.actor) or p.get("domain") or UNKNOWN)
        facts = ClaimFacts(
            id=claim_id, seq=e.seq, lineage=int(p["lineage"]), edition=int(p["edition"]), supersedes=p.get("supersedes"),
            kind=self._word(p["kind"]), scope=self._word(p["scope"]), text_sha256=p["text_sha256"], evidence_sha256=p.get("evidence_sha256"),
            author=self._word(e.actor), author_domain=domain, created_at=e.at, text_key=p.get("text_key"), tier_seq=e.seq, tier=Tier.UNVERIFIED,
            private_to=p.get("private_to"),
        )
        self.claims[claim_id] = facts
        old = self.claims.get(p["supersedes"]) if p.get("supersedes") is not None else None
        if old is not None:
            old.superseded_by = claim_id
            if old.tier_seq < e.seq:
                old.tier_seq, old.tier = e.seq, Tier.SUPERSEDED

    def _share(self, e: Event) -> None:
        """A private claim shared: every edition of its lineage the log holds is shared from here on."""
        lineage = e.payload.get("lineage")
        for facts in self.claims.values():
            if facts.lineage == lineage or facts.id == int(e.subject or 0):
                facts.private_to = None

    def _relation(self, e: Event) -> None:
        p = e.payload
        if p.get("row") is None:
            return
        self._relations[(int(p["row"]),)] = Row(e.seq, {
            "source": int(e.subject or 0), "target": p.get("target"), "source_lineage": p.get("source_lineage"),
            "target_lineage": p.get("target_lineage"), "kind": p.get("kind"), "why": p.get("why_sha256"),
            "author": e.actor, "author_domain": p.get("domain"), "at": e.at,
        })

    def _witness(self, e: Event) -> None:
        facts = self.claims.get(int(e.subject or 0))
        p = e.payload
        if facts is None or "row" not in p:
            return
        domain = self._word(self.domains.get(e.actor) or p.get("domain") or "")
        if e.kind == "memory.corroborate":
            w = WitnessFacts(int(p["row"]), e.seq, self._word(e.actor), domain, e.at, blind=bool(p.get("blind")), note=p.get("evidence_sha256"),
                             kind=p.get("witness"), similarity=p.get("similarity"), restatement=p.get("restatement"))
            if self._rebuild:
                if self._exposures_from is not None and self._exposures_from < e.seq:
                    shown = domain == facts.author_domain or (domain, facts.lineage) in self._seen
                    if w.kind is None:  # before witnesses said what they saw: blind is never shown
                        w.rebuilt_blind = not shown
                    else:  # the broker's rule (memory.authoring.corroborate), applied again to what the events say
                        matched = semantic.evidence_matches(w.similarity, str(p.get("evidence_match")))
                        w.rebuilt_kind = "informed" if shown else ("blind" if matched else "unread")
                        w.rebuilt_blind = w.rebuilt_kind == "blind"
                else:
                    self._unbuilt_blind += 1
            facts.corroborations = _added(facts.corroborations, w)
        else:
            facts.disputes = _added(facts.disputes, WitnessFacts(int(p["row"]), e.seq, self._word(e.actor), domain, e.at, note=p.get("reason_sha256", UNKNOWN)))
        facts.last_used_at = e.at

    def _promote(self, e: Event) -> None:
        facts = self.claims.get(int(e.subject or 0))
        if facts is not None:
            row = e.payload.get("row")
            facts.promotions = _added(facts.promotions, PromotionFacts(None if row is None else int(row), e.seq, e.at, e.actor, e.payload.get("reason")))

    def _retire(self, e: Event) -> None:
        facts = self.claims.get(int(e.subject or 0))
        if facts is not None:
            facts.retired_at, facts.retired_by, facts.retired_reason = e.at, e.actor, e.payload.get("reason")
            facts.tier_seq, facts.tier = e.seq, Tier.RETIRED
            if e.payload.get("rule") == "restatement" and self._rebuild:
                self._link(e, facts)

    def _link(self, e: Event, facts: ClaimFacts) -> None:
        """A restatement's link row, its kind recomputed: was the new claim's domain shown the one it restates?"""
        p = e.payload
        other = self.claims.get(int(p.get("restates") or 0))
        recorded = p.get("link")
        kind: Any = recorded
        if other is not None and self._exposures_from is not None and self._exposures_from < e.seq:
            kind = "restatement" if (facts.author_domain, other.lineage) in self._seen else "rediscovery"
            if kind != recorded:
                why = ("its author's domain had been shown it" if kind == "restatement"
                       else "no exposure event shows its author's domain that claim before")
                self._links_found.append(Difference(
                    "claim_links", (p.get("row"),), "kind", kind, str(recorded),
                    f"claim_links: claim {facts.id} was linked to claim {other.id} as a {recorded} at event {e.seq}, but {why}: "
                    "the exposure rows were changed behind the broker's back before it judged", e.seq))
        if p.get("row") is not None:
            self._links[(int(p["row"]),)] = Row(e.seq, {
                "claim": facts.id, "restates": p.get("restates"), "kind": kind, "similarity": p.get("similarity"), "at": e.at,
            })

    def _embed(self, e: Event) -> None:
        model = e.payload.get("model")
        for claim, sha in (e.payload.get("vectors") or {}).items():
            self._vectors[(int(claim), model)] = (e.seq, sha, e.at)

    def _unretire(self, e: Event) -> None:
        facts = self.claims.get(int(e.subject or 0))
        if facts is not None:
            facts.retired_at = facts.retired_by = facts.retired_reason = None

    def _tier(self, e: Event) -> None:
        facts = self.claims.get(int(e.subject or 0))
        if facts is not None:
            facts.tier_seq, facts.tier = e.seq, Tier(e.payload["to"])
            if e.payload.get("superseded_by") is not None:
                facts.superseded_by = int(e.payload["superseded_by"])

    def _revoke(self, e: Event) -> None:
        if e.subject:
            self.revoked.add(e.subject)

    def _shown(self, e: Event) -> None:
        p = e.payload
        domain = self.domains.get(e.actor) or p.get("domain") or ""
        for claim_id, lineage in p.get("claims", ()):
            self._seen.setdefault((domain, lineage), e.seq)
            self._exposures[(claim_id, lineage, e.actor, domain, p.get("via"), e.at)] += 1

    def _exposures_logged(self, e: Event) -> None:
        if self._exposures_from is None:
            self._exposures_from = e.seq

    def _policy(self, e: Event) -> None:
        after = e.payload.get("after") or {}
        self.policy = TrustPolicy.from_table(after.get("policy") or {})
        self._settings = (e.seq, json.dumps(after, sort_keys=True, separators=(",", ":"), ensure_ascii=False))

    def _groom_run(self, e: Event) -> None:
        p = dict(e.payload)
        row = p.pop("row", None)
        high_water = p.pop("high_water", None)
        if row is None or high_water is None:
            self._groom_legacy += 1
            return
        summary = p
        self._groom[(int(row),)] = Row(e.seq, {
            "at": e.at, "actor": e.actor, "high_water": high_water,
            "summary": Check(lambda found, s=summary: _json_equal(found, s), f"the summary event {e.seq} recorded"),
        })

    def _spawn(self, e: Event) -> None:
        domain = domain_of_spawn(e.payload)
        if e.subject and domain:
            self.domains[e.subject] = domain

    # -- what the tables must hold ---------------------------------------------------

    def findings(self, facts: ClaimFacts, tier: Tier) -> list[Difference]:
        """Where the events disagree with themselves about one claim: a tier or a blindness the broker recorded on
        tampered rows (``tier``: the claim's tier on its rebuilt facts)."""
        out = []
        for w in facts.corroborations:
            if w.rebuilt_kind is not None and w.rebuilt_kind != w.kind:
                why = (f"domain {w.domain} had been shown an edition of claim {facts.id}" if w.rebuilt_kind == "informed"
                       else f"no exposure event shows domain {w.domain} an edition of claim {facts.id} before it, and its evidence's "
                       f"similarity {w.similarity} makes it {w.rebuilt_kind}")
                out.append(Difference("corroborations", (w.row,), "witness", w.rebuilt_kind, str(w.kind),
                                      f"corroborations: corroboration {w.row} was judged {w.kind} at event {w.seq}, but {why}: "
                                      "the exposure rows were changed behind the broker's back before it judged", w.seq))
                continue
            if w.rebuilt_blind is not None and w.rebuilt_blind != w.blind:
                if w.blind:
                    seen = self._seen.get((w.domain, facts.lineage))
                    why = f"domain {w.domain} had been shown an edition of claim {facts.id}" + (f" (event {seen})" if seen else "")
                    out.append(Difference("corroborations", (w.row,), "blind", "0", "1",
                                          f"corroborations: corroboration {w.row} was judged blind at event {w.seq}, but {why}: "
                                          "the exposure rows were changed behind the broker's back before it judged", w.seq))
                else:
                    out.append(Difference("corroborations", (w.row,), "blind", "1", "0",
                                          f"corroborations: corroboration {w.row} was judged informed at event {w.seq}, but no exposure "
                                          f"event shows domain {w.domain} an edition of claim {facts.id} before it: an exposure row was "
                                          "inserted behind the broker's back", w.seq))
        if tier is not facts.tier and facts.tier_seq:
            out.append(Difference("claims", (facts.id,), "tier", tier.value, facts.tier.value,
                                  f"claims: claim {facts.id}: event {facts.tier_seq} made it {facts.tier.value}, but its witnesses' events "
                                  f"make it {tier.value}: the broker judged rows changed behind its back", facts.tier_seq))
        return out

    def _claim_row(self, facts: ClaimFacts, policy: TrustPolicy) -> Row:
        """What the claims table must hold for one claim, in CLAIMS_TABLE's column order."""
        standing = facts.standing(policy, self.revoked, rebuilt=True)
        return Row(facts.seq, (
            facts.lineage, facts.edition, facts.supersedes, facts.superseded_by, facts.kind, facts.scope, facts.text_sha256,
            facts.text_key if facts.text_key is not None else _TEXT_KEY, facts.evidence_sha256, facts.author, facts.author_domain,
            standing.tier.value, facts.created_at, facts.last_used_at, facts.retired_at, facts.retired_by, facts.retired_reason,
            facts.private_to,
        ))

    def projections(self, conn: apsw.Connection) -> Iterable[Projection]:
        """Every table's expected rows.  The claims table's are made one at a time as the comparison asks for
        them (:class:`ClaimRows`), never all at once: a million claims' rows would double what the walk holds."""
        policy = self.policy or TrustPolicy()
        corroborations: dict[tuple[Any, ...], Row] = {}
        disputes: dict[tuple[Any, ...], Row] = {}
        promotions: dict[tuple[Any, ...], Row] = {}
        legacy_promotions: dict[int, list[PromotionFacts]] = {}
        findings: list[Difference] = []
        for facts in self.claims.values():
            standing = facts.standing(policy, self.revoked, rebuilt=True)
            findings += self.findings(facts, standing.tier)
            _witness_rows(corroborations, facts.id, facts.corroborations, standing.corroborations, "evidence")
            _witness_rows(disputes, facts.id, facts.disputes, standing.disputes, "reason")
            for p in facts.promotions:
                if p.row is None:
                    legacy_promotions.setdefault(facts.id, []).append(p)
                else:
                    promotions[(p.row,)] = Row(p.seq, {"claim": facts.id, "at": p.at, "by": p.by, "reason": p.reason})
        # Promotions written before their events named the row: the claim's rows in id order, one per event.
        for claim_id, legacy in legacy_promotions.items():
            taken = {k[0] for k in promotions}
            ids = [r[0] for r in conn.execute("SELECT id FROM promotions WHERE claim = ? ORDER BY id", (claim_id,)) if r[0] not in taken]
            for row_id, p in zip(ids, legacy):
                promotions[(row_id,)] = Row(p.seq, {"claim": claim_id, "at": p.at, "by": p.by, "reason": p.reason})
        claims = MadeRows(self.claims, lambda _, facts: self._claim_row(facts, policy), single=True)
        yield Projection(CLAIMS_TABLE, claims, findings=tuple(f for f in findings if f.table == "claims"))
        yield Projection(CORROBORATIONS_TABLE, corroborations, findings=tuple(f for f in findings if f.table == "corroborations"))
        yield Projection(DISPUTES_TABLE, disputes)
        yield Projection(PROMOTIONS_TABLE, promotions)
        before = self._before_logged
        legacy_where = f"id > {before}" if before else None
        yield Projection(attrs.evolve(EXPOSURES_TABLE, where=legacy_where), multiset=self._exposures)
        settings: dict[tuple[Any, ...], Row] = {}
        if self._settings is not None:
            seq, value = self._settings
            settings[("settings",)] = Row(seq, {"value": Check(lambda found, v=value: _json_equal(found, json.loads(v)), f"the settings event {seq} recorded")})
        yield Projection(SETTINGS_TABLE, settings)
        legacy_groom = self._groom_legacy
        yield Projection(GROOM_TABLE, self._groom, legacy=(lambda key: "written before groom events named their row") if legacy_groom else None)
        if self._rebuild:  # decisions read one claim's events; only verify rebuilds these
            yield Projection(LINKS_TABLE, self._links, findings=tuple(self._links_found))
            yield Projection(RELATIONS_TABLE, self._relations)
            yield Projection(VECTORS_TABLE, MadeRows(self._vectors, _vector_row))

    def unrebuilt(self) -> list[Unrebuilt]:
        out = []
        if self._before_logged:
            out.append(Unrebuilt("exposures", None, self._before_logged, "written before exposures were logged as events"))
        if self._unbuilt_blind:
            out.append(Unrebuilt("corroborations", "blind", self._unbuilt_blind,
                                 "judged before exposures were logged as events: the blindness the broker recorded is taken"))
        return out


@final
class MadeRows(Mapping[tuple[Any, ...], Row]):
    """A table's expected rows, each made from what the walk kept when asked for (a read-only view).

    ``single``: ``source`` is keyed by the one key column's value (a claim's id), not by the key tuple.
    """

    def __init__(self, source: dict[Any, T], make: Callable[[Any, T], Row], *, single: bool = False) -> None:
        self._source: dict[Any, Any] = source
        self._make = make
        self._single = single

    def __getitem__(self, key: tuple[Any, ...]) -> Row:
        inner = (key[0] if len(key) == 1 else None) if self._single else key
        try:
            kept = self._source[inner]
        except (KeyError, TypeError):
            raise KeyError(key) from None
        return self._make(key, kept)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return ((k,) for k in self._source) if self._single else iter(self._source)

    def __len__(self) -> int:
        return len(self._source)


def _vector_row(_: tuple[Any, ...], kept: tuple[int, str, str]) -> Row:
    """A vector's row: its bytes must hash to the SHA-256 its ``memory.embed`` event recorded."""
    seq, sha, at = kept
    return Row(seq, {
        "vector": Check(lambda found: found is not None and vectors.digest(found) == sha, f"the vector whose sha256 event {seq} recorded ({sha[:16]}...)"),
        "at": at,
    })


def _added(items: list[T] | tuple[()], item: T) -> list[T]:
    """``items`` with ``item`` appended (a list made on the first)."""
    if isinstance(items, tuple):
        return [item]
    items.append(item)
    return items


def _witness_rows(into: dict[tuple[Any, ...], Row], claim_id: int, witnesses: list[WitnessFacts], verdicts: Iterable[Verdict], note: str) -> None:
    """The rows of one claim's corroborations (``note`` = evidence) or disputes (``note`` = reason), with their verdicts."""
    by_row = {v.row: v for v in verdicts}
    for w in witnesses:
        v = by_row[w.row]
        values = {"claim": claim_id, "principal": w.principal, "domain": w.domain, "at": w.at, note: w.note,
                  "counted": int(v.counted), "reason_not_counted": v.reason.value if v.reason else None}
        if note == "evidence":  # a corroboration: its blindness and kind as the exposure events and its evidence say
            values["blind"] = int(w.rebuilt_blind if w.rebuilt_blind is not None else w.blind)
            values["witness"] = w.rebuilt_kind if w.rebuilt_kind is not None else w.kind
            values["similarity"] = w.similarity
            values["restatement"] = w.restatement
        into[(w.row,)] = Row(w.seq, values)


#: An older event does not carry the text key: it is the broker's rule applied to the row's (checked) text.
_TEXT_KEY: Final = FromRow(lambda row: claim_rows.text_key(row["text"]) if isinstance(row["text"], str) else None)


def _json_equal(found: Any, expected: Any) -> bool:
    try:
        return bool(json.loads(found) == expected)
    except (TypeError, ValueError):
        return False


_HANDLERS: Final = {
    "memory.remember": MemoryLog._remember,
    "memory.revise": MemoryLog._remember,
    "memory.corroborate": MemoryLog._witness,
    "memory.dispute": MemoryLog._witness,
    "memory.promote": MemoryLog._promote,
    "memory.retire": MemoryLog._retire,
    "memory.unretire": MemoryLog._unretire,
    "memory.tier": MemoryLog._tier,
    "memory.revoke": MemoryLog._revoke,
    SHOWN: MemoryLog._shown,
    EXPOSURES_LOGGED: MemoryLog._exposures_logged,
    "memory.policy": MemoryLog._policy,
    "memory.groom": MemoryLog._groom_run,
    "agent.spawn": MemoryLog._spawn,
    "memory.embed": MemoryLog._embed,
    "memory.share": MemoryLog._share,
    LINK: MemoryLog._relation,
}

__all__ = ["MemoryLog", "ClaimFacts", "WitnessFacts", "KINDS", "CLAIM_KINDS", "TIER_KINDS", "shown"]


def for_verify() -> MemoryLog:
    """The projector ``verify`` runs (``Feature.projector``): blindness rebuilt from the exposure events too."""
    return MemoryLog(rebuild_blind=True)
