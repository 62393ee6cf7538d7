"""One-off events stay known after their day (issue 18.5): "visited Lisbon in 2019" is found by a
search today and as of any later time, not before it happened, while ended states stay ended."""
from __future__ import annotations

import pytest

from tests.belief import MODES, ingest, open_memory, targets


@pytest.fixture(params=MODES)
async def mem(request, db_dsn, fake_openai):
    m = await open_memory(request.param, db_dsn, fake_openai)
    yield m
    await m.close()


EPISODES = [
    ("e1", "2020-02-01", "I work at Acme Corp."),
    ("e2", "2021-03-01", "I visited Lisbon last week."),
    ("e3", "2022-05-02", "I left Acme Corp last week and now work at Globex."),
]


async def test_past_events_stay_in_view_ended_states_do_not(mem, group):
    known = await ingest(mem, group, EPISODES)
    assert await targets(mem, group, "VISITED") == {"Lisbon"}
    assert await targets(mem, group, "VISITED", as_of="2023-01-01") == {"Lisbon"}
    assert await targets(mem, group, "VISITED", as_of="2020-06-01") == set()
    assert await targets(mem, group, "VISITED", known_at=known["e1"]) == set()
    assert await targets(mem, group, "WORKS_FOR") == {"Globex"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2021-06-01") == {"Acme Corp"}
    context = await mem.context("where did Alice travel", group_ids=group)
    facts = context.split("<FACTS>")[1].split("</FACTS>")[0]
    assert any("Lisbon" in line and "2021-02-2" in line for line in facts.splitlines())
    async with mem.pool.acquire() as conn:
        bounded = await conn.fetchval(
            "SELECT bool_and(is_event AND NOT upper_inf(valid)) FROM pgmemory.facts"
            " WHERE group_id = $1 AND relation = 'VISITED'", group)
    assert bounded
