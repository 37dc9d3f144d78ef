"""The prefilter's semantic layer, and the thresholds that say when two texts mean the same.

The lexical rules (``memory.prefilter``) read English word lists; the same
injection in French or Japanese passed them.  This layer reads meaning: a
claim's vector is compared with **labelled exemplars** -- short texts of
each refused class (``injection``, ``directive``, ``conditional``,
``exfiltration``) and benign near-misses (descriptions of attacks, commands
mentioned as facts, security notes), in many languages
(``memory/exemplars.py``).  A claim is refused when its nearest exemplar is
of a refused class, close enough (:data:`REFUSE_AT`), and nearer than the
nearest benign exemplar by :data:`MARGIN`.  The refusal names the class and
that exemplar -- our text, never the claim's.

It runs when the claim is embedded, in the background (``remember`` never
waits for the model): a claim refused by meaning is **retired** at once by
the broker (rule ``prefilter``, a ``memory.rejected`` event naming the
class and exemplar), never deleted.  Until then it is unverified and only
found by its words; ``context`` pushes trusted claims only.

The thresholds were calibrated on labelled sets kept apart from the
exemplars (``tests/memory/semantic_cases.py``, ``tests/memory/witness_pairs.py``);
docs/MEMORY.md has the figures and the command that measures them.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import TYPE_CHECKING, Final, Sequence, final

import attrs

from memory import probe
from memory.exemplars import EXEMPLARS, Exemplar
from memory.probe import Probe

if TYPE_CHECKING:
    import numpy as np

#: Refused classes (benign exemplars are the other label).
CLASSES: Final = ("injection", "directive", "conditional", "exfiltration")
#: Cosine to the nearest refused exemplar at or above which a claim may be refused ...
REFUSE_AT: Final = 0.86
#: ... if it is also this much nearer to it than to the nearest benign exemplar.
MARGIN: Final = 0.03
#: A blind witness's evidence must be at least this close to the claim (cosine, e5-small passages).
#: Calibrated on ``tests/memory/witness_pairs.py``: from 0.91 no non-matching pair there passes
#: (e5's cosines crowd together on one topic: "the cache warms in 90 s" and "deploys take ten
#: minutes" are 0.88 apart), and 0.92 keeps a margin (a different cause of the same symptom
#: reached 0.911 in the flood scenario).  12 of 18 restatements pass; a witness it misses is
#: ``unread``, never blind -- the cost of a miss is a vouch that does not count.
EVIDENCE_MEANING: Final = 0.92
#: Without an embedder: the share of the claim's content words the evidence repeats.
EVIDENCE_WORDS: Final = 0.5
#: A new claim this close to an earlier claim of another domain restates it (rediscovery or near-duplicate).
#: Stricter than a witness's evidence: nobody asked for this link, and it retires the new claim.
RESTATES_AT: Final = 0.94
#: Retrieval: meaning candidates below this cosine are not candidates at all.
RELEVANT_AT: Final = 0.80
#: The threshold a witness's evidence must reach, by how it was measured (a rediscovery: a restatement's).
EVIDENCE_AT: Final = {"meaning": EVIDENCE_MEANING, "words": EVIDENCE_WORDS, "rediscovery": RESTATES_AT}


def evidence_matches(similarity: float | None, method: str) -> bool:
    """What makes a witness never shown the claim *blind* rather than *unread*: its similarity, rounded
    to 4 places as its event records it, at or above its method's threshold (``verify`` applies it again)."""
    at = EVIDENCE_AT.get(method)
    return similarity is not None and at is not None and round(similarity, 4) >= at


@final
@attrs.frozen
class Refusal:
    """Why meaning refused a text: the class, the nearest exemplar (ours), how close."""

    rule: str
    exemplar: str
    exemplar_text: str
    similarity: float
    #: The trained probe's score, when it is the probe that refused (``memory.probe``).
    probe: float | None = None

    def detail(self) -> str:
        near = f"nearest labelled example {self.exemplar}: {self.exemplar_text!r}, similarity {self.similarity:.2f}"
        if self.probe is not None:
            return f"a classifier trained on labelled orders and facts scores it {self.probe:.2f} as an order to the reader; it reads as {self.rule.replace('_', ' ')} ({near})"
        return f"it reads as {self.rule.replace('_', ' ')} ({near})"


@final
class Exemplars:
    """The labelled exemplars as vectors of one model."""

    def __init__(self, items: Sequence[Exemplar], matrix: np.ndarray, trained: Probe | None = None) -> None:
        import numpy as np

        self.items = tuple(items)
        self.matrix = np.asarray(matrix, dtype=np.float32)
        self.refused = np.array([e.label != "benign" for e in self.items])
        self.trained = trained

    def judge(self, vector: np.ndarray) -> Refusal | None:
        """Refused when the nearest exemplar is an order close enough and nearer than every benign one,
        or when the trained probe scores the vector as an order (the refusal then names the nearest
        exemplar of a refused class, for its class)."""
        import numpy as np

        scores = self.matrix @ vector
        bad = np.where(self.refused, scores, -2.0)
        good = np.where(self.refused, -2.0, scores)
        best = int(np.argmax(bad))
        chosen = self.items[best]
        if scores[best] >= REFUSE_AT and scores[best] - float(good.max()) >= MARGIN:
            return Refusal(chosen.label, chosen.id, chosen.text, round(float(scores[best]), 4))
        if self.trained is not None and (score := self.trained.score(vector)) >= probe.REFUSE_AT:
            return Refusal(chosen.label, chosen.id, chosen.text, round(float(scores[best]), 4), round(score, 4))
        return None


_WORD: Final = re.compile(r"\w+")
_SMALL: Final = frozenset("a an the is are was were be to of in on at for and or it its this that with by as from".split())


def word_overlap(claim: str, evidence: str) -> float:
    """The share of the claim's content words that the evidence repeats (the no-embedder fallback)."""
    wanted = {w for w in _WORD.findall(claim.lower()) if w not in _SMALL}
    said = {w for w in _WORD.findall(evidence.lower())}
    return len(wanted & said) / len(wanted) if wanted else 0.0


def texts_digest(items: Sequence[Exemplar]) -> str:
    return hashlib.sha256("\n".join(f"{e.id}\t{e.label}\t{e.text}" for e in items).encode()).hexdigest()


def shipped_vectors(model: str) -> np.ndarray | None:
    """The exemplars' vectors shipped with conclave for ``model``, if they were made from these very texts."""
    import numpy as np

    from memory import exemplar_vectors

    if exemplar_vectors.MODEL != model or exemplar_vectors.TEXTS_SHA256 != texts_digest(EXEMPLARS):
        return None
    raw = base64.b64decode(exemplar_vectors.VECTORS)
    matrix = np.frombuffer(raw, dtype=np.float16).astype(np.float32).reshape(len(EXEMPLARS), -1)
    return matrix
