"""Fact resolution: candidates from Postgres (same entity pair for duplicates; touching
entities for contradictions), decisions from the extractor, asked only when there are any."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import asyncpg

from pgmemory.extract.types import EpisodeInput, ExtractedFact, Extractor, FactCandidate, FactDecision, FactQuestion
from pgmemory.ingest.resolve_entities import ResolvedEntity
from pgmemory.storage.vectors import as_vectors


@dataclass
class JudgedFact:
    """A new fact with its resolved endpoints, its candidates and the extractor's verdict."""

    fact: ExtractedFact
    source: ResolvedEntity
    target: ResolvedEntity
    embedding: list[float]
    decision: FactDecision
    candidates: dict[str, FactCandidate]


def attach_endpoints(facts: list[ExtractedFact], entities: list[ResolvedEntity],
                     embeddings: list[list[float]]) -> list[tuple[ExtractedFact, ResolvedEntity, ResolvedEntity, list[float]]]:
    """Pair each fact with its resolved entities; drop self-loops, unknown names and repeats."""
    by_name = {r.entity.name.lower(): r for r in entities}
    out, seen = [], set()
    for fact, emb in zip(facts, embeddings):
        src, tgt = by_name.get(fact.source.lower()), by_name.get(fact.target.lower())
        if src is None or tgt is None or src.id == tgt.id:
            continue
        key = (src.id, tgt.id, fact.relation, fact.negated)
        if key in seen:
            continue
        seen.add(key)
        out.append((fact, src, tgt, emb))
    return out


async def judge_facts(db: asyncpg.Pool | asyncpg.Connection, group_id: str,
                      facts: list[tuple[ExtractedFact, ResolvedEntity, ResolvedEntity, list[float]]],
                      extractor: Extractor, episode: EpisodeInput,
                      usage) -> list[JudgedFact]:
    """Find duplicate and contradiction candidates for each fact (through `db`: the pool or the
    apply transaction's connection) and let the extractor decide."""
    if not facts:
        return []
    sources = [s.id for _, s, _, _ in facts]
    targets = [t.id for _, _, t, _ in facts]
    existing = [not (s.is_new and t.is_new) for _, s, t, _ in facts]
    duplicates: dict[int, list[FactCandidate]] = {}
    contradictions: dict[int, list[FactCandidate]] = {}
    if any(existing):
        # Same-relation facts that ended before a statement's place in the fold (an assertion's
        # start, not after its end; a negation's end: fold_key, sql/35_fact_rules.sql) are not its
        # candidates.
        starts = [fold_place(f, episode.reference_time) for f, _, _, _ in facts]
        rows = await db.fetch(
            "SELECT * FROM pgmemory_internal.read_fact_candidates($1, $2, $3, $4, $5::vector[], $6)",
            group_id, sources, targets, [f.relation for f, _, _, _ in facts],
            as_vectors([e for _, _, _, e in facts]), starts)
        # A candidate's endpoints named as this episode resolves them: an entity it renames ("Liam"
        # said as "Liam Reyes") is the same one, so a repeat is not judged a new spouse.
        names = {r.id: r.name for _, s, t, _ in facts for r in (s, t)}
        for row in rows:
            into = duplicates if row["kind"] == "duplicate" else contradictions
            into.setdefault(row["idx"] - 1, []).append(_candidate(row, names))
    questions = [FactQuestion(i, replace(f, source=s.name, target=t.name), duplicates.get(i, []),
                              contradictions.get(i, []))
                 for i, (f, s, t, _) in enumerate(facts) if duplicates.get(i) or contradictions.get(i)]
    decisions: dict[int, FactDecision] = {}
    if questions:
        decisions = {d.index: d for d in await extractor.judge_facts(episode, questions, usage)}
    judged = []
    for i, (fact, src, tgt, emb) in enumerate(facts):
        cands = {c.id: c for c in duplicates.get(i, []) + contradictions.get(i, [])}
        judged.append(JudgedFact(fact, src, tgt, emb, decisions.get(i, FactDecision(i)), cands))
    return judged


def fold_place(fact: ExtractedFact, reference_time: datetime) -> datetime:
    """Where a statement takes its place in the fold (pgmemory_internal.fold_key): a negation at
    the end it states, an assertion at its start (else when said) but not after its stated end."""
    if fact.negated:
        return fact.invalid_at or reference_time
    start = fact.valid_at or reference_time
    return min(start, fact.invalid_at) if fact.invalid_at else start


def _candidate(row: asyncpg.Record, names: dict) -> FactCandidate:
    return FactCandidate(str(row["fact_id"]), names.get(row["source_id"], row["source_name"]),
                         names.get(row["target_id"], row["target_name"]), row["relation"],
                         row["fact"], row["valid_from"], row["valid_to"])
