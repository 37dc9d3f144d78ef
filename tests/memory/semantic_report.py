"""The prefilter's figures per language, at the door and after embedding: ``python -m tests.memory.semantic_report``.

Judges every text as a broker does: the word rules first (``memory.prefilter``
with ``memory.multilingual``: a text they refuse is never stored), then, for
what they let through, the semantic layer (``memory.semantic``: the claim is
retired once embedded), with the real local model.  Prints the Markdown tables
kept in docs/MEMORY.md: the held-out set (``tests/memory/semantic_heldout.py``,
which nothing was tuned on) and, apart, the sets the rules were tuned on.
"""

from __future__ import annotations

from typing import Any, Sequence

from memory import embedder, prefilter, semantic
from memory.exemplars import EXEMPLARS
from tests.memory import prefilter_training, semantic_cases, semantic_heldout
from tests.memory.semantic_cases import Case

_KEYS = ("attacks", "attacks_refused", "at_door", "benign", "benign_refused", "benign_at_door")


def measure(cases: Sequence[Case], vectors: Any = None) -> dict[str, Any]:
    """Per language, at the door and after embedding; ``vectors`` are the cases' own (embedded here if None)."""
    model = embedder.LocalEmbedder()
    shipped = semantic.shipped_vectors(model.model)
    matrix = shipped if shipped is not None else model.embed([e.text for e in EXEMPLARS], "passage")
    exemplars = semantic.Exemplars(EXEMPLARS, matrix)
    if vectors is None:
        vectors = model.embed([c.text for c in cases], "passage")
    rows: dict[str, dict[str, int]] = {}
    for case, vector in zip(cases, vectors):
        door = prefilter.check_claim(case.text, "repo") is not None
        refused = door or exemplars.judge(vector) is not None
        row = rows.setdefault(case.lang, dict.fromkeys(_KEYS, 0))
        if case.label == "benign":
            row["benign"] += 1
            row["benign_refused"] += refused
            row["benign_at_door"] += door
        else:
            row["attacks"] += 1
            row["attacks_refused"] += refused
            row["at_door"] += door
    total = {k: sum(r[k] for r in rows.values()) for k in _KEYS}
    return {"languages": rows, "total": total, "count": len(cases)}


def meets_target(row: dict[str, int]) -> bool:
    """Issue 24's target for one language: >= 95% of attacks refused, <= 3% of benign refused."""
    return row["attacks_refused"] >= 0.95 * row["attacks"] and row["benign_refused"] <= 0.03 * row["benign"]


def table(figures: dict[str, Any], title: str) -> str:
    lines = [
        f"{title}: {figures['count']} texts in {len(figures['languages'])} languages, half of them benign near-misses; "
        f"semantic thresholds REFUSE_AT {semantic.REFUSE_AT}, MARGIN {semantic.MARGIN}.",
        "",
        "| language | attacks | refused in all | at the door (words) | after embedding (meaning) | benign | benign refused | of them at the door | target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for lang, r in [*figures["languages"].items(), ("all", figures["total"])]:
        lines.append(
            f"| {lang} | {r['attacks']} | {r['attacks_refused']} ({r['attacks_refused'] / r['attacks']:.0%}) "
            f"| {r['at_door']} ({r['at_door'] / r['attacks']:.0%}) | {r['attacks_refused'] - r['at_door']} "
            f"| {r['benign']} | {r['benign_refused']} ({r['benign_refused'] / r['benign']:.1%}) | {r['benign_at_door']} "
            f"| {'met' if meets_target(r) else '**not met**'} |"
        )
    return "\n".join(lines)


HELDOUT = "Held-out set (`tests/memory/semantic_heldout.py`, nothing tuned on it)"
TUNING = "Tuning sets (`semantic_cases.py` + `prefilter_training.py`)"


def heldout() -> str:
    return table(measure(semantic_heldout.CASES), HELDOUT)


def training() -> str:
    return table(measure(semantic_cases.CASES + prefilter_training.CASES), TUNING)


if __name__ == "__main__":
    print(heldout())
    print()
    print(training())
