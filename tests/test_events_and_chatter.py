"""Issue 18 items 5 and 9, the extraction halves, through the public API in both extractor modes:
a one-off event is bounded to its day or stated span (states stay open) and stays known after it
happened, not before; the assistant's own chatter creates neither facts nor an entity."""
from __future__ import annotations

import json

from tests.belief import ingest, summaries, targets
from tests.support import utc


EPISODES = [
    ("e1", "2019-05-03", "I visited Lisbon yesterday."),
    ("e2", "2020-02-01", "I live in Boston and I attended the Web Summit in 2019."),
]


async def test_an_event_is_bounded_and_a_state_stays_open(mem, group):
    known = await ingest(mem, group, EPISODES)
    assert await targets(mem, group, "VISITED") == {"Lisbon"}  # a past event stays known
    assert await targets(mem, group, "VISITED", as_of="2019-05-02T12:00:00") == {"Lisbon"}
    assert await targets(mem, group, "VISITED", as_of="2019-05-01T12:00:00") == set()
    assert await targets(mem, group, "VISITED", as_of="2019-05-03T12:00:00") == {"Lisbon"}
    assert await targets(mem, group, "ATTENDED", as_of="2019-11-05") == {"Web Summit"}  # the stated year
    assert await targets(mem, group, "ATTENDED", as_of="2020-01-02") == {"Web Summit"}
    assert await targets(mem, group, "ATTENDED", as_of="2018-12-31") == set()  # not yet
    assert await targets(mem, group, "LIVES_IN") == {"Boston"}  # a state: open until ended
    assert await targets(mem, group, "LIVES_IN", as_of="2030-01-01") == {"Boston"}
    # before the second episode arrived nothing was known about 2019's summit
    assert await targets(mem, group, "ATTENDED", as_of="2019-11-05", known_at=known["e1"]) == set()
    async with mem.pool.acquire() as conn:
        rows = await conn.fetch("SELECT relation, attributes, valid_from, valid_to FROM pgmemory.believed_facts"
                                " WHERE group_id = $1 ORDER BY relation", group)
    kinds = {r["relation"]: (json.loads(r["attributes"]) if isinstance(r["attributes"], str)
                             else r["attributes"]).get("kind") for r in rows}
    assert kinds == {"ATTENDED": "event", "LIVES_IN": None, "VISITED": "event"}
    visit = next(r for r in rows if r["relation"] == "VISITED")
    assert (visit["valid_from"], visit["valid_to"]) == (utc("2019-05-02"), utc("2019-05-03"))


async def test_the_assistants_chatter_is_neither_fact_nor_entity(mem, group):
    for eid, text in [("c1", "Sure, I can help you plan the trip! I love a good itinerary."),
                      ("c2", "Of course. I work best with clear instructions.")]:
        result = await mem.add_episode(group, text, actor="Assistant", reference_time=utc("2024-03-01"),
                                       episode_id=eid)
        assert result.status == "done"
    await ingest(mem, group, [("u1", "2024-03-02", "I work at Acme Corp.")])
    names = set(await summaries(mem, group))
    assert "Assistant" not in names and {"Alice", "Acme Corp"} <= names
    assert await targets(mem, group, "LOVES") == set() and await targets(mem, group, "WORKS_FOR") == {"Acme Corp"}
    found = await mem.search("Assistant", group_ids=group, limit=10)
    assert all(e.name != "Assistant" for e in found.entities)


PAST = [
    ("e1", "2020-02-01", "I work at Acme Corp."),
    ("e2", "2021-03-01", "I visited Lisbon last week."),
    ("e3", "2022-05-02", "I left Acme Corp last week and now work at Globex."),
]


async def test_past_events_stay_in_view_ended_states_do_not(mem, group):
    known = await ingest(mem, group, PAST)
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
