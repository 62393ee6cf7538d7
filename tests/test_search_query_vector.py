"""The query vector of a search travels in binary (a real[] cast to vector): the same hits as the
text literal it replaced, for one group and several, from a list, a tuple or a numpy array."""
from __future__ import annotations

import numpy as np

from pgmemory.search.candidates import SEARCH_MANY, SEARCH_ONE, fetch_rows, options
from pgmemory.search.config import RECIPES, SearchFilters
from pgmemory.storage.vectors import vector_literals
from tests.support import utc

STORY = ["Alice works at Acme Corp.", "Bob moved to Lisbon last spring.", "Alice adopted a grey cat named Miso.",
         "Bob plays chess with Alice on Sundays.", "Carol teaches piano in Porto."]


def _rows(rows) -> list[tuple]:
    """What a caller reads of the candidate rows (in no set order): kind, keys, ranks, and the
    detail (floats to 6 digits: a component rounded once to float4 vs via 7 decimal digits may
    move a distance in the last bit)."""
    def detail(d: dict) -> list:
        return sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in d.items())
    return sorted(((r["kind"], str(r["id"]), r["version_id"], r["ranks"], detail(r["detail"])) for r in rows),
                  key=lambda r: r[:3])


async def test_binary_query_vector_finds_what_the_text_literal_found(memory, group):
    groups = [group, f"{group}-b"]
    for g in groups:
        for i, text in enumerate(STORY):
            await memory.add_episode(g, text, actor="Narrator", reference_time=utc(f"2024-01-0{i + 1}"))
    for recipe in ("combined_hybrid_rrf", "edge_hybrid_rrf"):
        opts = options(RECIPES[recipe], SearchFilters(), with_embeddings=False)
        for query in ("where does Alice work", "who plays chess", "a cat"):
            embedding = (await memory.embedder.embed([query]))[0]
            async with memory.pool.acquire() as conn:
                for statement, target in ((SEARCH_ONE, group), (SEARCH_MANY, groups)):
                    as_text = await conn.fetch(statement.replace("$3::real[]::vector", "$3::text::vector"), target, query,
                                               vector_literals([embedding])[0], opts)
                    assert as_text, (recipe, query)
                    for sent in (embedding, tuple(embedding), np.array(embedding, dtype=np.float32)):
                        found = await fetch_rows(conn, statement, target, query, sent, opts)
                        assert _rows(found) == _rows(as_text), (recipe, query, type(sent))
