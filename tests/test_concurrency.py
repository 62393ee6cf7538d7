"""Concurrency battery: many writers with contradicting episodes, searches and init while ingesting.

Every run is bounded by a timeout that fails the test (the pg_textsearch 1.0.0 freeze of
issue 8 hung backends forever); afterwards no episode is lost, none duplicated, no entity
duplicated, and each person's current employer is the last one they named.
"""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.setup import init_database
from tests.conftest import DIM

WRITERS = 8
COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Industries", "Wayne Enterprises"]
BOUND_S = 120  # a healthy run takes a few seconds; a hang fails the test instead of the suite


def chronology(person: int, steps: int = 6) -> list[dict]:
    """One person's episodes in time order: a first job, then "I left X last week and now work at Y"."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(hours=person)
    jobs = [COMPANIES[(person + i) % len(COMPANIES)] for i in range(steps)]
    lines = [f"I work at {jobs[0]}."] + [f"I left {jobs[i - 1]} last week and now work at {jobs[i]}."
                                         for i in range(1, steps)]
    # The chatter makes texts long enough for pg_textsearch 1.0.0 to freeze (what issue 8 saw).
    return [{"content": f"{text} We talked about topic {person * steps + i} with friends for hours.",
             "actor": f"Person{person}", "episode_id": f"p{person}-{i}",
             "reference_time": start + timedelta(days=30 * i)} for i, text in enumerate(lines)]


def last_employer(episodes: list[dict]) -> str:
    return episodes[-1]["content"].rsplit(" work at ", 1)[1].split(".")[0]


async def write(memory: Memory, group: str, episodes: list[dict]) -> None:
    for ep in episodes:
        await memory.add_episode(group, ep["content"], actor=ep["actor"], episode_id=ep["episode_id"],
                                 reference_time=ep["reference_time"])


async def search_until(memory: Memory, groups: list[str], stop: asyncio.Event) -> int:
    done = 0
    while not stop.is_set():
        await memory.search("where does Person1 work now", group_ids=groups, limit=5)
        done += 1
        await asyncio.sleep(0)
    return done


async def bounded(coro):
    try:
        return await asyncio.wait_for(coro, BOUND_S)
    except TimeoutError:
        pytest.fail(f"ingestion did not finish within {BOUND_S} s: the database froze")


def check_outcome(dsn: str, plan: dict[str, list[list[dict]]]) -> None:
    """All episodes done exactly once, no duplicate entity, last employer current for everyone."""
    with psycopg.connect(dsn) as conn:
        for group, writers in plan.items():
            expected = sorted(ep["episode_id"] for episodes in writers for ep in episodes)
            rows = conn.execute("SELECT status, count(*) FROM pgmemory.episodes WHERE group_id = %s"
                                " GROUP BY status", (group,)).fetchall()
            assert dict(rows) == {"done": len(expected)}, group
            dupes = conn.execute("SELECT lower(name), count(*) FROM pgmemory.entities WHERE group_id = %s"
                                 " GROUP BY 1 HAVING count(*) > 1", (group,)).fetchall()
            assert dupes == [], group
            current = conn.execute(
                "SELECT s.name, array_agg(t.name ORDER BY t.name) FROM pgmemory.facts f"
                " JOIN pgmemory.entities s ON s.id = f.source_id JOIN pgmemory.entities t ON t.id = f.target_id"
                " WHERE f.group_id = %s AND f.relation = 'WORKS_FOR' AND upper_inf(f.recorded)"
                " AND f.valid @> now() GROUP BY s.name", (group,)).fetchall()
            want = {episodes[0]["actor"]: [last_employer(episodes)] for episodes in writers}
            assert dict(current) == want, group


@pytest.fixture
def fresh_dsn(empty_dsn):
    """A freshly initialised database of its own (the battery must not share a frozen one)."""
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, DIM)
    return empty_dsn


async def test_writers_into_one_group_and_into_many_with_contradictions(fresh_dsn):
    shared = {"battery-shared": [chronology(p) for p in range(WRITERS)]}
    separate = {f"battery-{p}": [chronology(p)] for p in range(WRITERS)}
    memory = await Memory.open(fresh_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(),
                               pool_size=2 * WRITERS + 4)
    stop = asyncio.Event()
    try:
        searcher = asyncio.create_task(search_until(memory, [*shared, *separate], stop))

        async def ingest_all() -> None:
            await asyncio.gather(*(write(memory, group, episodes)
                                   for plan in (shared, separate)
                                   for group, writers in plan.items() for episodes in writers))
            stop.set()
            assert await searcher > 0
        await bounded(ingest_all())
    finally:
        stop.set()
        memory.pool.terminate()
    check_outcome(fresh_dsn, {**shared, **separate})


async def test_init_while_ingesting_changes_nothing_and_blocks_no_writer(fresh_dsn):
    plan = {"battery-init": [chronology(p) for p in range(4)]}
    memory = await Memory.open(fresh_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(),
                               pool_size=WRITERS)
    stop = asyncio.Event()

    def init_repeatedly(force: bool) -> int:
        runs = 0
        with psycopg.connect(fresh_dsn) as conn:
            while not stop.is_set():
                if force:  # pretend the stored SQL is outdated, so init re-applies all of it
                    conn.execute("UPDATE pgmemory.settings SET value = '\"outdated\"' WHERE key = 'sql_fingerprint'")
                    conn.commit()
                init_database(conn, DIM)
                runs += 1
        return runs

    try:
        async def run() -> list[int]:
            inits = [asyncio.create_task(asyncio.to_thread(init_repeatedly, force)) for force in (False, True)]
            await asyncio.gather(*(write(memory, group, episodes)
                                   for group, writers in plan.items() for episodes in writers))
            stop.set()
            return await asyncio.gather(*inits)
        runs = await bounded(run())
    finally:
        stop.set()
        memory.pool.terminate()
    assert all(n > 0 for n in runs)
    check_outcome(fresh_dsn, plan)


async def test_file_of_three_groups_with_a_third_contradicting_lines_finishes(fresh_dsn):
    # The shape issue 8 froze on: 300 episodes over 3 groups, ingested with the CLI's default
    # concurrency of 4, one line in three "I left X last week and now work at Y".
    plan = {f"battery-file-{g}": [chronology(p, 5) for p in range(20)] for g in range(3)}
    batch = [{"group_id": group, **ep} for group, writers in plan.items() for episodes in writers
             for ep in episodes]
    memory = await Memory.open(fresh_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        results = await bounded(memory.add_episodes(batch, concurrency=4))
    finally:
        memory.pool.terminate()
    assert [r.status for r in results] == ["done"] * len(batch)
    check_outcome(fresh_dsn, plan)
