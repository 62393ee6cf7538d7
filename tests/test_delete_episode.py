"""Issue 18 item 3: deleting an episode. Retract: the belief becomes what it would be had the
episode never been ingested (as new versions, history kept). Erase: also its text is nowhere.
Both extractor modes; deletion is scoped by group."""
from __future__ import annotations

import random
import re
import uuid

import psycopg
import pytest
from psycopg import sql

from pgmemory import InvalidInput
from pgmemory.ingest.episode import episode_uuid
from tests.belief import believed, ingest, summaries, targets

STORY = [
    ("r1", "2020-01-10", "I work at Acme Corp and I live in Boston."),
    ("r2", "2021-03-01", "I left Acme Corp last week and now work at Globex."),
    ("r3", "2021-06-01", "I moved to Denver."),
    ("r4", "2022-05-02", "I left Globex last week and now work at Acme Corp."),
    ("r5", "2019-06-01", "I work at Initech."),  # arrives late, about the past
    ("r6", "2023-01-10", "I like jazz."),
    ("r7", "2023-02-01", "I work at Acme Corp."),  # repeats a believed fact
    ("r8", "2022-01-10", "I moved back to Boston."),
    ("r9", "2024-01-15", "I no longer work at Acme Corp."),
    ("r10", "2020-05-05", "My sister Carol lives in Lima."),
]


def sentences(summary: str) -> set[str]:
    """A summary's sentences (their order follows transaction time, which a re-fold changes)."""
    return {s for s in re.split(r"(?<=\.) ", summary) if s}


@pytest.mark.parametrize("seed", range(3))
async def test_retract_equals_never_ingested(mem, group, seed):
    rng = random.Random(seed)
    retracted = set(rng.sample([eid for eid, _, _ in STORY], rng.randint(1, 5)))
    await ingest(mem, group, STORY)
    for eid in sorted(retracted):
        await mem.delete_episode(group, eid)
    rest = f"{group}-rest"
    await ingest(mem, rest, [e for e in STORY if e[0] not in retracted])
    assert await believed(mem, group) == await believed(mem, rest), f"retracted {sorted(retracted)}"
    got, want = await summaries(mem, group), await summaries(mem, rest)
    assert {k: sentences(v) for k, v in got.items()} == {k: sentences(v) for k, v in want.items()}


def tag(group: str) -> str:
    """A capitalised word unique to this test's group, to name entities no other test uses."""
    return "Q" + "".join(chr(ord("a") + int(c, 16)) for c in group[2:10])


async def test_retract_undoes_the_only_episode_that_ended_a_fact(mem, group):
    globex = f"Globex {tag(group)}"
    known = await ingest(mem, group, [
        ("a", "2020-01-10", "I work at Acme Corp."),
        ("b", "2021-03-01", f"I left Acme Corp last week and now work at {globex}."),
        ("c", "2021-04-01", f"I like {globex}.")])
    assert await targets(mem, group, "WORKS_FOR") == {globex}
    out = await mem.delete_episode(group, "b")
    assert (out.facts_retracted, out.facts_changed, out.erased) == (1, 1, False)  # Globex gone, Acme re-opened
    assert await targets(mem, group, "WORKS_FOR") == {"Acme Corp"}
    # What we believed before the delete is still answerable.
    assert await targets(mem, group, "WORKS_FOR", known_at=known["b"]) == {globex}
    assert (await summaries(mem, group))["Acme Corp"] == "Alice works for Acme Corp."


TABLES = """
SELECT c.table_schema, c.table_name, c.column_name FROM information_schema.columns c
  JOIN information_schema.tables t USING (table_schema, table_name)
 WHERE c.table_schema IN ('pgmemory', 'pgmemory_graph')
   AND (c.data_type IN ('text', 'jsonb', 'json', 'character varying', 'ARRAY')
        OR c.udt_name IN ('agtype', 'tsvector'))
"""


def rows_containing(dsn: str, needle: str) -> list[str]:
    """Every (table or view).column of pgmemory and its AGE graph with a row containing needle."""
    found = []
    with psycopg.connect(dsn) as conn:
        for schema, table, column in conn.execute(TABLES).fetchall():
            query = sql.SQL("SELECT count(*) FROM {}.{} WHERE {}::text ILIKE %s").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(column))
            if conn.execute(query, (f"%{needle}%",)).fetchone()[0]:
                found.append(f"{schema}.{table}.{column}")
    return found


async def test_erase_leaves_no_trace(mem, group, db_dsn):
    globex = f"Globex {tag(group)}"
    story = [(eid, day, text.replace("Globex", globex)) for eid, day, text in STORY[:4]]
    await ingest(mem, group, story)
    erased_text = story[1][2]  # r2: the only source of "works for Globex" and "left Acme Corp"
    assert rows_containing(db_dsn, f"Alice works for {globex}")  # it was there
    out = await mem.delete_episode(group, "r2", erase=True)
    assert out.erased
    for needle in [erased_text, f"Alice works for {globex}", f"now work at {globex}"]:
        assert rows_containing(db_dsn, needle) == [], needle
    assert rows_containing(db_dsn, f"Alice left {globex}")  # said by r4, which stays
    rest = f"{group}-rest"
    await ingest(mem, rest, [e for e in story if e[0] != "r2"])
    assert await believed(mem, group) == await believed(mem, rest)
    async with mem.pool.acquire() as conn:
        log = await conn.fetch("SELECT * FROM pgmemory.erasures WHERE group_id = $1", group)
    assert [r["episode_id"] for r in log] == [episode_uuid(group, "r2")]
    assert set(log[0].keys()) == {"group_id", "episode_id", "erased_at", "facts_affected", "entities_affected"}


async def test_retract_keeps_the_text_in_history_but_erase_does_not(memory, group, db_dsn):
    lima, paris = f"Lima {tag(group)}", f"Paris {tag(group)}"
    await ingest(memory, group, [
        ("a", "2020-01-01", f"I like {lima}."), ("b", "2020-02-01", f"My sister Carol lives in {lima}."),
        ("c", "2020-03-01", f"I like {paris}."), ("d", "2020-04-01", f"My sister Carol lives in {paris}.")])
    await memory.delete_episode(group, "a")
    assert await targets(memory, group, "LIKES") == {paris}
    assert "pgmemory.facts.fact" in rows_containing(db_dsn, f"Alice likes {lima}")  # a past belief
    await memory.delete_episode(group, "c", erase=True)
    assert await targets(memory, group, "LIKES") == set()
    assert rows_containing(db_dsn, f"Alice likes {paris}") == []
    assert rows_containing(db_dsn, f"like {paris}") == []


async def test_delete_is_scoped_by_group(memory, group):
    await ingest(memory, group, [("x", "2020-01-01", "I work at Acme Corp.")])
    eid = episode_uuid(group, "x")
    with pytest.raises(InvalidInput, match="does not exist in group"):
        await memory.delete_episode("attacker", eid)
    with pytest.raises(InvalidInput, match="does not exist in group"):
        await memory.delete_episode("attacker", eid, erase=True)
    assert await targets(memory, group, "WORKS_FOR") == {"Acme Corp"}
    assert (await memory.episode_status(eid, group))["status"] == "done"
    with pytest.raises(InvalidInput, match="does not exist"):
        await memory.delete_episode(group, uuid.uuid4())
    out = await memory.delete_episode(group, eid)
    # Entities only it mentioned go, with every version of their facts.
    assert (out.entities_removed, out.facts_removed) == (2, 1)
    assert await targets(memory, group, "WORKS_FOR") == set()
