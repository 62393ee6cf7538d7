"""What one episode needs embedded: its vector (its own text blended with the turns before it,
episode_vector), started before extraction so the model runs while the extractor and the candidate
reads do; then its new entity names and fact sentences in one call (names already stored reuse
their vectors)."""
from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Sequence

import asyncpg

from pgmemory.extract.types import EpisodeInput
from pgmemory.providers.embedder import Embedder

# An episode's vector: its own "actor: content" (at most EMBED_CHARS) embedded alone, plus, for a
# message, PREVIOUS_WEIGHT**k x the own-text vector of the k-th message before it (k <= PREVIOUS_TURNS,
# each within PREVIOUS_WINDOW_S of the next), normalised. The turns before were embedded by their
# own ingestion, so the embedder's cache serves them: no second text is encoded (session 5 encoded
# "turn before + own text" as one text, 1.5x the cost). Chosen by cross-validation between the
# LoCoMo dev conversations (pgmemory/eval/README.md, bench/episode_vectors.py).
EMBED_CHARS = 2000
PREVIOUS_TURNS = 1
PREVIOUS_WEIGHT = 0.25
PREVIOUS_WINDOW_S = 1800

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


def episode_vector_recipe() -> str:
    """Names how episode vectors are made (the settings above), so `pgmemory reembed` knows
    whether the stored ones were made the same way."""
    return (f"own text[:{EMBED_CHARS}] + {PREVIOUS_WEIGHT}^k x own text of {PREVIOUS_TURNS} turn(s) before "
            f"within {PREVIOUS_WINDOW_S}s, normalised")


def own_text(ep: EpisodeInput) -> str:
    """What an episode says, as embedded: "actor: content", cut to EMBED_CHARS (the same string when
    it is the turn before another episode, so the embedder's cache serves its vector)."""
    return (f"{ep.actor}: {ep.content}" if ep.actor else ep.content)[:EMBED_CHARS]


def context_turns(episode: EpisodeInput, previous: Sequence[EpisodeInput]) -> list[EpisodeInput]:
    """The messages just before a message (`previous` is oldest first), nearest first: at most
    PREVIOUS_TURNS, each within PREVIOUS_WINDOW_S of the one after it; none for other kinds."""
    if episode.kind != "message":
        return []
    out: list[EpisodeInput] = []
    after = episode
    for p in reversed(previous[-PREVIOUS_TURNS:] if PREVIOUS_TURNS > 0 else []):
        if p.kind != "message" or (after.reference_time - p.reference_time).total_seconds() > PREVIOUS_WINDOW_S:
            break
        out.append(p)
        after = p
    return out


def episode_embedding_texts(episode: EpisodeInput, previous: Sequence[EpisodeInput]) -> list[str]:
    """The texts an episode's vector is made of: its own text first, then the turns before it,
    nearest first (a reply, "They loved it!", is found by what it answers)."""
    return [own_text(episode), *(own_text(p) for p in context_turns(episode, previous))]


def blend(vectors: Sequence[Sequence[float]]) -> list[float]:
    """normalise(v0 + w v1 + w^2 v2 ...) with w = PREVIOUS_WEIGHT: the own-text vector first."""
    dim = len(vectors[0])
    out = [0.0] * dim
    for k, vec in enumerate(vectors):
        w = PREVIOUS_WEIGHT ** k
        for i in range(dim):
            out[i] += w * vec[i]
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


async def episode_vectors(embedder: Embedder,
                          items: Sequence[tuple[EpisodeInput, Sequence[EpisodeInput]]]) -> list[list[float]]:
    """The stored vectors of (episode, the episodes before it) pairs, in ONE embed call: a text
    shared by several (an episode is the turn before the next one) is embedded once."""
    texts = [episode_embedding_texts(ep, previous) for ep, previous in items]
    flat = [t for group in texts for t in group]
    vectors = await embedder.embed(flat) if flat else []
    out, at = [], 0
    for group in texts:
        out.append(blend(vectors[at:at + len(group)]))
        at += len(group)
    return out


async def episode_vector(embedder: Embedder, episode: EpisodeInput, previous: Sequence[EpisodeInput],
                         own: Awaitable[list[float]] | None = None) -> list[float]:
    """The episode's stored vector: one embed call (the turns before come from the cache when hot),
    or, given `own` (its own text's vector, started earlier), one for the turns before only."""
    if own is None:
        return (await episode_vectors(embedder, [(episode, previous)]))[0]
    texts = episode_embedding_texts(episode, previous)
    context = await embedder.embed(texts[1:]) if len(texts) > 1 else []
    return blend([await own, *context])


async def stored_name_vectors(pool: asyncpg.Pool, group_id: str, names: list[str]) -> dict[str, list[float]]:
    """Stored embeddings of the entities of ``group_id`` named exactly as in ``names`` (a short read)."""
    if not names:
        return {}
    async with pool.acquire() as conn:
        wanted = sorted(set(names))
        rows = await conn.fetch(_STORED_NAME_VECTORS, group_id, wanted, sorted({n.lower() for n in wanted}))
    return {r["name"]: r["name_embedding"].to_list() for r in rows}


def start_own_vector(embedder: Embedder, episode: EpisodeInput) -> asyncio.Task:
    """The vector of the episode's own text, computed in the background from now on: the text is
    known before the raw episode is even stored, and its (up to 256) tokens are the episode's
    largest encode. Await it, or `discard` it."""
    async def one() -> list[float]:
        return (await embedder.embed([own_text(episode)]))[0]

    return asyncio.ensure_future(one())


def start_episode_vector(embedder: Embedder, episode: EpisodeInput, previous: Sequence[EpisodeInput],
                         own: asyncio.Task | None = None) -> asyncio.Task:
    """The episode's vector (blended with the turns before it), computed in the background while
    the extractor works; `own` is its own text's vector if already started. Await it, or `discard` it."""
    return asyncio.ensure_future(episode_vector(embedder, episode, previous, own))


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
