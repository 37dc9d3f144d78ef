"""The memory's wire ops.

The author of a claim and every witness are the connection's principal
(``call.principal``); no argument class here has a field that could name
one, and the router refuses requests that try.  Agent ops (``remember``,
``corroborate``, ``dispute``, ``revise``) need an agent principal; the
operator's (``promote``, ``retire``, ``unretire``, ``revoke``, ``verify``,
``groom``, and the inspection ops ``list``, ``trail``, ``log``) are refused
to anything inside an agent's process tree.  ``recall``, ``context`` and
``show`` serve both, and log what they showed to whom.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from broker.errors import ConclaveError, ErrorCode
from broker.core import Call, Feature
from broker.optable import Access, OpTable
from memory import authoring, claims, curation, doctor, exposures, inspection, links, prefilter, privacy, retrieval, revocation, schema, settings, standing, trails, vectors
from store import dialect, events
from store.events import BROKER_ACTOR
from store.integrity import ExpectedHead
from memory.policy import PolicyError
from memory import projection as memory_projection
from broker.team import VERIFY_EVERY
from memory.service import MemoryService

if TYPE_CHECKING:
    from broker.core import BrokerCore
    from broker.team import Team

OPS = OpTable()
SERVICE: Final = "memory"
MAX_REASON: Final = 2000


@attrs.frozen
class RememberArgs:
    kind: str
    text: str
    scope: str = "repo"
    evidence: str | None = None
    #: Keep it in the caller's private pool: visible to its agent name only, until shared.
    private: bool = False


@attrs.frozen
class RecallArgs:
    query: str
    limit: int = 10
    #: Follow one link from each hit and append what it leads to (tagged ``linked``).
    expand: bool = False
    #: A look, not a use: logged as shown (the reader saw the claims) but not counted as recall hits.
    preview: bool = False


@attrs.frozen
class ContextArgs:
    query: str
    #: Tokens; None takes the team file's ``[memory] context_budget_tokens``.
    budget: int | None = None
    include_unverified: bool = False
    #: Follow one link from each claim pushed, into what the budget has left.
    expand: bool = True
    #: A look at what would be pushed: logged as shown, not counted as a push.
    preview: bool = False


@attrs.frozen
class LinkArgs:
    source: int
    target: int
    kind: str = "relates-to"
    why: str | None = None


@attrs.frozen
class CorroborateArgs:
    id: int
    evidence: str | None = None


@attrs.frozen
class DisputeArgs:
    id: int
    reason: str


@attrs.frozen
class ReviseArgs:
    id: int
    text: str
    evidence: str | None = None


@attrs.frozen
class ClaimArgs:
    id: int


@attrs.frozen
class ListArgs:
    tier: str | None = None
    kind: str | None = None
    scope: str | None = None
    of_agent: str | None = None
    include_retired: bool = False
    limit: int = 50
    before: int | None = None


@attrs.frozen
class TrailArgs:
    of_agent: str | None = None
    claim: int | None = None


@attrs.frozen
class ExportArgs:
    after: int = 0
    limit: int = inspection.EXPORT_PAGE


@attrs.frozen
class LogArgs:
    kind: str | None = None
    of_agent: str | None = None
    claim: int | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None


@attrs.frozen
class PromoteArgs:
    id: int
    reason: str | None = None


@attrs.frozen
class ReasonArgs:
    id: int
    reason: str


@attrs.frozen
class RevokeArgs:
    target: str
    reason: str | None = None


@attrs.frozen
class GroomArgs:
    dry_run: bool = False


@attrs.frozen
class NoArgs:
    pass


def service(call: Call) -> MemoryService:
    svc = call.core.extensions.get(SERVICE)
    if svc is None:
        raise ConclaveError(ErrorCode.UNAVAILABLE, "the memory service is not running")
    return svc


def _text(op: str, field: str, value: str, limit: int) -> str:
    if not value.strip():
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {field} is empty")
    if len(value) > limit:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {field} is {len(value)} characters; at most {limit}")
    return value


def _choice(op: str, field: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {field} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _range(op: str, field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {field} must be from {low} to {high}, not {value}")
    return value


async def _screen(call: Call, op: str, checks: list[tuple[str, prefilter.Rejection | None]]) -> None:
    """Refuse the request if any field broke a prefilter rule; log the rule, never the text."""
    for field, rejection in checks:
        if rejection is None:
            continue
        await call.core.record("memory.rejected", actor=call.principal.key, subject=op, payload={"rule": rejection.rule, "field": field})
        raise ConclaveError(ErrorCode.REJECTED, f"{op}: " + rejection.message(f"the {field}"))


def _notes(evidence: str | None) -> list[tuple[str, prefilter.Rejection | None]]:
    return [("evidence", prefilter.check_note(evidence))] if evidence is not None else []


# -- agent ops ---------------------------------------------------------------------


@OPS.op("memory.remember", RememberArgs, access=Access.AGENT)
async def remember(call: Call, args: RememberArgs) -> dict[str, Any]:
    """Store a new claim (unverified) as the calling agent."""
    op = "memory.remember"
    _choice(op, "kind", args.kind, claims.KINDS)
    _choice(op, "scope", args.scope, claims.SCOPES)
    _text(op, "text", args.text, claims.MAX_TEXT)
    if args.evidence is not None:
        _text(op, "evidence", args.evidence, claims.MAX_NOTE)
    await _screen(call, op, [("text", prefilter.check_claim(args.text, args.scope)), *_notes(args.evidence)])
    svc = service(call)
    again = None
    if dialect.of(call.core.store.backend) == dialect.POSTGRESQL:  # off the writer (authoring.remember says why)
        again = await call.core.store.read(
            lambda conn: authoring.own_live_claim(conn, call.principal, kind=args.kind, scope=args.scope, text=args.text, private=args.private)
        )
    result = await call.core.store.call(
        lambda conn: authoring.remember(
            conn, svc.policy, call.principal, kind=args.kind, scope=args.scope, text=args.text, evidence=args.evidence, again=again,
            private=args.private,
        ),
        replayable=True,
    )
    svc.note_new_claim()
    return result


@OPS.op("memory.revise", ReviseArgs, access=Access.AGENT)
async def revise(call: Call, args: ReviseArgs) -> dict[str, Any]:
    """Write a new edition of a claim (unverified, no witnesses); the old edition is kept."""
    op = "memory.revise"
    _text(op, "text", args.text, claims.MAX_TEXT)
    if args.evidence is not None:
        _text(op, "evidence", args.evidence, claims.MAX_NOTE)
    svc = service(call)
    scope = await call.core.store.call(lambda conn: claims.require(conn, args.id).scope)
    await _screen(call, op, [("text", prefilter.check_claim(args.text, scope)), *_notes(args.evidence)])
    result = await call.core.store.call(
        lambda conn: authoring.revise(conn, svc.policy, call.principal, args.id, text=args.text, evidence=args.evidence),
        replayable=True,
    )
    svc.note_new_claim()
    return result


@OPS.op("memory.corroborate", CorroborateArgs, access=Access.AGENT)
async def corroborate(call: Call, args: CorroborateArgs) -> dict[str, Any]:
    """Vouch for a claim by id; the reply says whether it counted and why not."""
    if args.evidence is not None:
        _text("memory.corroborate", "evidence", args.evidence, claims.MAX_NOTE)
    await _screen(call, "memory.corroborate", _notes(args.evidence))
    svc = service(call)
    claim = await svc.read(lambda conn: claims.require(conn, args.id))
    # The witness's own statement against the claim, by meaning, before the job (off the event loop).
    match = attrs.evolve(await svc.meaning.evidence_match(claim.text, args.evidence), text_sha256=claims.digest(claim.text))
    return await call.core.store.call(
        lambda conn: authoring.corroborate(conn, svc.policy, call.principal, args.id, evidence=args.evidence, match=match), replayable=True
    )


@OPS.op("memory.dispute", DisputeArgs, access=Access.AGENT)
async def dispute(call: Call, args: DisputeArgs) -> dict[str, Any]:
    """Refute a claim by id, with a reason."""
    _text("memory.dispute", "reason", args.reason, MAX_REASON)
    await _screen(call, "memory.dispute", [("reason", prefilter.check_note(args.reason))])
    svc = service(call)
    return await call.core.store.call(lambda conn: authoring.dispute(conn, svc.policy, call.principal, args.id, reason=args.reason), replayable=True)


@OPS.op("memory.recall", RecallArgs)
async def recall(call: Call, args: RecallArgs) -> list[dict[str, Any]]:
    """Search every live claim (all tiers, badged); logged as exposures."""
    _text("memory.recall", "query", args.query, claims.MAX_TEXT)
    _range("memory.recall", "limit", args.limit, 1, retrieval.MAX_LIMIT)
    svc = service(call)
    probe = await svc.probe(args.query)
    via = "show" if args.preview else "recall"
    return await call.core.store.call(
        lambda conn: retrieval.recall(conn, svc.policy, call.principal, args.query, limit=args.limit, probe=probe, expand=args.expand, shown_as=via),
        replayable=True,
    )


@OPS.op("memory.context", ContextArgs)
async def context(call: Call, args: ContextArgs) -> dict[str, Any]:
    """The fenced reference block for a query: trusted claims by default, within a token budget."""
    _text("memory.context", "query", args.query, claims.MAX_TEXT)
    svc = service(call)
    budget = svc.settings.context_budget_tokens if args.budget is None else args.budget
    _range("memory.context", "budget", budget, 1, retrieval.MAX_BUDGET)
    probe = await svc.probe(args.query)
    via = "show" if args.preview else "context"
    return await call.core.store.call(
        lambda conn: retrieval.context(
            conn, call.principal, args.query, budget=budget, include_unverified=args.include_unverified, probe=probe, expand=args.expand, shown_as=via
        ),
        replayable=True,
    )


@OPS.op("memory.share", ClaimArgs)
async def share(call: Call, args: ClaimArgs) -> dict[str, Any]:
    """Share a private claim (its agent or the operator): it starts as an unverified shared claim, its author kept."""
    svc = service(call)
    return await call.core.store.call(lambda conn: privacy.share(conn, svc.policy, call.principal, args.id), replayable=True)


@OPS.op("memory.link", LinkArgs)
async def link(call: Call, args: LinkArgs) -> dict[str, Any]:
    """Link two claims (relates-to, depends-on, supersedes) as the caller; neither claim's trust changes."""
    if args.why is not None:
        _text("memory.link", "why", args.why, links.MAX_WHY)
        await _screen(call, "memory.link", [("why", prefilter.check_note(args.why))])
    return await call.core.store.call(
        lambda conn: links.link(conn, call.principal, args.source, args.target, kind=args.kind, why=args.why), replayable=True
    )


@OPS.op("memory.show", ClaimArgs)
async def show(call: Call, args: ClaimArgs) -> dict[str, Any]:
    """A claim's biography: editions, witnesses (blind or informed, counted or why not), promotions, events."""
    svc = service(call)

    def job(conn):  # type: ignore[no-untyped-def]
        claims.require_visible(conn, args.id, call.principal)
        out = inspection.show(conn, svc.policy, args.id)
        if not call.principal.is_operator:
            # A link to another agent's private claim would name it (and carry its linker's words): left out.
            ends = claims.load_many(conn, (i for r in out["relations"] for i in (r["source"], r["target"])))
            out["relations"] = [r for r in out["relations"] if all(ends[i].visible_to(call.principal) for i in (r["source"], r["target"]) if i in ends)]
        if not call.principal.is_operator:
            exposures.record(conn, call.principal, [claims.require(conn, args.id)], "show", events.now())
        return out

    return await call.core.store.call(job, replayable=True)


@attrs.frozen
class SettleArgs:
    timeout: float = 30.0


@OPS.op("memory.settle", SettleArgs, access=Access.OPERATOR)
async def settle(call: Call, args: SettleArgs) -> dict[str, Any]:
    """Wait until every claim remembered so far is embedded (and screened, and linked); meaning off: at once."""
    if not 0 < args.timeout <= 600:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"memory.settle: timeout must be from 0 to 600 seconds, not {args.timeout}")
    meaning = service(call).meaning
    settled = await meaning.settle(args.timeout)
    return {"settled": settled, **meaning.describe()}


@OPS.op("memory.stats", NoArgs)
async def stats(call: Call, _args: NoArgs) -> dict[str, Any]:
    """Counts by tier and kind, witnesses, exposures, the policy in force."""
    svc = service(call)
    path = str(call.core.paths.database)
    meaning = svc.meaning
    out = await svc.read(lambda conn: {**inspection.stats(conn, svc.policy, path), "vectors": vectors.count(conn, meaning.model)})
    out["meaning"] = meaning.describe()
    out["background_verify"] = attrs.asdict(svc.watched)
    return out


# -- operator ops ------------------------------------------------------------------


@OPS.op("memory.list", ListArgs, access=Access.OPERATOR)
async def list_claims(call: Call, args: ListArgs) -> list[dict[str, Any]]:
    """Claims, newest first, filtered by tier, kind, scope or author agent."""
    if args.tier is not None:
        _choice("memory.list", "tier", args.tier, ("unverified", "trusted", "disputed", "superseded", "retired"))
    _range("memory.list", "limit", args.limit, 1, inspection.MAX_LIST)
    svc = service(call)
    return await svc.read(
        lambda conn: inspection.listing(
            conn, tier=args.tier, kind=args.kind, scope=args.scope, of_agent=args.of_agent, include_retired=args.include_retired,
            limit=args.limit, before=args.before,
        )
    )  # fmt: skip


@OPS.op("memory.trail", TrailArgs, access=Access.OPERATOR)
async def trail(call: Call, args: TrailArgs) -> list[dict[str, Any]]:
    """A claim's trail (every edition: authored, shown, corroborated, disputed, tier changes), or an agent's
    (its sessions and children: what it authored, corroborated, disputed), in the order it happened (memory.trails)."""
    if (args.claim is None) == (args.of_agent is None):
        raise ConclaveError(ErrorCode.INVALID_ARGS, "memory.trail: give either claim (an id) or of_agent (an agent name)")
    if args.claim is not None:
        claim_id = args.claim
        return await service(call).read(lambda conn: trails.claim_trail(conn, claim_id))
    agent = args.of_agent
    assert agent is not None
    return await service(call).read(lambda conn: trails.agent_trail(conn, agent))


@OPS.op("memory.export", ExportArgs, access=Access.OPERATOR)
async def export(call: Call, args: ExportArgs) -> dict[str, Any]:
    """One page of every claim with its whole biography, oldest first; pass ``next`` as ``after`` for the next page."""
    _range("memory.export", "limit", args.limit, 1, inspection.EXPORT_PAGE)
    svc = service(call)
    return await svc.read(lambda conn: inspection.export_page(conn, svc.policy, after=args.after, limit=args.limit))


@OPS.op("memory.log", LogArgs, access=Access.OPERATOR)
async def log(call: Call, args: LogArgs) -> list[dict[str, Any]]:
    """Events (every family), filtered by kind, agent, claim, time."""
    await call.core.settle_events()
    return await service(call).read(
        lambda conn: inspection.log(conn, kind=args.kind, of_agent=args.of_agent, claim=args.claim, since=args.since, until=args.until, limit=args.limit)
    )


@OPS.op("memory.promote", PromoteArgs, access=Access.OPERATOR)
async def promote(call: Call, args: PromoteArgs) -> dict[str, Any]:
    """Make a claim trusted by a person's decision (recorded, with the reason)."""
    svc = service(call)
    return await call.core.store.call(lambda conn: curation.promote(conn, svc.policy, call.principal, args.id, reason=args.reason))


@OPS.op("memory.retire", ReasonArgs, access=Access.OPERATOR)
async def retire(call: Call, args: ReasonArgs) -> dict[str, Any]:
    """Tombstone a claim with a reason (never deleted)."""
    _text("memory.retire", "reason", args.reason, MAX_REASON)
    svc = service(call)
    return await call.core.store.call(lambda conn: curation.retire_by_operator(conn, svc.policy, call.principal, args.id, reason=args.reason))


@OPS.op("memory.unretire", ReasonArgs, access=Access.OPERATOR)
async def unretire(call: Call, args: ReasonArgs) -> dict[str, Any]:
    """Bring a retired claim back; its standing is recomputed."""
    _text("memory.unretire", "reason", args.reason, MAX_REASON)
    svc = service(call)
    return await call.core.store.call(lambda conn: curation.unretire(conn, svc.policy, call.principal, args.id, reason=args.reason))


@OPS.op("memory.revoke", RevokeArgs, access=Access.OPERATOR)
async def revoke(call: Call, args: RevokeArgs) -> dict[str, Any]:
    """Revoke AGENT:SESSION: its witnesses stop counting, claims that needed them are demoted, a live process is ended."""
    revocation.parse_target(args.target)
    svc = service(call)
    result = await call.core.store.call(lambda conn: revocation.revoke(conn, svc.policy, call.principal, args.target, reason=args.reason))
    live = call.core.registry.get(result["principal"])
    ended = False
    if live is not None:
        if call.core.supervisor is not None:
            ended = await call.core.supervisor.revoke(live.principal)
        else:
            ended = call.core.registry.end(live.principal) is not None
    return {**result, "ended": ended}


@attrs.frozen
class VerifyArgs:
    #: A head a person kept elsewhere, ``SEQ:HASH`` as verify printed it (the hash may be a 16+ digit prefix).
    expect_head: str | None = None


@OPS.op("memory.verify", VerifyArgs, access=Access.OPERATOR)
async def verify(call: Call, args: VerifyArgs) -> dict[str, Any]:
    """Walk the keyed chain, hold its head against the anchor (and a head you noted), the rows against their events, and the search indexes."""
    try:
        expect = ExpectedHead.parse(args.expect_head) if args.expect_head is not None else None
    except ValueError as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, str(exc)) from None
    return await service(call).verify(expect, hung_up=call.peer_gone)


@OPS.op("memory.groom", GroomArgs, access=Access.OPERATOR)
async def groom(call: Call, args: GroomArgs) -> dict[str, Any]:
    """One lifecycle pass (decay, duplicates, caps); retires, never deletes.  dry_run shows the plan."""
    return await service(call).groom(actor=call.principal.key, dry_run=args.dry_run)


# -- the eval (memory eval) --------------------------------------------------------------


@attrs.frozen
class ExamQueryArgs:
    q: str
    expect: list[int]
    cat: str


@attrs.frozen
class EvalArgs:
    queries: list[ExamQueryArgs]
    budget: int | None = None  # None: the team's [memory] context budget, as context uses


@OPS.op("memory.eval", EvalArgs, access=Access.OPERATOR)
async def evaluate(call: Call, args: EvalArgs) -> dict[str, Any]:
    """Score recall and context against an exam (read-only: no exposure, no event); recall@5/@15 per category, misses classified."""
    from memory import evaluation

    svc = service(call)
    budget = svc.settings.context_budget_tokens if args.budget is None else args.budget
    _range("memory.eval", "budget", budget, 1, retrieval.MAX_BUDGET)
    try:
        queries = evaluation.check_fixture({"queries": [attrs.asdict(q) for q in args.queries]})
    except ValueError as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"memory.eval: {exc}") from None
    probes = [await svc.probe(q.q) for q in queries]

    def job(conn):  # type: ignore[no-untyped-def]
        return {"corpus": evaluation.fingerprint(conn), "budget": budget, **evaluation.run(conn, call.principal, queries, probes, budget=budget)}

    return await svc.read(job)


# -- the vault (memory vault export / import) -----------------------------------------------


@attrs.frozen
class VaultExportArgs:
    out: str
    force: bool = False


@attrs.frozen
class VaultImportArgs:
    dir: str
    apply: bool = False


def _vault_dir(call: Call, op: str, given: str) -> Path:
    """An absolute folder outside the work tree and the state directory.

    Agents write the work tree: a vault there could be edited by one of them
    and then imported as the operator's own edits.
    """
    path = Path(given)
    if not path.is_absolute():
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: the vault folder must be an absolute path, not {given!r}")
    real = path.resolve()
    for inside, what in ((call.core.paths.repo, "the repository's work tree, which agents write"), (call.core.paths.state, "the state directory")):
        if real == inside.resolve() or real.is_relative_to(inside.resolve()):
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {given} is inside {what}; keep the vault in a folder of your own outside it")
    return real


@OPS.op("memory.vault_export", VaultExportArgs, access=Access.OPERATOR)
async def vault_export(call: Call, args: VaultExportArgs) -> dict[str, Any]:
    """Write every live claim as an Obsidian vault (deterministic, atomic; a foreign folder only with force)."""
    from memory import vault, vault_files

    root = _vault_dir(call, "memory.vault_export", args.out)
    rendered = await service(call).read(vault.render)
    try:
        done = await trio.to_thread.run_sync(lambda: vault_files.write(root, rendered, force=args.force))
    except vault.VaultError as exc:
        raise ConclaveError(ErrorCode.CONFLICT, f"memory.vault_export: {exc}") from None
    except OSError as exc:
        raise ConclaveError(ErrorCode.CONFLICT, f"memory.vault_export: cannot write {root}: {exc.strerror}; choose a folder you can write") from None
    return {"out": str(root), "snapshot": rendered.snapshot, "claims": rendered.claims, "files": len(rendered.files), **done}


@OPS.op("memory.vault_import", VaultImportArgs, access=Access.OPERATOR)
async def vault_import(call: Call, args: VaultImportArgs) -> dict[str, Any]:
    """Diff a vault against a fresh export (a dry run); with apply, make it so in one transaction, as the operator."""
    from memory import vault, vault_files

    op = "memory.vault_import"
    root = _vault_dir(call, op, args.dir)
    svc = service(call)
    try:
        manifest, notes = await trio.to_thread.run_sync(lambda: vault_files.read(root))
        fresh = await svc.read(vault.render)
        plan = vault.diff(fresh, manifest, notes, claims.KINDS, claims.SCOPES)
    except vault.VaultError as exc:
        raise ConclaveError(ErrorCode.CONFLICT, f"{op}: {exc}") from None
    for item in plan.new:
        _text(op, f"the text of {item['path']}", item["text"], claims.MAX_TEXT)
    for item in plan.edits:
        _text(op, f"the text of {item['path']}", item["to"], claims.MAX_TEXT)
    checks = [(f"text of {i['path']}", prefilter.check_claim(i["text"], i["scope"])) for i in plan.new]
    scopes = {n.fields["id"]: n.fields["scope"] for n in notes if "id" in n.fields}
    checks += [(f"text of {e['path']}", prefilter.check_claim(e["to"], scopes[e["claim"]])) for e in plan.edits]
    await _screen(call, op, checks)
    out = {"dir": str(root), "dry_run": not args.apply, **plan.as_dict()}
    if not args.apply or plan.empty:
        return out
    reason = f"deleted from the vault {root}"

    def apply(conn):  # type: ignore[no-untyped-def]
        # One job, one transaction: every change or none.  Each claim is re-read under the writer;
        # if one moved since the diff, the whole import is refused.
        for item in [*plan.edits, *plan.retire]:
            row = claims.require(conn, item["claim"])
            if not row.live or row.tier.value != item["tier"] or (item in plan.edits and row.text != item["from"]):
                raise ConclaveError(ErrorCode.CONFLICT, f"{op}: claim {row.id} changed while importing; run the import again (it will say the vault is stale)")
        editions = []
        for item in plan.edits:
            old = claims.require(conn, item["claim"])
            new = claims.insert(conn, call.principal, kind=old.kind, scope=old.scope, text=item["to"], evidence=old.evidence, revises=old)
            editions.append({"from": old.id, "to": new.id})
        retired = [curation.retire_by_operator(conn, svc.policy, call.principal, item["claim"], reason=reason)["id"] for item in plan.retire]
        created = [
            authoring.remember(conn, svc.policy, call.principal, kind=i["kind"], scope=i["scope"], text=i["text"], evidence=None)["id"] for i in plan.new
        ]
        events.append(conn, "memory.vault_import", actor=call.principal.key, subject=str(root),
                      payload={"snapshot": plan.snapshot, "editions": editions, "retired": retired, "created": created})  # fmt: skip
        return {"editions": editions, "retired": retired, "created": created}

    out["applied"] = await call.core.store.call(apply)
    for _ in out["applied"]["editions"] + out["applied"]["created"]:
        svc.note_new_claim()
    return out


# -- ingest (memory ingest) ---------------------------------------------------------------------


@attrs.frozen
class IngestFile:
    name: str
    text: str


@attrs.frozen
class IngestArgs:
    files: list[IngestFile]
    kind: str = "discovery"
    scope: str = "repo"
    apply: bool = False


@OPS.op("memory.ingest", IngestArgs, access=Access.OPERATOR)
async def ingest_files(call: Call, args: IngestArgs) -> dict[str, Any]:
    """Stage the facts of Markdown files as unverified claims (provenance ingest:FILE); a dry run unless apply."""
    from memory import ingest

    op = "memory.ingest"
    _choice(op, "kind", args.kind, claims.KINDS)
    _choice(op, "scope", args.scope, claims.SCOPES)
    if not args.files:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: give at least one file")
    found: list[ingest.Candidate] = []
    skipped: list[ingest.Skipped] = []
    for f in args.files:
        _text(op, "a file name", f.name, claims.MAX_NOTE - len(ingest.PROVENANCE))
        await _screen(call, op, [("file name", prefilter.check_note(ingest.PROVENANCE + f.name))])
        c, s = ingest.split(f.name, f.text, args.kind)
        found += c
        skipped += s
    svc = service(call)

    def twins(conn):  # type: ignore[no-untyped-def]
        keys = list({claims.text_key(c.text) for c in found})
        out: dict[str, tuple[int, str]] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT text_key, id, tier FROM claims WHERE text_key IN ({marks}) AND tier IN ('unverified', 'trusted', 'disputed') AND private_to IS NULL ORDER BY id"
            for key, cid, tier in conn.execute(sql, chunk):
                out.setdefault(key, (cid, tier))
        return out

    staging = ingest.stage(found, skipped, await svc.read(twins), args.scope)
    out: dict[str, Any] = {"dry_run": not args.apply, "store": staging.store, "refused": staging.refused}
    if not args.apply or not staging.store:
        return out

    def apply(conn):  # type: ignore[no-untyped-def]
        stored = []
        for entry in staging.store:
            made = authoring.remember(conn, svc.policy, call.principal, kind=entry["kind"], scope=entry["scope"], text=entry["text"], evidence=entry["provenance"])
            stored.append(made["id"])
        events.append(conn, "memory.ingest", actor=call.principal.key, subject=",".join(sorted({f.name for f in args.files}))[:500],
                      payload={"files": sorted({f.name for f in args.files}), "stored": stored, "refused": len(staging.refused)})  # fmt: skip
        return stored

    stored = await call.core.store.call(apply)
    for entry, cid in zip(out["store"], stored):
        entry["id"] = cid
        svc.note_new_claim()
    return out


# -- the trust graph (memory graph, the dashboard) ---------------------------------------


@attrs.frozen
class GraphArgs:
    claim: int | None = None
    of_agent: str | None = None
    format: str = "json"


@OPS.op("memory.graph", GraphArgs, access=Access.OPERATOR)
async def trust_graph(call: Call, args: GraphArgs) -> dict[str, Any]:
    """Who vouched for whom: principals grouped by trust domain, each witness an edge (one claim, an agent, or all)."""
    from memory import graph

    if args.format != "json":
        _choice("memory.graph", "format", args.format, ("json", *graph.FORMATS))
    svc = service(call)
    subject, described, omitted = await svc.read(lambda conn: inspection.graph_claims(conn, svc.policy, claim=args.claim, of_agent=args.of_agent))
    drawn = graph.build(subject, described, omitted=omitted)
    out = drawn.as_dict()
    if args.format != "json":
        out["rendered"] = graph.render(drawn, args.format)
    return out


# -- start ---------------------------------------------------------------------------


async def start(core: BrokerCore, nursery: trio.Nursery) -> None:
    """Settle the settings in force and start the automatic groom (in a running broker)."""
    team = core.team
    try:
        wanted = settings.MemorySettings.from_tables(team.policy, team.memory) if team is not None else None
    except PolicyError as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, str(exc)) from None

    def settle(conn):  # type: ignore[no-untyped-def]
        exposures.start_log(conn)
        if wanted is None:
            return settings.recorded(conn) or settings.MemorySettings()
        before = settings.record(conn, wanted, actor=BROKER_ACTOR)
        # A store first opened by a broker has nothing to recompute; a changed trust policy does.
        if (before.trust if before else settings.TrustPolicy()) != wanted.trust:
            standing.restand_all(conn, wanted.trust, actor=BROKER_ACTOR, cause="the trust policy changed")
        return wanted

    effective = await core.store.call(settle)
    svc = MemoryService(core, effective)
    core.extensions[SERVICE] = svc
    if core.live:
        nursery.start_soon(svc.auto_groom)
        every = team.verify_every if team is not None else VERIFY_EVERY
        if every > 0:
            nursery.start_soon(svc.watch, every)
        nursery.start_soon(svc.meaning.run, lambda: svc.policy)


def check_team(team: Team, where: str) -> None:
    """The team file's ``[policy]`` (the trust policy) and ``[memory]`` (the lifecycle)."""
    settings.MemorySettings.from_tables(team.policy, team.memory, where)


FEATURE = Feature(
    "memory", OPS, schema=schema.SCHEMA, start=start, check_team=check_team, projector=memory_projection.for_verify, doctor=doctor.report
)
