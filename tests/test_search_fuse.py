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
            # On one connection with custom plans: the approximate vector index may find other
            # candidates under another plan (the facts' cosine statement), which is not what is compared.
            _same(*await _fused_and_every(memory, [group], query, config, limit), query, limit)
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


# --- Episodes and entities (the default recipe): RRF, the neighbour bonus, the speaker factor and
# described-first fused in SQL bound what is described; the search returns the same as fusing all.

SPEAKERS = ["Zoë Martin", "Jürgen", "SAM", "maya lee", "Strauß", "Ollie_B"]
TOPICS = ["hiking in the hills", "green tea every morning", "my dog Pepper", "the new job at Northwind",
          "a trip to Boston", "painting with watercolours", "the book club", "coffee with Ana"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
QUESTIONS = ["What did ZOË say about hiking?", "what does jürgen think of green tea", "Did Sam and Maya Lee "
             "talk about the book club?", "zoe martin trip to boston", "STRAUSS dog Pepper", "ollie_b coffee",
             "who went hiking", "zoë MARTIN's job at Northwind", "tea", "Jürgen Jürgen watercolours painting"]


async def _conversation(memory, group: str) -> None:
    """Seven sessions of eight turns between two of SPEAKERS (non-ASCII, mixed-case, multi-word and
    underscore names), a minute apart, on few topics: many hits, neighbours, speaker matches and ties
    of the fused scores. No two turns are the same text: equal vectors would tie in the cosine list,
    whose order among equal distances may change with the plan."""
    from datetime import datetime, timedelta, timezone

    episodes = []
    for s in range(7):
        pair = (SPEAKERS[s % len(SPEAKERS)], SPEAKERS[(s * 5 + 1) % len(SPEAKERS)])
        start = datetime(2024, 1, 1 + s, 9, tzinfo=timezone.utc)
        for t in range(8):
            topic = TOPICS[(s * 3 + t * (s % 3 + 1)) % len(TOPICS)]
            episodes.append({"group_id": group, "actor": pair[t % 2], "reference_time": start + timedelta(minutes=t),
                             "content": f"{'I love' if t % 3 else 'We talked about'} {topic}, {ORDINALS[t]} {s}."})
    results = await memory.add_episodes(episodes, concurrency=1)
    assert all(getattr(r, "status", None) == "done" for r in results)


async def _fused_and_every(memory, groups: list[str], query: str, config, limit: int) -> tuple[dict, dict]:
    """Each kind's best `limit` (id, score) after Memory.search's reranking, of the candidates of the
    call told the limit and the query (fused in SQL) and of every candidate. One connection with
    custom plans, the tables analysed first: the approximate vector index may find other candidates
    under another plan, which is not what is compared here."""
    from pgmemory.search.engine import _rerank

    embedding = (await memory.embedder.embed([query]))[0]
    out = []
    async with memory.pool.acquire() as conn:
        await conn.execute("ANALYZE pgmemory.episodes; ANALYZE pgmemory.entities; ANALYZE pgmemory.facts; "
                           "SET plan_cache_mode = force_custom_plan")
        try:
            for opts in (options(config, SearchFilters(), with_embeddings=False, limit=limit, query=query),
                         options(config, SearchFilters(), with_embeddings=False)):
                found = await fetch_candidates(conn, groups, query, embedding, opts)
                out.append({kind: [(h.id, h.score) for h in rerank.described_first(
                                await _rerank(getattr(found, kind), query, embedding, limit, config, None))[:limit]]
                            for kind in ("facts", "entities", "episodes")})
        finally:
            await conn.execute("RESET plan_cache_mode")
    return out[0], out[1]


def _same(got: dict[str, list], want: dict[str, list], *context) -> None:
    """The same ids in the same order, scores within 1e-9, for every kind."""
    for kind in want:
        assert [i for i, _ in got[kind]] == [i for i, _ in want[kind]], (kind, *context)
        assert all(abs(a - b) <= 1e-9 for (_, a), (_, b) in zip(got[kind], want[kind])), (kind, *context)


async def _described(memory, group: str, query: str, opts) -> dict[str, int]:
    embedding = (await memory.embedder.embed([query]))[0]
    async with memory.pool.acquire() as conn:
        rows = await fetch_rows(conn, SEARCH_ONE, group, query, embedding, opts)
    return {kind: sum(r["kind"] == kind for r in rows) for kind in ("entity", "episode")}


async def test_the_default_recipe_returns_what_fusing_every_candidate_returns(memory, group):
    await _conversation(memory, group)
    config = resolve_config("combined_hybrid_rrf")
    boosted = 0
    for query in QUESTIONS:
        for limit in (1, 3, 10):
            fused, every = await _fused_and_every(memory, [group], query, config, limit)
            _same(fused, every, query, limit)
            found = await memory.search(query, group_ids=[group], limit=limit, config=config)
            boosted += sum("speaker" in h.scores for h in found.episodes)
        fused = await _described(memory, group, query, options(config, SearchFilters(), with_embeddings=False,
                                                                limit=3, query=query))
        every = await _described(memory, group, query, options(config, SearchFilters(), with_embeddings=False))
        assert fused["episode"] < every["episode"], query  # only what can be among the best 3 is described
        assert fused["entity"] <= every["entity"], query
    assert boosted  # named speakers (non-ASCII and mixed-case ones among them) were lifted


async def test_episode_fusion_follows_the_reranking_settings(memory, group):
    """Without the speaker factor or neighbours, with a wider span and weight, under session
    proximity (episodes then not cut), with PRF and with equal method weights (more ties)."""
    await _conversation(memory, group)
    for overrides in ({"speaker_weight": 0.0}, {"neighbours": 0}, {"neighbour_span": 2, "neighbour_weight": 2.0},
                      {"session_weight": 1.0}, {"prf_weight": 0.25},
                      {"method_weights": (("fulltext", 0.5), ("cosine", 0.5))}):
        config = resolve_config("combined_hybrid_rrf", **overrides)
        for query in QUESTIONS[:4]:
            for limit in (2, 10):
                fused, every = await _fused_and_every(memory, [group], query, config, limit)
                _same(fused, every, overrides, query, limit)


async def test_several_groups_on_one_node_fuse_across_them(memory):
    groups = [f"g-fuse-{i}-{__import__('uuid').uuid4().hex[:6]}" for i in range(2)]
    for g in groups:
        await _conversation(memory, g)
    config = resolve_config("combined_hybrid_rrf")
    for query in QUESTIONS[:5]:
        _same(*await _fused_and_every(memory, groups, query, config, 5))


async def test_sql_decides_a_named_speaker_as_python_does_or_leaves_it_open(memory):
    """names_speaker: True/False exactly as rerank.named_speakers decides for ASCII names; NULL (the
    factor is then an upper bound and Python decides) for a name with any non-ASCII character."""
    actors = ["Zoë Martin", "Jürgen", "SAM", "maya lee", "Strauß", "Ollie_B", "Sam-Lee", "O'Brien", "a_b c",
              "!!!", "", "K", "Ana"]
    queries = ["ZOË MARTIN?", "zoe martin", "jürgen", "sam", "Maya  Lee!", "strauss", "STRASSE", "ollie_b",
               "ollie b", "sam lee", "o brien", "A_B C", "ana's", "\u212a", "maya", "hi"]
    async with memory.pool.acquire() as conn:
        for actor in actors:
            for query in queries:
                words = " ".join(rerank.casefolded_words(query))
                named = await conn.fetchval("SELECT pgmemory_internal.names_speaker($1, $2)", actor, words)
                hit = rerank.named_speakers([_episode(actor)], query, 1.0)[0]
                if actor.isascii():
                    assert named is ("speaker" in hit.scores), (actor, query)
                else:
                    assert named is None, (actor, query)


def _episode(actor: str):
    import uuid

    from pgmemory.search.types import EpisodeHit
    return EpisodeHit(id=uuid.uuid4(), group_id="g", ranks={}, score=1.0, actor=actor)


async def test_entities_are_cut_by_rrf_with_described_ones_first(memory, group):
    await _facts(memory, group)
    config = resolve_config("node_hybrid_rrf", candidates=15)
    for query in ("who likes green tea", "Person3 owns a dog", "tea in the evening"):
        for limit in (1, 3, 10):
            _same(*await _fused_and_every(memory, [group], query, config, limit))
        fused = await _described(memory, group, query, options(config, SearchFilters(), with_embeddings=False,
                                                                limit=3, query=query))
        every = await _described(memory, group, query, options(config, SearchFilters(), with_embeddings=False))
        assert 3 <= fused["entity"] < every["entity"], query


@pytest.mark.parametrize("recipe, weights", [
    ("edge_hybrid_rrf", None),
    ("edge_hybrid_rrf", (("fulltext", 0.7), ("cosine", 0.3))),
    ("combined_hybrid_rrf", None),
])
async def test_facts_of_one_group_in_the_usual_view_are_described_as_the_general_statement_does(
        memory, group, recipe, weights):
    """One group, no known_at / keys / metadata / centre / vectors asked for: search_candidates
    describes the facts with a leaner statement of its own (sql/70_search.sql). Asking for the vectors
    takes the general statement; apart from each fact's vector, its rows are the same: the facts kept,
    their ranks (JSON), names, times, attributes, episodes and null distance."""
    await _facts(memory, group)
    config = resolve_config(recipe, candidates=15, **({"method_weights": weights} if weights else {}))
    for query in ("who likes green tea", "does anyone own a dog or a cat", "tea in the evening"):
        embedding = (await memory.embedder.embed([query]))[0]
        for limit in (1, 3, 10, None):
            rows = {}
            async with memory.pool.acquire() as conn:
                # one connection with custom plans (the approximate vector index may find other
                # candidates under another plan, which is not what is compared here)
                await conn.execute("SET plan_cache_mode = force_custom_plan")
                try:
                    for vectors in (False, True):
                        found = await fetch_rows(conn, SEARCH_ONE, group, query, embedding,
                                                 options(config, SearchFilters(), with_embeddings=vectors,
                                                         limit=limit, query=query))
                        rows[vectors] = sorted(
                            (r["version_id"], r["id"], r["ranks"], {k: v for k, v in r["detail"].items() if k != "embedding"})
                            for r in found if r["kind"] == "fact")
                        vectors_sent = [r["detail"]["embedding"] is not None for r in found if r["kind"] == "fact"]
                        assert set(vectors_sent) == {vectors}, (query, limit)
                finally:
                    await conn.execute("RESET plan_cache_mode")
            assert rows[False], (query, limit)
            assert rows[False] == rows[True], (query, limit)
