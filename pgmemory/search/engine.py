"""Run a search: validate, embed the query, φ candidates (one round trip), ρ rerank, cut to limit."""
from __future__ import annotations

import time
from typing import Any

import asyncpg

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import validate_group_ids
from pgmemory.providers.embedder import Embedder
from pgmemory.providers.reranker import CrossEncoder
from pgmemory.search import rerank
from pgmemory.search.candidates import fetch_candidates, options, refused_ids_as_input_errors
from pgmemory.search.config import MAX_LIMIT, MAX_QUERY_CHARS, SearchConfig, SearchFilters
from pgmemory.search.fanout import DISTRIBUTED_SINCE, Layout, fetch_fanned_out
from pgmemory.search.types import Hit, SearchResults
from pgmemory.validate import check_int, check_text


def check_request(query: Any, group_ids: Any, limit: Any) -> list[str]:
    """Refuse an empty or oversized query, bad group ids or a limit out of range. A group named
    twice is searched once (its full-text candidates would otherwise count twice in the ranks)."""
    if isinstance(query, str) and not query.strip():
        raise InvalidInput("search query is empty")
    check_text(query, "search query", max_chars=MAX_QUERY_CHARS)
    groups = list(dict.fromkeys(validate_group_ids(group_ids)))
    check_int(limit, "limit", 1, MAX_LIMIT)
    return groups


async def run_search(pool: asyncpg.Pool, embedder: Embedder, cross_encoder: CrossEncoder | None,
                     query: str, group_ids: list[str], limit: int, config: SearchConfig,
                     filters: SearchFilters, timings: dict[str, float] | None = None,
                     layout: Layout | None = None) -> SearchResults:
    """f(α) = ρ(φ(α)): candidates of every kind, reranked per kind, the best `limit` of each.
    With `timings` (bench/search_latency.py), the seconds of each stage are added to it:
    "embed", "sql" (the candidate call), "decode" (rows to hits) and "rerank". `layout`: whether
    the database is distributed, as known to the caller (Memory's, read once); without it, read
    at a search of several groups."""
    if config.reranker == "cross_encoder" and cross_encoder is None:
        raise InvalidInput("the cross_encoder reranker needs a provider: configure an LLM endpoint "
                           "(PGMEMORY_LLM_BASE_URL) or a local model (PGMEMORY_CROSS_ENCODER)")
    needs_embedding = "cosine" in config.methods or config.reranker == "mmr"
    started = time.perf_counter()
    embedding = (await embedder.embed([query]))[0] if needs_embedding else None
    embedded = time.perf_counter()
    opts = options(config, filters, with_embeddings=config.reranker == "mmr", limit=limit, query=query)
    layout = layout or Layout()
    with refused_ids_as_input_errors():
        async with pool.acquire() as conn:
            fan_out = len(group_ids) > 1 and await layout.known(conn)
            if not fan_out:
                try:  # single_node: a database distributed since the layout was read says so
                    found = await fetch_candidates(conn, group_ids, query, embedding,
                                                   {**opts, "single_node": len(group_ids) > 1}, timings,
                                                   distributed=layout.distributed)
                except asyncpg.PostgresError as exc:
                    if exc.sqlstate != DISTRIBUTED_SINCE:
                        raise
                    layout.distributed = fan_out = True
        if fan_out:  # several groups on Citus: each on its worker at once, merged (search/fanout.py)
            found = await fetch_fanned_out(pool, group_ids, query, embedding, opts, timings)
    fetched = time.perf_counter()
    out = SearchResults()
    for kind in ("facts", "entities", "communities", "episodes"):
        found_hits = getattr(found, kind)
        if found_hits:  # a kind not searched (or without candidates) has nothing to rerank
            hits = rerank.described_first(
                await _rerank(found_hits, query, embedding, limit, config, cross_encoder))
            setattr(out, kind, hits[:limit])
    if timings is not None:
        timings["embed"] = timings.get("embed", 0.0) + embedded - started
        timings["rerank"] = timings.get("rerank", 0.0) + time.perf_counter() - fetched
    return out


async def _rerank(hits: list[Hit], query: str, embedding, limit: int, config: SearchConfig,
                  cross_encoder: CrossEncoder | None) -> list[Hit]:
    fused = rerank.rrf(hits, config.rrf_k, config.fusion_weights())
    if config.neighbours:
        fused = rerank.neighbours(fused, config.neighbour_weight)
    if config.speaker_weight:
        fused = rerank.named_speakers(fused, query, config.speaker_weight)
    if config.session_weight:
        fused = rerank.session_proximity(fused, config.session_weight, config.session_window_s, config.rrf_k)
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
