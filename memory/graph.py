"""Who vouched for whom: the trust graph of one claim, one agent's claims, or the whole memory.

A claim's biography (``memory show``) lists its witnesses one by one; the
graph draws the same rows as a picture a person can take in at a glance.
Each node is a principal (``agent:session``), and nodes are grouped by
*trust domain* -- the team agent a principal descends from -- because that is
what the trust policy counts: two witnesses in one box are one witness.  Each
corroboration is an edge from the witness to the claim's author, labelled
with the claim, *blind* or *informed* (had that domain been shown the claim
before it vouched?) and *counted* or why not; a dispute is an edge too,
drawn differently.

Everything here is pure: :func:`build` takes claims as ``memory show`` /
``memory.standing.describe`` render them (dicts with ``corroborations`` and
``disputes``), and the renderers turn a :class:`TrustGraph` into Graphviz
DOT, Mermaid, or plain text for a terminal.  Turning DOT into SVG needs the
Graphviz program and lives in :mod:`memory.graphviz`; choosing which claims
to draw reads the store and lives in :mod:`memory.inspection`.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any, Final, Iterable, Literal, Mapping, final

import attrs

from broker.terminal import printable

#: How a verdict's stored reason reads in a label (``memory.policy.NotCounted``'s values).
REASONS: Final[Mapping[str, str]] = {
    "author_domain": "author's own domain",
    "domain_already_counted": "domain already counted",
    "revoked": "witness revoked",
    "covered_by_promotion": "covered by the operator's promotion",
    "unread": "vouched by id, never shown it, no matching evidence",
}
FORMATS: Final = ("text", "dot", "mermaid")
EdgeKind = Literal["corroborated", "disputed"]

#: A claim's box in a picture is filled and outlined by its tier (fill, line and text); DOT and Mermaid share them.
TIER_COLOURS: Final[Mapping[str, tuple[str, str]]] = {
    "trusted": ("#dcf2e0", "#1e6b34"),
    "unverified": ("#fff3d1", "#8a5a00"),
    "disputed": ("#fbe1e1", "#b3261e"),
    "retired": ("#e4e4e4", "#555555"),
    "superseded": ("#efefef", "#7a7a7a"),
}
#: An edge's colour says what the policy made of it; DOT and Mermaid share them.
EDGE_COLOURS: Final[Mapping[str, str]] = {"counted": "#1e6b34", "not counted": "#6e6e6e", "disputed": "#b3261e", "wrote": "#333333"}
#: How much of a claim's text a picture shows: lines of at most this many characters, at most this many lines.
BOX_WIDTH: Final = 32
BOX_LINES: Final = 3


class GraphError(ValueError):
    """A claim given to :func:`build` lacks what a graph needs; the message names the field."""


@final
@attrs.frozen
class Node:
    """One principal that authored or witnessed a drawn claim."""

    principal: str
    domain: str
    authored: tuple[int, ...] = ()

    @property
    def agent(self) -> str:
        return self.principal.rpartition(":")[0]


@final
@attrs.frozen
class Edge:
    """One witness row: ``source`` (the witness) vouched for, or disputed, ``target`` (the author) on ``claim``."""

    source: str
    target: str
    claim: int
    kind: EdgeKind
    counted: bool
    blind: bool | None  # None for a dispute: blindness is asked of corroborations only
    reason: str | None  # why it did not count (a NotCounted value), None when it counted
    #: blind, informed, unread -- or "rediscovered" (the witness remembered the same finding itself)
    how: str | None = None

    @property
    def label(self) -> str:
        how = "disputed" if self.kind == "disputed" else (self.how or ("blind" if self.blind else "informed"))
        verdict = "counted" if self.counted else f"not counted: {REASONS.get(self.reason or '', self.reason or 'no reason recorded')}"
        return f"#{self.claim} {how}, {verdict}"

    @property
    def colour(self) -> str:
        return EDGE_COLOURS["disputed" if self.kind == "disputed" else "counted" if self.counted else "not counted"]


@final
@attrs.frozen
class ClaimRef:
    id: int
    tier: str
    author: str
    text: str

    @property
    def title(self) -> str:
        """How a picture names the claim: ``#12 [trusted]``."""
        return f"#{self.id} [{self.tier}]"

    def box(self) -> list[str]:
        """The claim as a picture's box shows it: its title, then its text, wrapped and cut short."""
        return [self.title, *_wrap(self.text, BOX_WIDTH, BOX_LINES)]

    def colours(self) -> tuple[str, str]:
        return TIER_COLOURS.get(self.tier, TIER_COLOURS["unverified"])


@final
@attrs.frozen
class TrustGraph:
    """The principals behind some claims, grouped by trust domain, and every witness edge between them.

    ``subject`` says what was drawn ("claim 12", "agent alice", "every
    claim with a witness"); ``omitted`` counts claims left out by a size cap.
    """

    subject: str
    claims: tuple[ClaimRef, ...]
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    omitted: int = 0

    def domains(self) -> dict[str, list[Node]]:
        """Domain -> its nodes, in a stable order (domains by name, principals by name)."""
        out: dict[str, list[Node]] = {}
        for node in self.nodes:
            out.setdefault(node.domain, []).append(node)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "omitted": self.omitted,
            "claims": [attrs.asdict(c) for c in self.claims],
            "domains": {d: [n.principal for n in ns] for d, ns in self.domains().items()},
            "nodes": [{**attrs.asdict(n), "authored": list(n.authored)} for n in self.nodes],
            "edges": [{**attrs.asdict(e), "label": e.label} for e in self.edges],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrustGraph:
        """The inverse of :meth:`as_dict` (a graph that came over the wire)."""
        return cls(
            subject=data["subject"],
            omitted=data.get("omitted", 0),
            claims=tuple(ClaimRef(c["id"], c["tier"], c["author"], c["text"]) for c in data["claims"]),
            nodes=tuple(Node(n["principal"], n["domain"], tuple(n["authored"])) for n in data["nodes"]),
            edges=tuple(
                Edge(e["source"], e["target"], e["claim"], e["kind"], e["counted"], e["blind"], e["reason"], e.get("how")) for e in data["edges"]
            ),
        )


def build(subject: str, claims: Iterable[Mapping[str, Any]], *, omitted: int = 0) -> TrustGraph:
    """The graph of ``claims``, each as ``memory show`` renders it.

    Raises:
        GraphError: a claim lacks ``id``, ``author``, ``author_domain`` or its
            witness lists, or a witness lacks ``principal`` or ``domain``.
    """
    refs: dict[int, ClaimRef] = {}
    domain_of: dict[str, str] = {}
    authored: dict[str, list[int]] = {}
    edges: list[Edge] = []
    for claim in claims:
        cid = _field(claim, "id", "a claim")
        if cid in refs:
            continue
        author = _field(claim, "author", f"claim {cid}")
        domain_of.setdefault(author, _field(claim, "author_domain", f"claim {cid}"))
        authored.setdefault(author, []).append(cid)
        # A claim's words are an agent's: no escape sequence of theirs reaches the operator's terminal.
        refs[cid] = ClaimRef(cid, claim.get("tier", "unverified"), author, " ".join(printable(str(claim.get("text", ""))).split()))
        for kind, rows in (("corroborated", _field(claim, "corroborations", f"claim {cid}")), ("disputed", _field(claim, "disputes", f"claim {cid}"))):
            for row in rows:
                witness = _field(row, "principal", f"a witness of claim {cid}")
                domain_of.setdefault(witness, _field(row, "domain", f"witness {witness} of claim {cid}"))
                counted = bool(row.get("counted"))
                edges.append(
                    Edge(
                        source=witness,
                        target=author,
                        claim=cid,
                        kind=kind,  # type: ignore[arg-type]
                        counted=counted,
                        blind=bool(row.get("blind")) if kind == "corroborated" else None,
                        reason=None if counted else (row.get("reason_not_counted") or None),
                        how=("rediscovered" if row.get("restatement") else row.get("witness")) if kind == "corroborated" else None,
                    )
                )
    nodes = tuple(
        Node(p, domain_of[p], tuple(sorted(authored.get(p, ())))) for p in sorted(domain_of, key=lambda p: (domain_of[p], p))
    )
    # Claims by id, each claim's witnesses in the order they were recorded: the same picture however the claims came.
    ordered = tuple(sorted(edges, key=lambda e: e.claim))
    return TrustGraph(subject=subject, claims=tuple(sorted(refs.values(), key=lambda c: c.id)), nodes=nodes, edges=ordered, omitted=omitted)


def _field(row: Mapping[str, Any], name: str, what: str) -> Any:
    value = row.get(name)
    if value is None or value == "":
        raise GraphError(f"{what} has no {name!r}; pass claims as `memory show` renders them")
    return value


def render(graph: TrustGraph, fmt: str) -> str:
    """``graph`` as ``text``, ``dot`` or ``mermaid``.

    Raises:
        GraphError: for any other format (SVG needs Graphviz: see :mod:`memory.graphviz`).
    """
    if fmt == "text":
        return to_text(graph)
    if fmt == "dot":
        return to_dot(graph)
    if fmt == "mermaid":
        return to_mermaid(graph)
    raise GraphError(f"no graph format {fmt!r}; choose one of {', '.join(FORMATS)}")


# -- text -------------------------------------------------------------------------------


def to_text(graph: TrustGraph) -> str:
    """A plain-text picture for a terminal: the domains and their members, then every edge."""
    lines = [f"trust graph of {graph.subject}"]
    for c in graph.claims:
        lines.append(f"  claim #{c.id} [{c.tier}] by {c.author}: {_clip(c.text, 72)}")
    if graph.omitted:
        lines.append(f"  ({graph.omitted} more claim(s) not drawn)")
    if not graph.nodes:
        lines.append("  (no claims to draw)")
        return "\n".join(lines)
    lines.append("")
    lines.append("trust domains (a domain counts once, however many members vouch):")
    for domain, members in graph.domains().items():
        lines.append(f"  [{domain}]")
        for n in members:
            lines.append(f"    {n.principal}" + (f"  (author of {', '.join(f'#{i}' for i in n.authored)})" if n.authored else ""))
    lines.append("")
    if not graph.edges:
        lines.append("no witnesses yet")
    else:
        lines.append("who vouched for whom:")
        width = max(len(e.source) for e in graph.edges)
        refs = {c.id: c for c in graph.claims}
        for cid, edges in _by_claim(graph.edges):
            # With several claims drawn, each claim's witnesses come under its tier and words.
            indent = "  "
            if len(graph.claims) > 1:
                lines.append(f"  {refs[cid].title} {_clip(refs[cid].text, 60)}")
                indent = "    "
            for e in edges:
                arrow = "--x" if e.kind == "disputed" else "-->"
                lines.append(f"{indent}{e.source:<{width}} {arrow} {e.target}   {e.label}")
    return "\n".join(lines)


def _by_claim(edges: Iterable[Edge]) -> list[tuple[int, list[Edge]]]:
    """Edges grouped by claim, claims in id order, each claim's edges in the order they were recorded."""
    grouped: dict[int, list[Edge]] = {}
    for e in edges:
        grouped.setdefault(e.claim, []).append(e)
    return sorted(grouped.items())


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _wrap(text: str, width: int, lines: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters (at spaces where it can), at most ``lines`` of them,
    the last ending in an ellipsis when words were left out."""
    out = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    if len(out) > lines:
        out = out[:lines]
        out[-1] = _clip(out[-1] + " \u2026", width) if len(out[-1]) < width - 1 else out[-1][: width - 1] + "\u2026"
    return out


# -- Graphviz DOT -----------------------------------------------------------------------


def _dot_string(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, newlines as \\n."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n") + '"'


def to_dot(graph: TrustGraph) -> str:
    """Graphviz DOT: one cluster per trust domain, holding its principals and the claims they wrote;
    each claim a box coloured by its tier with its words; each witness an edge to the claim it vouched
    for (counted solid, the rest dashed, disputes red with a bar), each author a bold "wrote" edge."""
    ids = {n.principal: f"n{i}" for i, n in enumerate(graph.nodes)}
    by_author: dict[str, list[ClaimRef]] = {}
    for c in graph.claims:
        by_author.setdefault(c.author, []).append(c)
    out = [
        "digraph trust {",
        f"  label={_dot_string('trust graph of ' + graph.subject)};",
        '  labelloc="t";',
        '  fontname="Helvetica";',
        "  rankdir=LR;",
        '  node [shape=box, style="rounded", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for i, (domain, members) in enumerate(graph.domains().items()):
        out.append(f"  subgraph cluster_{i} {{")
        out.append(f"    label={_dot_string('domain ' + domain)};")
        out.append('    style="dashed";')
        for n in members:
            extra = ", peripheries=2" if n.authored else ""
            out.append(f"    {ids[n.principal]} [label={_dot_string(n.principal)}{extra}];")
        for n in members:
            for c in by_author.get(n.principal, ()):
                fill, line = c.colours()
                out.append(
                    f'    c{c.id} [label={_dot_string(chr(10).join(c.box()))}, shape=note, style="filled", '
                    f'fillcolor="{fill}", color="{line}", fontcolor="{line}"];'
                )
        out.append("  }")
    for c in graph.claims:
        colour = EDGE_COLOURS["wrote"]
        out.append(f'  {ids[c.author]} -> c{c.id} [label="wrote", style=bold, color="{colour}", fontcolor="{colour}"];')
    for e in graph.edges:
        style = "solid" if e.counted else "dashed"
        arrow = ', arrowhead="tee"' if e.kind == "disputed" else ""
        out.append(f'  {ids[e.source]} -> c{e.claim} [label={_dot_string(e.label)}, color="{e.colour}", fontcolor="{e.colour}", style={style}{arrow}];')
    out.append("}")
    return "\n".join(out) + "\n"


# -- Mermaid ----------------------------------------------------------------------------

_MERMAID_UNSAFE: Final = re.compile(r'["<>#&`|\[\]{}()\n\r]')


def _mermaid_text(text: str) -> str:
    """Text inside a Mermaid quoted label: every character that could end it written as an entity."""
    return _MERMAID_UNSAFE.sub(lambda m: "#" + str(ord(m.group())) + ";" if m.group() not in "\n\r" else " ", text)


def to_mermaid(graph: TrustGraph) -> str:
    """A Mermaid flowchart with a title: one subgraph per trust domain, holding its principals and the
    claims they wrote; each claim a box coloured by its tier with its words; witness edges to the claim
    (counted solid, the rest dotted, disputes crossed; coloured as in DOT), authors' "wrote" edges thick."""
    ids = {n.principal: f"n{i}" for i, n in enumerate(graph.nodes)}
    by_author: dict[str, list[ClaimRef]] = {}
    for c in graph.claims:
        by_author.setdefault(c.author, []).append(c)
    # The title is front matter (YAML): a JSON string is a YAML double-quoted string, escapes and all.
    out = ["---", f"title: {json.dumps('trust graph of ' + printable(graph.subject))}", "---", "flowchart LR"]
    for i, (domain, members) in enumerate(graph.domains().items()):
        out.append(f'  subgraph d{i}["domain {_mermaid_text(domain)}"]')
        for n in members:
            shape = ('[["', '"]]') if n.authored else ('["', '"]')
            out.append(f"    {ids[n.principal]}{shape[0]}{_mermaid_text(n.principal)}{shape[1]}")
        for n in members:
            for c in by_author.get(n.principal, ()):
                out.append(f'    c{c.id}["{"<br/>".join(_mermaid_text(line) for line in c.box())}"]')
        out.append("  end")
    links: list[str] = []  # each link's colour, by its index (Mermaid styles links by their order)
    for e in graph.edges:
        arrow = "-->" if e.counted else "-.->"
        if e.kind == "disputed":
            arrow = "--x" if e.counted else "-.-x"
        out.append(f'  {ids[e.source]} {arrow}|"{_mermaid_text(e.label)}"| c{e.claim}')
        links.append(e.colour)
    for c in graph.claims:
        out.append(f'  {ids[c.author]} ==>|"wrote"| c{c.id}')
        links.append(EDGE_COLOURS["wrote"])
    for tier, (fill, line) in TIER_COLOURS.items():
        if any(c.tier == tier for c in graph.claims):
            out.append(f"  classDef {tier} fill:{fill},stroke:{line},color:{line}")
            out.append(f"  class {','.join(f'c{c.id}' for c in graph.claims if c.tier == tier)} {tier}")
    for colour in dict.fromkeys(links):
        which = ",".join(str(i) for i, c in enumerate(links) if c == colour)
        out.append(f"  linkStyle {which} stroke:{colour},color:{colour}")
    return "\n".join(out) + "\n"
