"""OfflineExtractor: split an episode into sentences and run the rules over each."""
from __future__ import annotations

from pgmemory.extract.dates import find_times, to_utc, zone_of
from pgmemory.extract.offline.facts import (
    apply_rule,
    carry_transition_times,
    favourites,
    kinship,
    possessions,
    rather,
    role_at,
    workplace,
)
from pgmemory.extract.offline.json_records import extract_json
from pgmemory.extract.offline.pairs import pair_statements
from pgmemory.extract.offline.patterns import RULES
from pgmemory.extract.offline.phrases import add_proper_nouns
from pgmemory.extract.offline.state import Ctx, Sentence
from pgmemory.extract.offline.speakers import segments
from pgmemory.extract.offline.subjects import lead_subject
from pgmemory.extract.offline.text import _sentences, clauses, is_casual, normalise
from pgmemory.extract.roles import is_assistant
from pgmemory.extract.types import EpisodeInput, Extraction



class OfflineExtractor:
    """Rule-based, deterministic extraction of entities and facts (see the package docstring)."""

    def extract(self, episode: EpisodeInput, previous: list[EpisodeInput]) -> Extraction:
        """Extract from ``episode`` alone; ``previous`` is accepted for the interface but unused."""
        if episode.kind == "json":
            return extract_json(episode.content, to_utc(episode.reference_time))
        # (in the speaker's own UTC offset: "yesterday" is the day before the speaker's date)
        ctx = Ctx(None, episode.reference_time.astimezone(zone_of(episode.reference_time)))
        sentences: list[Sentence] = []
        base = 0
        for speaker, part in segments(episode.content, episode.actor):
            ctx.speaker = None if is_assistant(speaker) else speaker
            ctx.antecedent = None
            if ctx.speaker:
                ctx.registry.add(ctx.speaker, "Person", base - 1)
            text, casual = normalise(part), is_casual(part)
            sentences += [_extract_sentence(sentence, base + offset, casual, ctx)
                          for offset, sentence in _sentences(text)]
            base += len(text) + 1
        add_proper_nouns(sentences, ctx)
        return Extraction(entities=ctx.registry.ordered(), facts=ctx.facts)


def _extract_sentence(text: str, offset: int, casual: bool, ctx: Ctx) -> Sentence:
    times = find_times(text, ctx.reference)
    masked = list(text)
    for t in times:
        masked[t.start:t.end] = " " * (t.end - t.start)
    s = Sentence(text, offset, times, clauses(text), "".join(masked), casual=casual)
    s.leads = [lead_subject(s, start, end, ctx) for start, end in s.clauses]
    if text.rstrip().endswith("?"):
        return s
    first_fact = len(ctx.facts)
    kinship(s, ctx)
    for rule in RULES:
        for m in rule.pattern.finditer(text):
            apply_rule(rule, m, s, ctx)
    role_at(s, ctx)
    possessions(s, ctx)
    favourites(s, ctx)
    pair_statements(s, ctx)
    rather(s, ctx)
    workplace(s, ctx)
    carry_transition_times(first_fact, ctx)
    return s
