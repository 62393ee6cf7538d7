"""One episode end to end: store the raw episode, extract, resolve, judge, apply in ONE transaction.

The raw episode is committed first (status pending): it is the lossless record
and survives a failure. Everything derived from it commits together with its
status 'done', or not at all; a failure records the error and can be retried.
A per-group advisory lock serialises writers of one group, so concurrent
writers never create duplicate entities or facts; other groups run in parallel.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from pgmemory.errors import InvalidInput
from pgmemory.extract.types import EpisodeInput, ExtractedFact, Extractor
from pgmemory.ingest.embed_episode import embed_episode
from pgmemory.ingest.episode import Episode
from pgmemory.ingest.invalidation import FactPlan, plan_facts
from pgmemory.ingest.resolve_entities import ResolvedEntity, resolve_entities
from pgmemory.ingest.resolve_facts import attach_endpoints, judge_facts
from pgmemory.providers.embedder import Embedder
from pgmemory.providers.llm import Usage

CONTEXT_EPISODES = 4
EPISODE_EMBED_CHARS = 2000


@dataclass
class EpisodeResult:
    """What ingesting one episode did, and what it cost."""

    episode_id: uuid.UUID
    group_id: str
    status: str  # "done" | "skipped" (already ingested)
    entities_created: list[str] = field(default_factory=list)
    entities_merged: list[str] = field(default_factory=list)
    facts_created: list[str] = field(default_factory=list)
    facts_duplicate: int = 0
    facts_invalidated: int = 0
    facts_retracted: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    db_seconds: float = 0.0


class IngestError(Exception):
    """Processing an episode failed; the raw episode is kept with status 'failed'."""

    def __init__(self, episode_id: uuid.UUID, cause: BaseException) -> None:
        super().__init__(f"episode {episode_id} failed: {type(cause).__name__}: {cause}")
        self.episode_id = episode_id
        self.cause = cause


@dataclass
class Ingestor:
    """Runs the pipeline with one pool, embedder and extractor."""

    pool: asyncpg.Pool
    embedder: Embedder
    extractor: Extractor

    async def ingest(self, ep: Episode, *, entity_types=None, edge_types=None) -> EpisodeResult:
        """Ingest one validated episode; re-ingesting a done episode id is a no-op."""
        started = time.perf_counter()
        async with self.pool.acquire() as conn:
            status = await _store_raw(conn, ep)
            if status == "done":
                return EpisodeResult(ep.id, ep.group_id, "skipped")
            previous = await _previous(conn, ep)
        db_time = time.perf_counter() - started
        usage = Usage()
        try:
            return await self._process(ep, previous, usage, db_time, entity_types, edge_types)
        except Exception as exc:
            async with self.pool.acquire() as conn:
                await conn.execute(
                    "UPDATE pgmemory.episodes SET status = 'failed', attempts = attempts + 1, error = $2,"
                    " llm_calls = llm_calls + $3, prompt_tokens = prompt_tokens + $4,"
                    " completion_tokens = completion_tokens + $5"
                    " WHERE group_id = $6 AND id = $1 AND status <> 'done'",
                    ep.id, f"{type(exc).__name__}: {exc}"[:2000], usage.calls, usage.prompt_tokens,
                    usage.completion_tokens, ep.group_id)
            raise IngestError(ep.id, exc) from exc

    async def _process(self, ep: Episode, previous: list[EpisodeInput], usage: Usage, db_time: float,
                       entity_types, edge_types) -> EpisodeResult:
        episode = ep.as_input()
        extraction = await self.extractor.extract(episode, previous, usage,
                                                  entity_types=entity_types, edge_types=edge_types)
        names = [e.name for e in extraction.entities]
        sentences = [fact_embedding_text(f) for f in extraction.facts]
        spoken = f"{ep.actor}: {ep.content}" if ep.actor else ep.content
        name_vecs, fact_vecs, episode_vec = await embed_episode(
            self.pool, self.embedder, ep.group_id, names, sentences, spoken[:EPISODE_EMBED_CHARS])
        result = EpisodeResult(ep.id, ep.group_id, "done")
        judge = _Timed(self.extractor)
        t0 = time.perf_counter()
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", ep.group_id)
                status = await conn.fetchval(
                    "SELECT status FROM pgmemory.episodes WHERE group_id = $1 AND id = $2 FOR UPDATE",
                    ep.group_id, ep.id)
                if status == "done":
                    return EpisodeResult(ep.id, ep.group_id, "skipped")
                resolved = await resolve_entities(conn, ep.group_id, extraction.entities, name_vecs,
                                                  judge, episode, previous, usage)
                facts = attach_endpoints(extraction.facts, resolved, fact_vecs)
                judged = await judge_facts(conn, ep.group_id, facts, judge, episode, usage)
                plan = plan_facts(judged)
                payload = _payload(ep, resolved, plan, usage, episode_vec)
                applied = await conn.fetchval("SELECT pgmemory.apply_episode($1, $2::jsonb)", ep.id, payload)
        _fill(result, resolved, applied, usage)
        result.db_seconds = db_time + (time.perf_counter() - t0) - judge.seconds
        return result


def fact_embedding_text(fact: ExtractedFact) -> str:
    """What a fact's embedding is computed from: its sentence plus the relation in words, so
    questions phrased by relation ("where does X work") find sentences that do not say it."""
    relation = fact.relation.lower().replace("_", " ")
    return f"{fact.fact} ({fact.source} {relation} {fact.target})"


class _Timed:
    """Wraps the extractor inside the transaction to measure the time its decisions take,
    so db_seconds counts only the database (commit included)."""

    def __init__(self, extractor: Extractor) -> None:
        self._extractor = extractor
        self.seconds = 0.0

    async def _timed(self, pending):
        started = time.perf_counter()
        try:
            return await pending
        finally:
            self.seconds += time.perf_counter() - started

    async def resolve_entities(self, *args, **kwargs):
        return await self._timed(self._extractor.resolve_entities(*args, **kwargs))

    async def judge_facts(self, *args, **kwargs):
        return await self._timed(self._extractor.judge_facts(*args, **kwargs))


async def _store_raw(conn: asyncpg.Connection, ep: Episode) -> str:
    """Insert the raw episode (pending) unless its id exists in its group; return the stored status."""
    row = await conn.fetchrow(
        "INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, source_description, valid_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (group_id, id) DO NOTHING RETURNING status",
        ep.id, ep.group_id, ep.kind, ep.content, ep.actor, ep.source_description, ep.reference_time)
    if row is not None:
        return row["status"]
    stored = await conn.fetchrow("SELECT content, status FROM pgmemory.episodes WHERE group_id = $1 AND id = $2",
                                 ep.group_id, ep.id)
    if stored["content"] != ep.content:
        raise InvalidInput(f"episode id {ep.id} is already used by a different episode of group {ep.group_id!r}")
    return stored["status"]


async def _previous(conn: asyncpg.Connection, ep: Episode) -> list[EpisodeInput]:
    """The episodes just before this one in its group (by reference time): the extractor's context."""
    rows = await conn.fetch(
        "SELECT content, kind, valid_at, actor, source_description FROM pgmemory.episodes"
        " WHERE group_id = $1 AND id <> $2 AND valid_at <= $3"
        " ORDER BY valid_at DESC, recorded_at DESC LIMIT $4",
        ep.group_id, ep.id, ep.reference_time, CONTEXT_EPISODES)
    return [EpisodeInput(r["content"], r["kind"], r["valid_at"], r["actor"], r["source_description"])
            for r in reversed(rows)]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _vec(values) -> list[float] | None:
    return None if values is None else [float(x) for x in values]


def _payload(ep: Episode, resolved: list[ResolvedEntity], plan: FactPlan, usage: Usage,
             episode_vec) -> dict:
    """The decisions of one episode for pgmemory.apply_episode (format documented there)."""
    unique = {r.id: r for r in resolved}.values()
    new_entities = [{
        "id": str(r.id), "name": r.name, "labels": r.entity.labels, "summary": r.entity.summary,
        "attributes": r.entity.attributes, "embedding": _vec(r.embedding)} for r in unique if r.is_new]
    updates = [{
        "id": str(r.id), "name": r.name if r.renamed else None,
        "labels": r.new_labels, "attributes": r.entity.attributes}
        for r in unique if not r.is_new and (r.renamed or r.new_labels or r.entity.attributes)]
    claims = [{
        "id": str(c.id), "kind": c.kind, "duplicate_of": c.duplicate_of, "contradicts": list(c.contradicts),
        "source": str(c.judged.source.id), "target": str(c.judged.target.id),
        "relation": c.judged.fact.relation, "fact": c.judged.fact.fact,
        "valid_from": _iso(c.judged.fact.valid_at), "valid_to": _iso(c.judged.fact.invalid_at),
        "embedding": _vec(c.judged.embedding), "attributes": c.judged.fact.attributes}
        for c in plan.claims]
    return {
        "group": ep.group_id,
        "reference_time": ep.reference_time.isoformat(),
        "new_entities": new_entities,
        "entity_updates": updates,
        "mentions": [str(r.id) for r in unique],
        "mention_summaries": {str(r.id): r.entity.summary for r in unique if r.entity.summary},
        "claims": claims,
        "usage": {"calls": usage.calls, "prompt_tokens": usage.prompt_tokens,
                  "completion_tokens": usage.completion_tokens},
        "embedding": _vec(episode_vec),
    }


def _fill(result: EpisodeResult, resolved: list[ResolvedEntity], applied: dict, usage: Usage) -> None:
    unique = {r.id: r for r in resolved}.values()
    result.entities_created = [r.name for r in unique if r.is_new]
    result.entities_merged = [r.name for r in unique if not r.is_new]
    result.facts_created = list(applied["created"])
    result.facts_duplicate = applied["duplicates"]
    result.facts_invalidated = applied["ended"]
    result.facts_retracted = applied["withdrawn"]
    result.llm_calls = usage.calls
    result.prompt_tokens = usage.prompt_tokens
    result.completion_tokens = usage.completion_tokens
