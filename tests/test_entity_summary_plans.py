"""An entity's summary as of a time (pgmemory_internal.entity_summary_at) is the same whatever
plan the database picks for it: facts that started the same day and were recorded together are
told apart by version in every branch, so which five it keeps never depends on the scan order
(an index read in order, a scan sorted, a generic plan)."""
from __future__ import annotations

import asyncpg

from pgmemory.storage.connect import _init_async_connection
from tests.support import utc

WORDS = ["piano", "Lisbon", "chess", "Acme", "cat", "garden", "Porto", "violin", "bakery", "river"]
PEOPLE = ["Alice", "Bob", "Carol", "Dmitri", "Erin", "Farid"]
SUMMARY_AT = "SELECT summary FROM pgmemory_internal.entity_summary_at($1, $2, $3, NULL)"


async def test_summaries_as_of_do_not_depend_on_the_plan(memory, group, db_dsn):
    # Two facts per episode (a like and a visit) start the same day and are recorded together.
    for i in range(40):
        who, what, where = PEOPLE[i % 6], WORDS[i % 10], WORDS[(i * 7 + 3) % 10]
        await memory.add_episode(group, f"{who} likes {what} and visited {where} with {PEOPLE[(i + 1) % 6]}.",
                                 actor=who, reference_time=utc(f"2024-0{1 + i % 9}-1{i % 10}"))
    seen = {}
    plans = {"index": {"enable_seqscan": "off", "enable_bitmapscan": "off"},
             "scan": {"enable_indexscan": "off", "enable_bitmapscan": "off"},
             "generic": {"plan_cache_mode": "force_generic_plan"}}
    for mode, settings in plans.items():
        conn = await asyncpg.connect(db_dsn, server_settings=settings)
        try:
            await _init_async_connection(conn)
            entities = await conn.fetch("SELECT id, name FROM pgmemory.entities WHERE group_id = $1 ORDER BY name",
                                        group)
            seen[mode] = {(e["name"], point): await conn.fetchval(SUMMARY_AT, group, e["id"], utc(point))
                          for e in entities for point in ("2024-03-01", "2024-06-15", "2024-12-31")}
        finally:
            await conn.close()
    assert seen["index"] == seen["scan"] == seen["generic"]
    # the speakers have more than five facts by then: their summaries are five of them
    assert seen["index"][("Alice", "2024-12-31")].count("Alice") == 5
