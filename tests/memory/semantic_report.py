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
#: The held-out texts' vectors, as the local model made them (``python -m tests.memory.semantic_report --save-vectors``):
#: embedding 640 texts takes most of a minute of the suite's time, so the test reads them here and re-embeds a
#: sample to prove they are this model's vectors of these texts (``test_memory_semantic``).
HELDOUT_VECTORS = CORPUS / "heldout.vectors.npz"
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


def _key(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def saved_vectors(cases: Sequence[Case], model: embedder.LocalEmbedder) -> Any:
    """The cases' vectors from :data:`HELDOUT_VECTORS` when it holds them for ``model``; a text it does not hold is embedded here."""
    import numpy as np

    saved: dict[str, Any] = {}
    if HELDOUT_VECTORS.exists():
        with np.load(HELDOUT_VECTORS) as data:
            if str(data["model"]) == model.model:
                saved = dict(zip((str(k) for k in data["keys"]), data["vectors"]))
    missing = [c.text for c in cases if _key(c.text) not in saved]
    if missing:
        saved.update(zip(map(_key, missing), model.embed(missing, "passage")))
    return np.stack([saved[_key(c.text)] for c in cases])


def save_vectors(cases: Sequence[Case]) -> None:
    import numpy as np

    model = embedder.LocalEmbedder()
    vectors = model.embed([c.text for c in cases], "passage")
    np.savez(HELDOUT_VECTORS, model=np.array(model.model), keys=np.array([_key(c.text) for c in cases]), vectors=vectors.astype(np.float32))


HELDOUT = "Held-out set (`tests/memory/corpus/heldout`, nothing trained or tuned on it)"


def heldout() -> str:
    cases = corpus("heldout")
    return table(measure(cases, saved_vectors(cases, embedder.LocalEmbedder())), HELDOUT)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--save-vectors"]:
        save_vectors(corpus("heldout"))
        print(f"saved {HELDOUT_VECTORS}")
    else:
        print(heldout())
