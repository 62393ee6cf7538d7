"""Non-graph retrieval baselines over raw turns: Okapi BM25 and dense cosine.

They answer "would plain search over the transcript have found the evidence?",
the floor pgmemory's graph retrieval has to beat.  Both rank turn ids.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

from pgmemory.eval.readers import Turn

Embed = Callable[[list[str]], list[list[float]]]

# The NLTK English stopword list, plus contraction fragments the tokenizer leaves.
STOPWORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what
    which who whom this that these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for
    with about against between into through during before after above below to from up
    down in out on off over under again further then once here there when where why how
    all any both each few more most other some such no nor not only own same so than too
    very s t can will just don should now d ll m o re ve y ain aren couldn didn doesn
    hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
    """.split()
)
_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercase alphanumeric words minus English stopwords: the shared BM25 analyzer."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class BM25Index:
    """Okapi BM25 (k1=1.2, b=0.75) over turn texts, built once per conversation.

    IDF is ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (the Lucene form, never
    negative).  Repeated query words count once per occurrence.
    """

    k1 = 1.2
    b = 0.75

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._ids = [t.turn_id for t in turns]
        self._tfs = [Counter(tokenize(t.text)) for t in turns]
        self._lengths = [sum(tf.values()) for tf in self._tfs]
        self._avgdl = (sum(self._lengths) / len(turns)) if any(self._lengths) else 1.0
        df: Counter[str] = Counter(w for tf in self._tfs for w in tf)
        n = len(turns)
        self._idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}

    def scores(self, query: str) -> list[float]:
        """BM25 score of every turn for the query, in turn order."""
        terms = [w for w in tokenize(query) if w in self._idf]
        out = []
        for tf, length in zip(self._tfs, self._lengths):
            norm = self.k1 * (1 - self.b + self.b * length / self._avgdl)
            out.append(
                sum(self._idf[w] * tf[w] * (self.k1 + 1) / (tf[w] + norm) for w in terms if w in tf)
            )
        return out

    def search(self, query: str, k: int | None = None) -> list[str]:
        """Turn ids with a positive score, best first (ties keep turn order), at most k."""
        ranked = _rank(self._ids, self.scores(query))
        return _top([tid for tid, score in ranked if score > 0], k)


class DenseIndex:
    """Cosine similarity between an embedded query and turn texts embedded once up front."""

    def __init__(self, turns: Sequence[Turn], embed: Embed) -> None:
        self._ids = [t.turn_id for t in turns]
        self._embed = embed
        vectors = embed([t.text for t in turns]) if turns else []
        if len(vectors) != len(turns):
            raise ValueError(f"embed returned {len(vectors)} vectors for {len(turns)} texts")
        self._vectors = [_unit(v) for v in vectors]

    def scores(self, query: str) -> list[float]:
        """Cosine similarity of every turn to the query, in turn order."""
        q = _unit(self._embed([query])[0])
        return [sum(a * b for a, b in zip(q, v)) for v in self._vectors]

    def search(self, query: str, k: int | None = None) -> list[str]:
        """All turn ids, most similar first (ties keep turn order), at most k."""
        return _top([tid for tid, _ in _rank(self._ids, self.scores(query))], k)


def _rank(ids: list[str], scores: list[float]) -> list[tuple[str, float]]:
    return sorted(zip(ids, scores), key=lambda pair: -pair[1])


def _top(ids: list[str], k: int | None) -> list[str]:
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return ids if k is None else ids[:k]


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]
