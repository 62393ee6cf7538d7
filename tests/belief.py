"""Helpers for belief-state scenario tests: a Memory per extractor mode, and what it believes."""
from __future__ import annotations

import asyncio
from datetime import datetime

from pgmemory import Memory
from pgmemory.extract.llm import LLMExtractor
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.providers.llm import LLMClient
from pgmemory.search.config import SearchFilters
from tests.support import utc

async def open_memory(mode: str, dsn: str, fake_openai) -> Memory:
    """The offline rules, or the LLM extractor against the fake server answering like the rules
    (bench/scripted_llm.py: scripted extraction, resolution and judgement answers)."""
    if mode == "offline":
        return await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    from bench.scripted_llm import ScriptedModel

    fake_openai.responder = ScriptedModel()
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5,
                       max_retries=1, base_delay=0.01)
    return await Memory.open(dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))


async def ingest(memory: Memory, group: str, episodes: list[tuple[str, str, str]],
                 actor: str = "Alice") -> dict[str, datetime]:
    """Ingest (id, day, text) in order; returns the transaction time just after each one."""
    known = {}
    for eid, day, text in episodes:
        result = await memory.add_episode(group, text, actor=actor, reference_time=utc(day), episode_id=eid)
        assert result.status == "done"
        known[eid] = await clock(memory)
    return known


async def clock(memory: Memory) -> datetime:
    """The database's clock now (and a moment later, so the next write is strictly after it)."""
    async with memory.pool.acquire() as conn:
        t = await conn.fetchval("SELECT clock_timestamp()")
    await asyncio.sleep(0.002)
    return t


async def targets(memory: Memory, group: str, relation: str, *, as_of: str | datetime | None = None,
                  known_at: datetime | None = None) -> set[str]:
    """Targets of `relation` that search returns as true at as_of (default now), as believed at known_at."""
    when = utc(as_of) if isinstance(as_of, str) else as_of
    results = await memory.search(f"{relation.lower().replace('_', ' ')}", group_ids=group, limit=50,
                                  filters=SearchFilters(as_of=when, known_at=known_at, relation_types=(relation,)))
    return {f.target for f in results.facts}


async def believed(memory: Memory, group: str) -> set[tuple]:
    """Every believed fact of the group by content: names, relation, sentence and valid range."""
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT source, relation, target, fact, valid_from, valid_to FROM pgmemory.believed_facts"
            " WHERE group_id = $1", group)
    return {tuple(r) for r in rows}


async def summaries(memory: Memory, group: str) -> dict[str, str]:
    """Believed (not retired) entity name -> summary."""
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch("SELECT name, summary FROM pgmemory.entities WHERE group_id = $1"
                                " AND retired_at IS NULL", group)
    return {r["name"]: r["summary"] for r in rows}


async def entities(memory: Memory, group: str) -> dict[str, tuple]:
    """Believed entity name -> (labels as a set, attributes)."""
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch("SELECT name, labels, attributes FROM pgmemory.entities WHERE group_id = $1"
                                " AND retired_at IS NULL", group)
    return {r["name"]: (frozenset(r["labels"]), r["attributes"]) for r in rows}


# What check_exclusions compares, each with the group as its one parameter: the pairs the live
# claims make, the stored pairs, the stored components.
EXCLUSION_QUERIES = (
    "SELECT fc.lineage, x FROM pgmemory.fact_claims fc, unnest(fc.contradicts) x"
    " WHERE fc.group_id = %s AND fc.retracted_by IS NULL AND x <> fc.lineage",
    "SELECT lineage, other FROM pgmemory.lineage_exclusions WHERE group_id = %s",
    "SELECT lineage, component FROM pgmemory.lineage_components WHERE group_id = %s")


def check_exclusions(claimed, stored, components) -> None:
    """The stored exclusive pairs and components (pgmemory.lineage_exclusions / lineage_components)
    are those of the group's live claims: every pair a live claim makes, both ways, and nothing a
    retracted or deleted one made; the components are the connected sets of those pairs."""
    expected = {(a, b) for a, b in claimed}
    expected |= {(b, a) for a, b in expected}
    assert {(a, b) for a, b in stored} == expected
    parts: dict = {}
    for lineage, component in components:
        parts.setdefault(component, set()).add(lineage)
    nodes, want = {a for a, _ in expected}, []
    while nodes:
        comp, frontier = set(), {nodes.pop()}
        while frontier:
            comp |= frontier
            frontier = {b for a, b in expected if a in frontier} - comp
        nodes -= comp
        want.append(frozenset(comp))
    assert sorted(map(frozenset, parts.values()), key=sorted) == sorted(want, key=sorted)
