"""The session-proximity option of search: episodes of the strongest sessions rank higher."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.search import rerank
from pgmemory.search.config import resolve_config
from pgmemory.search.types import EpisodeHit, FactHit

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)


def episode(name: str, score: float, minutes: float) -> EpisodeHit:
    return EpisodeHit(id=uuid.uuid5(uuid.NAMESPACE_URL, name), group_id="g", ranks={}, score=score,
                      content=name, valid_at=T0 + timedelta(minutes=minutes))


def test_session_proximity_lifts_the_hits_of_the_strongest_session():
    # Session A (10:00-10:20, chained by gaps <= 30 min): 0.05 + 0.04 + 0.03 = 0.12, rank 1.
    # Session B (a day later): 0.08 alone, rank 2. Session C (two days later): 0.04, rank 3.
    hits = [episode("b1", 0.08, 1440), episode("a1", 0.05, 0), episode("a2", 0.04, 10),
            episode("c1", 0.04, 2880), episode("a3", 0.03, 20)]
    ranked = rerank.session_proximity(hits, weight=1.0, window_s=1800, k=10)
    bonus = {h.content: h.scores["session"] for h in ranked}
    assert bonus == {"a1": 1 / 11, "a2": 1 / 11, "a3": 1 / 11, "b1": 1 / 12, "c1": 1 / 13}
    # a3 (0.03 + 1/11 = 0.1209) now passes c1 (0.04 + 1/13 = 0.1169).
    assert [h.content for h in ranked] == ["b1", "a1", "a2", "a3", "c1"]
    assert ranked[1].score == pytest.approx(0.05 + 1 / 11)


def test_session_window_splits_sessions_and_weight_zero_is_off():
    hits = [episode("a1", 0.05, 0), episode("a2", 0.04, 45), episode("b1", 0.06, 1440)]
    # With a 30 min window, a1 and a2 (45 min apart) are separate sessions: b1's is the strongest.
    ranked = rerank.session_proximity(hits, weight=1.0, window_s=1800, k=10)
    assert [h.content for h in ranked] == ["b1", "a1", "a2"]
    assert ranked[1].scores["session"] == pytest.approx(1 / 12)
    hits = [episode("a1", 0.05, 0), episode("a2", 0.04, 45), episode("b1", 0.06, 1440)]
    wider = rerank.session_proximity(hits, weight=1.0, window_s=3600, k=10)
    assert {h.content: h.scores["session"] for h in wider} == {"a1": 1 / 11, "a2": 1 / 11, "b1": 1 / 12}
    untouched = [episode("x", 0.2, 0), episode("y", 0.1, 5000)]
    assert rerank.session_proximity(untouched, weight=0.0, window_s=1800) == untouched
    assert all("session" not in h.scores for h in untouched)
    facts = [FactHit(id=uuid.uuid4(), group_id="g", ranks={}, score=0.3)]
    assert rerank.session_proximity(facts, weight=1.0, window_s=1800) == facts


@pytest.mark.parametrize("overrides, message", [
    ({"session_weight": -0.5}, "session_weight must be between 0 and 10"),
    ({"session_window_s": -1}, "session_window_s must be between 0 and"),
])
def test_session_options_are_validated(overrides, message):
    with pytest.raises(InvalidInput, match=message):
        resolve_config("combined_hybrid_rrf", **overrides)


async def test_search_with_session_weight_scores_episode_hits_by_session(memory, group):
    turns = [("Ann", "I bought a red kayak for the lake.", T0),
             ("Bob", "Nice, do you paddle at dawn?", T0 + timedelta(minutes=1)),
             ("Ann", "Yes, the lake is calm at dawn.", T0 + timedelta(minutes=2)),
             ("Ann", "My cousin sold his kayak last winter.", T0 + timedelta(days=30))]
    await memory.add_episodes([{"group_id": group, "content": text, "actor": who, "reference_time": when,
                                "episode_id": f"t{i}"} for i, (who, text, when) in enumerate(turns)])
    plain = await memory.search("kayak", group_ids=[group], limit=10, config="episode_hybrid_rrf")
    config = resolve_config("episode_hybrid_rrf", session_weight=1.0)
    boosted = await memory.search("kayak", group_ids=[group], limit=10, config=config)
    assert {h.id for h in boosted.episodes} == {h.id for h in plain.episodes}
    assert all("session" not in h.scores for h in plain.episodes)
    by_id = {h.id: h for h in plain.episodes}
    for hit in boosted.episodes:
        assert hit.score == pytest.approx(by_id[hit.id].score + hit.scores["session"])
    first_session = [h for h in boosted.episodes if h.valid_at < T0 + timedelta(days=1)]
    later = [h for h in boosted.episodes if h.valid_at >= T0 + timedelta(days=1)]
    assert first_session and later
    assert min(h.scores["session"] for h in first_session) > max(h.scores["session"] for h in later)
