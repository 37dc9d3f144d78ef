"""``conclave memory ...``: the shared memory from a terminal or from inside an agent.

Inside an agent's process tree these commands act as that agent (its
ticket is in the environment); from a person's terminal they act as the
operator.  With no broker running, operator commands open the store
themselves.  Every command takes ``--json`` (one JSON document on stdout)
and ``--repo`` / ``--state-dir``.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from broker.clikit import JsonOpt, RepoOpt, StateOpt, Target, call, die, emit, say, shorten, table
from broker.literal import visible

app = typer.Typer(no_args_is_help=True, add_completion=False)

IdArg = Annotated[int, typer.Argument(help="The claim id.", min=1)]
EvidenceOpt = Annotated[Optional[str], typer.Option("--evidence", help="What supports it (a test name, a log line).")]


def _witness_line(w: dict[str, Any]) -> str:
    mark = "counted" if w["counted"] else f"not counted: {w['reason_not_counted']}"
    how = "" if "blind" not in w else (" blind" if w["blind"] else " informed")
    return f"{w['principal']} (domain {w['domain']}){how}, {mark}"


def _print_claim(c: dict[str, Any]) -> None:
    # say() prints literally: claim text, evidence and reasons are agents' words.
    say(f"claim {c['id']} {c['badge']}  {c['kind']}/{c['scope']}  edition {c['edition']}  by {c['author']}  at {c['created_at']}")
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
    table(
        title,
        cols,
        [(r["id"], r["badge"], r["kind"], *([r["score"]] if score else []), r["author"], shorten(r["text"], 90)) for r in rows],
    )


def _claim_op(json_out: bool, repo: Any, state_dir: Any, op: str, args: dict[str, Any]) -> None:
    """Run an op that answers with one claim; print it (or its JSON).  None-valued args are left out."""
    target = Target(json_out, repo, state_dir)
    emit(target, call(target, op, {k: v for k, v in args.items() if v is not None}), _print_claim)


# -- agent commands --------------------------------------------------------------------


@app.command()
def remember(
    kind: Annotated[str, typer.Option("--kind", help="discovery, solution, pattern, workflow or failure.")],
    text: Annotated[str, typer.Option("--text", help="The claim: one statement of fact about the repository.")],
    scope: Annotated[str, typer.Option("--scope", help="repo (this repository) or general (true everywhere).")] = "repo",
    evidence: EvidenceOpt = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Store a new claim as this agent; it starts unverified."""
    _claim_op(json_out, repo, state_dir, "memory.remember", {"kind": kind, "text": text, "scope": scope, "evidence": evidence})


@app.command()
def corroborate(id: IdArg, evidence: EvidenceOpt = None, json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Vouch for claim ID; says whether this corroboration counted, and why not."""
    _claim_op(json_out, repo, state_dir, "memory.corroborate", {"id": id, "evidence": evidence})


@app.command()
def dispute(
    id: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why the claim is wrong.")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Refute claim ID; an independent dispute makes it disputed."""
    _claim_op(json_out, repo, state_dir, "memory.dispute", {"id": id, "reason": reason})


@app.command()
def revise(
    id: IdArg,
    text: Annotated[str, typer.Option("--text", help="The corrected claim.")],
    evidence: EvidenceOpt = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Write a new edition of claim ID (unverified, no witnesses); the old edition is kept."""
    _claim_op(json_out, repo, state_dir, "memory.revise", {"id": id, "text": text, "evidence": evidence})


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="Words to search for.")],
    limit: Annotated[int, typer.Option("--limit", help="At most this many claims.")] = 10,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Search every live claim, each badged with its tier."""
    target = Target(json_out, repo, state_dir)
    rows = call(target, "memory.recall", {"query": query, "limit": limit})
    emit(target, rows, lambda rs: _claims_table(f"recall: {query}", rs, score=True) if rs else say("no claim matches"))


@app.command()
def context(
    query: Annotated[str, typer.Argument(help="What the agent is about to work on.")],
    budget: Annotated[int, typer.Option("--budget", help="Token budget for the block.")] = 500,
    include_unverified: Annotated[bool, typer.Option("--include-unverified", help="Also inject unverified and disputed claims (badged).")] = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """The reference block to inject for QUERY: trusted claims only unless told otherwise."""
    target = Target(json_out, repo, state_dir)
    result = call(target, "memory.context", {"query": query, "budget": budget, "include_unverified": include_unverified})
    emit(target, result, lambda r: sys.stdout.write(visible(r["block"], keep_newlines=True) + "\n") if r["block"] else say("nothing to inject"))


@app.command()
def show(id: IdArg, json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Claim ID's biography: editions, witnesses, promotions, retirements, events."""
    target = Target(json_out, repo, state_dir)

    def human(c: dict[str, Any]) -> None:
        _print_claim(c)
        if len(c["editions"]) > 1:
            table("editions", ["id", "edition", "tier", "author", "created", "superseded by"], [
                (e["id"], e["edition"], e["tier"], e["author"], e["created_at"], e["superseded_by"]) for e in c["editions"]
            ])
        table("history", ["seq", "at", "event", "actor", "claim", "detail"], [
            (h["seq"], h["at"], h["kind"], h["actor"], h["claim"], _detail(h["detail"])) for h in c["history"]
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
    limit: Annotated[int, typer.Option("--limit", help="At most this many (newest first).")] = 50,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Claims, newest first."""
    target = Target(json_out, repo, state_dir)
    args = {"tier": tier, "kind": kind, "scope": scope, "of_agent": agent, "include_retired": all_, "limit": limit}
    rows = call(target, "memory.list", {k: v for k, v in args.items() if v is not None})
    emit(target, rows, lambda rs: _claims_table("claims", rs) if rs else say("no claims"))


@app.command()
def trail(
    agent: Annotated[str, typer.Option("--agent", help="The agent name (every session of it, and its children).")],
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
    state_dir: StateOpt = None,
) -> None:
    """Everything an agent authored, corroborated and disputed, in time order."""
    target = Target(json_out, repo, state_dir)
    rows = call(target, "memory.trail", {"of_agent": agent})

    def human(rs: list[dict[str, Any]]) -> None:
        def verdict(r: dict[str, Any]) -> str:
            if r["counted"] is None:
                return r["note"] or ""
            return ("counted" if r["counted"] else f"not counted ({r['note']})") + ("" if r["blind"] is None else (", blind" if r["blind"] else ", informed"))

        table(f"trail of {agent}", ["at", "principal", "action", "claim", "tier", "verdict", "text"], [
            (r["at"], r["principal"], r["action"], r["claim"], r["tier"], verdict(r), shorten(r["text"], 60)) for r in rs
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
    emit(target, rows, lambda rs: table("memory log", ["seq", "at", "event", "actor", "subject", "detail"], [
        (r["seq"], r["at"], r["kind"], r["actor"], r["subject"], _detail(r["detail"])) for r in rs
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
def verify(json_out: JsonOpt = False, repo: RepoOpt = None, state_dir: StateOpt = None) -> None:
    """Check the event hash chain, every row against its event, and the search indexes; exit 1 on tampering."""
    target = Target(json_out, repo, state_dir)
    report = call(target, "memory.verify")

    def human(r: dict[str, Any]) -> None:
        if r["ok"]:
            say(f"ok: {r['events']} events chained, every claim and witness matches its event, search indexes consistent")
        for p in r["problems"]:
            say(f"  {p['problem']}")

    emit(target, report, human)
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
        say(f"corroborations: {c['total']} ({c['counted']} counted, {c['blind']} blind)  disputes: {s['disputes']}  exposures: {s['exposures']}")
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

    emit(target, result, human)


# -- the trust graph ------------------------------------------------------------------------
# (Its imports sit here so the block stays in one piece; typer reads the annotations from module globals.)

from pathlib import Path  # noqa: E402

from broker.clikit import EXIT_USAGE  # noqa: E402

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
