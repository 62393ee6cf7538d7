"""What one episode needs embedded: its text (with the turn before it, episode_embedding_text),
started before extraction so the model runs while the extractor and the candidate reads do; then its new entity names and fact sentences in one call
(names already stored reuse their vectors)."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg

from pgmemory.extract.types import EpisodeInput
from pgmemory.providers.embedder import Embedder

# What an episode's vector is computed from (episode_embedding_text): at most EMBED_CHARS, its own
# "actor: content" first; a message after up to PREVIOUS_TURNS messages just before it (within
# PREVIOUS_WINDOW_S), each cut to PREVIOUS_CHARS. 1 turn: LoCoMo dev R@10 75.9 -> 78.0, both
# conversations up, the count cross-validated between them (pgmemory/eval/README.md).
EMBED_CHARS = 2000
PREVIOUS_TURNS = 1
PREVIOUS_WINDOW_S = 1800
PREVIOUS_CHARS = 400

# A stored name embedding is reused only while the entity still has the name it was computed
# from: a renamed entity keeps its first name's vector, so any earlier version with another
# name rules it out (two range probes of entity_versions_names: a name before or after it).
# lower(name) lets the lookup use entities_group_name.
_STORED_NAME_VECTORS = """
SELECT DISTINCT ON (e.name) e.name, nv.name_embedding
  FROM pgmemory.entities e
  JOIN pgmemory.entity_name_vectors nv ON nv.group_id = e.group_id AND nv.entity_id = e.id
 WHERE e.group_id = $1 AND lower(e.name) = ANY($3::text[]) AND e.name = ANY($2::text[])
   AND NOT EXISTS (SELECT 1 FROM pgmemory.entity_versions v
                    WHERE v.group_id = e.group_id AND v.entity_id = e.id AND v.name < e.name)
   AND NOT EXISTS (SELECT 1 FROM pgmemory.entity_versions v
                    WHERE v.group_id = e.group_id AND v.entity_id = e.id AND v.name > e.name)
 ORDER BY e.name, e.created_at
"""


def _spoken(ep: EpisodeInput) -> str:
    return f"{ep.actor}: {ep.content}" if ep.actor else ep.content


def episode_embedding_text(episode: EpisodeInput, previous: Sequence[EpisodeInput]) -> str:
    """The text an episode's vector is computed from: "actor: content", and for a message the
    messages just before it in the same conversation (`previous`, oldest first: up to
    PREVIOUS_TURNS within PREVIOUS_WINDOW_S of it) above it, so a reply ("They loved it!") is
    found by what it answers. Its own text is kept whole up to EMBED_CHARS; the turns before
    it fill what is left."""
    own = _spoken(episode)[:EMBED_CHARS]
    if episode.kind != "message" or PREVIOUS_TURNS < 1:
        return own
    lines: list[str] = []
    for p in reversed(previous[-PREVIOUS_TURNS:]):
        if p.kind != "message" or (episode.reference_time - p.reference_time).total_seconds() > PREVIOUS_WINDOW_S:
            break
        lines.insert(0, _spoken(p)[:PREVIOUS_CHARS])
    context = "\n".join(lines)[:max(0, EMBED_CHARS - len(own) - 1)]
    return f"{context}\n{own}" if context else own


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
