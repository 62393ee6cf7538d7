"""Times said in statements, read as a careful reader would, through the public API in both
extractor modes: what is true now, and what was true at T (search's as_of).

A state said in the past tense at a stated time held then and holds no longer; "until X" ends a
state, "from X to Y" / "between X and Y" bound it on both sides; "since X" starts one.
"""
from __future__ import annotations

import pytest

from tests.belief import ingest, targets
from tests.support import utc

SAID = "2024-06-15"


@pytest.mark.parametrize("text, relation, now, during, before, during_text", [
    # ended states: not true now, true in the stated span
    ("I lived in Boston from 2018 to 2020.", "LIVES_IN", set(), "2020-06-01", "2017-06-01", {"Boston"}),
    ("I worked at Initech between 2018 and 2020.", "WORKS_FOR", set(), "2019-06-01", "2017-06-01", {"Initech"}),
    ("I worked at Acme Corp in 2015.", "WORKS_FOR", set(), "2015-06-01", "2014-06-01", {"Acme Corp"}),
    ("Last year I lived in Denver.", "LIVES_IN", set(), "2023-06-01", "2022-06-01", {"Denver"}),
    ("I worked at Globex from March to May 2020.", "WORKS_FOR", set(), "2020-04-10", "2020-02-10", {"Globex"}),
    # an end with an unknown start: true before the end, not after
    ("I worked at Hooli until last year.", "WORKS_FOR", set(), "2022-06-01", None, {"Hooli"}),
    ("I used to live in Lisbon until 2020.", "LIVES_IN", set(), "2019-06-01", None, {"Lisbon"}),
    # must not end: present or perfect tense, a start, a future end (a plan)
    ("I have lived in Madrid since 2019.", "LIVES_IN", {"Madrid"}, "2020-06-01", "2018-06-01", {"Madrid"}),
    ("I work at Umbrella until next year.", "WORKS_FOR", {"Umbrella"}, "2024-06-16", "2024-06-01", {"Umbrella"}),
    ("I moved to Oslo in 2019.", "LIVES_IN", {"Oslo"}, "2021-06-01", "2018-06-01", {"Oslo"}),
])
async def test_a_stated_time_bounds_the_state(mem, group, text, relation, now, during, before, during_text):
    await ingest(mem, group, [("e1", SAID, text)])
    assert await targets(mem, group, relation) == now, text
    assert await targets(mem, group, relation, as_of=during) == during_text, text
    if before is not None:
        assert await targets(mem, group, relation, as_of=before) == set(), text


@pytest.mark.parametrize("said, text, relation, start", [
    # "last March": the latest March before the month it was said in
    ("2024-01-10", "I moved to Boston last March.", "LIVES_IN", "2023-03-01"),
    ("2024-12-10", "I moved to Boston last March.", "LIVES_IN", "2024-03-01"),
    ("2024-03-20", "I moved to Boston last March.", "LIVES_IN", "2023-03-01"),
    ("2024-06-10", "I joined Initech this March.", "WORKS_FOR", "2024-03-01"),
])
async def test_last_march_is_the_march_before(mem, group, said, text, relation, start):
    await ingest(mem, group, [("e1", said, text)])
    async with mem.pool.acquire() as conn:
        starts = await conn.fetch("SELECT valid_from FROM pgmemory.believed_facts WHERE group_id = $1"
                                  " AND relation = $2", group, relation)
    assert [r["valid_from"] for r in starts] == [utc(start)], text


@pytest.mark.parametrize("text, relation, expected", [
    # the verb does not speak of the past: which Monday, which March is not said -> nothing
    ("I'm starting at Initech on Monday.", "WORKS_FOR", set()),
    ("I start at Initech in March.", "WORKS_FOR", set()),
    ("I'm visiting Paris on May 8.", "VISITED", set()),
    # it does: the most recent one
    ("I started at Initech on Monday.", "WORKS_FOR", {"Initech"}),
    ("I visited Paris on May 8.", "VISITED", {"Paris"}),
    ("I moved to Boston in March.", "LIVES_IN", {"Boston"}),
])
async def test_a_weekday_or_month_without_a_past_verb_is_no_past_date(mem, group, text, relation, expected):
    await ingest(mem, group, [("e1", SAID, text)])
    assert await targets(mem, group, relation, as_of="2024-06-14") == expected, text
