"""The same searches on a server with AGE and pg_textsearch installed and on one with neither: full
text is Postgres' tsvector on both (pg_textsearch 1.0.0 is refused), the graph AGE-mirrored or not."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pgmemory import Memory, SearchConfig
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder

CORPUS = [
    ("Ann", "I work at Lumen Labs."),
    ("Ann", "I love sailing and I live in Bergen."),
    ("Ben", "I have a dog named Biscuit."),
    ("Ben", "My favourite food is ramen."),
    ("Cal", "I study at Oxford University."),
    ("Cal", "I visited Lisbon in 2019."),
]
QUERIES = ["Lumen Labs", "sailing", "dog Biscuit", "ramen", "Oxford University", "Lisbon"]


async def top_hits(dsn: str, group: str) -> tuple[str, list[str], list[str]]:
    memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        for i, (actor, text) in enumerate(CORPUS):
            await memory.add_episode(group, text, actor=actor,
                                     reference_time=datetime(2024, 1, 1 + i, tzinfo=timezone.utc))
        async with memory.pool.acquire() as conn:
            mode = await conn.fetchval("SELECT pgmemory_internal.setting('text_search') #>> '{}'")
        cfg = SearchConfig(kinds=("facts", "episodes"), methods=("fulltext",))
        facts, episodes = [], []
        for q in QUERIES:
            r = await memory.search(q, group_ids=[group], config=cfg)
            facts.append(r.facts[0].fact if r.facts else None)
            episodes.append(r.episodes[0].content if r.episodes else None)
        bfs = await memory.search("Ann", group_ids=[group],
                                  config=SearchConfig(kinds=("facts",), methods=("bfs",), bfs_recent_episodes=6))
        facts.append(len(bfs.facts))
        return mode, facts, episodes
    finally:
        await memory.erase_group(group)
        await memory.close()


@pytest.fixture
def tsvector_dsn(server_without_age):
    return server_without_age.dsn


async def test_bm25_and_tsvector_agree_on_the_top_hit(db_dsn, tsvector_dsn, group):
    bm25_mode, bm25_facts, bm25_episodes = await top_hits(db_dsn, group)
    ts_mode, ts_facts, ts_episodes = await top_hits(tsvector_dsn, group)
    assert (bm25_mode, ts_mode) == ("tsvector", "tsvector")
    assert bm25_facts == ts_facts
    assert bm25_episodes == ts_episodes
    # every fact of the group known now, by BFS, including the visit to Lisbon in 2019: a past
    # one-off event stays in view (pgmemory.holds_at)
    assert None not in bm25_episodes and bm25_facts[-1] == 7
