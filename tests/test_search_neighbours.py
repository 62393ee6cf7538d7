"""Neighbouring turns: the turns just before and after a hit join the candidates of a search."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import episode_uuid
from pgmemory.search import rerank
from pgmemory.search.config import resolve_config
from pgmemory.search.types import EpisodeHit

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)


def episode(name: str, score: float, near: dict[str, int] | None = None) -> EpisodeHit:
    return EpisodeHit(id=uuid.uuid5(uuid.NAMESPACE_URL, name), group_id="g", ranks={}, score=score, content=name,
                      neighbour_of={uuid.uuid5(uuid.NAMESPACE_URL, n): d for n, d in (near or {}).items()})


def test_a_neighbour_gains_weight_times_its_best_hit_over_the_distance():
    hits = [episode("hit1", 0.10), episode("hit2", 0.06), episode("other", 0.05),
            episode("next1", 0.0, {"hit1": 1, "hit2": 1}), episode("next2", 0.0, {"hit2": 1}),
            episode("two_away", 0.01, {"hit1": 2, "hit2": 1})]
    ranked = rerank.neighbours(hits, 0.5)
    assert [h.content for h in ranked] == ["hit1", "hit2", "next1", "other", "two_away", "next2"]
    gains = {h.content: h.scores.get("neighbour") for h in ranked}
    assert gains == {"hit1": None, "hit2": None, "other": None, "next1": 0.05, "next2": 0.03,
                     "two_away": pytest.approx(0.03)}  # max(0.5 x 0.10 / 2, 0.5 x 0.06 / 1)
    assert ranked[4].score == pytest.approx(0.04)
    unchanged = [episode("a", 0.2), episode("b", 0.0, {"a": 1})]
    assert [h.score for h in rerank.neighbours(unchanged, 0.0)] == [0.2, 0.0]


@pytest.mark.parametrize("overrides, message", [
    ({"neighbours": -1}, "neighbours must be between 0 and 100"),
    ({"neighbours": 101}, "neighbours must be between 0 and 100"),
    ({"neighbour_weight": 11}, "neighbour_weight must be between 0 and 10"),
    ({"neighbour_span": 0}, "neighbour_span must be between 1 and 10"),
])
def test_neighbour_options_are_validated(overrides, message):
    with pytest.raises(InvalidInput, match=message):
        resolve_config("combined_hybrid_rrf", **overrides)


async def test_search_adds_the_turns_before_and_after_a_hit(memory, group):
    # One chat session stamped with one time (as LoCoMo stamps turns): arrival order decides
    # which turn is next. The answer ("a puppy named Biscuit") shares no word with the query.
    session = [("Bob", "How was your weekend?"), ("Ann", "I adopted a pet last weekend."),
               ("Ann", "A puppy named Biscuit, he is tiny."), ("Bob", "Cute!")]
    batch = [{"group_id": group, "content": text, "actor": who, "reference_time": T0, "episode_id": f"s{i}"}
             for i, (who, text) in enumerate(session)]
    batch.append({"group_id": group, "content": "Lunch was great.", "actor": "Ann",
                  "reference_time": T0 + timedelta(days=1), "episode_id": "later"})
    await memory.add_episodes(batch)
    await memory.add_episode(f"{group}-other", "Another group adopted a cat.", actor="Ann",
                             reference_time=T0, episode_id="s9")
    ids = {name: episode_uuid(group, name) for name in ("s0", "s1", "s2", "s3", "later")}
    base = resolve_config("episode_hybrid_rrf", methods=("fulltext",))

    plain = await memory.search("adopted pet", group_ids=[group], config=base)
    assert [h.id for h in plain.episodes] == [ids["s1"]]

    config = resolve_config("episode_hybrid_rrf", methods=("fulltext",), neighbours=5, neighbour_weight=0.5)
    found = await memory.search("adopted pet", group_ids=[group], config=config)
    by_id = {h.id: h for h in found.episodes}
    assert [h.id for h in found.episodes][0] == ids["s1"]
    assert set(by_id) == {ids["s0"], ids["s1"], ids["s2"]}  # not s3 (two away), not the next day's
    for name in ("s0", "s2"):
        assert by_id[ids[name]].ranks == {} and by_id[ids[name]].neighbour_of == {ids["s1"]: 1}
        assert by_id[ids[name]].score == pytest.approx(0.5 * by_id[ids["s1"]].score)
    # Two turns either way: s3 joins, two turns after s1, at half a next turn's gain.
    two = await memory.search("adopted pet", group_ids=[group], config=resolve_config(config, neighbour_span=2))
    by_id = {h.id: h for h in two.episodes}
    assert set(by_id) == {ids["s0"], ids["s1"], ids["s2"], ids["s3"]}
    assert by_id[ids["s3"]].neighbour_of == {ids["s1"]: 2}
    assert by_id[ids["s3"]].score == pytest.approx(0.5 * by_id[ids["s1"]].score / 2)

    # The window bounds a neighbour: a day apart is another session, even when adjacent.
    hit_later = await memory.search("lunch", group_ids=[group], config=config)
    assert [h.id for h in hit_later.episodes] == [ids["later"]]
    wide = resolve_config(config, session_window_s=2 * 86400)
    hit_wide = await memory.search("lunch", group_ids=[group], config=wide)
    assert [h.id for h in hit_wide.episodes] == [ids["later"], ids["s3"]]
