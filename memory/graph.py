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

import re
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


@final
@attrs.frozen
class ClaimRef:
    id: int
    tier: str
    author: str
    text: str


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
    return TrustGraph(subject=subject, claims=tuple(sorted(refs.values(), key=lambda c: c.id)), nodes=nodes, edges=tuple(edges), omitted=omitted)


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
        for e in graph.edges:
            arrow = "--x" if e.kind == "disputed" else "-->"
            lines.append(f"  {e.source:<{width}} {arrow} {e.target}   {e.label}")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


# -- Graphviz DOT -----------------------------------------------------------------------


def _dot_string(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, newlines as \\n."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n") + '"'


def to_dot(graph: TrustGraph) -> str:
    """Graphviz DOT: one cluster per trust domain; counted edges solid, the rest dashed; disputes red."""
    ids = {n.principal: f"n{i}" for i, n in enumerate(graph.nodes)}
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
            label = n.principal + ("\n" + "author of " + ", ".join(f"#{c}" for c in n.authored) if n.authored else "")
            extra = ', peripheries=2' if n.authored else ""
            out.append(f"    {ids[n.principal]} [label={_dot_string(label)}{extra}];")
        out.append("  }")
    for e in graph.edges:
        color = "firebrick" if e.kind == "disputed" else ("darkgreen" if e.counted else "gray40")
        style = "solid" if e.counted else "dashed"
        arrow = ', arrowhead="tee"' if e.kind == "disputed" else ""
        out.append(f"  {ids[e.source]} -> {ids[e.target]} [label={_dot_string(e.label)}, color={color}, fontcolor={color}, style={style}{arrow}];")
    out.append("}")
    return "\n".join(out) + "\n"


# -- Mermaid ----------------------------------------------------------------------------

_MERMAID_UNSAFE: Final = re.compile(r'["<>#&`|\[\]{}()\n\r]')


def _mermaid_text(text: str) -> str:
    """Text inside a Mermaid quoted label: every character that could end it written as an entity."""
    return _MERMAID_UNSAFE.sub(lambda m: "#" + str(ord(m.group())) + ";" if m.group() not in "\n\r" else " ", text)


def to_mermaid(graph: TrustGraph) -> str:
    """A Mermaid flowchart: one subgraph per trust domain; counted edges solid, the rest dotted."""
    ids = {n.principal: f"n{i}" for i, n in enumerate(graph.nodes)}
    out = ["flowchart LR", f"  %% trust graph of {_mermaid_text(graph.subject)}"]
    for i, (domain, members) in enumerate(graph.domains().items()):
        out.append(f'  subgraph d{i}["domain {_mermaid_text(domain)}"]')
        for n in members:
            label = _mermaid_text(n.principal) + ("<br/>author of " + ", ".join(f"#35;{c}" for c in n.authored) if n.authored else "")
            shape = ('[["', '"]]') if n.authored else ('["', '"]')
            out.append(f"    {ids[n.principal]}{shape[0]}{label}{shape[1]}")
        out.append("  end")
    for e in graph.edges:
        arrow = "-->" if e.counted else "-.->"
        if e.kind == "disputed":
            arrow = "--x" if e.counted else "-.-x"
        out.append(f'  {ids[e.source]} {arrow}|"{_mermaid_text(e.label)}"| {ids[e.target]}')
    return "\n".join(out) + "\n"
