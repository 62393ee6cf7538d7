"""The database describes only the facts plain RRF can rank within the limit (option "fuse"), and a
search returns the same facts, in the same order, with the same scores as fusing every candidate."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pgmemory.search import rerank
from pgmemory.search.candidates import fetch_candidates, fetch_rows, options, SEARCH_ONE
from pgmemory.search.config import RECIPES, SearchFilters, resolve_config

PETS = ["cat", "dog", "parrot", "hamster", "goldfish", "rabbit", "turtle"]
DRINKS = ["green tea", "black tea", "coffee", "cocoa", "lemonade"]


async def _facts(memory, group: str) -> None:
    for i in range(42):
        person = f"Person{i}"
        if i % 3:
            await memory.add_fact(group, person, "LIKES", DRINKS[i % len(DRINKS)],
                                  f"{person} likes {DRINKS[i % len(DRINKS)]} in the morning {i % 4 * 'and the evening '}")
        else:
            await memory.add_fact(group, person, "OWNS", PETS[i % len(PETS)],
                                  f"{person} owns a {PETS[i % len(PETS)]} and likes tea")


def _expected(found, config, limit: int) -> list[tuple]:
    """The facts of fusing every candidate in Python, cut to the limit."""
    fused = rerank.rrf(found.facts, config.rrf_k, {**dict(config.method_weights), "prf": config.prf_weight})
    return [(h.version_id, h.score, h.fact) for h in fused[:limit]]


@pytest.mark.parametrize("recipe, weights", [
    ("edge_hybrid_rrf", None),
    ("combined_hybrid_rrf", None),
    ("edge_hybrid_rrf", (("fulltext", 0.5), ("cosine", 0.5))),  # equal weights: many exact ties
])
async def test_a_search_returns_the_facts_of_fusing_every_candidate(memory, group, recipe, weights):
    await _facts(memory, group)
    config = resolve_config(recipe, candidates=15, **({"method_weights": weights} if weights else {}))
    for query in ("who likes green tea", "does anyone own a dog or a cat", "tea in the evening"):
        embedding = (await memory.embedder.embed([query]))[0]
        async with memory.pool.acquire() as conn:
            every = await fetch_candidates(conn, [group], query, embedding,
                                           options(config, SearchFilters(), with_embeddings=False))
        assert len(every.facts) >= 15, query  # the lists full
        for limit in (1, 3, 10):
            found = await memory.search(query, group_ids=[group], limit=limit, config=config)
            assert [(h.version_id, h.score, h.fact) for h in found.facts] == _expected(every, config, limit)
            async with memory.pool.acquire() as conn:
                rows = await fetch_rows(conn, SEARCH_ONE, group, query, embedding,
                                        options(config, SearchFilters(), with_embeddings=False, limit=limit))
            described = [r for r in rows if r["kind"] == "fact"]
            assert limit <= len(described) < len(every.facts), (query, limit)


async def test_only_plain_rrf_without_keys_or_metadata_is_cut(memory, group):
    await _facts(memory, group)
    query = "who likes green tea"
    embedding = (await memory.embedder.embed([query]))[0]
    config = replace(RECIPES["edge_hybrid_rrf"], candidates=15)

    async def facts(cfg, filters=SearchFilters(), **extra) -> int:
        opts = {**options(cfg, filters, with_embeddings=False, limit=3), **extra}
        async with memory.pool.acquire() as conn:
            rows = await fetch_rows(conn, SEARCH_ONE, group, query, embedding, opts)
        return sum(r["kind"] == "fact" for r in rows)

    every = await facts(config, fuse=None)
    assert await facts(config) < every
    # Rerankers that reorder after RRF need every candidate; so do merges of groups (with_keys).
    assert await facts(replace(config, reranker="episode_mentions")) == every
    assert await facts(replace(config, reranker="mmr")) == every
    assert await facts(config, with_keys=True) == every


async def test_edge_recipe_fuses_twice_the_limit_per_method_unless_candidates_is_given(memory, group):
    """edge_hybrid_rrf asks each method for 2 x limit candidates (Graphiti's edge_search rule); a
    caller's explicit `candidates` wins; the default recipe keeps its fixed pool."""
    await _facts(memory, group)
    edge = RECIPES["edge_hybrid_rrf"]
    for limit in (1, 3, 7):
        assert options(edge, SearchFilters(), with_embeddings=False, limit=limit)["candidates"] == 2 * limit
        assert options(resolve_config("edge_hybrid_rrf", candidates=30), SearchFilters(), with_embeddings=False,
                       limit=limit)["candidates"] == 30
        assert options(RECIPES["combined_hybrid_rrf"], SearchFilters(), with_embeddings=False,
                       limit=limit)["candidates"] == 30
    for query in ("who likes green tea", "does anyone own a dog or a cat"):
        embedding = (await memory.embedder.embed([query]))[0]
        for limit in (3, 7):
            pool = replace(edge, candidates=2 * limit)
            async with memory.pool.acquire() as conn:
                lists = await fetch_candidates(conn, [group], query, embedding,
                                               options(pool, SearchFilters(), with_embeddings=False))
            wider = replace(edge, candidates=30)
            async with memory.pool.acquire() as conn:
                every = await fetch_candidates(conn, [group], query, embedding,
                                               options(wider, SearchFilters(), with_embeddings=False))
            assert len(lists.facts) < len(every.facts), (query, limit)  # the pool is smaller
            found = await memory.search(query, group_ids=[group], limit=limit, config="edge_hybrid_rrf")
            assert [(h.version_id, h.score, h.fact) for h in found.facts] == _expected(lists, edge, limit)
