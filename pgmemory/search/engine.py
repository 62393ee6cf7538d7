"""Run a search: validate, embed the query, φ candidates (one round trip), ρ rerank, cut to limit."""
from __future__ import annotations

from typing import Any

import asyncpg

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import validate_group_id
from pgmemory.providers.embedder import Embedder
from pgmemory.providers.reranker import CrossEncoder
from pgmemory.search import rerank
from pgmemory.search.candidates import fetch_candidates, options
from pgmemory.search.config import MAX_LIMIT, MAX_QUERY_CHARS, SearchConfig, SearchFilters
from pgmemory.search.types import Hit, SearchResults


def check_request(query: Any, group_ids: Any, limit: Any) -> list[str]:
    """Refuse an empty or oversized query, bad group ids or a limit out of range."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("search query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"search query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    if isinstance(group_ids, str):
        group_ids = [group_ids]
    if not group_ids:
        raise InvalidInput("group_ids must name at least one group")
    groups = [validate_group_id(g) for g in group_ids]
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer between 1 and {MAX_LIMIT}, got {limit!r}")
    return groups


async def run_search(pool: asyncpg.Pool, embedder: Embedder, cross_encoder: CrossEncoder | None,
                     query: str, group_ids: list[str], limit: int, config: SearchConfig,
                     filters: SearchFilters) -> SearchResults:
    """f(α) = ρ(φ(α)): candidates of every kind, reranked per kind, the best `limit` of each."""
    if config.reranker == "cross_encoder" and cross_encoder is None:
        raise InvalidInput("the cross_encoder reranker needs a provider: configure an LLM endpoint "
                           "(PGMEMORY_LLM_BASE_URL) or a local model (PGMEMORY_CROSS_ENCODER)")
    needs_embedding = "cosine" in config.methods or config.reranker == "mmr"
    embedding = (await embedder.embed([query]))[0] if needs_embedding else None
    opts = options(config, filters, with_embeddings=config.reranker == "mmr")
    async with pool.acquire() as conn:
        found = await fetch_candidates(conn, group_ids, query, embedding, opts)
    out = SearchResults()
    for kind in ("facts", "entities", "communities", "episodes"):
        hits = rerank.described_first(
            await _rerank(getattr(found, kind), query, embedding, limit, config, cross_encoder))
        setattr(out, kind, hits[:limit])
    return out


async def _rerank(hits: list[Hit], query: str, embedding, limit: int, config: SearchConfig,
                  cross_encoder: CrossEncoder | None) -> list[Hit]:
    fused = rerank.rrf(hits, config.rrf_k, dict(config.method_weights))
    if config.reranker == "mmr":
        return rerank.mmr(fused, embedding, config.mmr_lambda, limit)
    if config.reranker == "episode_mentions":
        return rerank.episode_mentions(fused)
    if config.reranker == "node_distance":
        return rerank.node_distance(fused)
    if config.reranker == "cross_encoder" and fused:
        shortlist = fused[:max(limit * 3, 20)]
        scores = await cross_encoder.score(query, [h.text() for h in shortlist])
        for h, s in zip(shortlist, scores):
            h.scores["cross_encoder"] = s
            h.score = s
        return sorted(shortlist, key=lambda h: -h.score)
    return fused
