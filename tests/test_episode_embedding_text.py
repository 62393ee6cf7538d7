"""An episode's vector is computed from its words and, for a message, the turn just before it."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.extract.types import EpisodeInput
from pgmemory.ingest import embed_episode
from pgmemory.ingest.embed_episode import blend, episode_embedding_texts
from pgmemory.ingest.episode import episode_uuid
from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embed_cache import EmbeddingCache, embed_reusing
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.search.config import resolve_config

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)


def turn(content: str, actor: str | None = "Ann", kind: str = "message", at: datetime = T0) -> EpisodeInput:
    return EpisodeInput(content, kind, at, actor)


def test_a_message_is_embedded_with_the_turn_before_it():
    before = [turn("Lunch?", "Bob", at=T0 - timedelta(days=1)), turn("How did the kids like the museum?", "Bob")]
    assert episode_embedding_texts(turn("They loved it!"), before) == [
        "Ann: They loved it!", "Bob: How did the kids like the museum?"]
    assert episode_embedding_texts(turn("They loved it!"), []) == ["Ann: They loved it!"]
    assert episode_embedding_texts(turn("No speaker", None), []) == ["No speaker"]


def test_only_a_message_of_the_same_conversation_is_taken():
    # another session (beyond the window), a document, or a document before: own text only
    assert episode_embedding_texts(turn("Hi"), [turn("Old news", at=T0 - timedelta(hours=3))]) == ["Ann: Hi"]
    assert episode_embedding_texts(turn("Report text", None, kind="text"), [turn("Hello")]) == ["Report text"]
    assert episode_embedding_texts(turn("Hi"), [turn("{}", None, kind="json")]) == ["Ann: Hi"]


def test_each_text_is_the_turn_own_text_as_its_own_ingestion_embedded_it():
    # the turn before is the same string its own episode was embedded from: the cache serves it
    long_own = "x" * (embed_episode.EMBED_CHARS + 10)
    before = turn(long_own, "Bob")
    texts = episode_embedding_texts(turn("short"), [before])
    assert texts == ["Ann: short", episode_embedding_texts(before, [])[0]]
    assert len(texts[1]) == embed_episode.EMBED_CHARS


def test_the_vector_is_the_own_vector_plus_the_weighted_turn_before_normalised():
    own, prev = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    w = embed_episode.PREVIOUS_WEIGHT
    mixed = blend([own, prev])
    assert mixed == pytest.approx([1 / math.hypot(1, w), w / math.hypot(1, w), 0.0])
    assert blend([own]) == own


class CountingCachedHash(HashEmbedder):
    """The hash embedder behind the same cache the local and OpenAI embedders use; counts what it computes."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = EmbeddingCache()
        self.computed: list[str] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await embed_reusing(list(texts), self.cache, self._compute)

    async def _compute(self, texts: list[str]) -> list[list[float]]:
        self.computed += texts
        return [self.embed_one(t) for t in texts]


async def test_the_turn_before_costs_no_second_encode(db_dsn, group):
    # ingested in order, the turn before was embedded by its own episode: the cache serves it,
    # and the stored vector is the blend of the two own-text vectors
    embedder = CountingCachedHash()
    turns = [("Bob", "How was the dinosaur museum?"), ("Ann", "They loved it!")]
    async with await Memory.open(db_dsn, embedder=embedder, extractor=RuleExtractor()) as memory:
        await memory.add_episodes([{"group_id": group, "content": text, "actor": who, "reference_time": T0,
                                    "episode_id": f"t{i}"} for i, (who, text) in enumerate(turns)])
        stored = await memory.pool.fetchval("SELECT embedding FROM pgmemory.episodes WHERE group_id = $1 AND id = $2",
                                            group, episode_uuid(group, "t1"))
    assert embedder.computed.count("Bob: How was the dinosaur museum?") == 1
    assert embedder.computed.count("Ann: They loved it!") == 1
    expected = blend([embedder.embed_one("Ann: They loved it!"), embedder.embed_one("Bob: How was the dinosaur museum?")])
    assert stored.to_list() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("queued", [False, True])
async def test_a_reply_is_found_by_what_it_answers(memory, group, queued):
    # The answer shares no word with the question; the turn it answers does. Queued, the whole
    # session (one time) is stored before any turn is processed: the turn before is still the
    # one that arrived before, not a later one.
    session = [("Bob", "How did the kids like the dinosaur museum?"), ("Ann", "They were stoked, a great day."),
               ("Bob", "Shall we cook pasta tonight?"), ("Ann", "Sure, I will bring wine."),
               ("Bob", "Any plans for the holidays?"), ("Ann", "Maybe a trip to the coast."),
               ("Bob", "Did you fix the car?"), ("Ann", "Yes, it runs again.")]
    batch = [{"group_id": group, "content": text, "actor": who, "reference_time": T0, "episode_id": f"s{i}"}
             for i, (who, text) in enumerate(session)]
    if queued:
        for item in batch:
            await memory.enqueue_episode(**item)
        await memory.worker(drain=True, communities=False).run()
    else:
        await memory.add_episodes(batch)
    cosine_only = resolve_config("episode_hybrid_rrf", methods=("cosine",))
    found = await memory.search("did the kids like the dinosaur museum", group_ids=[group], limit=8, config=cosine_only)
    assert {e.id for e in found.episodes[:2]} == {episode_uuid(group, "s0"), episode_uuid(group, "s1")}
