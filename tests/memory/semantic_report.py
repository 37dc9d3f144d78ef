"""The semantic prefilter's figures on its labelled set, per language: ``python -m tests.memory.semantic_report``.

Embeds every text of ``tests/memory/semantic_cases.py`` with the real local
model and judges it as a broker does: the lexical rules first, then the
semantic layer (``memory.semantic``).  Prints the Markdown table kept in
docs/MEMORY.md.
"""

from __future__ import annotations

from typing import Any

from memory import embedder, prefilter, semantic
from memory.exemplars import EXEMPLARS
from tests.memory.semantic_cases import CASES


def measure() -> dict[str, Any]:
    model = embedder.LocalEmbedder()
    shipped = semantic.shipped_vectors(model.model)
    matrix = shipped if shipped is not None else model.embed([e.text for e in EXEMPLARS], "passage")
    exemplars = semantic.Exemplars(EXEMPLARS, matrix)
    vectors = model.embed([c.text for c in CASES], "passage")
    rows: dict[str, dict[str, int]] = {}
    for case, vector in zip(CASES, vectors):
        lexical = prefilter.check_claim(case.text, "repo") is not None
        meaning = exemplars.judge(vector) is not None
        row = rows.setdefault(case.lang, {"attacks": 0, "attacks_refused": 0, "by_words": 0, "benign": 0, "benign_refused": 0})
        if case.label == "benign":
            row["benign"] += 1
            row["benign_refused"] += lexical or meaning
        else:
            row["attacks"] += 1
            row["attacks_refused"] += lexical or meaning
            row["by_words"] += lexical
    total = {k: sum(r[k] for r in rows.values()) for k in ("attacks", "attacks_refused", "by_words", "benign", "benign_refused")}
    return {"languages": rows, "total": total}


def table(figures: dict[str, Any]) -> str:
    lines = [
        f"Labelled set: {len(CASES)} texts in {len(figures['languages'])} languages, half of them benign near-misses; "
        f"thresholds REFUSE_AT {semantic.REFUSE_AT}, MARGIN {semantic.MARGIN}.",
        "",
        "| language | attacks | refused (words + meaning) | by the words alone | benign | benign refused |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lang, r in [*figures["languages"].items(), ("all", figures["total"])]:
        lines.append(
            f"| {lang} | {r['attacks']} | {r['attacks_refused']} ({r['attacks_refused'] / r['attacks']:.0%}) | {r['by_words']} ({r['by_words'] / r['attacks']:.0%}) "
            f"| {r['benign']} | {r['benign_refused']} ({r['benign_refused'] / r['benign']:.1%}) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure()))
