"""What the dashboard shows, computed from the broker's replies (pure, no UI).

Each pane's rows are built here from the same wire replies the CLI prints
(``agents``, ``status.board``, ``lock.list``, ``memory.list``,
``memory.show``, ``memory.log``, ``msg.thread``), so the shapes are tested
without a terminal and ``conclave dashboard --json`` prints exactly what the
panes hold.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Final, Iterable, Mapping, Sequence, final

import attrs

from broker.dashboard.tail import LogName, clean

TIER_ORDER: Final = ("trusted", "disputed", "unverified", "superseded", "retired")
LIVE_TIERS: Final = ("trusted", "disputed", "unverified")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def age(since: str | None, now: datetime) -> float | None:
    """Seconds from ``since`` to ``now`` (None when unknown)."""
    at = parse_time(since)
    return None if at is None else max(0.0, (now - at).total_seconds())


def when(text: str | None) -> str:
    """An event time as ``2026-11-30 08:52:16`` (UTC, as stored)."""
    return (text or "?")[:19].replace("T", " ")


def span(seconds: float | None) -> str:
    """``4.2 s``, ``3 min 05 s``, ``2 h 07 min``."""
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def exit_words(code: int | None) -> str:
    """An exit status as a person reads it (the supervisor's words; "ended" when none was recorded)."""
    from broker.supervisor import exit_words as words

    return "ended" if code is None else words(code)


# -- agents ------------------------------------------------------------------------------


@final
@attrs.frozen
class AgentRow:
    """One principal: live or past, what it says, holds and waits for, its mail and output."""

    key: str  # agent:session ("broker" for the broker's own log)
    agent: str
    live: bool
    state: str
    status: str
    holds: tuple[str, ...]
    waits: tuple[str, ...]
    unread: int
    lines: int
    last_line: str
    has_log: bool
    run: int | None = None  # the run it belongs to (None: no broker said)
    started: str | None = None  # when it started (with no broker: when its log was last written)


def agent_rows(
    agents: Sequence[Mapping[str, Any]] | None,
    board: Mapping[str, Any] | None,
    locks: Mapping[str, Any] | None,
    logs: Mapping[str, LogName],
    counts: Mapping[str, int],
    last_lines: Mapping[str, str | None],
    now: datetime,
    log_times: Mapping[str, str] | None = None,
) -> list[AgentRow]:
    """Every principal the broker issued, merged with the board, the wait line and the log files.

    With no broker (``agents`` is None) the rows come from the log files alone
    (``log_times``: when each was last written).  The order is the one a person
    scans: live agents (the current run) by name, then past sessions newest
    first, the broker's own log last.
    """
    live_rows = {r["principal"]: r for r in (board or {}).get("agents", ())}
    unread = {r["agent"]: r["unread"] for r in (board or {}).get("agents", ())}
    waits: dict[str, list[str]] = {}
    for w in (locks or {}).get("waiting", ()):
        waits.setdefault(w["waiter"], []).append(
            f"{', '.join(w['resources'])} ({w['mode']}) for {span(age(w['since'], now))}, #{w['position']} in line"
        )
    rows: list[AgentRow] = []
    seen: set[str] = set()
    for a in agents or ():
        key = a["principal"]
        seen.add(key)
        live = live_rows.get(key)
        if a.get("live"):
            state = "live"
        elif a.get("revoked_at"):
            state = "revoked; " + exit_words(a.get("exit_code"))
        else:
            state = exit_words(a.get("exit_code"))
        rows.append(
            AgentRow(
                key=key,
                agent=a["agent"],
                live=bool(a.get("live")),
                state=state,
                status=clean((live or {}).get("status") or ""),
                holds=tuple(f"{h['resource']} ({h['mode']})" for h in (live or {}).get("locks", ())),
                waits=tuple(waits.get(key, ())),
                unread=unread.get(a["agent"], 0) if a.get("live") else 0,
                lines=counts.get(key, 0),
                last_line=last_lines.get(key) or "",
                has_log=key in logs,
                run=a.get("run"),
                started=a.get("started_at"),
            )
        )
    for key, name in logs.items():
        if key in seen or (agents is not None and key != "broker"):
            # With a broker, a log nobody issued is left out, except the broker's own.
            continue
        rows.append(
            AgentRow(
                key, name.agent, False, "broker log" if key == "broker" else "log only", "", (), (), 0,
                counts.get(key, 0), last_lines.get(key) or "", True, started=(log_times or {}).get(key),
            )
        )
    live = sorted((r for r in rows if r.live), key=lambda r: (r.agent, r.key))
    # Newest first: ISO times sort as text; a row with no time goes after every dated one.
    past = sorted((r for r in rows if not r.live and r.key != "broker"), key=lambda r: (r.started or "", r.key), reverse=True)
    return [*live, *past, *(r for r in rows if r.key == "broker")]


def first_agent(rows: Sequence[AgentRow]) -> str | None:
    """Where the Agents table's cursor starts: a live agent of the current run, else the newest
    past session, else the broker's log (None for no rows)."""
    live = [r for r in rows if r.live]
    if live:
        current = max((r.run for r in live if r.run is not None), default=None)
        return next(r.key for r in live if current is None or r.run == current)
    past = [r for r in rows if r.key != "broker"]
    if past:
        return max(past, key=lambda r: r.started or "").key
    return rows[0].key if rows else None


# -- locks ---------------------------------------------------------------------------------


def holding_rows(locks: Mapping[str, Any] | None, now: datetime) -> list[tuple[str, str, str, str, str, str]]:
    """(resource, mode, holder, held for, token, expires) for everything held."""
    return [
        (h["resource"], h["mode"], h["holder"], span(age(h["since"], now)), str(h["token"]), h.get("expires_at") or "")
        for h in (locks or {}).get("holdings", ())
    ]


def waiting_rows(locks: Mapping[str, Any] | None, now: datetime) -> list[tuple[str, str, str, str, str]]:
    """(position, waiter, resources, mode, waited for) in line order."""
    return [
        (str(w["position"]), w["waiter"], ", ".join(w["resources"]), w["mode"], span(age(w["since"], now)))
        for w in (locks or {}).get("waiting", ())
    ]


# -- mail ----------------------------------------------------------------------------------


@final
@attrs.frozen
class ThreadRow:
    thread: str
    participants: tuple[str, ...]
    messages: int
    last_at: str
    to_operator: bool


def thread_rows(sends: Iterable[Mapping[str, Any]]) -> list[ThreadRow]:
    """Threads from the ``msg.send`` events (newest activity first); bodies stay in the mailboxes."""
    threads: dict[str, dict[str, Any]] = {}
    for e in sends:
        detail = e.get("detail") or {}
        thread = detail.get("thread")
        if not thread:
            continue
        t = threads.setdefault(thread, {"people": {}, "count": 0, "last": "", "operator": False})
        sender = e["actor"].rpartition(":")[0] if ":" in e["actor"] else e["actor"]
        for who in (sender, *detail.get("recipients", ())):
            t["people"][who] = None
        t["count"] += 1
        t["last"] = max(t["last"], e["at"])
        t["operator"] = t["operator"] or "operator" in detail.get("recipients", ()) or sender == "operator"
    rows = [ThreadRow(k, tuple(v["people"]), v["count"], v["last"], v["operator"]) for k, v in threads.items()]
    rows.sort(key=lambda r: r.last_at, reverse=True)
    return rows


def message_lines(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """A thread as text: a header line per message, then its body indented."""
    out: list[str] = []
    for m in messages:
        subject = f"  [{clean(m['subject'])}]" if m.get("subject") else ""
        out.append(f"#{m['id']} {m['at'][11:19]}  {m['sender']} -> {', '.join(m['recipients'])}{subject}")
        out += ["    " + clean(line) for line in m["body"].splitlines() or [""]]
    return out


def reply_target(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Whom a reply in this thread goes to: the last sender who is not the operator."""
    for m in reversed(messages):
        if m["sender_agent"] != "operator":
            return m["sender_agent"]
    return None


@final
@attrs.frozen
class ThreadView:
    """The thread on screen in the Mail tab: its id and its messages, read together.

    The pane's header and the ``r`` key both read this one value, so the
    thread the header names is the thread a reply goes to, and the agent it
    names is the one who receives it.  While the thread is being read (or
    when it could not be) ``messages`` is None: the header says so and ``r``
    waits.
    """

    thread: str
    messages: tuple[Mapping[str, Any], ...] | None = None
    problem: str | None = None  # why it could not be read

    @property
    def reply_to(self) -> str | None:
        return None if self.messages is None else reply_target(self.messages)

    def header(self) -> str:
        if self.messages is None:
            return self.problem or f"thread {self.thread}: reading it..."
        to = self.reply_to
        return f"thread {self.thread}" + (f"  (r replies in this thread to {to})" if to else "  (no agent in it to reply to)")



# -- claims --------------------------------------------------------------------------------


def claim_rows(claims: Iterable[Mapping[str, Any]], *, tier: str | None, search: str) -> list[Mapping[str, Any]]:
    """Claims by tier (trusted first), newest first within one, filtered by tier and search words.

    ``tier`` is a tier, ``"live"`` (the three live tiers) or None (every tier).
    Every word of ``search`` must appear in the claim's text, author, kind or id.
    """
    words = search.lower().split()
    out = []
    for c in claims:
        if tier == "live" and c["tier"] not in LIVE_TIERS:
            continue
        if tier not in (None, "live") and c["tier"] != tier:
            continue
        hay = f"{c['id']} #{c['id']} {c['text']} {c['author']} {c['kind']} {c['tier']}".lower()
        if all(w in hay for w in words):
            out.append(c)
    out.sort(key=lambda c: (TIER_ORDER.index(c["tier"]) if c["tier"] in TIER_ORDER else 9, -c["id"]))
    return out


def tier_counts(claims: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts = {t: 0 for t in TIER_ORDER}
    for c in claims:
        counts[c["tier"]] = counts.get(c["tier"], 0) + 1
    return counts


def witnesses(claim: Mapping[str, Any]) -> str:
    """How many witnesses a claim has, in the one wording the claims table and the biography share:
    every corroboration recorded, and how many of them the trust policy counted (``memory``'s
    ``witnesses`` tally: ``{"total", "counted"}``)."""
    tally = claim.get("witnesses") or {}
    total, counted = int(tally.get("total", 0)), int(tally.get("counted", 0))
    return "none" if not total else f"{total}, {counted} counted"


def used(claim: Mapping[str, Any]) -> str:
    """How much the team used a claim (``memory``'s ``usage``): pushed in context, found directly by recall."""
    usage = claim.get("usage") or {}
    pushed = int((usage.get("context") or {}).get("count", 0))
    found = int((usage.get("recall") or {}).get("count", 0))
    return "never" if not pushed and not found else f"{pushed} pushed, {found} found"


_REASONS: Final = {
    "author_domain": "the author's own domain",
    "domain_already_counted": "that domain already counted",
    "revoked": "the witness was revoked",
    "covered_by_promotion": "covered by the operator's promotion",
}


def _verdict(w: Mapping[str, Any]) -> str:
    if w.get("counted"):
        return "counted"
    reason = w.get("reason_not_counted")
    return f"not counted: {_REASONS.get(reason, reason or 'no reason recorded')}"


def biography(claim: Mapping[str, Any]) -> list[str]:
    """A claim's biography as ``memory show`` has it: the claim, its editions, every witness
    (domain, blind or informed, counted or why not), disputes, and how it reached its tier."""
    out = [
        f"claim #{claim['id']}  [{claim['tier']}]  {claim['kind']}/{claim['scope']}  edition {claim['edition']}",
        f"by {claim['author']} (domain {claim.get('author_domain', '?')}) at {when(claim['created_at'])}",
        "",
        *("  " + clean(line) for line in claim["text"].splitlines()),
    ]
    if claim.get("evidence"):
        out.append(f"  evidence: {clean(claim['evidence'])}")
    editions = claim.get("editions") or []
    if len(editions) > 1:
        out += ["", "editions:"]
        for e in editions:
            mark = "  <- this one" if e["id"] == claim["id"] else ""
            later = f", superseded by #{e['superseded_by']}" if e.get("superseded_by") else ""
            out.append(f"  #{e['id']} edition {e['edition']} [{e['tier']}] by {e['author']} at {when(e['created_at'])}{later}{mark}")
    usage = claim.get("usage")
    if usage is not None:
        out += ["", f"used: {used(claim)}"]
        for via, label in (("context", "last pushed"), ("recall", "last found")):
            last = (usage.get(via) or {}).get("last")
            if last:
                out.append(f"  {label} {when(last)}")
    out += ["", f"witnesses: {witnesses(claim)}"]
    for w in claim.get("corroborations") or []:
        how = w.get("witness") or ("blind" if w.get("blind") else "informed")
        if w.get("restatement"):
            how += f" (rediscovered it in #{w['restatement']})"
        out.append(f"  {w['principal']} (domain {w['domain']}) {how}, {_verdict(w)}  at {when(w['at'])}")
        if w.get("evidence"):
            out.append(f"      evidence: {clean(w['evidence'])}")
    links = claim.get("links") or []
    if links:
        out += ["", "restatements:"]
        for link in links:
            if link["claim"] == claim["id"]:
                out.append(f"  restates #{link['restates']} ({link['kind']}, similarity {link['similarity']:.2f})")
            else:
                out.append(f"  restated by #{link['claim']} ({link['kind']}, similarity {link['similarity']:.2f})")
    disputes = claim.get("disputes") or []
    if disputes:
        out += ["", f"disputes ({len(disputes)}):"]
        for d in disputes:
            out.append(f"  {d['principal']} (domain {d['domain']}), {_verdict(d)}: {clean(d.get('reason') or '')}")
    standing = claim.get("standing") or {}
    if standing:
        out += ["", f"policy: quorum {standing.get('quorum')} domains" + (", one of them blind" if standing.get("require_blind") else "")]
        domains = standing.get("counted_domains") or []
        out.append(f"  counted domains: {', '.join(domains) if domains else 'none'}")
        if standing.get("short_of_trust") and claim["tier"] in ("unverified", "disputed"):
            out.append(f"  not trusted: {standing['short_of_trust']}")
    out += ["", "how it got its tier:"]
    steps = [h for h in claim.get("history") or [] if h["kind"] in _TIER_EVENTS]
    for h in steps:
        out.append("  " + _tier_step(h))
    for p in claim.get("promotions") or []:
        if not any(h["kind"] == "memory.promote" for h in steps):
            out.append(f"  {when(p['at'])} promoted by {p['by']}" + (f": {clean(p['reason'])}" if p.get("reason") else ""))
    if claim.get("retired"):
        r = claim["retired"]
        if not any(h["kind"] == "memory.retire" for h in steps):
            out.append(f"  {when(r['at'])} retired by {r['by']}: {clean(r['reason'] or '')}")
    if not steps and not claim.get("promotions") and not claim.get("retired"):
        out.append("  written unverified; nothing has changed it")
    return out


_TIER_EVENTS: Final = frozenset({"memory.tier", "memory.promote", "memory.retire", "memory.unretire", "memory.revoke", "memory.revise"})


def _tier_step(h: Mapping[str, Any]) -> str:
    d = h.get("detail") or {}
    at = when(h["at"])
    if h["kind"] == "memory.tier":
        cause = f" ({clean(str(d['cause']))})" if d.get("cause") else ""
        domains = d.get("counted_domains")
        counted = f"; counted domains: {', '.join(domains)}" if domains else ""
        return f"{at} #{h['claim']} {d.get('from')} -> {d.get('to')}{cause}{counted}"
    reason = f": {clean(str(d['reason']))}" if d.get("reason") else ""
    verb = h["kind"].removeprefix("memory.")
    return f"{at} #{h['claim']} {verb} by {h['actor']}{reason}"
