"""What one episode needs embedded: its text, started before extraction so the model runs while the
extractor and the candidate reads do; then its new entity names and fact sentences in one call
(names already stored reuse their vectors)."""
from __future__ import annotations

import asyncio

import asyncpg

from pgmemory.providers.embedder import Embedder

# A stored name embedding is reused only while the entity still has the name it was computed
# from: a renamed entity keeps its first name's vector, so any earlier version with another
# name rules it out (two range probes of entity_versions_names: a name before or after it).
# lower(name) lets the lookup use entities_group_name.
_STORED_NAME_VECTORS = """
SELECT DISTINCT ON (e.name) e.name, e.name_embedding
  FROM pgmemory.entities e
 WHERE e.group_id = $1 AND lower(e.name) = ANY($3::text[]) AND e.name = ANY($2::text[])
   AND e.name_embedding IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pgmemory.entity_versions v
                    WHERE v.group_id = e.group_id AND v.entity_id = e.id AND v.name < e.name)
   AND NOT EXISTS (SELECT 1 FROM pgmemory.entity_versions v
                    WHERE v.group_id = e.group_id AND v.entity_id = e.id AND v.name > e.name)
 ORDER BY e.name, e.created_at
"""


async def stored_name_vectors(pool: asyncpg.Pool, group_id: str, names: list[str]) -> dict[str, list[float]]:
    """Stored embeddings of the entities of ``group_id`` named exactly as in ``names`` (a short read)."""
    if not names:
        return {}
    async with pool.acquire() as conn:
        wanted = sorted(set(names))
        rows = await conn.fetch(_STORED_NAME_VECTORS, group_id, wanted, sorted({n.lower() for n in wanted}))
    return {r["name"]: r["name_embedding"].to_list() for r in rows}


def start_text_embedding(embedder: Embedder, text: str) -> asyncio.Task:
    """The episode text's vector, computed in the background from now on (the text is known before
    extraction; its ~256 tokens are the largest encode of the episode). Await it, or `discard` it."""
    async def one() -> list[float]:
        return (await embedder.embed([text]))[0]

    return asyncio.ensure_future(one())


def discard(task: asyncio.Task) -> None:
    """Cancel a background embedding no longer needed (or fetch its error, so none goes unreported)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()


async def embed_names_and_facts(pool: asyncpg.Pool, embedder: Embedder, group_id: str, names: list[str],
                                sentences: list[str]) -> tuple[list[list[float]], list[list[float]]]:
    """(name vectors, fact vectors): stored names reused, the rest in ONE embed call."""
    stored = await stored_name_vectors(pool, group_id, names)
    fresh_names = [n for n in names if n not in stored]
    vectors = await embedder.embed(fresh_names + sentences) if fresh_names or sentences else []
    computed = dict(zip(fresh_names, vectors))
    name_vecs = [stored.get(n) or computed[n] for n in names]
    return name_vecs, vectors[len(fresh_names):]
