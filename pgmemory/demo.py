"""The README demo: init, doctor, ingest a bundled multi-session conversation offline, then
search, build the context string (now and as of a past date), and answer one question at three
valid times and two transaction times."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from importlib import resources

from pgmemory.memory import Memory
from pgmemory.search.config import SearchFilters
from pgmemory.surfaces.search_cli import render

GROUP = "pgmemory-demo"
QUESTION = "Where does Maya work?"


def sample_sessions() -> list[list[dict]]:
    """The bundled conversation, split into sessions by episode id prefix."""
    text = resources.files("pgmemory.data").joinpath("sample_conversation.jsonl").read_text()
    sessions: dict[str, list[dict]] = {}
    for line in text.splitlines():
        item = json.loads(line)
        sessions.setdefault(item["episode_id"].split("-")[0], []).append({**item, "group_id": GROUP})
    return list(sessions.values())


def _utc(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=timezone.utc)


async def _employer(memory: Memory, as_of: datetime, known_at: datetime | None) -> str:
    results = await memory.search(QUESTION, group_ids=[GROUP], limit=5, config="edge_hybrid_rrf",
                                  filters=SearchFilters(as_of=as_of, known_at=known_at,
                                                        relation_types=("WORKS_FOR",)))
    return results.facts[0].target if results.facts else "(nothing known)"


async def _run() -> int:
    async with await Memory.open() as memory:
        await memory.erase_group(GROUP)
        known_after: list[datetime] = []
        print(f"\nIngesting the sample conversation into group {GROUP!r} (offline extractor):")
        for n, session in enumerate(sample_sessions(), start=1):
            results = await memory.add_episodes(session)
            facts = sum(len(r.facts_created) for r in results)
            ended = sum(r.facts_invalidated for r in results)
            calls = sum(r.llm_calls for r in results)
            print(f"  session {n}: {len(session)} episodes, {facts} new facts, {ended} facts ended, "
                  f"{calls} LLM calls")
            async with memory.pool.acquire() as conn:
                known_after.append(await conn.fetchval("SELECT clock_timestamp()"))
            await asyncio.sleep(0.01)

        print(f"\nSearch: {QUESTION!r}\n")
        print(render(await memory.search(QUESTION, group_ids=[GROUP], limit=5)))
        print("\nContext string for the LLM:\n")
        print(await memory.context(QUESTION, group_ids=[GROUP], limit=5, max_chars=1500))
        print("\nThe same, as of 2022-06-01 (only what was true then):\n")
        print(await memory.context(QUESTION, group_ids=[GROUP], limit=5, max_chars=1500,
                                   filters=SearchFilters(as_of=_utc("2022-06-01"))))

        print(f"\n{QUESTION} — by valid time T (rows) and what we knew at T' (columns)\n")
        times = [_utc("2022-06-01"), _utc("2023-06-01"), _utc("2024-06-01")]
        print(f"  {'T':<12}| {'known after session 2':<24}| {'known now':<24}")
        print(f"  {'-' * 12}+{'-' * 25}+{'-' * 24}")
        for t in times:
            then = await _employer(memory, t, known_after[1])
            now = await _employer(memory, t, None)
            print(f"  {t.date()!s:<12}| {then:<24}| {now:<24}")
    return 0


def run_demo() -> int:
    """Run the demo's round trip on the configured (initialised) database; returns the exit code."""
    return asyncio.run(_run())
