"""Entity resolution: Postgres finds candidates, exact names resolve at once, the extractor decides the rest."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import asyncpg

from pgmemory.extract.types import EntityCandidate, EntityQuestion, EpisodeInput, ExtractedEntity, Extractor
from pgmemory.storage.vectors import as_vectors


@dataclass
class ResolvedEntity:
    """Where an extracted entity landed: an existing entity (merged) or a new one."""

    id: uuid.UUID
    name: str
    is_new: bool
    entity: ExtractedEntity
    embedding: list[float] | None = None
    renamed: bool = False
    new_labels: list[str] = field(default_factory=list)


async def read_entity_candidates(db, group_id: str, entities: list[ExtractedEntity],
                                 embeddings: list[list[float]]) -> tuple[int, list[asyncpg.Record]]:
    """(the group's change counter, candidate rows) in one round trip and one snapshot. `db` is
    anything with asyncpg's fetch: the pool, a held connection or the locked apply transaction."""
    rows = await db.fetch("SELECT * FROM pgmemory_internal.read_entity_candidates($1, $2, $3::vector[])",
                          group_id, [e.name for e in entities], as_vectors(embeddings))
    return rows[0]["version"], [r for r in rows if r["idx"] is not None]


async def resolve_entities(rows: list[asyncpg.Record], entities: list[ExtractedEntity],
                           embeddings: list[list[float]], extractor: Extractor, episode: EpisodeInput,
                           previous: list[EpisodeInput], usage) -> list[ResolvedEntity]:
    """Map each extracted entity to an existing entity id or a new one (same order as input),
    given its candidate rows (read_entity_candidates); the extractor decides the unclear ones."""
    if not entities:
        return []
    by_index: dict[int, list[asyncpg.Record]] = {}
    for row in rows:
        by_index.setdefault(row["idx"] - 1, []).append(row)
    resolved: dict[int, ResolvedEntity] = {}
    questions: list[EntityQuestion] = []
    for i, entity in enumerate(entities):
        candidates = by_index.get(i, [])
        exact = next((c for c in candidates if c["exact"]), None)
        if exact is not None:
            resolved[i] = _merged(exact["entity_id"], exact["name"], exact["labels"], entity, embeddings[i])
        elif candidates:
            questions.append(EntityQuestion(i, entity, [
                EntityCandidate(str(c["entity_id"]), c["name"], c["summary"], tuple(c["labels"]))
                for c in candidates]))
    if questions:
        decisions = {d.index: d for d in await extractor.resolve_entities(episode, previous, questions, usage)}
        for q in questions:
            d = decisions.get(q.index)
            if d is not None and d.duplicate_of is not None:
                cand = next(c for c in q.candidates if c.id == d.duplicate_of)
                merged = _merged(uuid.UUID(cand.id), cand.name, list(cand.labels), q.entity, embeddings[q.index])
                if d.name and d.name != cand.name and len(d.name) >= len(cand.name):
                    merged.name, merged.renamed = d.name, True
                resolved[q.index] = merged
    out = []
    seen: dict[uuid.UUID, ResolvedEntity] = {}
    by_name: dict[str, ResolvedEntity] = {}
    for i, entity in enumerate(entities):
        r = resolved.get(i) or by_name.get(entity.name.lower()) or ResolvedEntity(
            uuid.uuid4(), entity.name, True, entity, embeddings[i])
        r = seen.setdefault(r.id, r)
        by_name[entity.name.lower()] = r
        out.append(r)
    return out


def _merged(entity_id, name, labels, entity: ExtractedEntity, embedding) -> ResolvedEntity:
    new_labels = [label for label in entity.labels if label not in labels]
    return ResolvedEntity(entity_id, name, False, entity, embedding, new_labels=new_labels)
