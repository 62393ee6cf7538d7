"""Issue 18 items 1-2 through the public API, in both extractor modes: returning to an earlier
state is a new validity interval; an earlier episode repeating a fact moves its start back.
Each sequence is asked now, as of each period, and as believed before each change."""
from __future__ import annotations

from tests.belief import believed, ingest, targets
from tests.support import utc


JOBS = [
    ("j1", "2020-01-10", "I work at Acme Corp."),
    ("j2", "2021-03-01", "I left Acme Corp last week and now work at Globex."),
    ("j3", "2022-05-02", "I left Globex last week and now work at Acme Corp."),
]


async def test_back_at_the_first_employer(mem, group):
    known = await ingest(mem, group, JOBS)
    assert await targets(mem, group, "WORKS_FOR") == {"Acme Corp"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2020-06-01") == {"Acme Corp"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2021-06-01") == {"Globex"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2023-06-01") == {"Acme Corp"}
    # Before the return we believed Globex was still the employer; before that, Acme.
    assert await targets(mem, group, "WORKS_FOR", known_at=known["j2"]) == {"Globex"}
    assert await targets(mem, group, "WORKS_FOR", known_at=known["j1"]) == {"Acme Corp"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2021-06-01", known_at=known["j1"]) == {"Acme Corp"}
    async with mem.pool.acquire() as conn:
        acme = await conn.fetch(
            "SELECT id, valid_from AS vf, valid_to AS vt FROM pgmemory.believed_facts"
            " WHERE group_id = $1 AND target = 'Acme Corp' ORDER BY 2", group)
    # Two validity intervals, two fact ids: the ended one is not re-opened.
    assert [(r["vf"], r["vt"]) for r in acme] == [(utc("2020-01-10"), utc("2021-02-22")),
                                                 (utc("2022-04-25"), None)]


HOMES = [
    ("h1", "2020-01-10", "I live in Boston."),
    ("h2", "2021-01-10", "I moved to Denver."),
    ("h3", "2022-01-10", "I moved back to Boston."),
]


async def test_boston_denver_boston(mem, group):
    known = await ingest(mem, group, HOMES)
    assert await targets(mem, group, "LIVES_IN") == {"Boston"}
    assert await targets(mem, group, "LIVES_IN", as_of="2020-06-01") == {"Boston"}
    assert await targets(mem, group, "LIVES_IN", as_of="2021-06-01") == {"Denver"}
    assert await targets(mem, group, "LIVES_IN", as_of="2023-06-01") == {"Boston"}
    assert await targets(mem, group, "LIVES_IN", known_at=known["h2"]) == {"Denver"}
    assert await targets(mem, group, "LIVES_IN", known_at=known["h1"]) == {"Boston"}


EARLIER = [
    ("s1", "2025-01-10", "I work at Initech."),
    ("s2", "2023-01-10", "I work at Initech."),  # arrives later, says it earlier
]


async def test_earlier_episode_moves_the_start_back(mem, group):
    known = await ingest(mem, group, EARLIER)
    assert await targets(mem, group, "WORKS_FOR", as_of="2024-01-01") == {"Initech"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2022-06-01") == set()
    assert await targets(mem, group, "WORKS_FOR") == {"Initech"}
    # What we believed before the earlier episode arrived stays answerable.
    assert await targets(mem, group, "WORKS_FOR", as_of="2024-01-01", known_at=known["s1"]) == set()
    async with mem.pool.acquire() as conn:
        history = await conn.fetch(
            "SELECT lower(h.valid) AS vf FROM pgmemory.facts f, pgmemory.fact_history(f.group_id, f.id) h"
            " WHERE f.group_id = $1 AND upper_inf(f.recorded)", group)
    assert [r["vf"] for r in history] == [utc("2025-01-10"), utc("2023-01-10")]


async def test_processing_order_does_not_change_the_belief(mem, group):
    """A job's end read before its start (an episode retried after a crash) gives the same belief
    as the natural order: the fact keeps the asserting sentence, not the negation's."""
    steps = [("o1", "2024-01-24", "I work at Initech."), ("o2", "2024-02-23", "I left Initech.")]
    await ingest(mem, group, steps)
    await ingest(mem, f"{group}-rev", list(reversed(steps)))
    natural, reversed_ = await believed(mem, group), await believed(mem, f"{group}-rev")
    assert {r[3:] for r in natural} == {r[3:] for r in reversed_}
    assert any("works for Initech" in r[3] or "work at Initech" in r[3] for r in natural)
