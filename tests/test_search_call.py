"""The search call itself: an option left out of the call's JSON means what null means (options()
leaves out every option without a value, other callers may send nulls), and on one node the
one-group entry point adds no layer of its own around search_candidates."""
from __future__ import annotations

import json

from pgmemory.search.candidates import SEARCH_ONE_NODE, fetch_rows, options
from pgmemory.search.config import _TIME_FIELDS, RECIPES, SearchFilters
from tests.support import utc

STORY = ["Alice works at Acme Corp.", "Bob moved to Lisbon last spring.", "Alice adopted a grey cat named Miso.",
         "Bob plays chess with Alice on Sundays.", "Carol teaches piano in Porto."]
# The options options() may leave out (no value): the fuse without a limit, the time filters, the centre.
MAY_BE_LEFT_OUT = ("fuse", "center", *_TIME_FIELDS)


def _rows(rows) -> list[tuple]:
    """Every row, whole (the rows' order is not what a caller relies on: it reranks them)."""
    return sorted((r["kind"], str(r["id"]), r["version_id"], json.dumps(r["ranks"], sort_keys=True),
                   json.dumps(r["detail"], sort_keys=True)) for r in rows)


async def test_an_option_left_out_means_what_null_means(memory, group):
    for i, text in enumerate(STORY):
        await memory.add_episode(group, text, actor="Narrator", reference_time=utc(f"2024-01-0{i + 1}"))
    for recipe in ("combined_hybrid_rrf", "edge_hybrid_rrf"):
        for limit in (None, 3):
            opts = options(RECIPES[recipe], SearchFilters(), with_embeddings=False, limit=limit, query="Alice")
            assert None not in opts.values() and "as_of" not in opts and ("fuse" in opts) == (limit is not None)
            as_nulls = {**{key: None for key in MAY_BE_LEFT_OUT}, **opts}
            for query in ("where does Alice work", "who plays chess"):
                embedding = (await memory.embedder.embed([query]))[0]
                async with memory.pool.acquire() as conn:
                    left_out = await fetch_rows(conn, SEARCH_ONE_NODE, group, query, embedding, opts)
                    sent_null = await fetch_rows(conn, SEARCH_ONE_NODE, group, query, embedding, as_nulls)
                assert left_out, (recipe, query)
                assert _rows(left_out) == _rows(sent_null), (recipe, limit, query)


async def test_one_group_search_is_search_candidates_alone_on_one_node(memory, group):
    """search_group is one SQL statement the planner inlines: the plan reads search_candidates'
    rows directly (a plpgsql search_group copied each row through a second tuplestore)."""
    await memory.add_episode(group, STORY[0], actor="Narrator", reference_time=utc("2024-01-01"))
    async with memory.pool.acquire() as conn:
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN (COSTS OFF, VERBOSE) " + SEARCH_ONE_NODE.replace("$1", "'g'").replace("$2", "'x'")
            .replace("$3::vector", "NULL::vector").replace("$4::jsonb", "'{}'::jsonb")))
    assert "search_candidates" in plan and "search_group" not in plan, plan
