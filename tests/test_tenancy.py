"""Tenancy: a caller of group A never reads a row of group B, on every public read path.

Group B (the victim) holds a secret; group A (the caller) holds ordinary data. Ids of B's
entities, facts and episodes are handed to every parameter that takes an id. Extend this file
when a read path is added: each test asserts zero rows of B come back.
"""
from __future__ import annotations

import dataclasses
import uuid

import asyncpg
import pytest

from pgmemory import InvalidInput, SearchConfig
from pgmemory.search.config import RECIPES
from tests.support import utc

VICTIM = [
    ("2023-09-01", "Bob", "I work at Pineapple Labs.", "b-1"),
    ("2023-09-02", "Bob", "The secret code word for the party is pineapple. I live in Oslo.", "b-2"),
]
CALLER = [
    ("2023-09-01", "Alice", "I work at Acme Corp.", "a-1"),
    ("2023-09-02", "Alice", "I live in Paris and I love pineapple cake.", "a-2"),
]
QUERY = "secret pineapple code word Bob Oslo Labs"


@pytest.fixture
async def tenants(memory, group):
    a, b = f"{group}-a", f"{group}-b"
    for g, items in ((b, VICTIM), (a, CALLER)):
        for day, actor, text, eid in items:
            await memory.add_episode(g, text, actor=actor, reference_time=utc(day), episode_id=eid)
    async with memory.pool.acquire() as conn:
        ids = {}
        for g in (a, b):
            ids[g] = {
                "entities": [r[0] for r in await conn.fetch(
                    "SELECT id FROM pgmemory.entities WHERE group_id = $1 ORDER BY name", g)],
                "facts": [r[0] for r in await conn.fetch(
                    "SELECT DISTINCT id FROM pgmemory.facts WHERE group_id = $1", g)],
                "episodes": [r[0] for r in await conn.fetch(
                    "SELECT id FROM pgmemory.episodes WHERE group_id = $1", g)],
            }
    assert ids[b]["entities"] and ids[b]["facts"] and ids[a]["entities"]
    return {"a": a, "b": b, "ids": ids}


def leaked(results, t) -> list:
    """Every hit that belongs to group B or carries one of B's ids or its secret."""
    b_ids = {i for kind in t["ids"][t["b"]].values() for i in kind}
    out = []
    for hit in results.facts + results.entities + results.communities + results.episodes:
        text = str(dataclasses.asdict(hit))
        if hit.group_id != t["a"] or hit.id in b_ids or "secret" in text or "Oslo" in text:
            out.append(hit)
    for fact in results.facts:
        out += [e for e in fact.episodes if e in b_ids]
    return out


def recipe(name: str, **changes) -> SearchConfig:
    cfg = RECIPES[name]
    if cfg.reranker == "cross_encoder":
        cfg = dataclasses.replace(cfg, reranker="rrf")  # the provider is not what is tested here
    return dataclasses.replace(cfg, **changes)


@pytest.mark.parametrize("name", sorted(RECIPES))
async def test_every_recipe_with_own_seeds_returns_no_row_of_another_group(memory, tenants, name):
    own = tenants["ids"][tenants["a"]]["entities"]
    cfg = recipe(name, bfs_seeds=tuple(own), center=own[0])
    results = await memory.search(QUERY, group_ids=[tenants["a"]], config=cfg)
    assert results.facts or results.entities or results.episodes or cfg.kinds == ("communities",)
    assert leaked(results, tenants) == []


@pytest.mark.parametrize("name", sorted(RECIPES))
@pytest.mark.parametrize("parameter", ["bfs_seeds", "center", "mixed_seeds"])
async def test_foreign_seed_or_centre_is_refused_for_every_recipe(memory, tenants, name, parameter):
    theirs = tenants["ids"][tenants["b"]]["entities"]
    own = tenants["ids"][tenants["a"]]["entities"]
    changes = {"bfs_seeds": (theirs[0],), "center": own[0]}
    if parameter == "center":
        changes = {"bfs_seeds": (own[0],), "center": theirs[0]}
    elif parameter == "mixed_seeds":
        changes["bfs_seeds"] = (own[0], theirs[0])
    with pytest.raises(InvalidInput, match="not an entity of the searched groups"):
        await memory.search(QUERY, group_ids=[tenants["a"]], config=recipe(name, **changes))


async def test_unknown_seed_gets_the_same_answer_as_a_foreign_one(memory, tenants):
    # The message must not reveal whether the id exists in some other group.
    messages = []
    for seed in (tenants["ids"][tenants["b"]]["entities"][0], uuid.uuid4()):
        with pytest.raises(InvalidInput) as info:
            await memory.search(QUERY, group_ids=[tenants["a"]],
                                config=SearchConfig(methods=("bfs",), bfs_seeds=(seed,)))
        messages.append(str(info.value).replace(str(seed), "<id>"))
    assert messages[0] == messages[1]


async def test_context_with_foreign_seeds_is_refused_and_plain_context_is_clean(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["entities"]
    with pytest.raises(InvalidInput, match="not an entity of the searched groups"):
        await memory.context(QUERY, group_ids=[tenants["a"]], episodes=True, communities=True,
                             config=SearchConfig(methods=("bfs",), bfs_seeds=tuple(theirs)))
    text = await memory.context(QUERY, group_ids=[tenants["a"]], episodes=True, communities=True,
                                config="combined_hybrid_bfs_rrf")
    assert "Alice" in text and "secret" not in text and "Oslo" not in text and "Bob" not in text


@pytest.mark.parametrize("engine", ["sql", "age"])
async def test_bfs_refuses_seeds_of_another_group(memory, tenants, engine):
    theirs = tenants["ids"][tenants["b"]]["entities"]
    with pytest.raises(InvalidInput, match="not an entity of the searched groups"):
        await memory.bfs(theirs, group_ids=[tenants["a"]], depth=2, engine=engine)
    own = tenants["ids"][tenants["a"]]["entities"]
    reached = await memory.bfs(own, group_ids=[tenants["a"]], depth=3, engine=engine)
    assert set(reached) <= set(own)


@pytest.mark.parametrize("function", ["bfs_entities", "bfs_entities_age"])
async def test_the_database_itself_refuses_foreign_seeds(memory, tenants, function):
    theirs = tenants["ids"][tenants["b"]]["entities"]
    async with memory.pool.acquire() as conn:
        with pytest.raises(asyncpg.InvalidParameterValueError, match="not an entity of the searched groups"):
            await conn.fetch(f"SELECT * FROM pgmemory.{function}($1, $2, 2)", [tenants["a"]], theirs)


async def test_episode_status_sees_only_the_callers_group(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["episodes"][0]
    assert await memory.episode_status(theirs, tenants["a"]) is None
    assert await memory.episode_status("b-1", tenants["a"]) is None
    mine = await memory.episode_status("a-1", tenants["a"])
    assert mine["group_id"] == tenants["a"] and mine["status"] == "done"


async def test_reusing_another_groups_episode_uuid_works_in_the_callers_group(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["episodes"][0]
    result = await memory.add_episode(tenants["a"], "I own a bicycle.", actor="Alice",
                                      reference_time=utc("2023-09-03"), episode_id=theirs)
    assert result.status == "done" and result.episode_id == theirs
    mine = await memory.episode_status(theirs, tenants["a"])
    assert mine["group_id"] == tenants["a"]
    found = await memory.search("bicycle pineapple secret", group_ids=[tenants["a"]],
                                config="episode_hybrid_rrf")
    assert [e.content for e in found.episodes if e.id == theirs] == ["I own a bicycle."]
    assert leaked(found, {**tenants, "ids": {**tenants["ids"], tenants["b"]: {
        k: [i for i in v if i != theirs] for k, v in tenants["ids"][tenants["b"]].items()}}}) == []
    victim = await memory.episode_status(theirs, tenants["b"])
    assert victim["group_id"] == tenants["b"] and victim["status"] == "done"


async def test_delete_episode_of_another_group_is_not_found(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["episodes"][0]
    with pytest.raises(InvalidInput, match="does not exist"):
        await memory.delete_episode(tenants["a"], theirs)
    assert (await memory.episode_status(theirs, tenants["b"]))["status"] == "done"
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.fact_episodes WHERE group_id = $1",
                                   tenants["b"]) > 0


async def test_retract_fact_of_another_group_is_refused(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["facts"][0]
    with pytest.raises(InvalidInput, match="not believed in group"):
        await memory.retract_fact(tenants["a"], theirs)
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.facts_current($1) WHERE id = $2",
                                   tenants["b"], theirs) == 1


async def test_fact_history_is_scoped_to_the_group(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["facts"][0]
    async with memory.pool.acquire() as conn:
        assert await conn.fetch("SELECT * FROM pgmemory.fact_history($1, $2)", tenants["a"], theirs) == []
        assert len(await conn.fetch("SELECT * FROM pgmemory.fact_history($1, $2)", tenants["b"], theirs)) >= 1


async def test_graph_mirror_keeps_one_episode_id_of_two_groups_apart(memory, tenants):
    theirs = tenants["ids"][tenants["b"]]["episodes"][0]
    await memory.add_episode(tenants["a"], "I own a bicycle.", actor="Alice",
                             reference_time=utc("2023-09-03"), episode_id=theirs)

    async def vertex(group):
        async with memory.pool.acquire() as conn:
            return await conn.fetchval("SELECT vertex_id FROM pgmemory.graph_vertices"
                                       " WHERE node_id = pgmemory_internal.episode_node($1, $2)", group, theirs)
    a_vertex, b_vertex = await vertex(tenants["a"]), await vertex(tenants["b"])
    assert a_vertex is not None and b_vertex is not None and a_vertex != b_vertex
    await memory.delete_episode(tenants["a"], theirs)
    assert await vertex(tenants["a"]) is None and await vertex(tenants["b"]) == b_vertex


async def test_fact_reads_name_entities_of_the_callers_group_only(memory, tenants):
    """Entity ids are unique per group only: a group holding entities with the caller's ids (a
    copied group, or a tenant writing rows itself) adds no row or name to the caller's fact reads."""
    a, b = tenants["a"], tenants["b"]
    async with memory.pool.acquire() as conn:
        await conn.execute("INSERT INTO pgmemory.entities (group_id, id, name)"
                           " SELECT $2, id, 'secret ' || name FROM pgmemory.entities WHERE group_id = $1", a, b)
        fact, source = await conn.fetchrow("SELECT id, source_id FROM pgmemory.facts WHERE group_id = $1"
                                           " AND upper_inf(recorded) ORDER BY version_id LIMIT 1", a)
    history = await memory.fact_history(a, fact)
    assert len(history) == 1 and "secret" not in f"{history[0].source} {history[0].target}"
    facts = await memory.entity_facts(a, source)
    assert facts and not [f for f in facts if "secret" in f"{f.source} {f.target}"]
    assert len({f.version_id for f in facts}) == len(facts)


async def test_the_wildcard_is_not_a_group_id(memory):
    """'*' means every group in grants and API keys, so no group may be called '*': a group of
    that name could be granted to no one alone, and a request narrowed to it sees nothing."""
    with pytest.raises(InvalidInput, match=r"'\*' is reserved"):
        await memory.add_episode("*", "I work at Starcorp.", actor="Sam", reference_time=utc("2024-01-01"))
    with pytest.raises(InvalidInput, match=r"'\*' is reserved"):
        await memory.search("Starcorp", group_ids=["a", "*"])
    with pytest.raises(InvalidInput, match=r"'\*' is reserved"):
        await memory.add_fact("*", "Sam", "WORKS_FOR", "Starcorp", "Sam works for Starcorp.")
    async with memory.pool.acquire() as conn:
        for call in ("SELECT pgmemory.enqueue_episode('*', 'I work at Starcorp.', 'message', 'Sam', now(), '', NULL)",
                     "SELECT pgmemory.add_fact('*', 'Sam', 'WORKS_FOR', 'Starcorp', 'Sam works for Starcorp.')"):
            with pytest.raises(asyncpg.InvalidParameterValueError, match=r"'\*' is reserved"):
                await conn.execute(call)
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.episodes WHERE group_id = '*'") == 0
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.facts WHERE group_id = '*'") == 0
