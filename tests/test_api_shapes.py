"""The API shapes users of mem0/Zep/Graphiti expect: add_messages, episode metadata (stored and
filterable), get_entity / list_entities / entity_facts / fact_history / get_episodes, a SyncMemory
with real methods that works inside a running event loop, `async with Memory.open()`, compact str."""
from __future__ import annotations

import inspect
from datetime import datetime, timezone

import psycopg
import pytest

from pgmemory import InvalidInput, Memory, SearchFilters, SyncMemory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder

T0 = datetime(2024, 1, 15, 10, 0, tzinfo=timezone.utc)


async def test_async_with_open_needs_no_await(db_dsn, group):
    async with Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        await memory.add_episode(group, "I moved to Austin.", actor="Kim", reference_time=T0)
        assert (await memory.get_episodes(group))[0].status == "done"
    assert memory.pool.is_closing()


async def test_add_messages_is_one_chat_episode_with_metadata(memory, group):
    result = await memory.add_messages(group, [
        {"role": "user", "name": "Alice", "content": "I left Tencent last week and now work at OpenAI."},
        {"role": "assistant", "content": "Congratulations on the new job!"}],
        metadata={"session": "s1", "channel": "web"}, reference_time=T0)
    assert result.status == "done"
    [episode] = await memory.get_episodes(group)
    assert episode.content == ("Alice: I left Tencent last week and now work at OpenAI.\n"
                               "Assistant: Congratulations on the new job!")
    assert episode.actor is None and episode.metadata == {"session": "s1", "channel": "web"}
    facts = (await memory.search("where does Alice work", group_ids=[group])).facts
    assert any("OpenAI" in f.fact for f in facts)
    assert not any(e.name == "Assistant" for e in await memory.list_entities(group))


async def test_one_speaker_messages_keep_the_speaker_as_actor(memory, group):
    await memory.add_messages(group, [{"role": "user", "name": "Bo", "content": "I live in Denver."},
                                      {"role": "user", "name": "Bo", "content": "I like\njazz."}],
                              reference_time=T0)
    [episode] = await memory.get_episodes(group)
    assert (episode.actor, episode.content) == ("Bo", "I live in Denver.\nI like jazz.")


async def test_metadata_filters_every_kind_of_result(memory, group):
    await memory.add_episode(group, "I work at Acme.", actor="Ann", reference_time=T0,
                             metadata={"session": "a", "n": 1})
    await memory.add_episode(group, "I work at Acme too.", actor="Ben", reference_time=T0.replace(hour=11),
                             metadata={"session": "b"})
    unfiltered = await memory.search("who works at Acme", group_ids=[group])
    assert {f.source for f in unfiltered.facts} == {"Ann", "Ben"}
    only_a = await memory.search("who works at Acme", group_ids=[group],
                                 filters=SearchFilters(metadata={"session": "a"}))
    assert {f.source for f in only_a.facts} == {"Ann"}
    assert [e.actor for e in only_a.episodes] == ["Ann"]
    assert "Ben" not in {e.name for e in only_a.entities} and "Ann" in {e.name for e in only_a.entities}
    none = await memory.search("who works at Acme", group_ids=[group],
                               filters=SearchFilters(metadata={"session": "zzz"}))
    assert (none.facts, none.entities, none.episodes) == ([], [], [])


async def test_enqueue_stores_metadata_in_the_same_transaction(memory, group, db_dsn):
    eid = await memory.enqueue_episode(group, "I work at Initech.", actor="Cy", reference_time=T0,
                                       metadata={"user": "cy-1"})
    episode = await memory.get_episode(group, eid)
    assert (episode.status, episode.metadata) == ("pending", {"user": "cy-1"})
    # Enqueued again with other metadata: a no-op, the stored metadata stays.
    assert await memory.enqueue_episode(group, "I work at Initech.", actor="Cy", reference_time=T0,
                                        metadata={"user": "other"}) == eid
    assert (await memory.get_episode(group, eid)).metadata == {"user": "cy-1"}
    with psycopg.connect(db_dsn) as conn, pytest.raises(psycopg.errors.InvalidParameterValue, match="JSON object"):
        conn.execute("SELECT pgmemory.enqueue_episode(%s, 'x', 'message', NULL, now(), '', NULL, '[1]'::jsonb)",
                     (group,))
    await memory.erase_group(group)  # leave no pending episode for other tests' workers


async def test_entities_facts_and_history(memory, group, other_group="other-g"):
    first = await memory.add_fact(group, "Alice", "WORKS_FOR", "Acme", "Alice works for Acme.",
                                  valid_from="2020-01-01T00:00:00Z")
    await memory.add_fact(group, "Alice", "WORKS_FOR", "Globex", "Alice works for Globex.",
                          valid_from="2022-01-01T00:00:00Z", functional=True)
    entities = await memory.list_entities(group)
    assert [e.name for e in entities] == ["Acme", "Alice", "Globex"]
    assert [e.name for e in await memory.list_entities(group, limit=1, offset=1)] == ["Alice"]
    assert [e.name for e in await memory.list_entities(group, name="glo")] == ["Globex"]
    alice = next(e for e in entities if e.name == "Alice")
    assert (await memory.get_entity(group, alice.id)).name == "Alice"
    assert await memory.get_entity(other_group, alice.id) is None  # another group's id: not found

    believed = await memory.entity_facts(group, alice.id)
    assert sorted(f.target for f in believed) == ["Acme", "Globex"]
    acme = next(f for f in believed if f.target == "Acme")
    assert acme.valid_to == datetime(2022, 1, 1, tzinfo=timezone.utc)  # ended by Globex
    history = await memory.fact_history(group, first["fact_id"])
    assert len(history) == 2 and history[0].valid_to is None and not history[0].believed
    assert history[1].believed and history[1].valid_to == acme.valid_to
    assert len(await memory.entity_facts(group, alice.id, history=True)) == 3
    assert (await memory.get_fact(group, first["fact_id"])).version_id == history[1].version_id
    assert await memory.fact_history(other_group, first["fact_id"]) == []
    assert "Alice works for Acme." in str(history[0]) and "superseded" in str(history[0])


@pytest.mark.parametrize("call, message", [
    (lambda m, g: m.add_episode(g, "x", reference_time=T0, metadata=["a"]), "metadata must be an object"),
    (lambda m, g: m.add_episode(g, "x", reference_time=T0, metadata={"a": float("nan")}), "metadata is not JSON"),
    (lambda m, g: m.add_episode(g, "x", reference_time=T0, metadata={"a": "\x00"}), "NUL"),
    (lambda m, g: m.add_messages(g, []), "messages is empty"),
    (lambda m, g: m.add_messages(g, [{"role": "user"}]), "message 1 content must be a string"),
    (lambda m, g: m.add_messages(g, [{"role": "user", "content": "hi", "x": 1}]), "unknown field"),
    (lambda m, g: m.add_messages(g, {"role": "user", "content": "hi"}), "messages must be a list"),
    (lambda m, g: m.get_episodes(g, last_n=0), "last_n"),
    (lambda m, g: m.get_episodes(g, status="gone"), "unknown episode status"),
    (lambda m, g: m.get_entity(g, "not-a-uuid"), "entity id"),
    (lambda m, g: m.list_entities(g, limit=True), "limit"),
    (lambda m, g: m.entity_facts(g, "0" * 32, history="yes"), "history"),
    (lambda m, g: m.search("x", group_ids=[g], filters=SearchFilters(metadata="a")), "metadata filter"),
])
async def test_bad_input_is_one_line_and_writes_nothing(memory, group, call, message):
    with pytest.raises(InvalidInput, match=message):
        await call(memory, group)
    assert await memory.get_episodes(group) == []


async def test_sync_memory_works_inside_a_running_loop(db_dsn, group):
    with SyncMemory(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        memory.add_episode(group, "I moved to Lisbon.", actor="Dee", reference_time=T0)
        results = memory.search("where does Dee live", group_ids=group)
        assert any("Lisbon" in f.fact for f in results.facts)
        assert [e.name for e in memory.list_entities(group)] == ["Dee", "Lisbon"]
        with pytest.raises(InvalidInput):
            memory.get_episodes(group, last_n=-1)
        text = str(results)
        assert text.splitlines()[0].startswith("SearchResults: ") and all(len(line) < 140 for line in text.splitlines())


def test_sync_memory_has_every_public_method_with_its_signature():
    for name, method in inspect.getmembers(Memory, inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue
        sync = getattr(SyncMemory, name, None)
        assert sync is not None and not inspect.iscoroutinefunction(sync), name
        assert list(inspect.signature(sync).parameters.values()) == \
            list(inspect.signature(method).parameters.values()), name


async def test_get_episodes_pages_through_shared_reference_times_with_before_id(memory, group):
    """15 episodes, several sharing a reference time (chunks of one document), paged 4 at a time
    with the oldest episode of each page as before_id: every episode exactly once, in order."""
    times = [T0] * 6 + [T0.replace(hour=11)] * 5 + [T0.replace(hour=12 + i) for i in range(4)]
    ids = await memory.enqueue_episodes([dict(group_id=group, content=f"chunk {i}", kind="text", reference_time=t)
                                         for i, t in enumerate(times)])
    seen, before_id = [], None
    while page := await memory.get_episodes(group, last_n=4, before_id=before_id):
        assert len(page) <= 4 and [e.reference_time for e in page] == sorted(e.reference_time for e in page)
        seen[:0] = page
        before_id = page[0].id
    assert [e.id for e in seen] == ids  # arrival order breaks equal reference times
    # The time alone (as before) still filters strictly; with the id, the time may be passed too.
    assert len(await memory.get_episodes(group, last_n=100, before=T0.replace(hour=11))) == 6
    tail = await memory.get_episodes(group, last_n=100, before=T0, before_id=ids[3])
    assert [e.id for e in tail] == ids[:3]
    with pytest.raises(InvalidInput, match="before_id: episode .* does not exist in group"):
        await memory.get_episodes(group, before_id="nope")


def test_search_results_print_each_hit_under_its_kind():
    """print(results) names each hit's kind in the singular (a community hit is a "community")."""
    from uuid import uuid4

    from pgmemory.search.types import CommunityHit, EntityHit, EpisodeHit, FactHit, SearchResults

    results = SearchResults(
        facts=[FactHit(uuid4(), "g", {}, 0.5, fact="Alice works for Acme.", valid_from=T0)],
        entities=[EntityHit(uuid4(), "g", {}, 0.4, name="Alice")],
        communities=[CommunityHit(uuid4(), "g", {}, 0.3, name="Alice, Acme", summary="Alice works for Acme.")],
        episodes=[EpisodeHit(uuid4(), "g", {}, 0.2, content="I work at Acme.", actor="Alice")])
    lines = str(results).splitlines()
    assert lines[0] == "SearchResults: 1 facts, 1 entities, 1 communities, 1 episodes"
    assert [line.split()[0] for line in lines[1:]] == ["fact", "entity", "community", "episode"]


async def test_search_results_to_dict_copies_without_deep_copying(memory, group, monkeypatch):
    """SearchResults.to_dict (the REST / MCP / CLI JSON of every search) is asdict's form, embeddings
    and the speaker's offset (said_offset, read by the context only) left out, in new containers, without copy.deepcopy of each UUID and time (dataclasses.asdict's
    way: most of the ~1.4 ms the REST server spent turning a default search into JSON)."""
    import copy
    from dataclasses import asdict

    from pgmemory.search.types import EpisodeHit, SearchResults

    for day, text in enumerate(("I work at Acme.", "I moved to Oslo.", "I like tea and skiing.")):
        await memory.add_episode(group, text, actor="Kim", reference_time=T0.replace(day=day + 1))
    results = await memory.search("Kim Acme Oslo tea", group_ids=[group], config="combined_hybrid_rrf")
    hit = results.episodes[0]
    results.episodes.append(EpisodeHit(hit.id, group, {"cosine": 9}, 0.1, content="x", neighbour_of={hit.id: 1},
                                       embedding=[0.5, 0.25]))
    assert results.facts and results.entities and results.episodes
    expected = {kind: [{k: v for k, v in asdict(h).items() if k not in ("embedding", "said_offset")}
                       for h in getattr(results, kind)]
                for kind in ("facts", "entities", "communities", "episodes")}
    monkeypatch.setattr(copy, "deepcopy", lambda *args, **kwargs: pytest.fail("deep-copied"))
    got = results.to_dict()
    assert got == expected
    got["facts"][0]["ranks"]["x"] = 1
    got["facts"][0]["episodes"].clear()
    got["episodes"][-1]["neighbour_of"].clear()
    assert "x" not in results.facts[0].ranks and results.facts[0].episodes and results.episodes[-1].neighbour_of
    assert isinstance(SearchResults().to_dict()["facts"], list)


def test_a_closed_sync_memory_says_so(memory_sync_factory, group):
    """A SyncMemory used after close() raises one clear line (it said 'Event loop is closed' and left
    a 'coroutine ... was never awaited' warning per call); closing twice is harmless."""
    import gc
    import warnings

    sync = memory_sync_factory()
    assert sync.search("anything", group_ids=[group]).facts == []
    sync.close()
    sync.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in (lambda: sync.search("anything", group_ids=[group]),
                     lambda: sync.context("anything", group_ids=[group])):
            with pytest.raises(RuntimeError, match=r"^this SyncMemory is closed: open a new one$"):
                call()
        gc.collect()
    assert [str(w.message) for w in caught] == []
