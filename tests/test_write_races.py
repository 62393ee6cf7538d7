"""Writers of one group racing each other (issue 9's read -> decide -> apply): each test stages one
interleaving on a real Postgres and checks what a user relies on afterwards."""
from __future__ import annotations

import asyncio
import json
import re

import psycopg

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


async def test_a_worker_on_a_pool_of_one_connection_drains_the_queue(db_dsn, group):
    """The worker's LISTEN holds a connection for as long as it runs: on a pool of one it would
    hold the only one and no slot could claim (it waited for ever). There the worker polls."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    async with await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(),
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
