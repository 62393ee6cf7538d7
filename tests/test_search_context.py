"""The context string fills whole lines greedily in priority order, never beyond max_chars."""
from __future__ import annotations

from datetime import datetime, timezone

from pgmemory.search import context
from pgmemory.search.types import EntityHit, EpisodeHit, FactHit, SearchResults


def greedy_by_rendering(sections, max_chars, preamble, headers):
    """The reference: render the whole text after every line and drop the line if it overflows."""
    chosen = {s.tag: [] for s in sections}
    empty_shown = set()

    def text():
        return context._render(preamble, [(s.tag, chosen[s.tag]) for s in sections
                                          if chosen[s.tag] or s.tag in empty_shown], headers)
    for s in sections:
        if s.always:
            empty_shown.add(s.tag)
            if len(text()) > max_chars:
                empty_shown.discard(s.tag)
        for line in s.lines:
            chosen[s.tag].append(line)
            if len(text()) > max_chars:
                chosen[s.tag].pop()
    return text(), tuple(len(chosen[s.tag]) for s in sections)


def test_fill_keeps_exactly_the_lines_the_rendered_text_allows():
    when = datetime(2020, 1, 1, tzinfo=timezone.utc)
    results = SearchResults(
        facts=[FactHit(id=None, group_id="g", ranks={}, fact=f"Fact {i} " + "x" * (i * 7 % 60), valid_from=when)
               for i in range(15)],
        entities=[EntityHit(id=None, group_id="g", ranks={}, name=f"E{i}", summary="s" * (i * 11 % 40))
                  for i in range(15)],
        episodes=[EpisodeHit(id=None, group_id="g", ranks={}, content="hello " * i, actor="Ann", valid_at=when)
                  for i in range(8)])
    sections = context._sections(results, communities=True, episodes=True)
    for headers, preamble in (({s.tag: s.header for s in sections}, context.PREAMBLE), ({}, context.SHORT_PREAMBLE)):
        for n in range(0, 4000, 17):
            got = context._fill(sections, n, preamble, headers)
            assert got == greedy_by_rendering(sections, n, preamble, headers), n
            assert len(got[0]) <= n


def _results(facts, entities):
    when = datetime(2023, 5, 20, tzinfo=timezone.utc)
    return SearchResults(
        facts=[FactHit(id=None, group_id="g", ranks={}, fact=f, valid_from=when) for f in facts],
        entities=[EntityHit(id=None, group_id="g", ranks={}, name=n, summary=s) for n, s in entities])


def test_entity_summaries_leave_out_the_facts_shown():
    results = _results(
        ["Melanie ran a charity race.", "Melanie loves painting."],
        [("charity race", "Melanie ran a charity race (until 2023-05-21)."),
         ("Melanie", "Melanie loves painting. Melanie has two kids."),
         ("Caroline", "Caroline loves creating art."),
         ("Oscar", "")])
    text = context.build_context(results)
    assert "- Melanie: Melanie has two kids." in text
    assert "- Caroline: Caroline loves creating art." in text
    assert "- Oscar" in text  # no summary: listed by name, as before
    assert "charity race:" not in text  # all it says is a fact shown above
    assert text.count("Melanie loves painting") == 1 and text.count("ran a charity race") == 1



def test_an_entity_leaves_out_only_the_sentences_of_facts_shown():
    """A fact too long for the budget is skipped while a shorter one after it fits: the entity
    summary then leaves out the sentence of the fact shown, not of the one skipped (the facts taken
    as shown were the first n: the skipped fact's sentence was dropped from the summary, said
    nowhere, and the shown fact's was said twice)."""
    long_fact = "Melanie ran a charity race " + "through the old town and along the river " * 3 + "on a sunny day."
    results = _results([long_fact, "Melanie loves painting."],
                       [("Melanie", f"{long_fact} Melanie loves painting.")])
    for max_chars in range(200, 900, 5):
        text = context.build_context(results, max_chars=max_chars)
        facts = text.split("</FACTS>")[0] if "</FACTS>" in text else ""
        [entity] = [line for line in text.splitlines() if line.startswith("- Melanie:")] or [None]
        assert text.count("Melanie loves painting") <= 1, max_chars
        if entity is not None:
            for sentence in (long_fact, "Melanie loves painting."):
                assert (sentence.rstrip(".") in entity) != (f"- {sentence} (" in facts), (max_chars, text)
