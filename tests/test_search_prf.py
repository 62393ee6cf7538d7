"""Lexical pseudo-relevance feedback: words of the best episode hits find the evidence that
shares no word with the query."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import episode_uuid
from pgmemory.search.config import resolve_config

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)

# "How do you unwind?" shares only "unwind" with the first turn, which says it with "running"
# and "headspace"; so does a turn of another day that shares no word with the question.
TURNS = [("Ann", "I unwind by running along the river, great for my headspace."),
         ("Bob", "I have a new bike."),
         ("Bob", "The river was cold today."),
         ("Ann", "Been running farther lately, it clears my headspace."),
         ("Bob", "Lunch at noon?"),
         ("Bob", "Pottery class was fun."),
         ("Bob", "My bike has a flat tyre.")]
QUESTION = "How do you unwind?"


async def _add(memory, group: str) -> None:
    await memory.add_episodes([
        {"group_id": group, "content": text, "actor": who, "reference_time": T0 + timedelta(days=i),
         "episode_id": f"t{i}"} for i, (who, text) in enumerate(TURNS)])


async def test_feedback_words_find_a_turn_that_shares_no_word_with_the_question(memory, group):
    await _add(memory, group)
    evidence, hit = episode_uuid(group, "t3"), episode_uuid(group, "t0")
    plain = resolve_config("episode_hybrid_rrf", methods=("fulltext",))
    found = await memory.search(QUESTION, group_ids=[group], config=plain)
    assert evidence not in {h.id for h in found.episodes}
    assert found.episodes[0].id == hit and "prf" not in found.episodes[0].ranks

    config = resolve_config(plain, prf_weight=0.5, prf_docs=1)
    found = await memory.search(QUESTION, group_ids=[group], config=config)
    by_id = {h.id: h for h in found.episodes}
    assert found.episodes[0].id == hit
    # The feedback turn's words held by two turns or more ("run", "headspac", "river", "ann";
    # "unwind" is the question's own) rank the feedback turn, then the evidence, then t2 (river).
    assert by_id[hit].ranks == {"fulltext": 1, "prf": 1}
    assert by_id[evidence].ranks == {"prf": 2}
    assert by_id[episode_uuid(group, "t2")].ranks == {"prf": 3}
    assert by_id[evidence].score == pytest.approx(0.5 / (config.rrf_k + 2))
    # The words of Bob's other turns are not in the feedback turn: never found.
    assert {episode_uuid(group, f"t{i}") for i in (1, 4, 5, 6)}.isdisjoint(by_id)


async def test_feedback_of_a_search_of_several_groups_reads_each_groups_words(memory, group):
    await _add(memory, group)
    other = f"{group}-b"
    await memory.add_episodes([
        {"group_id": other, "content": text, "actor": "Cy", "reference_time": T0, "episode_id": f"o{i}"}
        for i, text in enumerate(["I unwind with chess puzzles.", "Chess club meets on Fridays.",
                                  "Puzzles are on the table."])])
    config = resolve_config("episode_hybrid_rrf", methods=("fulltext",), prf_weight=0.5, prf_docs=2)
    found = await memory.search(QUESTION, group_ids=[group, other], config=config)
    prf = {h.id for h in found.episodes if "prf" in h.ranks}
    assert {episode_uuid(group, "t3"), episode_uuid(other, "o1"), episode_uuid(other, "o2")} <= prf
    assert all(h.group_id in (group, other) for h in found.episodes)


async def test_without_full_text_there_is_no_feedback(memory, group):
    await _add(memory, group)
    config = resolve_config("episode_hybrid_rrf", methods=("cosine",), prf_weight=0.5)
    found = await memory.search(QUESTION, group_ids=[group], config=config)
    assert found.episodes and all("prf" not in h.ranks for h in found.episodes)


@pytest.mark.parametrize("overrides, message", [
    ({"prf_weight": -0.1}, "prf_weight must be between 0 and 10"),
    ({"prf_weight": "1"}, "prf_weight"),
    ({"prf_docs": 0}, "prf_docs must be between 1 and 100"),
    ({"prf_terms": 51}, "prf_terms must be between 1 and 50"),
])
def test_feedback_options_are_validated(overrides, message):
    with pytest.raises(InvalidInput, match=message):
        resolve_config("combined_hybrid_rrf", **overrides)


async def test_the_default_recipe_asks_feedback_words_only_when_told(memory, group):
    await _add(memory, group)
    # off by default: no held-out gain on the blended episode vectors (pgmemory/eval/README.md)
    found = await memory.search(QUESTION, group_ids=[group])
    assert all("prf" not in h.ranks for h in found.episodes)
    found = await memory.search(QUESTION, group_ids=[group], config=resolve_config(None, prf_weight=0.25))
    assert {h.id: h.ranks.get("prf") for h in found.episodes}[episode_uuid(group, "t3")] == 2
