"""Ingestion end to end with the offline extractor: a user changes jobs and cities over sessions."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from pgmemory import InvalidInput
from tests.support import utc


async def now(memory) -> datetime:
    async with memory.pool.acquire() as conn:
        t = await conn.fetchval("SELECT clock_timestamp()")
    await asyncio.sleep(0.002)
    return t


async def facts(memory, sql: str, *args) -> set[tuple[str, str, str]]:
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT s.name, f.relation, t.name FROM {sql} f"
            " JOIN pgmemory.entities s ON s.id = f.source_id JOIN pgmemory.entities t ON t.id = f.target_id",
            *args)
    return {tuple(r) for r in rows}


SESSIONS = [
    ("e1", "2023-01-10", "I work at Acme Corp and I live in Boston."),
    ("e2", "2023-06-05", "I left Acme Corp last week and now work at Globex."),
    ("e3", "2024-02-01", "I moved to Denver two weeks ago."),
    ("e4", "2022-03-01", "I work at Initech."),  # arrives late, about the past
    ("e5", "2024-03-01", "I work at Globex."),  # a duplicate
]


@pytest.fixture
async def history(memory, group):
    known = {}
    for eid, day, text in SESSIONS:
        result = await memory.add_episode(group, text, actor="Alice", reference_time=utc(day), episode_id=eid)
        assert result.status == "done"
        known[eid] = await now(memory)
    return known


async def test_current_facts(memory, group, history):
    assert await facts(memory, "pgmemory.facts_current($1)", group) == {
        ("Alice", "WORKS_FOR", "Globex"), ("Alice", "LIVES_IN", "Denver")}


@pytest.mark.parametrize("when, expected", [
    ("2022-06-01", {("Alice", "WORKS_FOR", "Initech")}),
    ("2023-03-01", {("Alice", "WORKS_FOR", "Acme Corp"), ("Alice", "LIVES_IN", "Boston")}),
    ("2023-12-01", {("Alice", "WORKS_FOR", "Globex"), ("Alice", "LIVES_IN", "Boston")}),
    ("2024-06-01", {("Alice", "WORKS_FOR", "Globex"), ("Alice", "LIVES_IN", "Denver")}),
])
async def test_valid_at_as_known_now(memory, group, history, when, expected):
    assert await facts(memory, "pgmemory.facts_valid_at($1, $2)", group, utc(when)) == expected


@pytest.mark.parametrize("when, known_after, expected", [
    # After session 1 we believed Acme and Boston, open-ended: true "in 2024" as believed then.
    ("2024-01-01", "e1", {("Alice", "WORKS_FOR", "Acme Corp"), ("Alice", "LIVES_IN", "Boston")}),
    ("2024-01-01", "e2", {("Alice", "WORKS_FOR", "Globex"), ("Alice", "LIVES_IN", "Boston")}),
    ("2024-01-01", "e5", {("Alice", "WORKS_FOR", "Globex"), ("Alice", "LIVES_IN", "Boston")}),
    # Before the late message arrived we knew nothing about 2022.
    ("2022-06-01", "e3", set()),
    ("2022-06-01", "e4", {("Alice", "WORKS_FOR", "Initech")}),
])
async def test_believed_at(memory, group, history, when, known_after, expected):
    assert await facts(memory, "pgmemory.facts_as_of($1, $2, $3)", group, utc(when),
                       history[known_after]) == expected


async def test_late_message_does_not_invalidate_the_present(memory, group, history):
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT t.name, lower(f.valid) AS vf, upper(f.valid) AS vt FROM pgmemory.facts f"
            " JOIN pgmemory.entities t ON t.id = f.target_id"
            " WHERE f.group_id = $1 AND f.relation = 'WORKS_FOR' AND upper_inf(f.recorded)", group)
    ranges = {r["name"]: (r["vf"], r["vt"]) for r in rows}
    assert ranges["Globex"][1] is None
    assert ranges["Initech"] == (utc("2022-03-01"), utc("2023-01-10"))
    assert ranges["Acme Corp"] == (utc("2023-01-10"), utc("2023-05-29"))


async def test_duplicates_merge_and_provenance_points_at_episodes(memory, group, history):
    async with memory.pool.acquire() as conn:
        entities = await conn.fetch("SELECT name FROM pgmemory.entities WHERE group_id = $1", group)
        globex = await conn.fetch(
            "SELECT DISTINCT f.id FROM pgmemory.facts f JOIN pgmemory.entities t ON t.id = f.target_id"
            " WHERE f.group_id = $1 AND t.name = 'Globex'", group)
        sources = await conn.fetch(
            "SELECT e.content FROM pgmemory.fact_episodes fe JOIN pgmemory.episodes e ON e.id = fe.episode_id"
            " WHERE fe.fact_id = $1 ORDER BY e.valid_at", globex[0]["id"])
    names = sorted(r["name"] for r in entities)
    assert names.count("Alice") == 1 and names.count("Globex") == 1
    assert len(globex) == 1
    assert [r["content"] for r in sources] == [SESSIONS[1][2], SESSIONS[4][2]]


async def test_same_episode_id_twice_is_a_no_op(memory, group):
    first = await memory.add_episode(group, "I live in Paris.", actor="Bob", reference_time=utc("2024-01-01"),
                                     episode_id="same")
    second = await memory.add_episode(group, "I live in Paris.", actor="Bob", reference_time=utc("2024-01-01"),
                                      episode_id="same")
    assert (first.status, second.status) == ("done", "skipped")
    # The DB time is reported in two parts: the raw episode's own transaction, then the rest.
    assert first.store_seconds > 0 and first.db_seconds > 0 and second.store_seconds > 0
    assert await facts(memory, "pgmemory.facts_current($1)", group) == {("Bob", "LIVES_IN", "Paris")}
    with pytest.raises(InvalidInput, match="already used by a different episode"):
        await memory.add_episode(group, "I live in Rome.", actor="Bob", reference_time=utc("2024-01-01"),
                                 episode_id="same")


@pytest.mark.parametrize("kwargs, message", [
    (dict(content="   "), "content is empty"),
    (dict(reference_time=datetime(2024, 1, 1)), "has no time zone"),
    (dict(kind="email"), "unknown episode kind 'email'"),
    (dict(kind="json", content="{not json"), "not valid JSON"),
    (dict(content="x" * 50_001), "the limit is 50000"),
    (dict(reference_time="yesterday"), "not an ISO 8601 datetime"),
])
async def test_malformed_input_is_refused_before_writing(memory, group, kwargs, message):
    args = {"content": "I live in Paris.", "actor": "Bob", "reference_time": utc("2024-01-01"),
            "kind": "message", **kwargs}
    with pytest.raises(InvalidInput, match=message):
        await memory.add_episode(group, **args)
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.episodes WHERE group_id = $1", group) == 0


async def test_bulk_batch_with_one_bad_episode_writes_nothing(memory, group):
    batch = [{"group_id": group, "content": "I live in Oslo.", "actor": "Eve", "reference_time": "2024-01-01T00:00:00Z"},
             {"group_id": group, "content": "I live in Rome.", "actor": "Eve", "reference_time": "2024-01-02T00:00:00"}]
    with pytest.raises(InvalidInput, match="episode 2: reference_time .* has no time zone"):
        await memory.add_episodes(batch)
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.episodes WHERE group_id = $1", group) == 0


async def test_eight_writers_one_group_no_duplicates(memory, group):
    texts = [f"I work at Acme Corp and I like {hobby}." for hobby in
             ("chess", "tennis", "hiking", "jazz", "chess", "tennis", "hiking", "jazz")]
    await asyncio.gather(*(memory.add_episode(group, t, actor="Carol", reference_time=utc("2024-01-01"),
                                              episode_id=f"w{i}") for i, t in enumerate(texts)))
    async with memory.pool.acquire() as conn:
        names = [r["name"] for r in await conn.fetch(
            "SELECT name FROM pgmemory.entities WHERE group_id = $1", group)]
        works = await conn.fetchval(
            "SELECT count(DISTINCT id) FROM pgmemory.facts WHERE group_id = $1 AND relation = 'WORKS_FOR'", group)
        provenance = await conn.fetchval(
            "SELECT count(*) FROM pgmemory.fact_episodes fe JOIN pgmemory.facts f ON f.id = fe.fact_id"
            " WHERE f.group_id = $1 AND f.relation = 'WORKS_FOR'", group)
    assert len(names) == len(set(names))
    assert set(names) >= {"Carol", "Acme Corp"}
    assert works == 1 and provenance == 8


async def test_groups_ingest_in_parallel_and_stay_apart(memory, group):
    batch = [{"group_id": f"{group}-{i}", "content": f"I live in City{i}.", "actor": "Dan",
              "reference_time": "2024-01-01T00:00:00+00:00"} for i in range(4)]
    results = await memory.add_episodes(batch, concurrency=4)
    assert [r.status for r in results] == ["done"] * 4
    for i in range(4):
        assert await facts(memory, "pgmemory.facts_current($1)", f"{group}-{i}") == {("Dan", "LIVES_IN", f"City{i}")}


async def test_delete_episode_cascades(memory, group):
    await memory.add_episode(group, "I work at Acme Corp.", actor="Fay", reference_time=utc("2024-01-01"),
                             episode_id="a")
    await memory.add_episode(group, "I work at Acme Corp. I live in Lima.", actor="Fay",
                             reference_time=utc("2024-02-01"), episode_id="b")
    out = await memory.delete_episode(group, "b")
    # WORKS_FOR is still supported by episode a; LIVES_IN Lima only by b, and Lima is orphaned.
    assert (out.facts_retracted, out.facts_removed, out.entities_removed) == (0, 1, 1)
    assert await facts(memory, "pgmemory.facts_current($1)", group) == {("Fay", "WORKS_FOR", "Acme Corp")}
    out = await memory.delete_episode(group, "a")
    assert out.entities_removed == 2
    believed = {"episodes": "retracted_at IS NULL", "entities": "retired_at IS NULL", "facts": "upper_inf(recorded)",
                "episode_mentions": "true",
                "fact_episodes": "episode_id NOT IN (SELECT id FROM pgmemory.episodes WHERE retracted_at IS NOT NULL)"}
    async with memory.pool.acquire() as conn:
        # Retracted: nothing is believed; the retired entities and their facts' versions, the
        # retracted episodes and their provenance links stay as history.
        for table, now in believed.items():
            assert await conn.fetchval(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = $1 AND {now}",
                                       group) == 0
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.graph_vertices v JOIN pgmemory.entities e"
                                   " ON e.id = v.node_id WHERE e.group_id = $1", group) == 0  # not mirrored
    for eid in ("a", "b"):  # erased later: no history either
        await memory.delete_episode(group, eid, erase=True)
    async with memory.pool.acquire() as conn:
        for table in (*believed, "retractions"):
            assert await conn.fetchval(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = $1", group) == 0
        assert await conn.fetchval(
            "SELECT count(*) FROM pgmemory.graph_vertices v WHERE NOT EXISTS"
            " (SELECT 1 FROM pgmemory.entities WHERE id = v.node_id) AND NOT EXISTS"
            " (SELECT 1 FROM pgmemory.episodes e WHERE pgmemory_internal.episode_node(e.group_id, e.id) = v.node_id)"
            " AND NOT EXISTS"
            " (SELECT 1 FROM pgmemory.communities WHERE id = v.node_id)") == 0


async def test_delete_keeps_history_when_entities_remain(memory, group):
    await memory.add_episode(group, "I live in Lima.", actor="Gus", reference_time=utc("2024-01-01"),
                             episode_id="a")
    await memory.add_episode(group, "I like Lima.", actor="Gus", reference_time=utc("2024-01-02"),
                             episode_id="b")
    out = await memory.delete_episode(group, "b")
    assert (out.facts_retracted, out.facts_removed, out.entities_removed) == (1, 0, 0)
    assert await facts(memory, "pgmemory.facts_current($1)", group) == {("Gus", "LIVES_IN", "Lima")}
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM pgmemory.facts WHERE group_id = $1 AND relation = 'LIKES'", group) == 1


async def test_erase_group(memory, group):
    await memory.add_episode(group, "I work at Acme Corp.", actor="Hal", reference_time=utc("2024-01-01"))
    await memory.add_episode(group, "I like jazz.", actor="Hal", reference_time=utc("2024-01-02"), episode_id="j")
    await memory.delete_episode(group, "j")  # retracted: a tombstone and a retired entity
    assert await memory.erase_group(group) == 1
    async with memory.pool.acquire() as conn:
        for table in ("episodes", "entities", "facts", "entity_versions", "retractions", "fact_claims"):
            assert await conn.fetchval(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = $1", group) == 0


async def test_a_group_changed_between_the_reads_and_the_apply_is_decided_again_under_the_lock(db_dsn, group):
    """The offline extractor decides locally: when its group changed after the candidates were
    read, the episode is decided again with the group lock held, in one transaction (the lock,
    the candidate reads and the apply; on Citus each one task on the group's worker), and
    applied then: the new employer is current and the old one ended."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    changed: list[int] = []

    class ChangedMeanwhile(RuleExtractor):
        async def judge_facts(self, episode, questions, usage):
            if not changed:  # another writer, between this episode's reads and its apply
                changed.append(await memory.pool.fetchval("SELECT pgmemory.bump_group_version($1)", group))
            return await super().judge_facts(episode, questions, usage)

    async with await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=ChangedMeanwhile()) as memory:
        await memory.add_episode(group, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-02"))
        result = await memory.add_episode(group, "I work at Globex.", actor="Alice", reference_time=utc("2024-02-02"))
        current = await memory.search("where does Alice work", group_ids=group, limit=5)
    assert changed and result.status == "done" and result.facts_invalidated == 1
    assert [f.target for f in current.facts] == ["Globex"]


async def test_one_episode_asserting_and_negating_a_fact_makes_one_lineage(memory, group):
    """"I moved from Oslo to Zurich last month. I moved from Zurich to Prague yesterday.": the
    assertion and the negation of living in Zurich are statements about one fact (as add_fact
    joins a pair's lineage), so one interval is believed for it, not two overlapping ones."""
    result = await memory.add_episode(
        group, "I moved from Oslo to Zurich last month. I moved from Zurich to Prague yesterday.",
        actor="Tomas", reference_time=utc("2024-04-14"))
    assert result.status == "done"
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT DISTINCT f.lineage, f.valid FROM pgmemory.believed_facts b JOIN pgmemory.facts f"
            "  ON f.group_id = b.group_id AND f.id = b.id AND upper_inf(f.recorded)"
            " WHERE b.group_id = $1 AND b.target = 'Zurich'", group)
        claims = await conn.fetch("SELECT DISTINCT lineage FROM pgmemory.fact_claims fc"
                                  " JOIN pgmemory.entities t ON t.group_id = fc.group_id AND t.id = fc.target_id"
                                  " WHERE fc.group_id = $1 AND t.name = 'Zurich'", group)
    assert len(claims) == 1, claims
    assert len(rows) == 1, rows



async def test_a_repeat_naming_a_renamed_entity_is_judged_a_repeat(memory, group):
    """The candidate facts of a statement are named as the episode resolves their endpoints: an
    entity this episode renames ("Liam", said as "Liam Reyes") is the one its stored fact names, so
    "married to Liam Reyes" repeats "married to Liam" instead of ending it as a new spouse (the
    offline judge compared the new name with the stored one; seen after a delete re-derived "Liam")."""
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.extract.types import EpisodeInput, ExtractedEntity, ExtractedFact
    from pgmemory.ingest.resolve_entities import ResolvedEntity
    from pgmemory.ingest.resolve_facts import judge_facts
    from pgmemory.providers.embedder import HashEmbedder

    stored = await memory.add_fact(group, "Priya", "MARRIED_TO", "Liam", "Priya is married to Liam.")
    async with memory.pool.acquire() as conn:
        ids = dict(await conn.fetch("SELECT name, id FROM pgmemory.entities WHERE group_id = $1", group))
    fact = ExtractedFact(source="Priya", target="Liam Reyes", relation="MARRIED_TO",
                         fact="Priya is married to Liam Reyes.", functional=True)
    src = ResolvedEntity(ids["Priya"], "Priya", False, ExtractedEntity("Priya"))
    tgt = ResolvedEntity(ids["Liam"], "Liam Reyes", False, ExtractedEntity("Liam Reyes"), renamed=True)
    [vector] = await HashEmbedder().embed([fact.fact])
    episode = EpisodeInput("I am married to Liam Reyes.", "message", utc("2024-05-01"), actor="Priya")
    [judged] = await judge_facts(memory.pool, group, [(fact, src, tgt, vector)], RuleExtractor(), episode, None)
    assert judged.decision.duplicate_of == str(stored["fact_id"])
    assert judged.decision.contradicts == ()


def test_a_statements_place_in_the_fold_bounds_its_candidates_as_the_rules_place_it():
    """The candidate bound (facts that ended before a statement's place are not judged) uses the
    place the stored rules give it (pgmemory_internal.fold_key): an assertion's start, else when
    said, but not after the end it states; a negation's end."""
    from pgmemory.extract.types import ExtractedFact
    from pgmemory.ingest.resolve_facts import fold_place

    said = datetime(2021, 1, 1, tzinfo=timezone.utc)
    y2019, y2020 = datetime(2019, 1, 1, tzinfo=timezone.utc), datetime(2020, 1, 1, tzinfo=timezone.utc)
    fact = lambda **kw: ExtractedFact("Alice", "Acme", "WORKS_FOR", "Alice works at Acme.", **kw)  # noqa: E731
    assert fold_place(fact(), said) == said
    assert fold_place(fact(valid_at=y2019), said) == y2019
    assert fold_place(fact(invalid_at=y2019), said) == y2019  # "until 2019", said in 2021
    assert fold_place(fact(valid_at=y2019, invalid_at=y2020), said) == y2019
    assert fold_place(fact(negated=True), said) == said
    assert fold_place(fact(negated=True, invalid_at=y2019, valid_at=datetime(2018, 1, 1, tzinfo=timezone.utc)), said) == y2019


async def test_a_statement_of_a_withdrawn_fact_joins_its_lineage(memory, group):
    """Acme and Globex said from the same day (one employer: Globex withdraws Acme), then Acme
    again in 2024: no believed Acme fact was a candidate, yet the statement joins Acme's lineage, as
    add_fact joins it. Deleting the Globex episode then leaves one Acme fact since 2020, as if
    Globex had never been said, not a second one since 2024 held beside it."""
    for eid, day, text in (("e1", "2020-01-01", "I work at Acme."), ("e2", "2020-01-01", "I work at Globex."),
                           ("e3", "2024-01-01", "I work at Acme.")):
        await memory.add_episode(group, text, actor="Alice", reference_time=utc(day), episode_id=eid)
    believed = "SELECT target, valid_from, valid_to FROM pgmemory.believed_facts WHERE group_id = $1 ORDER BY 1, 2"
    assert [tuple(r) for r in await memory.pool.fetch(believed, group)] == [
        ("Acme", utc("2024-01-01"), None), ("Globex", utc("2020-01-01"), utc("2024-01-01"))]
    await memory.delete_episode(group, "e2")
    assert [tuple(r) for r in await memory.pool.fetch(believed, group)] == [("Acme", utc("2020-01-01"), None)]
