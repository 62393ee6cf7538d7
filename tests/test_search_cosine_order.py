"""Each kind's cosine list ranks its hits by exact distance, ties by id, whatever plan the
connection has cached: under an HNSW scan (relaxed order under hnsw.iterative_scan) as under an
exact scan, so a hit's rank never depends on the connection's plan."""
from __future__ import annotations

import asyncpg

from pgmemory.search.candidates import SEARCH_ONE, fetch_rows, options
from pgmemory.search.config import RECIPES, SearchFilters
from pgmemory.storage.connect import _init_async_connection
from tests.support import utc

WORDS = ["piano", "Lisbon", "chess", "Acme", "cat", "garden", "Porto", "violin", "bakery", "river"]
PEOPLE = ["Alice", "Bob", "Carol", "Dmitri", "Erin", "Farid"]


def _cosine_ranks(rows) -> dict[str, list[tuple[str, int, float]]]:
    """Per kind, the hits of the cosine method as (key, rank, exact distance), by rank; the key as
    the database orders ties: a fact's version number, an entity's or episode's uuid (as text:
    Postgres orders uuids bytewise, as their lowercase hex reads)."""
    out: dict[str, list] = {}
    for r in rows:
        if "cosine" in r["ranks"]:
            out.setdefault(r["kind"], []).append(
                (r["version_id"] or str(r["id"]), r["ranks"]["cosine"], r["detail"]["keys"]["cosine"]))
    return {k: sorted(v, key=lambda h: h[1]) for k, v in out.items()}


async def test_cosine_ranks_follow_the_exact_distance_under_an_index_plan_and_a_scan(memory, group, db_dsn):
    for g in (group, f"{group}-other"):
        for i in range(48):
            who, what, where = PEOPLE[i % 6], WORDS[i % 10], WORDS[(i * 7 + 3) % 10]
            await memory.add_episode(g, f"{who} likes {what} and visited {where} with {PEOPLE[(i + 1) % 6]}.",
                                     actor=who, reference_time=utc(f"2024-0{1 + i % 9}-1{i % 10}"))
    opts = {**options(RECIPES["combined_hybrid_rrf"], SearchFilters(), with_embeddings=False), "with_keys": True}
    plans = {"index": {"enable_seqscan": "off", "enable_bitmapscan": "off", "hnsw.iterative_scan": "relaxed_order",
                       "hnsw.ef_search": "10"},
             "scan": {"enable_indexscan": "off", "enable_bitmapscan": "off"}}
    seen = {}
    for name, settings in plans.items():
        conn = await asyncpg.connect(db_dsn, server_settings=settings)
        try:
            await _init_async_connection(conn)
            seen[name] = []
            for query in ("who likes chess", "a trip to Porto", "the violin", "Farid and Alice"):
                vector = (await memory.embedder.embed([query]))[0]
                rows = await fetch_rows(conn, SEARCH_ONE, group, query, vector, opts)
                seen[name].append(_cosine_ranks(rows))
        finally:
            await conn.close()
    for name, per_plan in seen.items():
        for per_query in per_plan:
            assert set(per_query) >= {"fact", "entity", "episode"}, (name, per_query.keys())
            for kind, hits in per_query.items():
                assert [h[1] for h in hits] == list(range(1, len(hits) + 1)), (name, kind)
                assert [(h[2], h[0]) for h in hits] == sorted((h[2], h[0]) for h in hits), (name, kind, hits)


async def test_cosine_ranks_follow_the_exact_distance_when_the_index_returns_them_out_of_order(memory, group, db_dsn):
    # hnsw.iterative_scan = relaxed_order returns rows out of distance order when a filter drops
    # most of what the index visits (here: an as-of point that few facts hold); the search's
    # re-sort must not take the scan's order as given (an Incremental Sort on the distance would,
    # past its first 32 rows: hence 40 candidates).
    for i in range(480):
        recent = i % 12 == 0
        words = " ".join(WORDS[(i * k + k * k) % 10] for k in range(1, 5))
        await memory.add_fact(group, PEOPLE[i % 6], "LIKES", f"{WORDS[i % 10]} {i}",
                              f"{PEOPLE[i % 6]} likes {words} with {PEOPLE[(i * 5 + 1) % 6]}.",
                              valid_from="2024-01-01T00:00:00Z" if recent else "2020-01-01T00:00:00Z",
                              valid_to=None if recent else "2020-06-01T00:00:00Z")
    # The index plan: sorting switched off, so the HNSW scan (which needs no sort) is chosen.
    settings = {"enable_seqscan": "off", "enable_bitmapscan": "off", "enable_sort": "off",
                "hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": "4"}
    opts = {**options(RECIPES["edge_hybrid_rrf"], SearchFilters(as_of=utc("2024-06-01")), with_embeddings=False),
            "with_keys": True, "candidates": 40}
    conn = await asyncpg.connect(db_dsn, server_settings=settings)
    try:
        await _init_async_connection(conn)
        out_of_order = 0
        for query in [f"{p} {w} {WORDS[(i + 3) % 10]}" for i, w in enumerate(WORDS) for p in PEOPLE[:3]]:
            vector = (await memory.embedder.embed([query]))[0]
            raw = [r["d"] for r in await conn.fetch(
                "SELECT f.embedding <=> $2::real[]::vector AS d FROM pgmemory.facts f WHERE f.group_id = $1"
                " AND upper_inf(f.recorded) AND f.valid @> $3::timestamptz"
                " ORDER BY f.embedding <=> $2::real[]::vector LIMIT 40", group, vector, utc("2024-06-01"))]
            out_of_order += raw != sorted(raw)
            hits = _cosine_ranks(await fetch_rows(conn, SEARCH_ONE, group, query, vector, opts))["fact"]
            assert [h[1] for h in hits] == list(range(1, len(hits) + 1)), query
            assert [(h[2], h[0]) for h in hits] == sorted((h[2], h[0]) for h in hits), (query, hits)
        assert out_of_order, "the index scan returned every list in order: this data does not test the re-sort"
    finally:
        await conn.close()
