"""The offline extractor as a pipeline Extractor: rule-based extraction and rule-based decisions.

Entity resolution: a candidate is the same entity when one name is the other
plus more words ("Alice" / "Alice Smith"); the fuller name is kept. Facts: a
duplicate is a believed fact with the same direction and relation type (a
negated fact also denies one of the same polarity: "no longer likes" ends
"loves"); what a fact ends is in ``offline.exclusivity`` (a new employer, a new
diet, the opposite preference, ...).
"""
from __future__ import annotations

from pgmemory.extract.offline import OfflineExtractor
from pgmemory.extract.offline.exclusivity import ends, same_statement
from pgmemory.extract.types import EntityDecision, EntityQuestion, EpisodeInput, Extraction, FactDecision, FactQuestion


class RuleExtractor:
    """Deterministic, no-LLM Extractor; its calls cost nothing and are not counted."""

    decides_locally = True  # its decisions may run under the group lock (no LLM wait)

    def __init__(self) -> None:
        self._rules = OfflineExtractor()

    async def extract(self, episode: EpisodeInput, previous: list[EpisodeInput], usage, *,
                      entity_types=None, edge_types=None) -> Extraction:
        """Rule-based entities and facts of one episode (custom types are not used offline)."""
        return self._rules.extract(episode, previous)

    async def resolve_entities(self, episode: EpisodeInput, previous: list[EpisodeInput],
                               questions: list[EntityQuestion], usage) -> list[EntityDecision]:
        """Same entity when one name's words start the other's; keep the fuller name."""
        decisions = []
        for q in questions:
            words = q.entity.name.lower().split()
            match = next((c for c in q.candidates if _extends(words, c.name.lower().split())), None)
            if match is None:
                decisions.append(EntityDecision(q.index, None, q.entity.name))
            else:
                fuller = max(match.name, q.entity.name, key=lambda n: (len(n.split()), len(n)))
                decisions.append(EntityDecision(q.index, match.id, fuller))
        return decisions

    async def judge_facts(self, episode: EpisodeInput, questions: list[FactQuestion],
                          usage) -> list[FactDecision]:
        """Duplicates and contradictions by the relation lexicon (see ``offline.exclusivity``)."""
        return [decide(q) for q in questions]


def decide(q: FactQuestion) -> FactDecision:
    """The offline verdict on one new fact: the fact it repeats (or denies) and those it ends."""
    f = q.fact
    dup = next((c for c in q.duplicates if same_statement(f, c)), None)
    contradicts = tuple(c.id for c in q.contradictions if ends(f, c))
    return FactDecision(q.index, dup.id if dup else None, contradicts)


def _extends(a: list[str], b: list[str]) -> bool:
    """True when the shorter word list is a prefix of the longer one (and not empty)."""
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return bool(short) and long_[:len(short)] == short
