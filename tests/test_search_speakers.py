"""Named speakers: episodes spoken by a person the query names rank before the others' words."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.search import rerank
from pgmemory.search.config import resolve_config
from pgmemory.search.types import EpisodeHit, FactHit

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)


def episode(name: str, actor: str | None, score: float) -> EpisodeHit:
    return EpisodeHit(id=uuid.uuid5(uuid.NAMESPACE_URL, name), group_id="g", ranks={}, score=score,
                      content=name, actor=actor)


def test_an_episode_of_a_named_speaker_counts_one_plus_weight_times():
    hits = [episode("bob1", "Bob", 0.10), episode("ann1", "Ann", 0.06), episode("anna", "Anna", 0.05),
            episode("nobody", None, 0.04), episode("ann_lee", "Ann Lee", 0.03)]
    ranked = rerank.named_speakers(hits, "What did ANN's sister say?", 1.0)
    assert [h.content for h in ranked] == ["ann1", "bob1", "anna", "nobody", "ann_lee"]
    assert ranked[0].score == pytest.approx(0.12) and ranked[0].scores["speaker"] == pytest.approx(0.06)
    assert "speaker" not in ranked[2].scores  # "Anna" is not "Ann": whole words only
    # A name of several words must appear whole, in order.
    two = [episode("bob", "Bob", 0.10), episode("ann_lee", "Ann Lee", 0.06)]
    assert [h.content for h in rerank.named_speakers(two, "what did lee paint", 1.0)] == ["bob", "ann_lee"]
    assert [h.content for h in rerank.named_speakers(two, "what did ann lee paint", 1.0)] == ["ann_lee", "bob"]
    # Both speakers named: both lifted alike, order kept; weight 0: nothing changes.
    both = rerank.named_speakers([episode("b", "Bob", 0.2), episode("a", "Ann", 0.1)], "Did Ann and Bob meet?", 1.0)
    assert [(h.content, h.score) for h in both] == [("b", pytest.approx(0.4)), ("a", pytest.approx(0.2))]
    off = rerank.named_speakers([episode("b", "Bob", 0.2), episode("a", "Ann", 0.1)], "Ann", 0.0)
    assert [h.content for h in off] == ["b", "a"]


def test_facts_are_not_speakers():
    fact = FactHit(id=uuid.uuid4(), group_id="g", ranks={}, score=0.5, version_id=1, relation="R", fact="Ann likes tea",
                   source_id=uuid.uuid4(), source="Ann", target_id=uuid.uuid4(), target="tea")
    assert rerank.named_speakers([fact], "what does Ann like", 1.0)[0].score == 0.5


@pytest.mark.parametrize("value", [-0.1, 10.5, "1"])
def test_speaker_weight_is_validated(value):
    with pytest.raises(InvalidInput, match="speaker_weight"):
        resolve_config("combined_hybrid_rrf", speaker_weight=value)


async def test_a_question_naming_a_speaker_ranks_their_turn_first(memory, group):
    # Bob's turn shares more words with the question (the speaker's name is in the full text too,
    # but Ann says much); the question is about Ann.
    batch = [{"group_id": group, "content": text, "actor": who, "reference_time": T0, "episode_id": f"s{i}"}
             for i, (who, text) in enumerate([("Bob", "My favourite hobby is pottery."),
                                               ("Ann", "Ceramics keep me busy on weekends."),
                                               ("Ann", "Nice weather today."), ("Bob", "Nice weather today.")])]
    await memory.add_episodes(batch)
    question = "What is Ann's favourite hobby?"
    plain_config = resolve_config("episode_hybrid_rrf", methods=("fulltext",))
    plain = await memory.search(question, group_ids=[group], config=plain_config)
    assert plain.episodes[0].actor == "Bob" and "hobby" in plain.episodes[0].content
    found = await memory.search(question, group_ids=[group], config=resolve_config(plain_config, speaker_weight=1.5))
    assert [h.actor for h in found.episodes] == ["Ann", "Ann", "Bob"]
    before = {h.id: h.score for h in plain.episodes}
    for h in found.episodes:
        assert h.score == pytest.approx(before[h.id] * (2.5 if h.actor == "Ann" else 1.0))
    # The default recipe names speakers too (weight chosen by cross-validation on LoCoMo).
    assert resolve_config(None).speaker_weight == 1.5
    default = await memory.search(question, group_ids=[group])
    assert default.episodes[0].actor == "Ann" and "speaker" in default.episodes[0].scores
