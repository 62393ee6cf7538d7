"""Search: each method, both time axes, filters, rerankers, BFS engines, bad input."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from pgmemory import InvalidInput, SearchConfig, SearchFilters
from pgmemory.search.config import resolve_config
from pgmemory.search import rerank
from pgmemory.search.types import FactHit
from tests.support import utc


async def ingest(memory, group, items):
    known = []
    for day, actor, text in items:
        await memory.add_episode(group, text, actor=actor, reference_time=utc(day))
        async with memory.pool.acquire() as conn:
            known.append(await conn.fetchval("SELECT clock_timestamp()"))
        await asyncio.sleep(0.002)
    return known


JOBS = [
    ("2021-01-10", "Alice", "I work at Acme Corp."),
    ("2022-06-05", "Alice", "I left Acme Corp last week and now work at Globex."),
    ("2023-09-01", "Alice", "I joined Initech yesterday."),
    ("2023-09-02", "Bob", "I live in Oslo and I love skiing."),
    ("2023-09-03", "Bob", "The secret code word for the party is pineapple."),
]


@pytest.fixture
async def graph(memory, group):
    known = await ingest(memory, group, JOBS)
    return {"group": group, "known": known}


def employers(results) -> list[str]:
    return [f.target for f in results.facts if f.relation == "WORKS_FOR"]


@pytest.mark.parametrize("as_of, expected", [
    ("2021-06-01", "Acme Corp"), ("2022-12-01", "Globex"), ("2024-01-01", "Initech")])
async def test_as_of_three_valid_times(memory, graph, as_of, expected):
    results = await memory.search("where does Alice work", group_ids=[graph["group"]],
                                  filters=SearchFilters(as_of=utc(as_of)))
    assert employers(results) == [expected]


async def test_known_at_two_transaction_times(memory, graph):
    query, group = "where does Alice work", graph["group"]
    # After the second episode we believed Globex was her employer "now" (2024).
    then = await memory.search(query, group_ids=[group],
                               filters=SearchFilters(as_of=utc("2024-01-01"), known_at=graph["known"][1]))
    assert employers(then) == ["Globex"]
    now = await memory.search(query, group_ids=[group], filters=SearchFilters(as_of=utc("2024-01-01")))
    assert employers(now) == ["Initech"]
    # Before anything was ingested, nothing was known.
    before = await memory.search(query, group_ids=[group],
                                 filters=SearchFilters(known_at=utc("2000-01-01"), as_of=utc("2024-01-01")))
    assert before.facts == [] and before.entities == [] and before.episodes == []


@pytest.mark.parametrize("candidates", [1, 10])
async def test_cosine_alone_finds_past_beliefs_as_known_then(memory, graph, candidates):
    """The facts' vector index holds current versions only: a cosine-only search as known at a
    past time, or with superseded versions, still ranks the versions believed then (exactly)."""
    group = graph["group"]
    cosine = SearchConfig(kinds=("facts",), methods=("cosine",), candidates=candidates)
    then = await memory.search("Globex", group_ids=[group], config=cosine,
                               filters=SearchFilters(known_at=graph["known"][1]))
    assert employers(then)[:1] == ["Globex"]
    assert then.facts[0].valid_to is None  # as believed then: still open (it has ended since)
    every = await memory.search("Globex", group_ids=[group], config=SearchConfig(kinds=("facts",), methods=("cosine",)),
                                filters=SearchFilters(include_superseded=True, include_invalidated=True))
    globex = [f for f in every.facts if f.target == "Globex"]
    assert {f.valid_to is None for f in globex} == {True, False}  # the open version and the ended one


async def test_invalidated_facts_excluded_by_default_included_on_request(memory, graph):
    group = graph["group"]
    default = await memory.search("Alice work", group_ids=[group], config="edge_hybrid_rrf")
    assert employers(default) == ["Initech"]
    everything = await memory.search("Alice work", group_ids=[group], config="edge_hybrid_rrf",
                                     filters=SearchFilters(include_invalidated=True))
    assert set(employers(everything)) == {"Acme Corp", "Globex", "Initech"}
    ended = {f.target: f.valid_to for f in everything.facts if f.relation == "WORKS_FOR"}
    assert ended["Acme Corp"] == utc("2022-05-29") and ended["Initech"] is None


@pytest.mark.parametrize("method", ["cosine", "fulltext"])
async def test_each_method_alone_finds_the_fact(memory, graph, method):
    cfg = SearchConfig(kinds=("facts",), methods=(method,))
    results = await memory.search("Bob loves skiing", group_ids=[graph["group"]], config=cfg)
    assert results.facts[0].fact == "Bob loves skiing."
    assert set(results.facts[0].ranks) == {method}


async def test_bfs_from_seed_and_from_recent_episodes(memory, graph):
    group = graph["group"]
    async with memory.pool.acquire() as conn:
        bob = await conn.fetchval("SELECT id FROM pgmemory.entities WHERE group_id = $1 AND name = 'Bob'", group)
    seeded = await memory.search("anything at all", group_ids=[group],
                                 config=SearchConfig(kinds=("facts", "entities"), methods=("bfs",), bfs_seeds=(bob,)))
    assert {f.fact for f in seeded.facts} == {"Bob lives in Oslo.", "Bob loves skiing."}
    assert {e.name for e in seeded.entities} == {"Bob", "Oslo", "skiing"}
    recent = await memory.search("anything at all", group_ids=[group],
                                 config=SearchConfig(kinds=("entities",), methods=("bfs",), bfs_recent_episodes=1))
    assert {e.name for e in recent.entities} >= {"Bob"}


async def test_raw_episodes_are_searchable(memory, graph):
    results = await memory.search("secret code word pineapple", group_ids=[graph["group"]])
    assert results.facts == [] or all("pineapple" not in f.fact for f in results.facts)
    assert results.episodes[0].content == "The secret code word for the party is pineapple."


async def test_filters_relation_types_and_labels(memory, graph):
    group = graph["group"]
    only_lives = await memory.search("Bob Oslo skiing", group_ids=[group],
                                     filters=SearchFilters(relation_types=("LIVES_IN",)))
    assert [f.relation for f in only_lives.facts] == ["LIVES_IN"]
    places = await memory.search("Oslo Bob", group_ids=[group], filters=SearchFilters(labels=("Place",)))
    assert [e.name for e in places.entities] == ["Oslo"]


async def test_relation_types_match_as_add_fact_stores_them(memory, group):
    """add_fact stores "works for" as WORKS_FOR; the filter reads its values the same way, so a
    relation named as it was written finds its facts (before: nothing, silently)."""
    await memory.add_fact(group, "Alice", "works for", "Acme Corp", "Alice works for Acme Corp.",
                          valid_from=utc("2020-01-01"))
    await memory.add_fact(group, "Alice", "lives-in", "Oslo", "Alice lives in Oslo.", valid_from=utc("2020-01-01"))
    for written in ("WORKS_FOR", "works for", "Works-For", " works_for "):
        found = await memory.search("Alice Acme Oslo", group_ids=[group],
                                    filters=SearchFilters(relation_types=(written,)))
        assert [f.relation for f in found.facts] == ["WORKS_FOR"], written
    assert SearchFilters(relation_types=["lives in", "LIVES_IN"]).relation_types == ("LIVES_IN", "LIVES_IN")


async def test_a_limit_above_the_candidate_pool_is_filled(memory, group):
    """A search of limit 40 where 45 facts match returns 40: each method reads at least `limit`
    candidates (the recipes' 30 per method capped every kind at 30 per method, whatever the limit)."""
    for i in range(45):
        await memory.add_fact(group, f"Person{i}", "OWNS", f"Teapot{i}", f"Person{i} owns a teapot.")
    fulltext = SearchConfig(kinds=("facts",), methods=("fulltext",))
    for config in (fulltext, "combined_hybrid_rrf", "edge_hybrid_rrf"):
        found = await memory.search("teapot", group_ids=[group], limit=40, config=config)
        assert len(found.facts) == 40, config
    assert len((await memory.search("teapot", group_ids=[group], limit=10, config=fulltext)).facts) == 10
    assert resolve_config("combined_hybrid_rrf").pool(10) == 30  # below the pool: the recipe's pool
    assert resolve_config("combined_hybrid_rrf").pool(40) == 40


async def test_time_range_filters(memory, graph):
    group = graph["group"]
    started_2023 = await memory.search("Alice work", group_ids=[group], config="edge_hybrid_rrf",
                                       filters=SearchFilters(include_invalidated=True,
                                                             valid_at_from=utc("2023-01-01")))
    assert employers(started_2023) == ["Initech"]
    ended_2022 = await memory.search("Alice work", group_ids=[group], config="edge_hybrid_rrf",
                                     filters=SearchFilters(include_invalidated=True,
                                                           invalid_at_from=utc("2022-01-01"),
                                                           invalid_at_to=utc("2022-12-31")))
    assert employers(ended_2022) == ["Acme Corp"]


async def test_hostile_filter_text_is_only_a_value(memory, graph):
    hostile = "WORKS_FOR'); DROP TABLE pgmemory.facts; --"
    results = await memory.search("Alice work", group_ids=[graph["group"]],
                                  filters=SearchFilters(relation_types=(hostile,), labels=(hostile,)))
    assert results.facts == [] and results.entities == []
    again = await memory.search("Robert'); DROP TABLE pgmemory.entities; --", group_ids=[graph["group"]])
    assert isinstance(again.facts, list)
    async with memory.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pgmemory.facts WHERE group_id = $1", graph["group"]) > 0


async def test_unknown_group_is_empty(memory):
    results = await memory.search("anything", group_ids=["no-such-group"])
    assert (results.facts, results.entities, results.communities, results.episodes) == ([], [], [], [])


@pytest.mark.parametrize("kwargs, message", [
    (dict(query="   "), "search query is empty"),
    (dict(query="x" * 4001), "the limit is 4000"),
    (dict(limit=0), "limit must be between 1 and 100"),
    (dict(limit=101), "limit must be between 1 and 100"),
    (dict(limit=True), "limit must be an integer between 1 and 100"),
    (dict(config="no_such_recipe"), "unknown search recipe 'no_such_recipe'"),
    (dict(config=SearchConfig(reranker="magic")), "unknown reranker 'magic'"),
    (dict(config=SearchConfig(reranker="node_distance")), "needs a centre entity"),
])
async def test_bad_search_input(memory, kwargs, message):
    args = {"query": "hello", "group_ids": ["g"], **kwargs}
    with pytest.raises(InvalidInput, match=message):
        await memory.search(args.pop("query"), **args)


async def test_context_has_facts_with_date_ranges_and_respects_max_chars(memory, graph):
    text = await memory.context("where does Alice work", group_ids=[graph["group"]], max_chars=2000)
    assert "<FACTS>" in text and "<ENTITIES>" in text
    assert "Alice joined Initech. (Date range: 2023-08-31 00:00 UTC - present)" in text
    short = await memory.context("where does Alice work", group_ids=[graph["group"]], max_chars=500)
    assert len(short) <= 500 and "</ENTITIES>" in short


@pytest.mark.parametrize("shown", [dict(), dict(episodes=True), dict(communities=True, episodes=True)])
async def test_context_searches_only_the_kinds_it_shows(memory, graph, monkeypatch, shown):
    """A context shows facts and entities (communities, episodes on request): it asks the database
    for those kinds only (the default recipe's episode candidates and their neighbouring turns
    were most of a context call's cost, then thrown away), and renders the same text as before."""
    import inspect

    import pgmemory.memory as memory_module
    from pgmemory.search.context import build_context

    group, query = graph["group"], "where does Alice work, and what is the code word"
    searched = []
    real = memory_module.run_search

    async def recorded(*args, **kwargs):
        searched.append(inspect.signature(real).bind(*args, **kwargs).arguments["config"].kinds)
        return await real(*args, **kwargs)
    monkeypatch.setattr(memory_module, "run_search", recorded)
    for config, filters in ((None, None), ("combined_hybrid_bfs_rrf", SearchFilters(as_of=utc("2022-12-01")))):
        full = await memory.search(query, group_ids=[group], config=config, filters=filters)
        searched.clear()
        text = await memory.context(query, group_ids=[group], config=config, filters=filters, **shown)
        expected = ("facts", "entities") + (("communities",) if shown.get("communities") else ()) + (
            ("episodes",) if shown.get("episodes") else ())
        assert searched == [expected]
        assert text == build_context(full, **shown)
    # A recipe of kinds a context does not show still renders what it shows (nothing): unchanged.
    searched.clear()
    await memory.context(query, group_ids=[group], config="episode_hybrid_rrf")
    assert searched == [("episodes",)]


async def test_a_context_of_several_groups_shows_each_line_once(memory, group):
    """Two groups that hold the same story (a user's memory and a shared copy): their context shows
    each fact, entity and episode line once, the budget going to distinct lines (each was shown
    twice, word for word)."""
    a, b = f"{group}-a", f"{group}-b"
    for g in (a, b):
        await ingest(memory, g, JOBS)
    text = await memory.context("where does Alice work, Bob Oslo", group_ids=[a, b], episodes=True, max_chars=4000)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == len(set(lines))
    assert "- Bob lives in Oslo. (Date range: 2023-09-02 00:00 UTC - present)" in lines
    assert "- [2023-09-02 00:00 UTC] Bob: I live in Oslo and I love skiing." in lines


async def test_bfs_age_and_sql_agree(memory, graph):
    group = graph["group"]
    async with memory.pool.acquire() as conn:
        ids = [r["id"] for r in await conn.fetch("SELECT id FROM pgmemory.entities WHERE group_id = $1", group)]
    for depth in (1, 2, 3):
        for seed in ids:
            sql = await memory.bfs([seed], group_ids=[group], depth=depth, engine="sql")
            age = await memory.bfs([seed], group_ids=[group], depth=depth, engine="age")
            assert sql == age
        assert await memory.bfs(ids[:3], group_ids=[group], depth=depth, engine="sql") == \
            await memory.bfs(ids[:3], group_ids=[group], depth=depth, engine="age")


async def test_node_distance_and_episode_mentions_rerankers(memory, graph):
    group = graph["group"]
    async with memory.pool.acquire() as conn:
        alice = await conn.fetchval("SELECT id FROM pgmemory.entities WHERE group_id = $1 AND name = 'Alice'", group)
    near = await memory.search("Oslo skiing Initech", group_ids=[group],
                               config=SearchConfig(kinds=("entities",), reranker="node_distance", center=alice))
    distances = [e.distance if e.distance is not None else 99 for e in near.entities]
    assert distances == sorted(distances) and near.entities[0].name == "Alice"
    mentioned = await memory.search("Alice Bob", group_ids=[group], config="node_episode_mentions")
    counts = [e.mentions for e in mentioned.entities]
    assert counts == sorted(counts, reverse=True)


def hit(name: str, ranks: dict[str, int], embedding=None) -> FactHit:
    return FactHit(id=uuid.uuid5(uuid.NAMESPACE_DNS, name), group_id="g", ranks=ranks, fact=name,
                   embedding=embedding)


def test_rrf_rewards_agreement_between_methods():
    a, b, c = hit("a", {"cosine": 1}), hit("b", {"cosine": 2, "fulltext": 2}), hit("c", {"fulltext": 1})
    ranked = rerank.rrf([a, b, c], k=60)
    assert ranked[0] is b
    assert ranked[0].score == pytest.approx(2 / 62)


def test_mmr_lambda_trades_relevance_for_diversity():
    q = [1.0, 0.0, 0.0]
    best = hit("best", {"cosine": 1}, [1.0, 0.0, 0.0])
    twin = hit("twin", {"cosine": 2}, [0.99, 0.14, 0.0])
    other = hit("other", {"cosine": 3}, [0.7, 0.0, 0.71])
    relevance_only = rerank.mmr([best, twin, other], q, lam=1.0)
    assert [h.fact for h in relevance_only] == ["best", "twin", "other"]
    diverse = rerank.mmr([best, twin, other], q, lam=0.3)
    assert [h.fact for h in diverse] == ["best", "other", "twin"]


def _mmr_by_definition(hits, query, lam, limit):
    """MMR as written down: at each step the hit of highest λ·sim(q, d) − (1−λ)·max sim(d, picked)
    (0 before the first pick), the earlier hit on a tie."""
    pool, picked, out = list(hits), [], []
    while pool and len(picked) < limit:
        def gain(h):
            redundancy = max((rerank._cos(h.embedding, p.embedding) for p in picked), default=0.0)
            return lam * rerank._cos(query, h.embedding) - (1 - lam) * redundancy
        best = max(pool, key=lambda h: (gain(h), -hits.index(h)))
        out.append((best.fact, gain(best)))
        picked.append(best)
        pool.remove(best)
    return out


class _CountedVector(list):
    """An embedding that counts how often it is read through (one similarity reads two)."""

    reads = 0

    def __iter__(self):
        _CountedVector.reads += 1
        return super().__iter__()


def test_mmr_compares_each_candidate_with_each_pick_once():
    """MMR over n candidates keeping `limit` reads each vector O(n x limit) times in all (each
    candidate's highest similarity to the picked ones is kept and updated per pick, norms once),
    not O(n x limit²): the rerank was ~70 ms of an edge_hybrid_mmr search of 60 candidates at
    limit 10 (10k bench). Same picks and scores as the definition, negative similarities included."""
    import random

    rnd = random.Random(5)
    query = [rnd.uniform(-1, 1) for _ in range(16)]
    hits = [hit(f"h{i}", {"cosine": i + 1}, [rnd.uniform(-1, 1) for _ in range(16)]) for i in range(60)]
    hits.append(hit("twin", {"cosine": 61}, list(hits[3].embedding)))  # an exact tie with h3
    hits.append(hit("novector", {"cosine": 62}))  # no embedding: never picked
    n = 61
    for lam in (0.0, 0.3, 0.5, 1.0):
        for limit in (1, 10, 61):
            want = _mmr_by_definition([h for h in hits if h.embedding], query, lam, limit)
            for h in hits:
                h.embedding = None if h.embedding is None else _CountedVector(h.embedding)
            _CountedVector.reads = 0
            got = rerank.mmr(hits, _CountedVector(query), lam=lam, limit=limit)
            assert [(h.fact, h.scores["mmr"]) for h in got] == want
            assert _CountedVector.reads <= 4 * n * (limit + 1), (lam, limit, _CountedVector.reads)


async def test_cross_encoder_reranks_by_its_scores(memory, graph, fake_openai):
    from pgmemory.providers.llm import LLMClient
    from pgmemory.providers.reranker import LLMCrossEncoder

    memory.cross_encoder = LLMCrossEncoder(LLMClient(base_url=fake_openai.base_url, api_key="t", model="m"))
    cfg = SearchConfig(kinds=("facts",), reranker="cross_encoder")
    fused = await memory.search("Bob", group_ids=[graph["group"]], config="edge_hybrid_rrf")
    n = len(fused.facts)
    fake_openai.script({"scores": [{"id": f"P{i}", "score": float(i)} for i in range(n)]})
    reranked = await memory.search("Bob", group_ids=[graph["group"]], config=cfg)
    assert [f.fact for f in reranked.facts] == [f.fact for f in reversed(fused.facts)]
    assert reranked.facts[0].scores["cross_encoder"] == n - 1
    assert "QUERY: Bob" in str(fake_openai.requests[0].body["messages"])


async def test_cross_encoder_without_a_provider_is_a_clear_error(memory, monkeypatch):
    for name in ("PGMEMORY_LLM_BASE_URL", "PGMEMORY_LLM_API_KEY", "OPENAI_API_KEY", "PGMEMORY_CROSS_ENCODER"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidInput, match="cross_encoder reranker needs a provider"):
        await memory.search("Bob", group_ids=["g"], config="combined_cross_encoder")


async def test_memory_reads_whether_it_is_distributed_once_not_per_search(memory, group, monkeypatch):
    """Issue 14: a search of several groups asks nothing more of a one-node database than the
    search itself: whether the tables are distributed was read when the Memory opened."""
    from pgmemory.search import fanout

    assert memory.layout.distributed is False
    a, b = f"{group}-a", f"{group}-b"
    await memory.add_episode(a, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-02"))
    await memory.add_episode(b, "I work at Globex.", actor="Bob", reference_time=utc("2024-01-02"))

    async def read_again(conn):
        raise AssertionError("the distribution setting was read again")
    monkeypatch.setattr(fanout, "is_distributed", read_again)
    results = await memory.search("where does he work", group_ids=[a, b], limit=10)
    assert {(f.group_id, f.target) for f in results.facts} == {(a, "Acme Corp"), (b, "Globex")}
