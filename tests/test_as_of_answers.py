"""What as-of answers show (issue 18.4-18.9), through the public API, in both extractor modes.

The oracle for a slice (valid at T, believed at T') is the public SQL API (facts_valid_at /
facts_as_of), independent of the search code: no fact sentence outside the slice, and no LLM
entity description from a later episode, may appear anywhere in the context string.
"""
from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone

import pytest

from bench.scripted_llm import _EPISODE, ScriptedModel
from pgmemory import Memory, SearchFilters
from pgmemory.demo import sample_sessions
from pgmemory.extract.llm import LLMExtractor
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.providers.llm import LLMClient
from pgmemory.storage.connect import create_pool
from tests.support import utc

QUERIES = ("Where does Maya work?", "Maya", "Where does Alice work and live?", "Alice")


async def now_ts(memory) -> datetime:
    async with memory.pool.acquire() as conn:
        stamp = await conn.fetchval("SELECT clock_timestamp()")
    await asyncio.sleep(0.002)
    return stamp


async def slice_sentences(memory, group, as_of, known_at) -> tuple[set[str], set[str]]:
    """(sentences of the slice, every other fact sentence of the group), from the public SQL API
    (facts_valid_at / facts_as_of: true at T by pgmemory.holds_at, believed at T')."""
    async with memory.pool.acquire() as conn:
        every = {r[0] for r in await conn.fetch("SELECT fact FROM pgmemory.facts WHERE group_id = $1", group)}
        point = as_of or await conn.fetchval("SELECT now()")
        if known_at is None:
            rows = await conn.fetch("SELECT fact FROM pgmemory.facts_valid_at($1, $2)", group, point)
        else:
            rows = await conn.fetch("SELECT fact FROM pgmemory.facts_as_of($1, $2, $3)", group, point, known_at)
    inside = {r[0] for r in rows}
    return inside, every - inside


ENDED = re.compile(r"[^.:]*? \(until \d{4}-\d{2}-\d{2}\)\.")


async def assert_slice_only(memory, group, as_of, known_at, *, forbidden: set[str] = frozenset(),
                            queries=QUERIES) -> str:
    """Every context for the slice holds no fact sentence from outside it (nor `forbidden` text),
    and an as-of answer shows only entities described by slice facts. Asked now (neither time
    given), entity summaries may also recall ended facts, marked "(until <date>)". Returns the
    first context."""
    inside, outside = await slice_sentences(memory, group, as_of, known_at)
    as_of_view = as_of is not None or known_at is not None
    filters = SearchFilters(as_of=as_of, known_at=known_at)
    texts = []
    for query in queries:
        text = await memory.context(query, group_ids=[group], limit=20, filters=filters, communities=True)
        scanned = text if as_of_view else ENDED.sub("", text)
        leaked = [s for s in outside | set(forbidden) if s.rstrip(".") in scanned]
        assert not leaked, f"as_of={as_of} known_at={known_at} {query!r}: {leaked} in\n{text}"
        results = await memory.search(query, group_ids=[group], limit=20, filters=filters)
        assert {f.fact for f in results.facts} <= inside
        if as_of_view:
            assert results.communities == []
            for e in results.entities:
                assert e.summary and all(part.strip() in {s.rstrip(".") for s in inside}
                                         for part in e.summary.rstrip(".").split(". ")), e
        texts.append(text)
    return texts[0]


# --- offline extractor: the bundled three-session conversation ---------------------------

@pytest.fixture
async def maya(memory, group):
    known = []
    for session in sample_sessions():
        await memory.add_episodes([{**item, "group_id": group} for item in session])
        known.append(await now_ts(memory))
    return {"group": group, "known": known}


PERIODS = (None, utc("2022-06-01"), utc("2023-06-01"), utc("2024-06-01"))


async def test_offline_as_of_answers_hold_only_the_slice(memory, maya):
    group, known = maya["group"], maya["known"]
    # Asked now, as of each period, and known before each change (after sessions 1 and 2).
    for known_at in (None, known[0], known[1]):
        for as_of in PERIODS:
            await assert_slice_only(memory, group, as_of, known_at, queries=QUERIES[:2])

    text = await assert_slice_only(memory, group, utc("2022-06-01"), None, queries=QUERIES[:1])
    assert "Maya works for Northwind Traders." in text
    assert "Fabrikam" not in text and "Contoso" not in text and "Denver" not in text
    # Before session 2 was ingested, Northwind was still believed to be her employer in 2024.
    then = await assert_slice_only(memory, group, utc("2024-06-01"), known[0], queries=QUERIES[:1])
    assert "Maya works for Northwind Traders." in then and "Contoso" not in then
    now = await memory.context("Where does Maya work?", group_ids=[group])
    assert "Fabrikam Robotics" in now


async def test_as_of_entity_match_ignores_later_summary_text(memory, maya):
    # "Fabrikam" is in Maya's current summary (2024); as of 2022 it must not make Maya match.
    group = maya["group"]
    past = await memory.search("Fabrikam Robotics", group_ids=[group], config="node_hybrid_rrf",
                               filters=SearchFilters(as_of=utc("2022-06-01")))
    assert all("Fabrikam" not in e.name + e.summary for e in past.entities)
    assert all(set(e.ranks) <= {"cosine"} for e in past.entities)  # no full-text match from the future
    # Text of the slice does match: Maya's 2022 job is in her as-of summary.
    job = await memory.search("Northwind", group_ids=[group], config="node_hybrid_rrf",
                              filters=SearchFilters(as_of=utc("2022-06-01")))
    assert "fulltext" in next(e for e in job.entities if e.name == "Maya").ranks


async def test_demo_as_of_table_is_right(memory, maya):
    from pgmemory.demo import _employer

    group, known = maya["group"], maya["known"]
    import pgmemory.demo as demo

    old = demo.GROUP
    demo.GROUP = group
    try:
        table = {(t, k): await _employer(memory, utc(t), k)
                 for t in ("2022-06-01", "2023-06-01", "2024-06-01") for k in (known[1], None)}
    finally:
        demo.GROUP = old
    assert table == {
        ("2022-06-01", known[1]): "Northwind Traders", ("2022-06-01", None): "Northwind Traders",
        ("2023-06-01", known[1]): "Contoso Health", ("2023-06-01", None): "Contoso Health",
        ("2024-06-01", known[1]): "Contoso Health", ("2024-06-01", None): "Fabrikam Robotics"}


async def test_bare_entities_never_outrank_described_ones(mem, group):
    memory = mem
    await memory.add_episode(group, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-01"))
    await memory.add_episode(group, "Hello there.", actor="Sam", reference_time=utc("2024-01-02"))
    results = await memory.search("Sam Acme Corp", group_ids=[group])
    names = [e.name for e in results.entities]
    assert "Sam" in names  # found (by name), but...
    bare = [i for i, e in enumerate(results.entities) if not e.summary]
    described = [i for i, e in enumerate(results.entities) if e.summary]
    assert described and max(described) < min(bare)  # ...after every entity with a summary


async def test_context_budget_facts_first(memory, maya):
    group = maya["group"]
    for n in (200, 300, 400, 700, 1500):
        text = await memory.context("Where does Maya work?", group_ids=[group], max_chars=n, episodes=True)
        assert len(text) <= n
        if n >= 300:
            assert re.search(r"^- Maya .*\((Date range:|on) ", text, re.MULTILINE), text


async def test_dates_are_utc_whatever_the_session_time_zone(db_dsn, memory, maya):
    group = maya["group"]
    utc_text = await memory.context("Where does Maya work?", group_ids=[group], episodes=True)
    pool = await create_pool(db_dsn + "&timezone=Asia/Kolkata")
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW timezone") == "Asia/Kolkata"
        kolkata = Memory(pool, HashEmbedder(), RuleExtractor())
        text = await kolkata.context("Where does Maya work?", group_ids=[group], episodes=True)
    finally:
        await pool.close()
    assert "2022-03-14 09:00 UTC" in text and text == utc_text


# --- LLM extractor through the fake OpenAI server, with scripted answers --------------------

def _fact(source, target, relation, fact, valid_at=None, invalid_at=None, kind="state"):
    return {"source": source, "target": target, "relation_type": relation, "fact": fact,
            "valid_at": valid_at, "invalid_at": invalid_at, "negated": False, "kind": kind,
            "functional": relation in ("WORKS_FOR", "LIVES_IN")}


def _entity(name, summary=""):
    return {"name": name, "type": None, "summary": summary, "attributes": {}}


LATER_DESCRIPTION = "A football team Alice started following after her move."
EPISODES = [  # (reference time, text, scripted extraction reply)
    ("2021-03-01T10:00:00+00:00", "I work at Acme and I live in Boston.", {
        "entities": [_entity("Alice", "The speaker."), _entity("Acme", "Alice's employer."),
                     _entity("Boston", "Alice's city.")],
        "facts": [_fact("Alice", "Acme", "WORKS_FOR", "Alice works for Acme.", "2021-03-01T10:00:00Z"),
                  _fact("Alice", "Boston", "LIVES_IN", "Alice lives in Boston.", "2021-03-01T10:00:00Z")]}),
    ("2022-05-10T10:00:00+00:00", "I left Acme last month and now work at Globex.", {
        "entities": [_entity("Alice"), _entity("Globex", "Alice's new employer.")],
        "facts": [_fact("Alice", "Globex", "WORKS_FOR", "Alice works for Globex.", "2022-04-01T00:00:00Z")]}),
    ("2023-08-20T10:00:00+00:00", "I visited Lisbon last Saturday.", {
        "entities": [_entity("Alice"), _entity("Lisbon", "A city Alice visited.")],
        "facts": [_fact("Alice", "Lisbon", "VISITED", "Alice visited Lisbon.", "2023-08-12T00:00:00Z",
                        "2023-08-13T00:00:00Z", kind="event")]}),
    ("2024-02-01T10:00:00+00:00", "I moved to Denver, joined Initech and now follow the Broncos.", {
        "entities": [_entity("Alice"), _entity("Denver", "Alice's new city."),
                     _entity("Initech", "Alice's employer since 2024."),
                     _entity("Denver Broncos", LATER_DESCRIPTION)],
        "facts": [_fact("Alice", "Denver", "LIVES_IN", "Alice moved to Denver.", "2024-01-20T00:00:00Z"),
                  _fact("Alice", "Initech", "WORKS_FOR", "Alice works for Initech.", "2024-01-25T00:00:00Z")]}),
]


class ScriptedExtraction(ScriptedModel):
    """The fake model: scripted extraction replies per episode; entity resolution and fact
    judgement answered like the rules (a new employer/home ends the previous one)."""

    def __init__(self, episodes=EPISODES) -> None:
        super().__init__()
        self.episodes = episodes

    def extract(self, user: str) -> dict:
        rendered = _EPISODE.search(user).group(1)
        reply = next(r for _, text, r in self.episodes if text in rendered)
        with self._lock:
            for f in reply["facts"]:
                self._endpoints[f["fact"]] = (f["source"], f["target"])
        return {"missed_entities": [], "invalid_entities": [], **reply}


async def _llm_memory(db_dsn, fake_openai, episodes) -> Memory:
    fake_openai.responder = ScriptedExtraction(episodes)
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5,
                       max_retries=1, base_delay=0.01)
    return await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))


@pytest.fixture
async def alice(db_dsn, fake_openai, group):
    memory = await _llm_memory(db_dsn, fake_openai, EPISODES)
    known = []
    try:
        for when, text, _ in EPISODES:
            await memory.add_episode(group, text, actor="Alice", reference_time=datetime.fromisoformat(when))
            known.append(await now_ts(memory))
        yield {"memory": memory, "group": group, "known": known}
    finally:
        await memory.close()


async def test_llm_as_of_answers_hold_only_the_slice(alice):
    memory, group, known = alice["memory"], alice["group"], alice["known"]
    periods = (None, utc("2021-06-01"), utc("2022-09-01"), utc("2023-08-12T12:00"), utc("2024-06-01"))
    # The Broncos' description comes from the 2024 episode: it must not reach earlier answers.
    for known_at in (None, *known[:3]):
        for as_of in periods:
            later = as_of is not None and as_of < utc("2024-02-01") or known_at is not None
            await assert_slice_only(memory, group, as_of, known_at, queries=QUERIES[2:],
                                    forbidden={LATER_DESCRIPTION} if later else set())

    past = await memory.context("Where does Alice work and live?", group_ids=[group],
                                filters=SearchFilters(as_of=utc("2022-09-01")))
    assert "Alice works for Globex." in past and "Alice lives in Boston." in past
    assert "Initech" not in past and "Denver" not in past
    # Believed after episode 1: Acme, in 2024 too.
    then = await memory.context("Where does Alice work and live?", group_ids=[group],
                                filters=SearchFilters(as_of=utc("2024-06-01"), known_at=known[0]))
    assert "Alice works for Acme." in then and "Globex" not in then
    now = await memory.context("Denver Broncos", group_ids=[group])
    assert LATER_DESCRIPTION in now


async def test_llm_event_is_rendered_on_its_day(alice):
    memory, group = alice["memory"], alice["group"]
    on_the_day = await memory.context("Lisbon", group_ids=[group], filters=SearchFilters(as_of=utc("2023-08-12T15:00")))
    assert "- Alice visited Lisbon. (on 2023-08-12)" in on_the_day
    # A past event stays in later answers (pgmemory.holds_at), and is not in earlier ones.
    later = await memory.context("Lisbon", group_ids=[group], filters=SearchFilters(as_of=utc("2024-06-01")))
    assert "- Alice visited Lisbon. (on 2023-08-12)" in later
    assert "- Alice visited Lisbon. (on 2023-08-12)" in await memory.context("Lisbon", group_ids=[group])
    before = await memory.context("Lisbon", group_ids=[group], filters=SearchFilters(as_of=utc("2023-08-01")))
    assert "Alice visited Lisbon" not in before
    assert "(Date range: 2021-03-01 10:00 UTC - 2022-04-01 00:00 UTC)" in await memory.context(
        "Alice Acme", group_ids=[group], filters=SearchFilters(include_invalidated=True))


def test_event_rendering_and_utc_in_the_context_builder():
    from datetime import timedelta

    from pgmemory.search.context import build_context
    from pgmemory.search.types import FactHit, SearchResults

    plus2 = timezone(timedelta(hours=2))

    def fact(text, start, end, **attrs):
        return FactHit(id=None, group_id="g", ranks={}, fact=text, valid_from=start, valid_to=end,
                       attributes=attrs)
    results = SearchResults(facts=[
        fact("Maya visited Lisbon.", datetime(2019, 3, 4, 2, tzinfo=plus2), datetime(2019, 3, 5, 2, tzinfo=plus2)),
        fact("Maya attended PyCon.", datetime(2023, 4, 20, tzinfo=timezone.utc), None, kind="event"),
        fact("Maya works for Acme.", datetime(2020, 1, 1, 1, tzinfo=plus2), None),
        fact("Maya lived in Oslo.", datetime(2018, 1, 1, tzinfo=timezone.utc),
             datetime(2019, 1, 1, tzinfo=timezone.utc)),
    ])
    text = build_context(results)
    assert "- Maya visited Lisbon. (on 2019-03-04)" in text
    assert "- Maya attended PyCon. (on 2023-04-20)" in text
    assert "- Maya works for Acme. (Date range: 2019-12-31 23:00 UTC - present)" in text
    assert "- Maya lived in Oslo. (Date range: 2018-01-01 00:00 UTC - 2019-01-01 00:00 UTC)" in text


def test_context_budget_is_never_exceeded_and_facts_come_first():
    from pgmemory.search.context import build_context
    from pgmemory.search.types import EntityHit, EpisodeHit, FactHit, SearchResults

    results = SearchResults(
        facts=[FactHit(id=None, group_id="g", ranks={}, fact=f"Fact number {i} " + "x" * (i * 7 % 60),
                       valid_from=datetime(2020, 1, 1, tzinfo=timezone.utc)) for i in range(12)],
        entities=[EntityHit(id=None, group_id="g", ranks={}, name=f"E{i}", summary="s" * (i * 11 % 40))
                  for i in range(12)],
        episodes=[EpisodeHit(id=None, group_id="g", ranks={}, content="hello " * i) for i in range(5)])
    fact_lines = [ln for ln in build_context(results).splitlines() if ln.startswith("- Fact")]
    for n in range(200, 2600, 13):
        text = build_context(results, max_chars=n, episodes=True)
        assert len(text) <= n
        lines = text.splitlines()
        kept = [ln for ln in lines if ln.startswith("- Fact")]
        assert kept, n  # at least one fact fits in 200 characters
        later = [ln for ln in lines if ln.startswith("- E") or ln.startswith("- [")]
        # A fact is left out only if it is not shorter than every entity/episode line that got in.
        for ln in fact_lines:
            if ln not in kept:
                assert all(len(ln) >= len(other) for other in later), (n, ln)



async def test_known_at_shows_names_as_recorded_then(db_dsn, fake_openai, group):
    episodes = [
        ("2024-01-01T00:00:00+00:00", "I work at Acme Robotics.", {
            "entities": [_entity("Alice"), _entity("Acme Robotics")],
            "facts": [_fact("Alice", "Acme Robotics", "WORKS_FOR", "Alice works for Acme Robotics.", "2024-01-01T00:00:00Z")]}),
        ("2024-02-01T00:00:00+00:00", "Acme Robotics Inc, where I work, is hiring.", {
            "entities": [_entity("Alice"), _entity("Acme Robotics Inc")],
            "facts": [_fact("Alice", "Acme Robotics Inc", "WORKS_FOR", "Alice works for Acme Robotics Inc.")]}),
    ]
    memory = await _llm_memory(db_dsn, fake_openai, episodes)
    try:
        await memory.add_episode(group, episodes[0][1], actor="Alice", reference_time=utc("2024-01-01"))
        before = await now_ts(memory)
        await memory.add_episode(group, episodes[1][1], actor="Alice", reference_time=utc("2024-02-01"))
        async with memory.pool.acquire() as conn:
            names = {r[0] for r in await conn.fetch("SELECT name FROM pgmemory.entities WHERE group_id = $1",
                                                    group)}
        assert names == {"Alice", "Acme Robotics Inc"}  # resolved to the same entity, renamed
        query, filters = "where does Alice work", SearchFilters(known_at=before)
        then = await memory.search(query, group_ids=[group], filters=filters)
        assert [f.target for f in then.facts] == ["Acme Robotics"]
        assert "Acme Robotics" in [e.name for e in then.entities]
        assert "Acme Robotics Inc" not in await memory.context(query, group_ids=[group], filters=filters)
        now = await memory.search(query, group_ids=[group])
        assert [f.target for f in now.facts] == ["Acme Robotics Inc"]
    finally:
        await memory.close()


async def test_offline_event_is_rendered_on_its_day(memory, group):
    await memory.add_episode(group, "I visited Lisbon yesterday.", actor="Maya", reference_time=utc("2024-03-10T09:00"))
    await memory.add_episode(group, "I work at Acme Corp.", actor="Maya", reference_time=utc("2024-03-10T09:05"))
    on_the_day = await memory.context("Lisbon", group_ids=[group], filters=SearchFilters(as_of=utc("2024-03-09T12:00")))
    assert "- Maya visited Lisbon. (on 2024-03-09)" in on_the_day and "Acme" not in on_the_day
    now = await memory.context("Maya", group_ids=[group])  # a past event stays in view
    assert "- Maya visited Lisbon. (on 2024-03-09)" in now
    assert "- Maya works for Acme Corp. (Date range: 2024-03-10 09:05 UTC - present)" in now


async def test_llm_context_budget_facts_first(alice):
    memory, group = alice["memory"], alice["group"]
    for as_of in (None, utc("2022-09-01")):
        for n in (200, 300, 400, 700, 1500):
            text = await memory.context("Where does Alice work and live?", group_ids=[group], max_chars=n,
                                        episodes=True, filters=SearchFilters(as_of=as_of))
            assert len(text) <= n
            if n >= 300:
                assert re.search(r"^- Alice .*\((Date range:|on) ", text, re.MULTILINE), text


async def test_llm_dates_are_utc_whatever_the_session_time_zone(db_dsn, alice):
    memory, group = alice["memory"], alice["group"]
    utc_text = await memory.context("Where does Alice work and live?", group_ids=[group], episodes=True)
    pool = await create_pool(db_dsn + "&timezone=America/Los_Angeles")
    try:
        other = Memory(pool, HashEmbedder(), memory.extractor)
        text = await other.context("Where does Alice work and live?", group_ids=[group], episodes=True)
    finally:
        await pool.close()
    assert "2024-01-20 00:00 UTC" in text and text == utc_text  # Denver, from midnight UTC
