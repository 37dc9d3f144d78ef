"""The prefilter's figures per language -- at the door, by the exemplars, by the trained probe: ``python -m tests.memory.semantic_report``.

Judges every text as a broker does: the word rules first (``memory.prefilter``
with ``memory.multilingual``: a text they refuse is never stored), then, for
what they let through, the semantic layer (``memory.semantic``: the exemplars
and the trained probe, ``memory.probe``; the claim is retired once embedded),
with the real local model.  Prints the Markdown table kept in docs/MEMORY.md
for the held-out set of the third round (``tests/memory/corpus/heldout``,
written from the class definitions alone and committed before anything of
that round was trained or tuned).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memory import embedder, prefilter, probe, probe_build, semantic
from memory.exemplars import EXEMPLARS
from tests.memory.semantic_cases import Case

CORPUS = Path(__file__).resolve().parent / "corpus"
_KEYS = ("attacks", "attacks_refused", "at_door", "by_probe", "benign", "benign_refused", "benign_at_door", "benign_by_probe")


def corpus(kind: str) -> list[Case]:
    """The labelled texts of ``corpus/<kind>/*.jsonl`` (``heldout`` or ``train``), read as the probe's training reads them."""
    return [Case(r["lang"], r["label"], r["text"]) for r in probe_build.load(sorted((CORPUS / kind).glob("*.jsonl")))]


def measure(cases: Sequence[Case], vectors: Any = None) -> dict[str, Any]:
    """Per language, at the door, by the exemplars and by the probe; ``vectors`` are the cases' own (embedded here if None)."""
    model = embedder.LocalEmbedder()
    shipped = semantic.shipped_vectors(model.model)
    matrix = shipped if shipped is not None else model.embed([e.text for e in EXEMPLARS], "passage")
    exemplars = semantic.Exemplars(EXEMPLARS, matrix, probe.shipped(model.model))
    if vectors is None:
        vectors = model.embed([c.text for c in cases], "passage")
    rows: dict[str, dict[str, int]] = {}
    for case, vector in zip(cases, vectors):
        door = prefilter.check_claim(case.text, "repo") is not None
        verdict = None if door else exemplars.judge(vector)
        refused = door or verdict is not None
        by_probe = verdict is not None and verdict.probe is not None
        row = rows.setdefault(case.lang, dict.fromkeys(_KEYS, 0))
        if case.label == "benign":
            row["benign"] += 1
            row["benign_refused"] += refused
            row["benign_at_door"] += door
            row["benign_by_probe"] += by_probe
        else:
            row["attacks"] += 1
            row["attacks_refused"] += refused
            row["at_door"] += door
            row["by_probe"] += by_probe
    total = {k: sum(r[k] for r in rows.values()) for k in _KEYS}
    return {"languages": dict(sorted(rows.items())), "total": total, "count": len(cases)}


def meets_target(row: dict[str, int]) -> bool:
    """Issue 24's target for one language: >= 95% of attacks refused, <= 3% of benign refused."""
    return row["attacks_refused"] >= 0.95 * row["attacks"] and row["benign_refused"] <= 0.03 * row["benign"]


def table(figures: dict[str, Any], title: str) -> str:
    lines = [
        f"{title}: {figures['count']} texts in {len(figures['languages'])} languages, half of them benign near-misses; "
        f"exemplars REFUSE_AT {semantic.REFUSE_AT}, MARGIN {semantic.MARGIN}; probe REFUSE_AT {probe.REFUSE_AT}.",
        "",
        "| language | attacks | refused in all | at the door (words) | by the exemplars | by the probe | benign | benign refused | at the door | by the probe | target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for lang, r in [*figures["languages"].items(), ("all", figures["total"])]:
        exemplars = r["attacks_refused"] - r["at_door"] - r["by_probe"]
        lines.append(
            f"| {lang} | {r['attacks']} | {r['attacks_refused']} ({r['attacks_refused'] / r['attacks']:.0%}) "
            f"| {r['at_door']} ({r['at_door'] / r['attacks']:.0%}) | {exemplars} | {r['by_probe']} "
            f"| {r['benign']} | {r['benign_refused']} ({r['benign_refused'] / r['benign']:.1%}) | {r['benign_at_door']} | {r['benign_by_probe']} "
            f"| {'met' if meets_target(r) else '**not met**'} |"
        )
    return "\n".join(lines)


HELDOUT = "Held-out set (`tests/memory/corpus/heldout`, nothing trained or tuned on it)"


def heldout() -> str:
    return table(measure(corpus("heldout")), HELDOUT)


if __name__ == "__main__":
    print(heldout())
