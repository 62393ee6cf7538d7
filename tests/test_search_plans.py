"""search_candidates runs its entities' statement on a generic plan (pgmemory_internal.search_plans):
the same rows as custom plans give, and the caller's own plan_cache_mode is given back after every
search."""
from __future__ import annotations

import asyncpg

from pgmemory.search.candidates import SEARCH_MANY, SEARCH_ONE, fetch_rows, options
from pgmemory.search.config import RECIPES, SearchFilters
from pgmemory.storage.connect import _init_async_connection
from tests.support import utc

WORDS = ["piano", "Lisbon", "chess", "Acme", "cat", "garden", "Porto", "violin", "bakery", "river"]
PEOPLE = ["Alice", "Bob", "Carol", "Dmitri", "Erin", "Farid"]
QUERIES = ("who likes chess", "a trip to Porto", "Farid and Alice", "the violin at the bakery")


async def _rows(conn, groups: list[str], query: str, vector, opts, plans: str) -> list:
    """One search's rows, sorted, with the entities' statement planned as `plans` says (the
    function replaced for this transaction only)."""
    call, target = (SEARCH_ONE, groups[0]) if len(groups) == 1 else (SEARCH_MANY, groups)
    undo = conn.transaction()
    await undo.start()
    try:
        await conn.execute("CREATE OR REPLACE FUNCTION pgmemory_internal.search_plans() RETURNS text"
                           f" LANGUAGE sql IMMUTABLE AS $$ SELECT '{plans}'::text $$")
        rows = await fetch_rows(conn, call, target, query, vector, opts)
    finally:
        await undo.rollback()
    return sorted((r["kind"], str(r["id"]), r["version_id"], repr(r["ranks"]), repr(r["detail"])) for r in rows)


async def test_generic_plans_return_what_custom_plans_return(memory, group, db_dsn):
    groups = [group, f"{group}-other"]
    for g in groups:
        for i in range(40):
            who, what, where = PEOPLE[i % 6], WORDS[i % 10], WORDS[(i * 7 + 3) % 10]
            await memory.add_episode(g, f"{who} likes {what} and visited {where} with {PEOPLE[(i + 1) % 6]}.",
                                     actor=who, reference_time=utc(f"2024-0{1 + i % 9}-1{i % 10}"))
    conn = await asyncpg.connect(db_dsn)
    try:
        await _init_async_connection(conn)
        assert await conn.fetchval("SELECT pgmemory_internal.search_plans()") == "force_generic_plan"
        kinds = set()
        for recipe in ("combined_hybrid_rrf", "node_hybrid_rrf", "episode_hybrid_rrf", "community_hybrid_rrf"):
            for filters in (SearchFilters(), SearchFilters(as_of=utc("2024-03-01"))):
                for query in QUERIES:
                    opts = options(RECIPES[recipe], filters, with_embeddings=False, limit=5, query=query)
                    vector = (await memory.embedder.embed([query]))[0]
                    for searched in ([group], groups):
                        generic = await _rows(conn, searched, query, vector, opts, "force_generic_plan")
                        custom = await _rows(conn, searched, query, vector, opts, "auto")
                        assert generic == custom, (recipe, filters.as_of, query, searched,
                                                   sorted(set(generic) - set(custom)), sorted(set(custom) - set(generic)))
                        kinds |= {r[0] for r in generic}
        assert kinds >= {"fact", "entity", "episode"}
    finally:
        await conn.close()


async def test_a_search_gives_the_callers_plan_cache_mode_back(memory, group, db_dsn):
    await memory.add_episode(group, "Alice likes chess and visited Porto with Bob.", actor="Alice",
                             reference_time=utc("2024-01-10"))
    conn = await asyncpg.connect(db_dsn)
    try:
        await _init_async_connection(conn)
        opts = options(RECIPES["combined_hybrid_rrf"], SearchFilters(), with_embeddings=False, limit=5, query="chess")
        vector = (await memory.embedder.embed(["chess"]))[0]
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            rows = await fetch_rows(conn, SEARCH_ONE, group, "chess", vector, opts)
            assert {r["kind"] for r in rows} >= {"entity", "episode"}
            assert await conn.fetchval("SELECT current_setting('plan_cache_mode')") == "force_custom_plan"
        async with conn.transaction():
            await fetch_rows(conn, SEARCH_ONE, group, "chess", vector, opts)
            assert await conn.fetchval("SELECT current_setting('plan_cache_mode')") == "auto"
    finally:
        await conn.close()
