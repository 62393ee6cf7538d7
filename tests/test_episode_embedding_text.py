"""An episode's vector is computed from its words and, for a message, the turn just before it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.extract.types import EpisodeInput
from pgmemory.ingest import embed_episode
from pgmemory.ingest.embed_episode import episode_embedding_text
from pgmemory.ingest.episode import episode_uuid
from pgmemory.search.config import resolve_config

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)


def turn(content: str, actor: str | None = "Ann", kind: str = "message", at: datetime = T0) -> EpisodeInput:
    return EpisodeInput(content, kind, at, actor)


def test_a_message_is_embedded_after_the_turn_before_it():
    before = [turn("Lunch?", "Bob", at=T0 - timedelta(days=1)), turn("How did the kids like the museum?", "Bob")]
    assert episode_embedding_text(turn("They loved it!"), before) == (
        "Bob: How did the kids like the museum?\nAnn: They loved it!")
    assert episode_embedding_text(turn("They loved it!"), []) == "Ann: They loved it!"
    assert episode_embedding_text(turn("No speaker", None), []) == "No speaker"


def test_only_a_message_of_the_same_conversation_is_taken():
    # another session (beyond the window), a document, or a document before: own text only
    assert episode_embedding_text(turn("Hi"), [turn("Old news", at=T0 - timedelta(hours=3))]) == "Ann: Hi"
    assert episode_embedding_text(turn("Report text", None, kind="text"), [turn("Hello")]) == "Report text"
    assert episode_embedding_text(turn("Hi"), [turn("{}", None, kind="json")]) == "Ann: Hi"


def test_the_episode_own_text_is_kept_whole_first():
    long_own = "x" * (embed_episode.EMBED_CHARS - 10)
    text = episode_embedding_text(turn(long_own), [turn("y" * 300, "Bob")])
    assert len(text) == embed_episode.EMBED_CHARS and text.endswith("Ann: " + long_own[:embed_episode.EMBED_CHARS - 5])
    text = episode_embedding_text(turn("short"), [turn("z" * 5000, "Bob")])
    assert text == "Bob: " + "z" * (embed_episode.PREVIOUS_CHARS - 5) + "\nAnn: short"


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
    found = await memory.search("kids dinosaur museum", group_ids=[group], limit=8, config=cosine_only)
    assert {e.id for e in found.episodes[:2]} == {episode_uuid(group, "s0"), episode_uuid(group, "s1")}
