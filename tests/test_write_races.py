"""Writers of one group racing each other (issue 9's read -> decide -> apply): each test stages one
interleaving on a real Postgres and checks what a user relies on afterwards."""
from __future__ import annotations

import asyncio

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
