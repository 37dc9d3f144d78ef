"""``conclave memory ...``: the shared memory from a terminal or from inside an agent.

Inside an agent's process tree these commands act as that agent (its
ticket is in the environment); from a person's terminal they act as the
operator.  With no broker running, operator commands open the store
themselves.  Every command takes ``--json`` (one JSON document on stdout)
and ``--repo`` / ``--state-dir``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from broker import clikit
from broker.clikit import EXIT_USAGE, JsonOpt, RepoOpt, StateOpt, Target, call, die, emit, say, shorten, table, when
from broker.literal import visible

app = typer.Typer(no_args_is_help=True, add_completion=False)

IdArg = Annotated[int, typer.Argument(help="The claim id.", min=1)]
EvidenceOpt = Annotated[Optional[str], typer.Option("--evidence", help="What supports it (a test name, a log line).")]


def _witness_line(w: dict[str, Any]) -> str:
    mark = "counted" if w["counted"] else f"not counted: {w['reason_not_counted']}"
    how = "" if "blind" not in w else " " + (w.get("witness") or ("blind" if w["blind"] else "informed"))
    extra = ""
    if w.get("restatement"):
        extra = f" -- rediscovered it in claim {w['restatement']}"
    elif w.get("similarity") is not None:
        extra = f" -- its evidence against the claim: similarity {w['similarity']:.2f}"
    return f"{w['principal']} (domain {w['domain']}){how}, {mark}{extra}"


def _link_line(claim: int, link: dict[str, Any]) -> str:
    if link["claim"] == claim:
        return f"restates claim {link['restates']} ({link['kind']}, similarity {link['similarity']:.2f}): retired, one claim not two"
    return f"restated by claim {link['claim']} ({link['kind']}, similarity {link['similarity']:.2f})"


def _usage_line(usage: dict[str, Any]) -> str:
    parts = []
    for via, verb in (("context", "pushed in context"), ("recall", "found by recall")):
        n, last = usage[via]["count"], usage[via]["last"]
        parts.append(f"{verb} {n} time{'' if n == 1 else 's'}" + (f" (last {when(last)})" if last else ""))
    return "used: " + ", ".join(parts)


def _print_claim(c: dict[str, Any]) -> None:
    # say() prints literally: claim text, evidence and reasons are agents' words.
    say(f"claim {c['id']} {c['badge']}  {c['kind']}/{c['scope']}  edition {c['edition']}  by {c['author']}  at {c['created_at']}"
        + (f"  (private to {c['private_to']})" if c.get("private_to") else ""))
    say(f"  {c['text']}")
    if c.get("evidence"):
        say(f"  evidence: {c['evidence']}")
    for w in c.get("corroborations", []):
        say(f"  corroborated by {_witness_line(w)}")
        if w.get("evidence"):
            say(f"    evidence: {w['evidence']}")
    for d in c.get("disputes", []):
        say(f"  disputed by {_witness_line(d)}: {d['reason']}")
    for p in c.get("promotions", []):
        say(f"  promoted by {p['by']} at {p['at']}" + (f": {p['reason']}" if p["reason"] else ""))
    for link in c.get("links", []):
        say(f"  {_link_line(c['id'], link)}")
    for r in c.get("relations", []):
        say(f"  link {r['id']}: claim {r['source']} {r['kind']} claim {r['target']}, by {r['author']}" + (f": {r['why']}" if r["why"] else ""))
    if c.get("usage") is not None:
        say(f"  {_usage_line(c['usage'])}")
    if c.get("superseded_by"):
        say(f"  superseded by claim {c['superseded_by']}")
    if c.get("retired"):
        say(f"  retired by {c['retired']['by']}: {c['retired']['reason']}")
    short = (c.get("standing") or {}).get("short_of_trust")
    if short and c["tier"] in ("unverified", "disputed"):
        say(f"  not trusted: {short}")
    if "counted" in c:
        say(f"  this corroboration: {'counted' if c['counted'] else 'not counted (' + str(c['reason_not_counted']) + ')'}")
    if c.get("twins"):
        say("  twins (same words): " + ", ".join(f"claim {t['id']} {t['tier']}" for t in c["twins"]))


def _claims_table(title: str, rows: list[dict[str, Any]], *, score: bool = False) -> None:
    cols = ["id", "tier", "kind", *(["score"] if score else []), "author", "text"]

    def tier(r: dict[str, Any]) -> str:
        linked = r.get("linked")
        return r["badge"] + (f" [linked] from #{linked['from']} ({linked['kind']})" if linked else "")

    table(
        title,
        cols,
        [(r["id"], tier(r), r["kind"], *([r["score"] if r.get("score") is not None else ""] if score else []), r["author"], shorten(r["text"], 90)) for r in rows],
    )


def _text_arg(value: str) -> str:
    """``--text -`` reads the text from stdin (for text too long or awkward for a command line)."""
    return sys.stdin.read().rstrip("\n") if value == "-" else value


def _check_length(op: str, field: str, value: str | None, limit: int) -> None:
    """Refuse over-long text here, with the op's own words, before it is sent.

    The op refuses it anyway; but text past the wire's 1 MiB line limit never
    reaches the op (the broker hangs up on the line), so without this check
    such a refusal would read differently inside an agent and at a terminal.
    """
    if value is not None and len(value) > limit:
        die(f"{op}: {field} is {len(value)} characters; at most {limit} [invalid_args]")


def _check_claim_text(op: str, text: str, evidence: str | None) -> None:
    from memory.claims import MAX_NOTE, MAX_TEXT

    _check_length(op, "text", text, MAX_TEXT)
    _check_length(op, "evidence", evidence, MAX_NOTE)


def _check_reason(op: str, reason: str | None) -> None:
    if reason is not None and len(reason) > 1000:
        from memory.ops import MAX_REASON

        _check_length(op, "reason", reason, MAX_REASON)


def _claim_op(json_out: bool, repo: Any, state_dir: Any, op: str, args: dict[str, Any]) -> None:
    """Run an op that answers with one claim; print it (or its JSON).  None-valued args are left out."""
    target = Target(json_out, repo, state_dir)
    emit(target, call(target, op, {k: v for k, v in args.items() if v is not None}), _print_claim)


# -- agent commands --------------------------------------------------------------------


@app.command()
def remember(
    kind: Annotated[str, typer.Option("--kind", help="discovery, solution, pattern, workflow or failure.")],
    text: Annotated[str, typer.Option("--text", help="The claim: one statement of fact about the repository; '-' reads it from stdin.")],
    scope: Annotated[str, typer.Option("--scope", help="repo (this repository) or general (true everywhere).")] = "repo",
    evidence: EvidenceOpt = None,
    private: Annotated[bool, typer.Option("--private", help="Keep it for this agent alone (any session) until shared; it never counts toward trust.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Store a new claim as this agent; it starts unverified (or private, with --private)."""
    text = _text_arg(text)
    _check_claim_text("memory.remember", text, evidence)
    args = {"kind": kind, "text": text, "scope": scope, "evidence": evidence, "private": private or None}
    _claim_op(json_out, repo, state_dir, "memory.remember", args)


@app.command()
def share(id: IdArg, json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Share private claim ID (its own agent, or the operator): it starts as an unverified shared claim, its author kept."""
    _claim_op(json_out, repo, state_dir, "memory.share", {"id": id})


WitnessEvidenceOpt = Annotated[
    Optional[str],
    typer.Option("--evidence", help="What you found, in your own words. Never shown the claim? Without this your vouch is unread and does not count."),
]


@app.command()
def corroborate(id: IdArg, evidence: WitnessEvidenceOpt = None, json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Vouch for claim ID: blind (never shown it, your evidence says what it says), informed (you read it), or unread (neither: not counted)."""
    _check_claim_text("memory.corroborate", "", evidence)
    _claim_op(json_out, repo, state_dir, "memory.corroborate", {"id": id, "evidence": evidence})


@app.command()
def settle(
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait at most.", min=0.1, max=600)] = 30.0,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Wait until the broker has embedded every claim remembered so far (operator); exit 1 if it has not within --timeout."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.settle", {"timeout": timeout})
    emit(target, result, lambda r: say(f"{'settled' if r['settled'] else 'not settled'}: {r['embedded']} claims embedded by {r['embedder']}" + (f"; error: {r['error']}" if r["error"] else "")))
    if not result["settled"]:
        raise typer.Exit(1)


@app.command()
def dispute(
    id: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why the claim is wrong.")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Refute claim ID; an independent dispute makes it disputed."""
    _check_reason("memory.dispute", reason)
    _claim_op(json_out, repo, state_dir, "memory.dispute", {"id": id, "reason": reason})


@app.command()
def revise(
    id: IdArg,
    text: Annotated[str, typer.Option("--text", help="The corrected claim; '-' reads it from stdin.")],
    evidence: EvidenceOpt = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Write a new edition of claim ID (unverified, no witnesses); the old edition is kept."""
    text = _text_arg(text)
    _check_claim_text("memory.revise", text, evidence)
    _claim_op(json_out, repo, state_dir, "memory.revise", {"id": id, "text": text, "evidence": evidence})


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="Words to search for.")],
    limit: Annotated[int, typer.Option("--limit", help="At most this many claims.")] = 10,
    expand: Annotated[bool, typer.Option("--expand", help="Also show the claims one link away from the hits, tagged [linked].")] = False,
    preview: Annotated[bool, typer.Option("--preview", help="A look only: not counted as a use of the claims found.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Search every live claim, each badged with its tier."""
    target = Target(json_out, repo, state_dir)
    rows = call(target, "memory.recall", {"query": query, "limit": limit, "expand": expand, "preview": preview})
    emit(target, rows, lambda rs: _claims_table(f"recall: {query}", rs, score=True) if rs else say("no claim matches"))


@app.command()
def context(
    query: Annotated[str, typer.Argument(help="What the agent is about to work on.")],
    budget: Annotated[
        Optional[int],
        typer.Option("--budget-tokens", "--budget", help="Token budget for the block (default: the team file's [memory] context_budget_tokens, else 500).", min=1),
    ] = None,
    include_unverified: Annotated[bool, typer.Option("--include-unverified", help="Also inject unverified and disputed claims (badged).")] = False,
    expand: Annotated[bool, typer.Option("--expand/--no-expand", help="Follow one link from each claim pushed, into what the budget has left.")] = True,
    preview: Annotated[bool, typer.Option("--preview", help="A look at what would be pushed: not counted as a push.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """The reference block to inject for QUERY: trusted claims only unless told otherwise."""
    target = Target(json_out, repo, state_dir)
    args = {"query": query, "include_unverified": include_unverified, "expand": expand, "preview": preview}
    if budget is not None:
        args["budget"] = budget
    result = call(target, "memory.context", args)

    def human(r: dict[str, Any]) -> None:
        if r["block"]:
            sys.stdout.write(visible(r["block"], keep_newlines=True) + "\n")
        else:
            say("nothing to inject" + (f" ({r['left_out']} matching claim(s) do not fit {r['budget']} tokens)" if r.get("left_out") else ""))

    emit(target, result, human)


@app.command()
def link(
    source: Annotated[int, typer.Argument(help="The claim the link starts from.", min=1)],
    target_id: Annotated[int, typer.Argument(metavar="TARGET", help="The claim it points to.", min=1)],
    kind: Annotated[str, typer.Option("--kind", help="relates-to (both ways), depends-on (SOURCE needs TARGET), supersedes (SOURCE replaces TARGET).")] = "relates-to",
    why: Annotated[Optional[str], typer.Option("--why", help="Why they are linked (shown in recall and show, never pushed in context).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Link claim SOURCE to claim TARGET; neither claim's trust changes."""
    from memory.links import MAX_WHY

    _check_length("memory.link", "why", why, MAX_WHY)
    target = Target(json_out, repo, state_dir)
    args = {"source": source, "target": target_id, "kind": kind, **({"why": why} if why is not None else {})}
    emit(target, call(target, "memory.link", args), lambda r: say(f"link {r['id']}: claim {r['source']} {r['kind']} claim {r['target']}" + (f" ({r['why']})" if r["why"] else "")))


@app.command()
def show(id: IdArg, json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Claim ID's biography: editions, witnesses, promotions, retirements, events."""
    target = Target(json_out, repo, state_dir)

    def human(c: dict[str, Any]) -> None:
        _print_claim(c)
        if len(c["editions"]) > 1:
            table("editions", ["id", "edition", "tier", "author", "created", "superseded by"], [
                (e["id"], e["edition"], e["tier"], e["author"], when(e["created_at"]), e["superseded_by"]) for e in c["editions"]
            ])
        table("history", ["seq", "at (UTC)", "event", "actor", "claim", "detail"], [
            (h["seq"], when(h["at"]), h["kind"], h["actor"], h["claim"], _detail(h["detail"])) for h in c["history"]
        ])

    emit(target, call(target, "memory.show", {"id": id}), human)


def _detail(detail: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in detail.items() if v not in (None, [], {}) and not k.endswith("sha256"))


# -- operator commands --------------------------------------------------------------------


@app.command("list")
def list_claims(
    tier: Annotated[Optional[str], typer.Option("--tier", help="Only this tier (unverified, trusted, disputed, superseded, retired).")] = None,
    kind: Annotated[Optional[str], typer.Option("--kind", help="Only this kind.")] = None,
    scope: Annotated[Optional[str], typer.Option("--scope", help="Only repo or general claims.")] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Only claims authored by this agent (and its children).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include retired and superseded claims.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="At most this many (newest first; 1000 at most).")] = 50,
    before: Annotated[
        Optional[int], typer.Option("--before", help="Only claims with ids below this one: the next page (the last page says what to pass).")
    ] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Claims, newest first, a page at a time (--before ID for the next; `memory export` for everything)."""
    target = Target(json_out, repo, state_dir)
    args = {"tier": tier, "kind": kind, "scope": scope, "of_agent": agent, "include_retired": all_, "limit": limit, "before": before}
    rows = call(target, "memory.list", {k: v for k, v in args.items() if v is not None})

    def human(rs: list[dict[str, Any]]) -> None:
        if not rs:
            say("no claims" + (f" below id {before}" if before is not None else ""))
            return
        _claims_table("claims", rs)
        if len(rs) == limit and rs[-1]["id"] > 1:
            say(f"more: conclave memory list --before {rs[-1]['id']}" + (f" --limit {limit}" if limit != 50 else ""))

    emit(target, rows, human)


@app.command()
def trail(
    claim: Annotated[Optional[int], typer.Argument(help="A claim id: its trail across every edition.", min=1)] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="An agent name: its trail (every session, and its children).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """A claim's trail (who wrote, was shown, vouched for, disputed it; tier changes), or with --agent an agent's."""
    target = Target(json_out, repo, state_dir)
    if (claim is None) == (agent is None):
        die("give a claim id (conclave memory trail 12) or an agent (conclave memory trail --agent alice), not both", EXIT_USAGE)
    args: dict[str, Any] = {"claim": claim} if claim is not None else {"of_agent": agent}
    rows = call(target, "memory.trail", args)

    def human(rs: list[dict[str, Any]]) -> None:
        def verdict(r: dict[str, Any]) -> str:
            if r["counted"] is None:
                return r["note"] or ""
            how = r.get("witness") or (None if r["blind"] is None else ("blind" if r["blind"] else "informed"))
            return ("counted" if r["counted"] else f"not counted ({r['note']})") + (f", {how}" if how else "")

        title = f"trail of claim {claim}" if claim is not None else f"trail of {agent}"
        table(title, ["at (UTC)", "principal", "action", "claim", "tier", "verdict", "text"], [
            (when(r["at"]), r["principal"], r["action"], r["claim"], r["tier"], verdict(r), shorten(r["text"], 60)) for r in rs
        ])

    emit(target, rows, human)


@app.command()
def log(
    kind: Annotated[Optional[str], typer.Option("--kind", help="Event kind: remember, corroborate, tier, revoke, ... (memory. optional).")] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Only events by this agent.")] = None,
    claim: Annotated[Optional[int], typer.Option("--claim", help="Only events about this claim.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="ISO time (2026-01-31T12:00:00+00:00).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="ISO time.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Only the newest N.")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """The memory's event log, oldest first."""
    target = Target(json_out, repo, state_dir)
    args = {"kind": kind, "of_agent": agent, "claim": claim, "since": since, "until": until, "limit": limit}
    rows = call(target, "memory.log", {k: v for k, v in args.items() if v is not None})
    emit(target, rows, lambda rs: table("memory log", ["seq", "at (UTC)", "event", "actor", "subject", "detail"], [
        (r["seq"], when(r["at"]), r["kind"], r["actor"], r["subject"], _detail(r["detail"])) for r in rs
    ]))


@app.command()
def promote(
    id: IdArg,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Make claim ID trusted by your decision (operator only; recorded)."""
    _claim_op(json_out, repo, state_dir, "memory.promote", {"id": id, "reason": reason})


@app.command()
def retire(
    id: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded on the tombstone).")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Retire claim ID (a tombstone; nothing is deleted)."""
    _check_reason("memory.retire", reason)
    _claim_op(json_out, repo, state_dir, "memory.retire", {"id": id, "reason": reason})


@app.command()
def unretire(
    id: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Bring retired claim ID back; its standing is recomputed."""
    _claim_op(json_out, repo, state_dir, "memory.unretire", {"id": id, "reason": reason})


@app.command()
def revoke(
    principal: Annotated[str, typer.Argument(metavar="AGENT:SESSION", help="The principal to revoke (conclave agents lists them).")],
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Revoke a principal: its witnesses stop counting and the claims that needed them are demoted."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.revoke", {"target": principal, **({"reason": reason} if reason else {})})

    def human(r: dict[str, Any]) -> None:
        say(f"revoked {r['principal']}" + (" and ended its process" if r["ended"] else "") + f"; {len(r['claims_recomputed'])} claim(s) recomputed")
        for c in r["changes"]:
            say(f"  claim {c['id']}: {c['from']} -> {c['to']}")

    emit(target, result, human)


@app.command()
def verify(
    expect_head: Annotated[
        Optional[str],
        typer.Option("--expect-head", metavar="SEQ:HASH", help="A head you noted earlier (as verify printed it): the log must still hold that event with that hash."),
    ] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Check the keyed event chain, its head against the anchor (and --expect-head), every table rebuilt from the events against the database, and the search indexes; exit 1 on tampering.

    Prints the head (SEQ:HASH): keep it somewhere the machine cannot reach (a
    note, a commit message) and pass it back with --expect-head later.
    """
    target = Target(json_out, repo, state_dir)
    report = call(target, "memory.verify", {"expect_head": expect_head} if expect_head is not None else {})

    def human(r: dict[str, Any]) -> None:
        chain = r.get("chain") or {}
        if r["ok"]:
            unkeyed = chain.get("unkeyed_events") or 0
            keyed = f", keyed from event {chain.get('keyed_from')}" + (f" ({unkeyed} earlier unkeyed event(s), pinned by it)" if unkeyed else "")
            say(f"ok: {r['events']} events chained{keyed}, head matches the anchor, every table rebuilt from the events matches the database, "
                "search indexes consistent")
        for p in r["problems"]:
            say(f"  {p['problem']}")
        for line in r.get("not_rebuilt") or ():
            say(f"  not rebuilt: {line}")
        expected = chain.get("expected_head")
        if expected and expected["found"]:
            say(f"expected head {expected['seq']} found; {expected['events_after']} event(s) written after it")
        say(f"head: {r['head']['seq']}:{r['head']['hash']}")

    emit(target, report, human)
    failed = (report.get("walk") or {}).get("failed")
    if failed:
        die(f"verify could not check the database: {failed}; nothing is known about the chain or the tables until it runs again")
    if not report["ok"]:
        first = report["problems"][0]["problem"]
        where = f"first bad event: {report['first_bad_event']}; " if report["first_bad_event"] is not None else ""
        die(f"verify: the database was changed behind the broker's back ({where}{first})")


@app.command()
def stats(json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Counts by tier and kind, witnesses, exposures, the policy in force."""
    target = Target(json_out, repo, state_dir)

    def human(s: dict[str, Any]) -> None:
        say(f"claims: {s['claims']}  " + "  ".join(f"{k} {v}" for k, v in s["by_tier"].items()))
        say("live by kind: " + "  ".join(f"{k} {v}" for k, v in s["live_by_kind"].items()))
        c = s["corroborations"]
        say(f"corroborations: {c['total']} ({c['counted']} counted, {c['blind']} blind, {c.get('unread', 0)} unread)  disputes: {s['disputes']}  exposures: {s['exposures']}")
        if "meaning" in s:
            m = s["meaning"]
            say(f"meaning: {m['embedder']}; {s.get('vectors', 0)} vectors stored, {m['embedded']} embedded by this broker"
                + (f"; error: {m['error']}" if m["error"] else ""))
            links = s.get("links") or {}
            say(f"restatements: {links.get('rediscoveries', 0)} rediscoveries, {links.get('restatements', 0)} informed near-duplicates")
        if s.get("relations") or s.get("private"):
            say(f"links drawn: {s.get('relations', 0)}  private claims: {s.get('private', 0)}")
        say(f"policy: quorum {s['policy']['quorum']}, require_blind {str(s['policy']['require_blind']).lower()}  last groom: {s['last_groom'] or 'never'}")
        say(f"memory events: {s['events']}  database: {s['database_bytes'] / 1e6:.1f} MB")

    emit(target, call(target, "memory.stats"), human)


@app.command()
def groom(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; change nothing.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """One lifecycle pass: decay, duplicates, caps.  Retires (tombstones), never deletes."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.groom", {"dry_run": dry_run}, timeout=None)

    def human(r: dict[str, Any]) -> None:
        counts = r["counts"] if r["dry_run"] else r
        say(("plan (dry run): " if r["dry_run"] else "groomed: ") + f"{counts['live']} live claims, {counts['retire']} to retire"
            + ("" if r["dry_run"] else f", {r['retired']} retired, {r['skipped']} skipped (changed since planned)"))
        if r["retire"]:
            table("retire", ["claim", "tier", "kind", "rule", "reason"], [
                (s["claim"], s["tier"], s["kind"], s["rule"], s["reason"]) for s in r["retire"][:50]
            ])
        hidden = r["omitted"]["retire"] + max(0, len(r["retire"]) - 50)
        if hidden:
            say(f"  ... and {hidden} more (--json lists {len(r['retire'])}; conclave memory log --kind retire has every one)")
        for pair in r["review"][:20]:
            say(f"  review: claims {pair['claims'][0]} ({pair['tiers'][0]}) and {pair['claims'][1]} ({pair['tiers'][1]}) are near-duplicates ({pair['similarity']}); not merged across tiers")
        for item in r.get("unused", [])[:20]:
            say(f"  review: claim {item['claim']} ({item['kind']}) is {item['reason']}; kept (retire it yourself if it is stale)")

    emit(target, result, human)


@app.command()
def export(
    format_: Annotated[str, typer.Option("--format", help="jsonl (one claim per line) or markdown (for people).")] = "jsonl",
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Every claim -- each edition, its witnesses with their evidence, disputes, promotions and every event of its
    tier history -- on stdout, oldest first, to audit or archive with ordinary tools.  Nothing is left out or cut."""
    clikit.export(Target(json_out, repo, state_dir), format_, op="memory.export", field="claims", title="memory", markdown=_claim_markdown)


def _claim_markdown(c: dict[str, Any]) -> str:
    from broker.literal import code_block, code_span

    lines = [
        "",
        f"## Claim {c['id']}: {c['tier']} {c['kind']}/{c['scope']}, edition {c['edition']} of lineage {c['lineage']}",
        "",
        f"- author: {code_span(c['author'])} (domain {code_span(c['author_domain'])}), {c['created_at']}",
    ]
    if c.get("superseded_by"):
        lines.append(f"- superseded by claim {c['superseded_by']}")
    if c.get("retired"):
        lines.append(f"- retired by {code_span(c['retired']['by'])}: {code_span(c['retired']['reason'])}")
    if c.get("usage") is not None:
        lines.append(f"- {_usage_line(c['usage'])}")
    for r in c.get("relations", []):
        lines.append(f"- link {r['id']}: claim {r['source']} {r['kind']} claim {r['target']}, by {code_span(r['author'])}" + (f": {code_span(r['why'])}" if r["why"] else ""))
    lines += ["", code_block(c["text"])]
    if c.get("evidence"):
        lines += ["", "Evidence:", "", code_block(c["evidence"])]
    if len(c.get("editions", [])) > 1:
        lines += ["", "Editions: " + ", ".join(f"{e['id']} (edition {e['edition']}, {e['tier']})" for e in c["editions"])]
    for title, key in (("Corroborations", "corroborations"), ("Disputes", "disputes")):
        if c.get(key):
            lines += ["", f"{title}:", ""]
            for w in c[key]:
                how = "" if "blind" not in w else (", blind" if w["blind"] else ", informed")
                verdict = "counted" if w["counted"] else f"not counted ({w['reason_not_counted']})"
                extra = w.get("evidence") if key == "corroborations" else w.get("reason")
                label = "evidence" if key == "corroborations" else "reason"
                lines.append(
                    f"- {code_span(w['principal'])} (domain {code_span(w['domain'])}) at {w['at']}{how}, {verdict}"
                    + (f"; {label}: {code_span(extra)}" if extra else "")
                )
    if c.get("promotions"):
        lines += ["", "Promotions:", ""] + [f"- by {code_span(p['by'])} at {p['at']}" + (f": {code_span(p['reason'])}" if p["reason"] else "") for p in c["promotions"]]
    if c.get("history"):
        lines += ["", "History:", ""] + [
            f"- {h['seq']} {h['at']} {h['kind']} by {code_span(h['actor'])}" + (f": {code_span(_detail(h['detail']))}" if _detail(h["detail"]) else "")
            for h in c["history"]
        ]
    return "\n".join(lines) + "\n"


# -- the eval ----------------------------------------------------------------------------------


@app.command("eval")
def eval_(
    fixture: Annotated[str, typer.Argument(metavar="FIXTURE.json", help="The exam: {\"version\": 1, \"queries\": [{\"q\", \"expect\": [ids], \"cat\"}]}.")],
    budget: Annotated[Optional[int], typer.Option("--budget-tokens", "--budget", help="The token budget the context path is scored with (default: the team's, as context uses).", min=1)] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Score recall and context against FIXTURE.json: recall@5 and @15 per category, every miss classified (read-only)."""
    import hashlib
    import json as json_

    from memory import evaluation

    try:
        raw = Path(fixture).read_bytes()
    except OSError as exc:
        die(f"cannot read the fixture {fixture}: {exc.strerror}; give the path of a JSON exam file", EXIT_USAGE)
    try:
        doc = json_.loads(raw)
        queries = evaluation.check_fixture(doc)
    except (ValueError, UnicodeDecodeError) as exc:
        die(f"the fixture {fixture} is not a usable exam: {exc}", EXIT_USAGE)
    target = Target(json_out, repo, state_dir)
    args: dict[str, Any] = {"queries": [{"q": q.q, "expect": q.expect, "cat": q.cat} for q in queries]}
    if budget is not None:
        args["budget"] = budget
    result = call(target, "memory.eval", args, timeout=None)
    result = {"fixture": {"path": fixture, "sha256": hashlib.sha256(raw).hexdigest(), "queries": len(queries)}, **result}
    pinned = doc.get("corpus")
    if isinstance(pinned, str) and pinned != result["corpus"]["sha256"]:
        result["warning"] = f"the fixture was written for corpus {pinned[:16]}; this store is {result['corpus']['sha256'][:16]}: figures are not comparable"

    def human(r: dict[str, Any]) -> None:
        say(f"fixture {r['fixture']['path']} sha256 {r['fixture']['sha256']} ({r['fixture']['queries']} queries)")
        say(f"corpus {r['corpus']['sha256']} ({r['corpus']['live']} live of {r['corpus']['claims']} claims); context budget {r['budget']} tokens")
        if r.get("warning"):
            say(f"warning: {r['warning']}")
        for path in evaluation.PATHS:
            summary = r["summary"][path]
            table(f"{path}: recall@K by category", ["category", "queries", "recall@5", "recall@15"], [
                (cat, row["queries"], f"{row['recall@5']:.2f}", f"{row['recall@15']:.2f}") for cat, row in summary["by_category"].items()
            ])
            say(f"{path} misses: " + ", ".join(f"{name} {n}" for name, n in summary["misses"].items()))
            for q in r["queries"]:
                for m in q[path]["misses"]:
                    rank = f" (rank {m['rank']})" if m.get("rank") else ""
                    say(f"  {m['class']}{rank}: claim {m['claim']} for {shorten(q['q'], 60)!r} missed at @{'/@'.join(map(str, m['missed_at']))}"
                        + (f" -- {m['why']}" if m.get("why") else ""))

    emit(target, result, human)


# -- the vault -----------------------------------------------------------------------------------

vault_app = typer.Typer(no_args_is_help=True, add_completion=False, help="The memory as an Obsidian vault: export it, edit it by hand, import the edits.")
app.add_typer(vault_app, name="vault")


def _folder(value: Path) -> str:
    return str(value.expanduser().absolute())


@vault_app.command("export")
def vault_export(
    out: Annotated[Path, typer.Option("--out", help="The vault folder: new, empty, or a vault this command wrote.")],
    force: Annotated[bool, typer.Option("--force", help="Replace a folder that is not an unedited vault of ours (it is moved aside and kept).")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Write one Markdown note per live claim, an index note per author and a manifest; the same store gives the same bytes."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.vault_export", {"out": _folder(out), "force": force}, timeout=None)

    def human(r: dict[str, Any]) -> None:
        say(f"exported {r['claims']} live claims to {r['out']} ({r['files']} files, snapshot {r['snapshot'][:16]})")
        if r["kept_aside"]:
            say(f"what was there ({r['was']}) is kept at {r['kept_aside']}")

    emit(target, result, human)


@vault_app.command("import")
def vault_import(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="A vault `vault export` wrote, edited since.")],
    yes: Annotated[bool, typer.Option("--yes", help="Apply the changes (one transaction); without it, only show them.")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Show what a vault's edits would do (a dry run); with --yes apply them: an edit is your new edition, a deleted note a retirement, a new note an unverified claim."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.vault_import", {"dir": _folder(folder), "apply": yes}, timeout=None)

    def human(r: dict[str, Any]) -> None:
        for e in r["edits"]:
            say(f"edit    claim {e['claim']} ({e['tier']}) -> a new unverified edition by you ({e['path']})")
            say(f"        - {shorten(e['from'], 100)}")
            say(f"        + {shorten(e['to'], 100)}")
        for d in r["retire"]:
            say(f"retire  claim {d['claim']} ({d['tier']}): its note {d['path']} was deleted")
        for n in r["new"]:
            say(f"new     {n['kind']}/{n['scope']} unverified claim from {n['path']}: {shorten(n['text'], 90)}")
        for line in r["ignored"]:
            say(f"ignored {line}")
        counts = f"{len(r['edits'])} edit(s), {len(r['retire'])} retirement(s), {len(r['new'])} new claim(s), {r['unchanged']} unchanged"
        if "applied" in r:
            a = r["applied"]
            say(f"applied: {counts}; new editions " + (", ".join(f"{e['from']}->{e['to']}" for e in a["editions"]) or "none")
                + f"; the vault is now stale: export it again before further edits")
        elif r["dry_run"] and not (r["edits"] or r["retire"] or r["new"]):
            say(f"nothing to import ({r['unchanged']} notes unchanged)")
        else:
            say(f"dry run: {counts}; nothing changed. Run again with --yes to apply")

    emit(target, result, human)


# -- ingest ---------------------------------------------------------------------------------------

#: What one ingest may send (the wire's line is 1 MiB; JSON escaping takes some of it).
INGEST_BYTES = 600_000


@app.command()
def ingest(
    files: Annotated[list[Path], typer.Argument(metavar="FILE.md...", help="Markdown notes, runbooks, incident write-ups.")],
    yes: Annotated[bool, typer.Option("--yes", help="Store what would be stored; without it, only show it.")] = False,
    kind: Annotated[str, typer.Option("--kind", help="The kind of a fact under no heading that names one (discovery, solution, pattern, workflow, failure).")] = "discovery",
    scope: Annotated[str, typer.Option("--scope", help="repo or general.")] = "repo",
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Stage the facts in Markdown files as unverified claims (provenance ingest:FILE), each through the prefilter and the
    duplicate check; a dry run that shows what it would store and what it refused, unless --yes."""
    sent, size = [], 0
    for path in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            die(f"cannot read {path}: {exc.strerror}; give Markdown files that exist", EXIT_USAGE)
        except UnicodeDecodeError:
            die(f"{path} is not UTF-8 text; convert it (iconv -t utf-8) and ingest it again", EXIT_USAGE)
        size += len(text.encode())
        sent.append({"name": str(path), "text": text})
    if size > INGEST_BYTES:
        die(f"these files hold {size} bytes; one ingest takes at most {INGEST_BYTES}: ingest them a few at a time", EXIT_USAGE)
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.ingest", {"files": sent, "kind": kind, "scope": scope, "apply": yes}, timeout=None)

    def human(r: dict[str, Any]) -> None:
        verb = "stored" if not r["dry_run"] else "would be stored"
        for e in r["store"]:
            ident = f"claim {e['id']} " if "id" in e else ""
            say(f"{'stored' if ident else 'store'} {ident}{e['kind']}/{e['scope']} from {e['file']}:{e['line']}: {shorten(e['text'], 90)}")
        for e in r["refused"]:
            what = f": {shorten(e['text'], 60)}" if e.get("text") else ""
            say(f"refused {e['file']}:{e['line']} -- {e['reason']}{what}")
        tail = "" if not r["dry_run"] else " (dry run: nothing stored; run again with --yes to store)"
        say(f"{len(r['store'])} fact(s) {verb}, unverified; {len(r['refused'])} refused or skipped{tail}")

    emit(target, result, human)


# -- the trust graph ------------------------------------------------------------------------

GRAPH_FORMATS = ("text", "dot", "mermaid", "svg")


@app.command()
def graph(
    claim: Annotated[Optional[int], typer.Argument(help="Draw this claim's witnesses (default: every claim with a witness).", min=1)] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Draw every claim this agent (and its children) authored, corroborated or disputed.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text (a terminal picture), dot (Graphviz), mermaid, or svg (needs Graphviz's dot).")] = "text",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Who vouched for whom: principals grouped by trust domain, each corroboration an edge (blind or informed, counted or not)."""
    from memory.graphviz import GraphvizError, find_dot, to_svg

    if fmt not in GRAPH_FORMATS:
        die(f"--format must be one of {', '.join(GRAPH_FORMATS)}, not {fmt!r}", EXIT_USAGE)
    if claim is not None and agent is not None:
        die("give a CLAIM or --agent NAME, not both", EXIT_USAGE)
    dot = None
    if fmt == "svg" and not json_out:
        try:
            dot = find_dot()  # before asking the broker: a missing program is the first thing to say
        except GraphvizError as exc:
            die(str(exc))
    target = Target(json_out, repo, state_dir)
    args = {"claim": claim, "of_agent": agent, "format": "json" if json_out else ("dot" if fmt == "svg" else fmt)}
    result = call(target, "memory.graph", {k: v for k, v in args.items() if v is not None})
    if json_out:
        emit(target, result)
        return
    if fmt == "svg":
        try:
            data = to_svg(result["rendered"], dot=dot)
        except GraphvizError as exc:
            die(str(exc))
    else:
        data = result["rendered"].encode()
    if output is not None:
        output.write_bytes(data)
        sys.stderr.write(f"conclave: wrote the trust graph of {result['subject']} ({len(result['nodes'])} principals, {len(result['edges'])} edges) to {output}\n")
    else:
        sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
        sys.stdout.flush()
