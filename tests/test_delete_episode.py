"""Issue 18 item 3: deleting an episode. Retract: the belief becomes what it would be had the
episode never been ingested (as new versions, history kept). Erase: also its text is nowhere.
Both extractor modes; deletion is scoped by group."""
from __future__ import annotations

import random
import re
import uuid

from datetime import datetime

import psycopg
import pydantic
import pytest
from psycopg import sql

from pgmemory import InvalidInput, SearchFilters
from pgmemory.ingest.episode import episode_uuid
from tests.belief import EXCLUSION_QUERIES, believed, check_exclusions, clock, entities, ingest, summaries, targets
from tests.support import utc
from tests.test_as_of_answers import _fact, _llm_memory

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
    ("r11", "2021-04-01", "I visited Zed Labs."),
    ("r12", "2022-07-01", "I like Zed Labs Inc."),  # the same entity, renamed to the fuller name
]


def sentences(summary: str) -> set[str]:
    """A summary's sentences (their order follows transaction time, which a re-fold changes)."""
    return {s for s in re.split(r"(?<=\.) ", summary) if s}


@pytest.mark.parametrize("seed", range(4))
async def test_retract_equals_never_ingested(mem, group, seed):
    """Ingest all, then retract (even seeds) or erase (odd seeds) a random subset == ingest only the rest."""
    rng = random.Random(seed)
    retracted = set(rng.sample([eid for eid, _, _ in STORY], rng.randint(1, 5)))
    erase = seed % 2 == 1
    await ingest(mem, group, STORY)
    before = {rel: await targets(mem, group, rel) for rel in ("WORKS_FOR", "LIVES_IN", "LIKES")}
    known = await clock(mem)
    for eid in sorted(retracted):
        await mem.delete_episode(group, eid, erase=erase)
    if not erase:  # what we believed before the retracts still answers (history kept)
        assert {rel: await targets(mem, group, rel, known_at=known) for rel in before} == before
    else:  # one believed version per fact at any moment of transaction time, history rewritten or not
        async with mem.pool.acquire() as conn:
            assert await conn.fetchval(
                "SELECT count(*) FROM pgmemory.facts a JOIN pgmemory.facts b ON a.id = b.id"
                " AND a.version_id < b.version_id AND a.recorded && b.recorded WHERE a.group_id = $1", group) == 0
    await assert_as_if_never_told(mem, group, [e for e in STORY if e[0] not in retracted])


async def assert_as_if_never_told(mem, group: str, kept: list[tuple[str, str, str]]) -> None:
    """The group, after its deletes, believes what a group told only `kept` believes: facts, entity
    summaries, names, labels and attributes; its exclusive pairs are those of its live claims."""
    rest = f"{group}-rest"
    await ingest(mem, rest, kept)
    assert await believed(mem, group) == await believed(mem, rest), f"kept {[e[0] for e in kept]}"
    got, want = await summaries(mem, group), await summaries(mem, rest)
    assert {k: sentences(v) for k, v in got.items()} == {k: sentences(v) for k, v in want.items()}
    assert await entities(mem, group) == await entities(mem, rest)  # names, labels, attributes
    async with mem.pool.acquire() as conn:  # the exclusive pairs its deleted claims made are gone
        check_exclusions(*[await conn.fetch(q.replace("%s", "$1"), group) for q in EXCLUSION_QUERIES])


MORE = [  # with STORY: a return to a job, a home left, a like dropped (the erase audit's random stories)
    ("s1", "2020-02-10", "I live in Denver."),
    ("s2", "2021-09-10", "I work at Initech."),
    ("s3", "2020-03-01", "My sister Carol lives in Paris."),
    ("s4", "2024-02-01", "I work at Acme Corp again."),
    ("s5", "2022-03-03", "I no longer live in Boston."),
    ("s6", "2021-05-05", "I like jazz."),
    ("s7", "2023-05-05", "I don't like jazz anymore."),
]


@pytest.mark.parametrize("seed", [13, 21, 5, 8])  # (13 and 21 differed before keep_slots_apart / the kept pairs)
async def test_deletes_in_any_order_equal_never_told(mem, group, seed):
    """A random story of STORY and MORE, told in a random order; 1-4 of its episodes deleted, retracted
    or erased at random == a group told only the others."""
    rng = random.Random(seed)
    story = STORY + MORE
    rng.shuffle(story)
    story = story[: rng.randint(5, len(story))]
    gone = set(rng.sample([e for e, _, _ in story], rng.randint(1, 4)))
    erase = rng.random() < 0.5
    await ingest(mem, group, story)
    for eid in sorted(gone):
        await mem.delete_episode(group, eid, erase=erase if rng.random() < 0.7 else not erase)
    await assert_as_if_never_told(mem, group, [e for e in story if e[0] not in gone])


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


@pytest.mark.parametrize("how", ["delete_episode", "retract_fact"])
async def test_a_value_between_two_of_one_slot_withdrawn_leaves_the_later_ending_the_earlier(mem, group, how):
    """Initech (2019), Globex (2021), Acme (2024): the judge saw Globex when Acme was said (Initech had
    ended), so only Globex -> Initech and Acme -> Globex were stored. Withdrawing Globex (its episode
    deleted, or the fact retracted) left Initech believed to this day beside Acme; a group that never
    heard of Globex ends Initech when Acme begins."""
    story = [("r1", "2019-06-01", "I work at Initech."), ("r2", "2021-03-01", "I now work at Globex."),
             ("r3", "2024-02-01", "I work at Acme Corp.")]
    await ingest(mem, group, story)
    if how == "delete_episode":
        await mem.delete_episode(group, "r2")
    else:
        async with mem.pool.acquire() as conn:
            globex = await conn.fetchval("SELECT id FROM pgmemory.believed_facts WHERE group_id = $1"
                                         " AND target = 'Globex'", group)
        await mem.retract_fact(group, globex)
    rest = f"{group}-rest"
    await ingest(mem, rest, [story[0], story[2]])
    assert await believed(mem, group) == await believed(mem, rest)
    assert await targets(mem, group, "WORKS_FOR") == {"Acme Corp"}
    assert await targets(mem, group, "WORKS_FOR", as_of="2022-01-01") == {"Initech"}
    async with mem.pool.acquire() as conn:  # the pair kept is a live claim's, as every stored pair
        check_exclusions(*[await conn.fetch(q.replace("%s", "$1"), group) for q in EXCLUSION_QUERIES])


@pytest.mark.parametrize("order", ["told in order", "told late"])
async def test_a_deleted_start_does_not_leave_two_values_of_one_slot_holding_together(mem, group, order):
    """Initech (2019), Acme (2020, ending Initech), Globex (2021, leaving Acme): Globex was judged when
    Initech had ended, so it never contradicted it. With the 2020 Acme statement deleted, Initech
    held on past 2021 beside Globex; a group that never heard it ends Initech where Globex begins."""
    story = [("a", "2019-06-01", "I work at Initech."), ("b", "2020-01-10", "I work at Acme Corp."),
             ("c", "2021-03-01", "I left Acme Corp last week and now work at Globex.")]
    if order == "told late":  # the past arrives last
        story = [story[1], story[2], story[0]]
    await ingest(mem, group, story)
    await mem.delete_episode(group, "b")
    rest = f"{group}-rest"
    await ingest(mem, rest, [e for e in story if e[0] != "b"])
    assert await believed(mem, group) == await believed(mem, rest)
    assert await targets(mem, group, "WORKS_FOR", as_of="2022-01-01") == {"Globex"}
    async with mem.pool.acquire() as conn:
        check_exclusions(*[await conn.fetch(q.replace("%s", "$1"), group) for q in EXCLUSION_QUERIES])


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


async def test_retract_keeps_the_text_in_history_but_erase_does_not(mem, group, db_dsn):
    memory = mem
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
    # A user's deletion request after a retract: the retracted episode can still be erased.
    await memory.delete_episode(group, "a", erase=True)
    assert rows_containing(db_dsn, f"Alice likes {lima}") == []
    assert await targets(memory, group, "LIVES_IN") == {paris}
    with pytest.raises(InvalidInput, match="does not exist"):
        await memory.delete_episode(group, "a", erase=True)  # erased: nothing left to find
    async with memory.pool.acquire() as conn:
        log = await conn.fetch("SELECT episode_id FROM pgmemory.erasures WHERE group_id = $1 ORDER BY erased_at",
                               group)
    assert [r["episode_id"] for r in log] == [episode_uuid(group, "c"), episode_uuid(group, "a")]


async def test_delete_is_scoped_by_group(mem, group):
    memory = mem
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
    # Entities only it introduced are retired, their facts withdrawn.
    assert (out.entities_removed, out.facts_removed) == (2, 1)
    assert await targets(memory, group, "WORKS_FOR") == set()


async def test_retract_retires_entities_it_alone_introduced(mem, group, db_dsn):
    lima = f"Lima {tag(group)}"
    known = await ingest(mem, group, [("a", "2020-01-10", "I work at Acme Corp."),
                                      ("b", "2020-05-05", f"My sister Carol lives in {lima}.")])
    out = await mem.delete_episode(group, "b")
    assert (out.entities_removed, out.facts_removed) == (2, 2)  # Carol and Lima, retired with 2 facts
    # Now: gone from facts, entities, search and context.
    assert await targets(mem, group, "LIVES_IN") == set()
    assert {"Carol", lima} & set(await summaries(mem, group)) == set()
    found = await mem.search(f"Carol {lima}", group_ids=group, limit=20)
    assert {e.name for e in found.entities} & {"Carol", lima} == set()
    assert lima not in await mem.context(f"Carol {lima}", group_ids=group)
    # Known before the retract: still believed then, entity and fact (history kept).
    assert await targets(mem, group, "LIVES_IN", known_at=known["b"]) == {lima}
    assert await targets(mem, group, "LIVES_IN", as_of="2021-01-01", known_at=known["b"]) == {lima}
    assert await targets(mem, group, "LIVES_IN", known_at=known["a"]) == set()
    then = await mem.search(f"Carol {lima}", group_ids=group, limit=20,
                            filters=SearchFilters(known_at=known["b"]))
    assert lima in {e.name for e in then.entities}
    assert f"Carol lives in {lima}" in await mem.context(f"Carol {lima}", group_ids=group,
                                                          filters=SearchFilters(known_at=known["b"]))
    where = rows_containing(db_dsn, lima)
    assert "pgmemory.facts.fact" in where and not [w for w in where if w.startswith("pgmemory_graph.")]
    # A later mention makes a new, believed entity: as if "b" had never been ingested.
    await ingest(mem, group, [("c", "2021-02-02", f"I visited {lima}.")])
    assert await targets(mem, group, "VISITED") == {lima}
    rest = f"{group}-rest"
    await ingest(mem, rest, [("a", "2020-01-10", "I work at Acme Corp."), ("c", "2021-02-02", f"I visited {lima}.")])
    assert await summaries(mem, group) == await summaries(mem, rest)
    assert await entities(mem, group) == await entities(mem, rest)
    # Erased later (a deletion request after the retract): the retired entities and their history go.
    out = await mem.delete_episode(group, "b", erase=True)
    assert (out.erased, out.entities_removed) == (True, 2)
    assert rows_containing(db_dsn, f"Carol lives in {lima}") == []
    async with mem.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.entities WHERE group_id = $1"
                                   " AND retired_at IS NOT NULL", group) == 0
    assert await targets(mem, group, "LIVES_IN", known_at=known["b"]) == set()  # history rewritten
    assert await summaries(mem, group) == await summaries(mem, rest)


async def test_retired_entities_are_not_listed_or_found(memory, group):
    """The graph reads answer what is believed now: an entity retired by a retract is neither
    listed (Memory.list_entities) nor found (Memory.get_entity), like search and context."""
    await ingest(memory, group, [("a", "2020-01-10", "I work at Acme Corp."),
                                 ("b", "2022-01-10", "I now work at Globex.")])
    globex = next(e for e in await memory.list_entities(group) if e.name == "Globex")
    await memory.delete_episode(group, "b")
    assert {e.name for e in await memory.list_entities(group)} == {"Alice", "Acme Corp"}
    assert await memory.list_entities(group, name="glob") == []
    assert await memory.get_entity(group, globex.id) is None
    # A later mention makes a new entity: one Globex is listed, the new one.
    await ingest(memory, group, [("c", "2023-01-10", "I now work at Globex.")])
    listed = [e for e in await memory.list_entities(group) if e.name == "Globex"]
    assert len(listed) == 1 and listed[0].id != globex.id


@pytest.mark.parametrize("erase", [False, True])
async def test_delete_undoes_a_rename(mem, group, db_dsn, erase):
    zed = f"Zed {tag(group)} Labs"
    known = await ingest(mem, group, [("a", "2020-01-10", f"I work at {zed}."),
                                      ("b", "2020-02-01", f"I like {zed} Inc.")])
    assert set(await summaries(mem, group)) == {"Alice", f"{zed} Inc"}  # one entity, renamed by "b"
    await mem.delete_episode(group, "b", erase=erase)
    assert set(await summaries(mem, group)) == {"Alice", zed}
    assert await targets(mem, group, "WORKS_FOR") == {zed}
    found = await mem.search(zed, group_ids=group, limit=20)
    assert zed in {e.name for e in found.entities}  # its name embedding is of the name it has now
    async with mem.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.entities e WHERE e.group_id = $1"
                                   " AND NOT EXISTS (SELECT FROM pgmemory.entity_name_vectors v"
                                   " WHERE v.group_id = e.group_id AND v.entity_id = e.id)", group) == 0
    then = await targets(mem, group, "WORKS_FOR", known_at=known["b"])
    if erase:  # history rewritten: it was never said
        assert then == {zed}
        assert rows_containing(db_dsn, f"{zed} Inc") == []
    else:  # retract: what we believed then still answers
        assert then == {f"{zed} Inc"}
        assert await targets(mem, group, "WORKS_FOR", known_at=known["a"]) == {zed}
    rest = f"{group}-rest"
    await ingest(mem, rest, [("a", "2020-01-10", f"I work at {zed}.")])
    assert await summaries(mem, group) == await summaries(mem, rest)
    assert await entities(mem, group) == await entities(mem, rest)


async def test_erase_rewrites_only_what_the_episode_wrote(mem, group, db_dsn):
    globex = f"Globex {tag(group)}"
    known = await ingest(mem, group, [
        ("j1", "2020-01-10", "I work at Acme Corp."),
        ("j2", "2021-03-01", f"I left Acme Corp last week and now work at {globex}."),
        ("j3", "2021-09-01", "I like jazz."),
        ("j4", "2022-05-02", f"I left {globex} last week and now work at Acme Corp.")])
    history = ("SELECT v.entity_id, lower(v.recorded), v.name, v.summary FROM pgmemory.entity_versions v"
               " WHERE v.group_id = $1 AND lower(v.recorded) < $2")
    async with mem.pool.acquire() as conn:
        entity_history = set(await conn.fetch(history, group, known["j3"]))
    await mem.delete_episode(group, "j4", erase=True)
    async with mem.pool.acquire() as conn:  # entity states recorded before j4 are all kept
        assert set(await conn.fetch(history, group, known["j3"])) == entity_history
        # Each entity's history has no gap: its versions meet each other and its current state.
        for e in await conn.fetch("SELECT id, created_at, updated_at FROM pgmemory.entities WHERE group_id = $1",
                                  group):
            spans = [r[0] for r in await conn.fetch("SELECT recorded FROM pgmemory.entity_versions"
                                                    " WHERE entity_id = $1 ORDER BY lower(recorded)", e["id"])]
            bounds = [e["created_at"]] + [b for r in spans for b in (r.lower, r.upper)] + [e["updated_at"]]
            assert bounds[0::2] == bounds[1::2], e["id"]
    assert rows_containing(db_dsn, f"left {globex}") == []  # said only by j4
    assert await targets(mem, group, "WORKS_FOR") == {globex}
    # History before j4 is untouched...
    assert await targets(mem, group, "WORKS_FOR", known_at=known["j1"]) == {"Acme Corp"}
    assert await targets(mem, group, "WORKS_FOR", known_at=known["j2"]) == {globex}
    assert await targets(mem, group, "WORKS_FOR", as_of="2020-06-01", known_at=known["j3"]) == {"Acme Corp"}
    # ...and since j4 we believed what we would have believed without it.
    assert await targets(mem, group, "WORKS_FOR", known_at=known["j4"]) == {globex}
    assert await targets(mem, group, "WORKS_FOR", as_of="2023-01-01", known_at=known["j4"]) == {globex}
    async with mem.pool.acquire() as conn:
        # One believed version per fact at any moment, and Globex believed without a gap since j2.
        rows = await conn.fetch(
            "SELECT f.id, f.recorded FROM pgmemory.facts f WHERE f.group_id = $1 AND f.relation = 'WORKS_FOR'"
            " ORDER BY f.id, lower(f.recorded)", group)
        spans = {}
        for r in rows:
            spans.setdefault(r["id"], []).append(r["recorded"])
        for versions in spans.values():
            assert all(a.upper == b.lower for a, b in zip(versions, versions[1:]))


class Company(pydantic.BaseModel):
    """An organisation (a custom entity type: its fields become attributes)."""

    industry: str | None = None
    headcount: int | None = None


def _company(name, summary, **attributes):
    return {"name": name, "type": "Company", "summary": summary, "attributes": attributes}


async def renameable(group: str) -> str:
    """"Acme <tag>", or the first variant of it whose hash embedding does not collide with
    " Inc": the rename's candidate is found by name similarity (>= 0.6), which the hash embedder
    standing in for a real one gives "Acme Qx" / "Acme Qx Inc" as 0.78, but 0.58 for about 1 word
    in 200 (a bucket shared with "inc" or "acme"), and the rename was then a new entity (a CI flake)."""
    import numpy as np

    from pgmemory.providers.embedder import HashEmbedder

    embedder = HashEmbedder()
    for suffix in ("", *"bcdfghjklmnp"):
        name = f"Acme {tag(group)}{suffix}"
        a, b = (np.asarray(v) for v in await embedder.embed([name, f"{name} Inc"]))
        if a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.7:
            return name
    raise AssertionError("no variant of the name escapes the hash embedder's collisions")


def acme_story(acme: str) -> list:
    """(reference time, text, scripted extraction reply): the second renames and re-describes `acme`."""
    alice = {"name": "Alice", "type": None, "summary": "", "attributes": {}}
    return [
        ("2024-01-01T00:00:00+00:00", f"I work at {acme}.", {
            "entities": [alice, _company(acme, "A robotics company.", industry="robotics")],
            "facts": [_fact("Alice", acme, "WORKS_FOR", f"Alice works for {acme}.", "2024-01-01T00:00:00Z")]}),
        ("2024-02-01T00:00:00+00:00", f"{acme} Inc, where I work, makes toys now with 500 people.", {
            "entities": [alice, _company(f"{acme} Inc", f"A toy maker {acme}.", industry=f"toys {acme}",
                                         headcount=500)],
            "facts": [_fact("Alice", f"{acme} Inc", "WORKS_FOR", f"Alice works for {acme} Inc.")]}),
    ]


@pytest.mark.parametrize("erase", [False, True])
async def test_delete_undoes_an_llm_rename_and_attribute_merge(db_dsn, fake_openai, group, erase):
    acme = await renameable(group)
    story = acme_story(acme)
    memory = await _llm_memory(db_dsn, fake_openai, story)
    rest = f"{group}-rest"
    try:
        known = {}
        for g, episodes in ((group, story), (rest, story[:1])):
            for i, (when, text, _) in enumerate(episodes):
                await memory.add_episode(g, text, actor="Alice", reference_time=datetime.fromisoformat(when),
                                         episode_id=f"e{i}", entity_types={"Company": Company})
                known[(g, i)] = await clock(memory)
        toys = f"toys {acme}"
        merged = (await entities(memory, group))[f"{acme} Inc"]
        assert merged[1] == {"industry": toys, "headcount": 500}  # renamed, attributes merged
        await memory.delete_episode(group, "e1", erase=erase)
        assert await entities(memory, group) == await entities(memory, rest)
        assert (await entities(memory, group))[acme] == (frozenset({"Entity", "Company"}), {"industry": "robotics"})
        assert await summaries(memory, group) == await summaries(memory, rest)
        then = await memory.search(acme, group_ids=group, limit=20, filters=SearchFilters(known_at=known[(group, 1)]))
        acme_then = [(e.name, e.attributes) for e in then.entities if e.name.startswith("Acme")]
        if erase:  # never said: no trace of the name, the description or the attributes
            for needle in (f"{acme} Inc", f"A toy maker {acme}", toys):
                assert rows_containing(db_dsn, needle) == [], needle
            assert acme_then == [(acme, {"industry": "robotics"})]
        else:  # retract: what we believed then is still answerable
            assert acme_then == [(f"{acme} Inc", {"industry": toys, "headcount": 500})]
    finally:
        await memory.close()


async def test_delete_restores_the_name_an_entity_was_created_with_through_add_fact(mem, group):
    zed = f"Zed {tag(group)} Labs"
    await mem.add_fact(group, "Alice", "WORKS_FOR", zed, f"Alice works for {zed}.", valid_from="2020-01-01T00:00:00Z")
    await ingest(mem, group, [("b", "2020-02-01", f"I like {zed} Inc.")])
    assert f"{zed} Inc" in await summaries(mem, group)  # renamed by "b"
    await mem.delete_episode(group, "b", erase=True)
    assert set(await summaries(mem, group)) == {"Alice", zed}
    assert await targets(mem, group, "WORKS_FOR") == {zed}


async def test_a_retracted_fact_stays_retracted_when_one_of_its_episodes_is_deleted(mem, group):
    """retract_fact withdraws the statements behind the fact: deleting one of the two episodes that
    said it re-folds the lineage without them, so the fact does not come back under another id."""
    await ingest(mem, group, [("e1", "2020-01-10", "I work at Acme Corp."), ("e2", "2021-01-10", "I work at Acme Corp.")])
    (fact,) = [f for f in (await mem.search("Acme Corp", group_ids=group)).facts if f.relation == "WORKS_FOR"]
    assert (await mem.retract_fact(group, fact.id))["action"] == "withdrawn"
    assert await targets(mem, group, "WORKS_FOR") == set()
    await mem.delete_episode(group, "e1")
    assert await targets(mem, group, "WORKS_FOR") == set()
    await ingest(mem, group, [("e3", "2022-01-10", "I work at Acme Corp.")])  # said again after the retraction
    assert await targets(mem, group, "WORKS_FOR") == {"Acme Corp"}


@pytest.mark.parametrize("erase", [False, True])
async def test_deleting_the_only_episode_behind_a_retracted_fact_takes_the_retraction_with_it(
        memory, group, db_dsn, erase):
    """A retract_fact of a fact only episode "b" said withdraws nothing once "b" is deleted: it goes
    too (it copied b's sentence and names b's entities), so the entity only "b" introduced is retired
    or erased as if "b" had never been ingested, and an erase leaves none of b's text."""
    lima = f"Lima {tag(group)}"
    known = await ingest(memory, group, [("a", "2020-01-10", "I live in Boston."),
                                         ("b", "2021-01-10", f"I live in {lima}.")])
    (fact,) = [f for f in (await memory.search(lima, group_ids=group)).facts if f.target == lima]
    await memory.retract_fact(group, fact.id)
    out = await memory.delete_episode(group, "b", erase=erase)
    assert out.entities_removed == 1
    assert set(await summaries(memory, group)) == {"Alice", "Boston"}
    assert lima not in await memory.context(f"where does Alice live {lima}", group_ids=group)
    if not erase:  # known before the retract: as believed then (history kept); then erased later
        assert await targets(memory, group, "LIVES_IN", known_at=known["b"]) == {lima}
        await memory.delete_episode(group, "b", erase=True)
    assert rows_containing(db_dsn, lima) == []
    assert await targets(memory, group, "LIVES_IN", known_at=known["b"]) == {"Boston"}


async def test_an_erase_leaves_a_retraction_that_still_withdraws_others_without_its_sentence(memory, group, db_dsn):
    """A retraction of a fact two episodes said stays when one is erased (the other's statement is
    still withdrawn), but no longer in the erased one's words."""
    lima = f"Lima {tag(group)}"
    await ingest(memory, group, [("a", "2020-01-10", f"I live in {lima}."), ("b", "2020-06-10", f"I moved to {lima}.")])
    (fact,) = [f for f in (await memory.search(lima, group_ids=group)).facts if f.target == lima]
    assert fact.fact == f"Alice lives in {lima}."
    await memory.retract_fact(group, fact.id)
    await memory.delete_episode(group, "a", erase=True)
    assert rows_containing(db_dsn, f"lives in {lima}") == []
    assert await targets(memory, group, "LIVES_IN") == set()


async def test_an_erase_leaves_what_was_believed_before_the_episode_unchanged(memory, group):
    """An erase rewrites only history from the erased episode's ingestion on: a version recorded
    before it carrying the same words (said by an episode retracted since) or longer ones that
    contain them ("... (per HR).", an entity summary) is untouched."""
    acme, initech = f"Acme {tag(group)}", f"Initech {tag(group)}"
    await memory.add_fact(group, "Alice", "WORKS_FOR", initech, f"Alice works for {initech} (per HR).",
                          valid_from="2020-01-01T00:00:00Z")
    known = await ingest(memory, group, [("e1", "2020-06-01", f"I work at {acme}.")])
    await memory.delete_episode(group, "e1")  # retracted: history kept
    known |= await ingest(memory, group, [("e2", "2021-01-01", f"I work at {acme}."),
                                          ("e3", "2022-01-01", f"I now work at {initech}.")])

    async def believed_then(at):
        async with memory.pool.acquire() as conn:
            facts = await conn.fetch("SELECT version_id, fact, valid::text FROM pgmemory.fact_versions"
                                     " WHERE group_id = $1 AND recorded @> $2::timestamptz ORDER BY 1", group, at)
            ents = await conn.fetch("SELECT id, name, summary FROM pgmemory.entity_history"
                                    " WHERE group_id = $1 AND recorded @> $2::timestamptz ORDER BY 1", group, at)
        return [tuple(r) for r in facts], [tuple(r) for r in ents]

    before = {eid: await believed_then(known[eid]) for eid in ("e1", "e2")}
    assert f"Alice works for {acme}." in [f for _, f, _ in before["e1"][0]]
    await memory.delete_episode(group, "e2", erase=True)
    await memory.delete_episode(group, "e3", erase=True)
    assert await believed_then(known["e1"]) == before["e1"]


@pytest.mark.parametrize("mentioned_later", [False, True])
async def test_an_erased_episode_s_entity_is_known_from_the_first_other_statement_of_it(memory, group,
                                                                                       mentioned_later):
    """An entity the erased episode created but a fact written with add_fact names too is known
    from that write on (as if the episode had never been ingested), not from the episode's time,
    nor from a later episode's mention: entities_at and search then list it beside its fact."""
    lima = f"Lima {tag(group)}"
    known = await ingest(memory, group, [("a", "2019-01-10", "I live in Boston."),
                                         ("e", "2020-01-10", f"I work at {lima}.")])
    await memory.add_fact(group, "Bob", "LIKES", lima, f"Bob likes {lima}.", valid_from="2020-02-01T00:00:00Z")
    known["f"] = await clock(memory)
    if mentioned_later:
        await ingest(memory, group, [("m", "2021-01-10", f"I visited {lima}.")])
    await memory.delete_episode(group, "e", erase=True)
    async with memory.pool.acquire() as conn:
        for at, there in ((known["e"], False), (known["f"], True)):
            facts = await conn.fetch("SELECT fact FROM pgmemory.facts_as_of($1, NULL, $2)", group, at)
            assert (f"Bob likes {lima}." in [r["fact"] for r in facts]) == there
            named = await conn.fetch("SELECT name FROM pgmemory.entities_at($1, NULL, $2)", group, at)
            assert (lima in [r["name"] for r in named]) == there
            found = await memory.search(f"Bob likes {lima}", group_ids=group, filters=SearchFilters(known_at=at))
            assert (lima in {e.name for e in found.entities}) == there


async def test_fact_versions_cite_the_episodes_of_their_own_time(memory, group):
    """fact_versions (and Memory.fact_history) give each version the episodes it cited while it was
    believed, so FOR SYSTEM_TIME AS OF T' cites as T' did: not an episode ingested after the
    version was superseded, and still an episode retracted since (history), as search does."""
    known = await ingest(memory, group, [("e1", "2021-01-10", "I work at Acme Corp."),
                                         ("e2", "2020-01-10", "I work at Acme Corp.")])  # moves the start back
    e1, e2 = episode_uuid(group, "e1"), episode_uuid(group, "e2")
    await memory.delete_episode(group, "e2")
    now = await clock(memory)

    async def cited(at):
        async with memory.pool.acquire() as conn:
            rows = await conn.fetch("SELECT valid_from, episodes FROM pgmemory.fact_versions"
                                    " WHERE group_id = $1 AND recorded @> $2::timestamptz", group, at)
        found = await memory.search("Acme Corp", group_ids=group, filters=SearchFilters(known_at=at))
        assert [set(f.episodes) for f in found.facts] == [set(r["episodes"]) for r in rows]
        return [(r["valid_from"], r["episodes"]) for r in rows]

    assert await cited(known["e1"]) == [(utc("2021-01-10"), [e1])]
    assert await cited(known["e2"]) == [(utc("2020-01-10"), [e1, e2])]
    assert await cited(now) == [(utc("2021-01-10"), [e1])]
    (fact,) = (await memory.search("Acme Corp", group_ids=group)).facts
    assert [v.episodes for v in await memory.fact_history(group, fact.id)] == [[e1], [e1, e2], [e1]]


async def test_a_retracted_episode_is_history_cited_before_the_retract_and_gone_after(memory, group, db_dsn):
    """Retract keeps the episode as history (episodes.retracted_at): a search or context known at a
    time before the retract shows it and the facts citing it as before; current reads (search,
    context, get_episode(s), episode_status, the analyst views) leave it out; the erase leaves none
    of its text."""
    globex = f"Globex {tag(group)}"
    said = f"I now work at {globex}."
    known = await ingest(memory, group, [("e1", "2020-01-01", "I work at Acme Corp."), ("e2", "2022-01-01", said)])
    e2 = episode_uuid(group, "e2")
    query = f"where does Alice work {globex}"

    async def cited(known_at=None):
        found = await memory.search(query, group_ids=group, limit=20, filters=SearchFilters(known_at=known_at))
        return ({e.id for e in found.episodes},
                {f.target: set(f.episodes) for f in found.facts if f.relation == "WORKS_FOR"})

    before = await cited(known["e2"])
    assert e2 in before[0] and e2 in before[1][globex]
    await memory.delete_episode(group, "e2")
    retracted = await clock(memory)
    # Known before the retract: the same episodes, facts and citations as before it.
    assert await cited(known["e2"]) == before
    assert f"works for {globex}" in await memory.context(query, group_ids=group,
                                                         filters=SearchFilters(known_at=known["e2"]))
    # Now, and known after the retract: as if it had never been ingested.
    for known_at in (None, retracted):
        episodes, facts = await cited(known_at)
        assert e2 not in episodes and globex not in facts and all(e2 not in ids for ids in facts.values())
        assert globex not in await memory.context(query, group_ids=group, filters=SearchFilters(known_at=known_at))
    assert [e.content for e in await memory.get_episodes(group)] == ["I work at Acme Corp."]
    assert await memory.get_episode(group, "e2") is None and await memory.episode_status("e2", group) is None
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.episode_log WHERE group_id = $1", group) == 1
    with pytest.raises(InvalidInput, match="does not exist"):
        await memory.delete_episode(group, "e2")  # retracted once
    # Erased: its row and text go; history is rewritten as if it had never been said.
    await memory.delete_episode(group, "e2", erase=True)
    assert rows_containing(db_dsn, said) == []
    assert globex not in (await cited(known["e2"]))[1]
    await memory.add_episode(group, said, actor="Alice", reference_time=utc("2022-01-01"), episode_id="e2")
    assert await targets(memory, group, "WORKS_FOR") == {globex}


@pytest.mark.parametrize("path", ["add_episode", "enqueue_episode"])
async def test_an_episode_said_again_after_its_retract_is_processed_as_new(memory, group, path):
    """Adding an episode with a retracted episode's id (a re-import, a corrected message) replaces the
    kept row: the new content is processed and believed, through either path."""
    await ingest(memory, group, [("e1", "2020-01-01", "I work at Acme Corp."),
                                 ("e2", "2022-01-01", "I now work at Initech.")])
    await memory.delete_episode(group, "e2")
    assert await targets(memory, group, "WORKS_FOR") == {"Acme Corp"}
    globex = f"Globex {tag(group)}"
    add = getattr(memory, path)
    await add(group, f"I now work at {globex}.", actor="Alice", reference_time=utc("2022-01-01"), episode_id="e2")
    if path == "enqueue_episode":
        await memory.retry(group)
    assert [e.content for e in await memory.get_episodes(group)] == ["I work at Acme Corp.", f"I now work at {globex}."]
    assert await targets(memory, group, "WORKS_FOR") == {globex}


STATISTICS = """
SELECT schemaname || '.' || tablename || '.' || attname FROM pg_stats
 WHERE schemaname IN ('pgmemory', 'pgmemory_graph')
   AND concat(most_common_vals::text, histogram_bounds::text, most_common_elems::text) ILIKE %s
"""


async def test_erase_leaves_its_text_in_no_planner_statistics(empty_dsn):
    """ANALYZE (autovacuum's, or a DBA's) copies column values into pg_statistic: most common values,
    histogram bounds, most common lexemes, which the owner reads in pg_stats. An erased episode's
    words, and an erased group's, are not left there (a fresh database: its few rows are all in
    the histograms)."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage.setup import init_database
    from tests.conftest import DIM

    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        init_database(conn, DIM)

    def analysed_with(needle: str) -> list[str]:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")
            return [r[0] for r in conn.execute(STATISTICS, (f"%{needle}%",)).fetchall()]

    memory = await Memory.open(empty_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        for group, secret in (("g-stats-1", "Vorquaxel"), ("g-stats-2", "Quendrith")):
            await ingest(memory, group, [("a", "2021-01-10", "I work at Acme Corp and I live in Boston."),
                                         ("b", "2021-05-10", f"I now work at {secret} Labs. I like {secret} Labs."),
                                         ("c", "2021-06-10", "I like jazz and I have a dog named Pepper.")])
            await memory.build_communities(group)
        for secret in ("Vorquaxel", "Quendrith"):
            assert "pgmemory.episodes.content" in analysed_with(secret)
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")
        await memory.delete_episode("g-stats-1", "b", erase=True)
        await memory.erase_group("g-stats-2")
        with psycopg.connect(empty_dsn) as conn:
            for secret in ("Vorquaxel", "Quendrith"):
                assert [r[0] for r in conn.execute(STATISTICS, (f"%{secret}%",)).fetchall()] == [], secret
    finally:
        await memory.close()


async def test_erase_leaves_its_text_in_no_embedding_cache(memory, fake_openai, group):
    """The embedder's in-process cache is keyed by the texts it embedded (the episode, its names and
    sentences): a long-running process (REST, MCP, a worker) that erases an episode or a group no
    longer holds their words there."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import OpenAIEmbedder
    from tests.fake_openai import Vectors

    fake_openai.script_embeddings(*[Vectors(384)] * 50)
    embedder = OpenAIEmbedder(model="embed-test", dim=384, base_url=fake_openai.base_url, max_retries=0)
    # (on the session database's pool: Memory.open would refuse an embedder it was not built with)
    memory = Memory(memory.pool, embedder, RuleExtractor())
    secret = tag(group)
    other = f"{group}-other"
    try:
        for g in (group, other):
            await ingest(memory, g, [("a", "2021-01-10", "I work at Acme Corp."),
                                     ("b", "2021-05-10", f"I now work at {secret} Labs.")])

        def cached() -> list[str]:
            return [t for t in embedder.cache._items if secret in t]

        assert cached()
        await memory.delete_episode(group, "b", erase=True)
        await memory.erase_group(other)
        assert cached() == []
    finally:
        await embedder.aclose()
