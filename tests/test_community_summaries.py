"""Community names and summaries: extractive offline, LLM map-reduce, lazily, outside locks."""
from __future__ import annotations

from datetime import datetime, timezone

import psycopg

from pgmemory import Memory, SearchFilters
from pgmemory.extract.llm import LLMExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.providers.llm import LLMClient
from tests.communities_support import plant_graph
from tests.support import until
from tests.test_communities import CHAT, detect


def batch(group):
    return [{"group_id": group, "content": text, "actor": "Narrator", "episode_id": f"e{i}",
             "reference_time": datetime(2024, 1, 1 + i, tzinfo=timezone.utc)} for i, text in enumerate(CHAT)]


def communities(conn, group):
    return conn.execute(
        "SELECT name, summary, summary_kind, revision = summarized_revision, name_embedding IS NOT NULL"
        " FROM pgmemory.communities WHERE group_id = %s AND ended_at IS NULL ORDER BY name", (group,)).fetchall()


async def test_an_ingest_run_names_and_summarises_its_communities_offline(memory, conn, group):
    await memory.add_episodes(batch(group))
    assert communities(conn, group) == []  # episodes only mark: nothing is detected or summarised per episode
    out = await memory.refresh_communities(group)
    assert out.detection is not None and out.refreshed == out.detection["communities"] >= 2
    rows = communities(conn, group)
    assert all(kind == "extractive" and fresh and embedded for _, _, kind, fresh, embedded in rows)
    acme = next(r for r in rows if "Acme" in r[1])
    assert "Alice" in acme[0] + acme[1] and "Bob" in acme[0] + acme[1]
    again = await memory.refresh_communities(group)  # nothing marked: no work
    assert again.detection is None and again.refreshed == 0

    results = await memory.search("Acme", group_ids=[group], config="community_hybrid_rrf")
    assert results.communities and "Acme" in results.communities[0].summary
    context = await memory.context("Who works at Acme?", group_ids=[group], communities=True)
    assert "COMMUNITIES" in context or "communities" in context
    # As-of answers leave communities out: their summaries are not written for a slice of time.
    past = await memory.search("Acme", group_ids=[group], config="community_hybrid_rrf",
                               filters=SearchFilters(as_of=datetime(2024, 1, 3, tzinfo=timezone.utc)))
    assert past.communities == []


async def test_a_new_member_marks_its_community_and_the_next_refresh_rewrites_it(memory, conn, group):
    await memory.add_episodes(batch(group), communities=True)
    await memory.add_episode(group, "Erin works at Acme.", actor="Narrator",
                             reference_time=datetime(2024, 2, 1, tzinfo=timezone.utc))
    stale = [r for r in communities(conn, group) if not r[3]]
    assert len(stale) == 1 and "Acme" in stale[0][1]
    out = await memory.refresh_communities(group)
    assert out.detection is None and out.refreshed == 1
    assert all(r[3] for r in communities(conn, group))


async def test_llm_summaries_are_map_reduced_counted_and_never_under_a_lock(db_dsn, fake_openai, conn, group):
    from bench.scripted_llm import ScriptedModel

    model = ScriptedModel()
    seen = []

    def respond(body):
        if body["messages"][0]["content"].startswith("You summarise a community"):
            with psycopg.connect(db_dsn, autocommit=True) as c:
                seen.append(c.execute(
                    "SELECT (SELECT count(*) FROM pg_locks WHERE granted"
                    "          AND (locktype = 'advisory' OR relation = 'pgmemory.group_locks'::regclass)),"
                    " (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    "   AND state LIKE 'idle in transaction%%')").fetchone())
        return model(body)

    fake_openai.responder = respond
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5,
                       max_retries=1, base_delay=0.01)
    memory = await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))
    try:
        plant_graph(conn, group, blocks=2, size=30, p_in=0.5, p_out=0.0, seed=1)
        conn.commit()
        out = await memory.build_communities(group)
    finally:
        await memory.close()
    # Two communities of 30: two map calls (25 + 5 members) and one reduce call each.
    assert out.detection["communities"] == 2 and out.refreshed == 2
    assert out.usage.calls == model.calls["community"] == 6 == len(seen)
    assert seen == [(0, 0)] * 6
    state = conn.execute("SELECT llm_calls, prompt_tokens > 0 FROM pgmemory.community_state WHERE group_id = %s",
                         (group,)).fetchone()
    assert state == (6, True)
    assert {r[2] for r in communities(conn, group)} == {"llm"}


def test_detection_refuses_bad_arguments(conn, group):
    for args in ((None, 30), (group, 0), (group, 5000)):
        try:
            conn.execute("SELECT pgmemory.detect_communities(%s, %s)", args)
        except psycopg.errors.InvalidParameterValue as exc:
            assert "must be" in str(exc)
            conn.rollback()
        else:
            raise AssertionError(f"accepted {args}")
    detect(conn, group)  # an empty group: nothing to find, nothing written
    assert conn.execute("SELECT count(*) FROM pgmemory.communities WHERE group_id = %s", (group,)).fetchone()[0] == 0


async def test_a_detection_cut_by_a_timeout_is_one_line_and_writes_nothing(db_dsn, conn, group):
    """A detection is one statement: cancelled by the statement timeout it leaves the group as it
    was (no community, the drift still due), and the error is one DatabaseTimeout line, not
    asyncpg's QueryCanceledError."""
    from pgmemory.errors import DatabaseTimeout
    from pgmemory.ingest.communities import refresh_communities
    from pgmemory.storage.connect import create_pool

    plant_graph(conn, group, blocks=6, size=40)
    conn.execute("INSERT INTO pgmemory.community_state (group_id, drift) VALUES (%s, 240)", (group,))
    conn.commit()

    async def tight(c):
        await c.execute("SET statement_timeout = '1ms'")
    pool = await create_pool(db_dsn, on_acquire=tight)
    try:
        await refresh_communities(pool, HashEmbedder(), None, group, rebuild=True)
    except DatabaseTimeout as exc:
        message = str(exc)
    else:
        raise AssertionError("the detection was not cut")
    finally:
        await pool.close()
    assert "\n" not in message and f"community detection of group '{group}'" in message
    assert "PGMEMORY_STATEMENT_TIMEOUT" in message and "nothing of it was written" in message
    assert conn.execute("SELECT count(*) FROM pgmemory.communities WHERE group_id = %s", (group,)).fetchone()[0] == 0
    assert conn.execute("SELECT pgmemory.communities_due(%s)", (group,)).fetchone()[0]


def test_the_cli_says_in_one_line_that_another_writer_held_the_group_too_long(db_dsn, conn, group):
    import os
    import subprocess
    import sys

    plant_graph(conn, group, blocks=2, size=10)
    conn.commit()
    conn.execute("SELECT pgmemory.bump_group_version(%s)", (group,))  # holds the group's write lock
    env = {**os.environ, "PGMEMORY_DSN": db_dsn, "PGMEMORY_EMBEDDER": "hash", "PGMEMORY_LOCK_TIMEOUT": "0.3"}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "communities", "rebuild", "--group", group],
                          capture_output=True, text=True, env=env, timeout=120)
    conn.rollback()
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "PGMEMORY_LOCK_TIMEOUT" in done.stderr and f"group '{group}'" in done.stderr


async def llm_down_memory(dsn: str, fake_openai) -> Memory:
    """A Memory whose LLM (the fake server) answers 503 overloaded, retried once."""
    from tests.fake_openai import Status

    fake_openai.responder = lambda body: Status(503, "overloaded")
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5,
                       max_retries=1, base_delay=0.01)
    return await Memory.open(dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))


async def test_an_llm_that_is_down_stops_the_summaries_and_leaves_them_marked(db_dsn, fake_openai, conn, group):
    """A down or overloaded LLM (after its retries) is not asked again for every other community
    of the group: they all stay marked, counted as failed, and the next refresh writes them."""
    from bench.scripted_llm import ScriptedModel

    memory = await llm_down_memory(db_dsn, fake_openai)
    try:
        plant_graph(conn, group, blocks=3, size=8, p_in=0.8, p_out=0.0, seed=2)
        conn.commit()
        out = await memory.build_communities(group)
        assert out.detection["communities"] == 3
        assert (out.refreshed, out.failed, out.usage.calls) == (0, 3, 2)  # one community, two attempts
        assert "503" in out.error and "\n" not in out.error
        assert all(not fresh for _, _, _, fresh, _ in communities(conn, group))
        fake_openai.responder = ScriptedModel()
        again = await memory.refresh_communities(group)
    finally:
        await memory.close()
    assert (again.refreshed, again.failed, again.error) == (3, 0, None)
    assert {r[2] for r in communities(conn, group)} == {"llm"}


async def test_the_idle_worker_writes_the_summaries_the_llm_failed_once_it_answers(empty_dsn, fake_openai, group,
                                                                                monkeypatch):
    """Summaries an LLM outage left marked were written only when the group was touched again (or by
    a manual refresh): a worker that stays idle now tries them again after a pause that doubles
    while the LLM keeps failing, and writes them once it answers, with no new episode. (A database
    of its own: the worker would take other tests' pending episodes.)"""
    import asyncio

    from bench.scripted_llm import ScriptedModel
    from pgmemory.ingest import worker as worker_module
    from pgmemory.storage.setup import init_database
    from tests.conftest import DIM

    monkeypatch.setattr(worker_module, "PROVIDER_FIRST_PAUSE", 0.2)
    conn = psycopg.connect(empty_dsn)
    init_database(conn, DIM)
    memory = await llm_down_memory(empty_dsn, fake_openai)
    try:
        plant_graph(conn, group, blocks=2, size=8, p_in=0.8, p_out=0.0, seed=3)
        conn.commit()
        assert (await memory.build_communities(group)).failed == 2
        worker = memory.worker(poll_seconds=0.1)
        worker._touched.add(group)  # as after processing one of its episodes
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.stats.errors, seconds=5)
        assert worker.stats.errors and "503" in worker.stats.errors[0], worker.stats.errors
        fake_openai.responder = ScriptedModel()

        def summarised() -> bool:
            conn.rollback()  # (a fresh snapshot)
            return {r[2] for r in communities(conn, group)} == {"llm"}

        await until(summarised, seconds=10)
        worker.stop()
        await asyncio.wait_for(task, 30)
        assert {r[2] for r in communities(conn, group)} == {"llm"}
    finally:
        await memory.close()
        conn.close()


async def test_the_idle_worker_reports_a_detection_timeout_and_goes_on(db_dsn, conn, group, monkeypatch):
    """The worker's idle community upkeep reports a detection cut by a timeout (now a
    DatabaseTimeout, no longer asyncpg's error) and tries the group again later; it does not stop."""
    monkeypatch.setenv("PGMEMORY_LOCK_TIMEOUT", "0.3")
    plant_graph(conn, group, blocks=2, size=10)
    conn.execute("INSERT INTO pgmemory.community_state (group_id, drift) VALUES (%s, 20)", (group,))
    conn.commit()
    memory = await Memory.open(db_dsn, embedder=HashEmbedder())
    try:
        worker = memory.worker(poll_seconds=0.2)
        worker._touched.add(group)
        conn.execute("SELECT pgmemory.bump_group_version(%s)", (group,))  # another writer holds the group
        await worker._refresh_touched()
        conn.rollback()
        assert len(worker.stats.errors) == 1 and "PGMEMORY_LOCK_TIMEOUT" in worker.stats.errors[0]
        assert worker._touched == {group}  # tried again at the next idle moment
        await worker._refresh_touched()
        assert worker.stats.errors[1:] == [] and worker._touched == set()
    finally:
        await memory.close()
    assert len(communities(conn, group)) == 2
