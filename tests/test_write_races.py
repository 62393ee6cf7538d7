"""Writers of one group racing each other (issue 9's read -> decide -> apply): each test stages one
interleaving on a real Postgres and checks what a user relies on afterwards."""
from __future__ import annotations

import asyncio
import json
import re

import psycopg
import pytest

from tests.support import utc




async def wait_for_lock_wait(memory, query_part: str, bound_s: float = 30.0) -> None:
    """Until a session runs a statement containing `query_part` and waits for a lock."""
    for _ in range(int(bound_s / 0.02)):
        if await memory.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                f"%{query_part}%"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no session waited for a lock in {query_part}")


async def test_a_writer_that_bumps_the_group_version_in_its_transaction_is_waited_for(db_dsn, memory, group):
    """A writer outside apply_episode calls pgmemory.bump_group_version(group) in its transaction
    (README). An episode whose candidates were read before that transaction committed must not be
    applied beside it: the bump holds the group's write lock until the commit, so the apply then
    sees the group changed and decides again (one Bob, not a second one beside the writer's)."""
    await memory.add_episode(group, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-01"))
    with psycopg.connect(db_dsn) as app:
        app.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (gen_random_uuid(), %s, 'Bob')",
                    (group,))
        app.execute("SELECT pgmemory.bump_group_version(%s)", (group,))
        ingest = asyncio.create_task(memory.add_episode(group, "I met Bob yesterday.", actor="Alice",
                                                        reference_time=utc("2024-02-01")))
        await wait_for_lock_wait(memory, "apply_if_unchanged")
        app.commit()
    result = await asyncio.wait_for(ingest, 60)
    bobs = await memory.pool.fetchval(
        "SELECT count(*) FROM pgmemory.entities WHERE group_id = $1 AND name = 'Bob'", group)
    assert result.status == "done" and result.entities_created == [] and bobs == 1


async def test_an_episode_leased_elsewhere_is_busy_on_a_pool_of_one_connection(db_dsn, group):
    """Adding an episode that another live process holds (its lease taken on another host) answers
    'busy' at once, also when the pool has one connection: the check for dead lease holders runs
    on the connection already held (a second acquire from the pool waited for ever)."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    async with await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(),
                                 pool_size=1) as memory:
        kw = dict(actor="Alice", reference_time=utc("2024-01-01"), episode_id="held")
        await memory.enqueue_episode(group, "I work at Acme Corp.", **kw)
        await memory.pool.execute(
            "UPDATE pgmemory.episodes SET status = 'processing', lease_owner = 'elsewhere:1:0:0',"
            " lease_until = clock_timestamp() + interval '5 minutes' WHERE group_id = $1", group)
        result = await asyncio.wait_for(memory.add_episode(group, "I work at Acme Corp.", **kw), 20)
    assert result.status == "busy"


async def test_a_worker_on_a_pool_of_one_connection_drains_the_queue(own_dsn, group):
    """The worker's LISTEN holds a connection for as long as it runs: on a pool of one it would
    hold the only one and no slot could claim (it waited for ever). There the worker polls."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    async with await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(),
                                 pool_size=1) as memory:
        await memory.enqueue_episode(group, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-01"))
        stats = await asyncio.wait_for(memory.worker(drain=True, poll_seconds=0.1, communities=False).run(), 30)
        status = await memory.pool.fetchval("SELECT status FROM pgmemory.episodes WHERE group_id = $1", group)
    assert (stats.done, status) == (1, "done")


def _judged_facts(requests) -> list[str]:
    """The NEW FACTS sections of the judge requests a fake LLM received."""
    return [r.body["messages"][-1]["content"].split("<NEW FACTS>")[1] for r in requests
            if "judgements" in json.dumps(r.body.get("response_format"))]


async def test_a_question_whose_candidates_only_came_in_another_order_is_not_asked_again(db_dsn, fake_openai,
                                                                                        group):
    """A concurrent writer re-records one of a question's candidates (its start moved back: a new
    version, so the candidates come in another order) while the LLM judges it: the group changed,
    the candidates are read again, and the same candidates in another order are the same question,
    answered from memory, not sent to the LLM again."""
    from pgmemory import Memory
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.providers.llm import LLMClient

    def add_acme(conn, frm, to=None):
        conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.',"
                     " p_valid_from => %s, p_valid_to => %s)", (group, utc(frm), to and utc(to)))
        conn.commit()

    with psycopg.connect(db_dsn) as conn:  # two intervals of one fact: 2018-2019 and since 2021
        add_acme(conn, "2018-01-01", "2019-01-01")
        add_acme(conn, "2021-01-01")

    def respond(body):
        text = body["messages"][-1]["content"]
        if len(_judged_facts(fake_openai.requests)) == 1:  # meanwhile, the earlier interval's start moves back
            with psycopg.connect(db_dsn) as conn:
                add_acme(conn, "2017-06-01", "2019-01-01")
        since_2021 = re.search(r"^(F\d+): .*\(valid: 2021", text, re.M).group(1)
        return {"judgements": [{"new_id": "N0", "duplicate_of": since_2021, "contradicts": []}]}

    fake_openai.script({"entities": [{"name": "Alice"}, {"name": "Acme"}],
                        "facts": [{"source": "Alice", "target": "Acme", "relation_type": "WORKS_FOR",
                                   "fact": "Alice works for Acme.", "valid_at": "2024-01-01"}]})
    fake_openai.responder = respond
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=30, max_retries=0)
    async with await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client)) as memory:
        result = await asyncio.wait_for(memory.add_episode(group, "I still work for Acme.", actor="Alice",
                                                           reference_time=utc("2024-02-01")), 60)
    assert result.status == "done" and result.decide_rounds == 2 and result.facts_duplicate == 1
    assert len(_judged_facts(fake_openai.requests)) == 1 and result.llm_calls == 2  # extraction + one judgement


def _acme_episode(fake_openai, respond) -> None:
    """Script the fake LLM: the episode says Alice works for Acme; `respond` answers the judge."""
    fake_openai.script({"entities": [{"name": "Alice"}, {"name": "Acme"}],
                        "facts": [{"source": "Alice", "target": "Acme", "relation_type": "WORKS_FOR",
                                   "fact": "Alice works for Acme.", "valid_at": "2024-01-01"}]})
    fake_openai.responder = respond


async def test_rounds_answered_from_memory_do_not_count_toward_the_llm_rounds(db_dsn, fake_openai, group):
    """Other writers change the group between each read and apply for 12 rounds but never what
    the episode asked the LLM: every round after the first is answered from memory (no LLM call),
    so the episode is applied once the group is quiet, not failed as busy after 8 rounds."""
    from pgmemory import Memory
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.ingest.pipeline import DECIDE_ROUNDS
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.providers.llm import LLMClient

    with psycopg.connect(db_dsn) as conn:
        conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.',"
                     " p_valid_from => %s)", (group, utc("2021-01-01")))
        conn.commit()
    bumps = {"left": 0}

    async def bump(conn) -> None:  # another writer's change at every connection the episode takes
        if bumps["left"] > 0:
            bumps["left"] -= 1
            await conn.execute("SELECT pgmemory.bump_group_version($1)", group)

    def respond(body):
        bumps["left"] = 12 * 3  # from the judgement on: about 12 rounds of three connections each
        return {"judgements": [{"new_id": "N0", "duplicate_of": re.search(r"^(F\d+):", body["messages"][-1]["content"],
                                                                            re.M).group(1), "contradicts": []}]}

    _acme_episode(fake_openai, respond)
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=30, max_retries=0)
    async with await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client),
                                 on_acquire=bump) as memory:
        result = await asyncio.wait_for(memory.add_episode(group, "I still work for Acme.", actor="Alice",
                                                           reference_time=utc("2024-02-01")), 60)
    assert result.status == "done" and result.facts_duplicate == 1
    assert result.decide_rounds > DECIDE_ROUNDS and bumps["left"] == 0
    assert result.llm_calls == 2  # the extraction and one judgement


async def test_a_group_that_changes_each_question_fails_the_episode_after_eight_llm_rounds(db_dsn, fake_openai,
                                                                                           group):
    """While the LLM judges, another writer records one more interval of the same fact, so each
    round raises a new question: after DECIDE_ROUNDS rounds that asked the LLM the episode fails
    as retryable (GroupBusy), having asked it no more."""
    from pgmemory import IngestError, Memory
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.ingest.pipeline import DECIDE_ROUNDS, group_busy
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.providers.llm import LLMClient

    def respond(body):
        n = len(_judged_facts(fake_openai.requests))
        with psycopg.connect(db_dsn) as conn:  # one more interval of Alice at Acme, a year each
            conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.',"
                         " p_valid_from => %s, p_valid_to => %s)",
                         (group, utc(f"{1990 + 2 * n}-01-01"), utc(f"{1991 + 2 * n}-01-01")))
            conn.commit()
        return {"judgements": [{"new_id": "N0", "duplicate_of": None, "contradicts": []}]}

    _acme_episode(fake_openai, respond)
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=30, max_retries=0)
    async with await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client)) as memory:
        with psycopg.connect(db_dsn) as conn:
            conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.',"
                         " p_valid_from => %s, p_valid_to => %s)", (group, utc("1980-01-01"), utc("1981-01-01")))
            conn.commit()
        try:
            await asyncio.wait_for(memory.add_episode(group, "I work for Acme.", actor="Alice",
                                                      reference_time=utc("2024-02-01")), 60)
        except IngestError as exc:
            failed = exc
        else:
            raise AssertionError("the episode was applied in a group that changed its question every round")
        status = await memory.pool.fetchval("SELECT status FROM pgmemory.episodes WHERE group_id = $1", group)
    assert group_busy(failed) and status == "failed"
    assert len(_judged_facts(fake_openai.requests)) == DECIDE_ROUNDS
