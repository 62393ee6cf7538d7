"""Everything one episode needs embedded, in one embedder call; entity names already stored reuse their vectors."""
from __future__ import annotations

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


async def embed_episode(pool: asyncpg.Pool, embedder: Embedder, group_id: str, names: list[str],
                        sentences: list[str], episode_text: str):
    """(name vectors, fact vectors, episode vector): stored names reused, the rest in ONE embed call."""
    stored = await stored_name_vectors(pool, group_id, names)
    fresh_names = [n for n in names if n not in stored]
    vectors = await embedder.embed(fresh_names + sentences + [episode_text])
    computed = dict(zip(fresh_names, vectors))
    name_vecs = [stored.get(n) or computed[n] for n in names]
    return name_vecs, vectors[len(fresh_names):-1], vectors[-1]
