"""The episode queue: enqueue_episode from SQL, leases, workers (order per group, several
processes, kill -9 take-over, SIGTERM) — each on its own database so no other test's
episodes are in the queue."""
from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmemory import InvalidInput, Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.ingest.episode import MAX_JSON_DEPTH, default_episode_uuid, episode_uuid, json_depth, validate_episode
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage import grants
from pgmemory.storage.setup import init_database
from tests.conftest import DIM
from tests.fake_openai import Delay, Reply
from tests.support import until

ENQUEUE = "SELECT pgmemory.enqueue_episode(%s, %s, %s, %s, %s, %s, %s)"
EXTRACTION = {"entities": [{"name": "Ivy"}, {"name": "Acme Corp"}],
              "facts": [{"source": "Ivy", "target": "Acme Corp", "relation_type": "WORKS_FOR",
                         "fact": "Ivy works for Acme Corp.", "functional": True}]}




def enqueue(dsn: str, group: str, content: str, when: str, *, actor: str = "Zoe", episode_id: str | None = None):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(ENQUEUE, (group, content, "message", actor, when, "", episode_id)).fetchone()[0]


def episodes(dsn: str) -> list[dict]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute("SELECT group_id, id, content, status, attempts, lease_owner, lease_until, llm_calls"
                            " FROM pgmemory.episodes ORDER BY group_id, valid_at").fetchall()


def cli(dsn: str, *args: str, llm: str | None = None, **popen) -> subprocess.Popen:
    env = {**os.environ, "PGMEMORY_DSN": dsn, "PGMEMORY_EMBEDDER": "hash"}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    if llm:
        env.update(PGMEMORY_LLM_BASE_URL=llm, PGMEMORY_LLM_API_KEY="t")
    return subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def wait_until(check, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting: {what}")


def test_enqueue_episode_from_sql_validates_and_is_idempotent(own_dsn):
    group = "psql-writer"
    first = enqueue(own_dsn, group, "I work at Acme Corp.", "2024-01-01T00:00:00Z", episode_id="z1")
    again = enqueue(own_dsn, group, "I work at Acme Corp.", "2024-01-01T00:00:00Z", episode_id="z1")
    # The same id Python derives for the same (group, string id): both surfaces agree.
    assert first == again == episode_uuid(group, "z1")
    # Without an id: the same stable default as Python's, so enqueueing twice is a no-op.
    plain = [enqueue(own_dsn, group, "Hi there.", when, actor="Ann") for when in
             ("2024-01-03T10:00:00+02:00", "2024-01-03T10:00:00+02:00", "2024-01-03T08:00:00.250000Z")]
    assert plain[0] == plain[1] == default_episode_uuid(group, "Ann", datetime(2024, 1, 3, 8, tzinfo=timezone.utc),
                                                          "Hi there.")
    assert plain[2] == default_episode_uuid(group, "Ann", datetime(2024, 1, 3, 8, 0, 0, 250000, tzinfo=timezone.utc),
                                            "Hi there.")
    given = str(uuid.uuid4())
    assert str(enqueue(own_dsn, group, "Hello.", "2024-01-02T00:00:00Z", episode_id=given)) == given
    bad = [
        (("", "x", "message", None, "2024-01-01Z", "", None), "group_id must be a non-empty string"),
        ((group, "  ", "message", None, "2024-01-01Z", "", None), "episode content is empty"),
        ((group, "x", "email", None, "2024-01-01Z", "", None), "unknown episode kind"),
        ((group, "{nope", "json", None, "2024-01-01Z", "", None), "not valid JSON"),
        ((group, "x", "message", None, None, "", None), "reference_time is required"),
        ((group, "x", "message", " ", "2024-01-01Z", "", None), "actor must be a non-empty string"),
        ((group, "x" * 50_001, "message", None, "2024-01-01Z", "", None), "the limit is 50000"),
        ((group, "Something else.", "message", "Zoe", "2024-01-01Z", "", "z1"), "already used"),
        ((group, "I work at Acme Corp.", "message", "Ann", "2024-01-01Z", "", "z1"), "z1 .* its actor differs"),
        ((group, "I work at Acme Corp.", "text", "Zoe", "2024-01-01Z", "", "z1"), "its kind differs"),
        ((group, "I work at Acme Corp.", "message", "Zoe", "2024-01-02Z", "", "z1"), "its reference_time differs"),
    ]
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        for args, message in bad:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
                conn.execute(ENQUEUE, args)
    rows = episodes(own_dsn)
    assert [(r["content"], r["status"], r["attempts"]) for r in rows] == [
        ("I work at Acme Corp.", "pending", 0), ("Hello.", "pending", 0), ("Hi there.", "pending", 0),
        ("Hi there.", "pending", 0)]


async def test_python_enqueue_refuses_an_id_used_by_another_episode(memory, group):
    """An id the group already uses for different content is InvalidInput naming it (not the
    database's error), and a batch holding such an episode stores none of its episodes."""
    t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    first = await memory.enqueue_episode(group, "I work at Acme Corp.", reference_time=t, episode_id="z1")
    assert await memory.enqueue_episode(group, "I work at Acme Corp.", reference_time=t, episode_id="z1") == first
    clash = f"episode id 'z1' ({first}) is already used by a different episode of group '{group}': its content differs"
    with pytest.raises(InvalidInput) as refused:
        await memory.enqueue_episode(group, "Something else.", reference_time=t, episode_id="z1")
    assert str(refused.value) == clash
    batch = [{"group_id": group, "content": "I live in Lima.", "reference_time": t + timedelta(days=1)},
             {"group_id": group, "content": "Something else.", "reference_time": t, "episode_id": "z1"}]
    with pytest.raises(InvalidInput) as refused:
        await memory.enqueue_episodes(batch)
    assert str(refused.value) == f"episode 2: {clash}"
    assert [e.content for e in await memory.get_episodes(group)] == ["I work at Acme Corp."]
    for other, differs in ((dict(actor="Bob"), "actor"), (dict(kind="text"), "kind"),
                           (dict(reference_time=t + timedelta(hours=1)), "reference_time")):
        same_text = {"reference_time": t, "episode_id": "z1", **other}
        with pytest.raises(InvalidInput, match=f"already used by a different episode of group .*: its {differs} differs"):
            await memory.enqueue_episode(group, "I work at Acme Corp.", **same_text)
        with pytest.raises(InvalidInput, match=f"its {differs} differs"):
            await memory.add_episode(group, "I work at Acme Corp.", **same_text)
    ids = await memory.enqueue_episodes([batch[0], {**batch[1], "content": "I work at Acme Corp."}])
    assert ids[1] == first and [e.content for e in await memory.get_episodes(group)] == [
        "I work at Acme Corp.", "I live in Lima."]


def test_sql_uuid5_equals_python(own_dsn):
    names = ["", "a", "x" * 55, "y" * 56, "z" * 63, "w" * 64, "v" * 65, "Zoë 日本 \U0001F600", "q" * 1000]
    with psycopg.connect(own_dsn) as conn:
        for name in names:
            got = conn.execute("SELECT pgmemory_internal.uuid5(%s, %s)", (uuid.NAMESPACE_URL, name)).fetchone()[0]
            assert got == uuid.uuid5(uuid.NAMESPACE_URL, name), len(name)
        for given in ("{12345678-1234-5678-1234-567812345678}", "urn:uuid:12345678123456781234567812345678"):
            got = conn.execute("SELECT pgmemory_internal.episode_uuid('g', %s)", (given,)).fetchone()[0]
            assert got == episode_uuid("g", given)


async def test_worker_keeps_group_order_one_episode_per_group_at_a_time(own_dsn):
    # Enqueued out of order: the worker must follow reference time within each group.
    for group in ("g-a", "g-b", "g-c"):
        enqueue(own_dsn, group, "I left Acme Corp and now work at Globex.", "2024-03-01T00:00:00Z")
        enqueue(own_dsn, group, "I live in Lima.", "2024-02-01T00:00:00Z")
        enqueue(own_dsn, group, "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    spans: list[tuple[str, object, float, float]] = []
    process = memory.ingestor.process

    async def recorded(ep, **kwargs):
        started = time.monotonic()
        await asyncio.sleep(0.05)  # widen each episode's span so overlaps would show
        try:
            return await process(ep, **kwargs)
        finally:
            spans.append((ep.group_id, ep.reference_time, started, time.monotonic()))

    memory.ingestor.process = recorded
    try:
        stats = await memory.worker(concurrency=4, drain=True).run()
        async with memory.pool.acquire() as conn:
            jobs = {r["group_id"]: (r["source"], r["target"], r["valid_to"]) for r in await conn.fetch(
                "SELECT group_id, source, target, valid_to FROM pgmemory.believed_facts"
                " WHERE relation = 'WORKS_FOR' AND target = 'Acme Corp'")}
    finally:
        await memory.close()
    assert (stats.done, stats.failed) == (9, 0)
    for group in ("g-a", "g-b", "g-c"):
        mine = sorted((s for s in spans if s[0] == group), key=lambda s: s[2])
        assert [s[1].month for s in mine] == [1, 2, 3]
        assert all(a[3] <= b[2] for a, b in zip(mine, mine[1:]))  # never two at once
        assert jobs[group][2] is not None  # Acme ended by the March episode, as in order
    groups_at_once = max(sum(1 for s in spans if s[2] <= t < s[3]) for _, _, t, _ in spans)
    assert groups_at_once > 1  # groups did run in parallel
    assert {(r["status"], r["attempts"], r["lease_owner"]) for r in episodes(own_dsn)} == {("done", 1, None)}


def test_two_worker_processes_never_process_one_episode(own_dsn):
    for n in range(8):
        for group in ("w-a", "w-b", "w-c"):
            enqueue(own_dsn, group, f"I work at Company{n}.", f"2024-01-{n + 1:02d}T00:00:00Z")
    procs = [cli(own_dsn, "worker", "--drain", "--concurrency", "2") for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-800:] for o in outs]
    rows = episodes(own_dsn)
    # attempts counts every lease taken: one each means no episode was processed twice.
    assert len(rows) == 24 and {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}
    done = [int(o[0].strip().splitlines()[-1].split(" done")[0].split()[-1]) for o in outs]
    assert sum(done) == 24
    with psycopg.connect(own_dsn) as conn:
        assert conn.execute("SELECT count(*) - count(DISTINCT (group_id, lower(name)))"
                            " FROM pgmemory.entities").fetchone()[0] == 0


def test_expired_lease_is_taken_over_after_kill_9(own_dsn, fake_openai):
    enqueue(own_dsn, "k-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z", actor="Ivy")
    fake_openai.script(Delay(60, Reply(EXTRACTION)))
    proc = cli(own_dsn, "worker", "--lease-seconds", "1", llm=fake_openai.base_url)
    try:
        wait_until(lambda: len(fake_openai.requests) == 1 or proc.poll() is not None, "the worker's LLM call")
        assert proc.poll() is None, proc.stderr.read()
        (row,) = episodes(own_dsn)
        assert row["status"] == "processing" and row["lease_owner"] and row["attempts"] == 1
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    async def take_over() -> tuple:
        memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
        try:
            return await memory.worker(drain=True, poll_seconds=0.1).run(), await memory.episode_status(
                row["id"], "k-a")
        finally:
            await memory.close()

    # Nobody renews the dead worker's lease; once it has expired, another worker takes the episode.
    wait_until(lambda: psycopg.connect(own_dsn).execute(
        "SELECT bool_and(lease_until <= clock_timestamp()) FROM pgmemory.episodes").fetchone()[0], "expiry")
    stats, status = asyncio.run(take_over())
    assert stats.done == 1
    assert (status["status"], status["attempts"]) == ("done", 2)


def test_sigterm_finishes_the_current_episode_and_stops(own_dsn, fake_openai):
    enqueue(own_dsn, "s-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z", actor="Ivy")
    enqueue(own_dsn, "s-a", "I live in Lima.", "2024-01-02T00:00:00Z", actor="Ivy")
    fake_openai.script(Delay(1.5, Reply(EXTRACTION)))
    proc = cli(own_dsn, "worker", llm=fake_openai.base_url)
    wait_until(lambda: len(fake_openai.requests) == 1 or proc.poll() is not None, "the worker's LLM call")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "1 done" in out.splitlines()[-1]
    assert [(r["content"], r["status"], r["lease_owner"]) for r in episodes(own_dsn)] == [
        ("I work at Acme Corp.", "done", None), ("I live in Lima.", "pending", None)]


def test_sigterm_after_the_grace_period_gives_the_episode_back(own_dsn, fake_openai):
    enqueue(own_dsn, "s-b", "I work at Acme Corp.", "2024-01-01T00:00:00Z", actor="Ivy")
    fake_openai.script(Delay(60, Reply(EXTRACTION)))
    proc = cli(own_dsn, "worker", "--grace-seconds", "0", llm=fake_openai.base_url)
    wait_until(lambda: len(fake_openai.requests) == 1 or proc.poll() is not None, "the worker's LLM call")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    (row,) = episodes(own_dsn)
    # Given back for the next worker; the call already made is billed.
    assert (row["status"], row["lease_owner"], row["llm_calls"]) == ("pending", None, 1)


def test_a_live_lease_is_never_taken_an_expired_one_is(own_dsn):
    eid = enqueue(own_dsn, "l-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    enqueue(own_dsn, "l-a", "I live in Lima.", "2024-01-02T00:00:00Z")
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        lease = "SELECT pgmemory_internal.lease_episode('l-a', %s, %s, '1 hour')"
        claim = "SELECT * FROM pgmemory_internal.claim_episode(%s, '1 hour')"
        assert conn.execute(lease, (eid, "A")).fetchone()[0] == "leased"
        assert conn.execute(lease, (eid, "B")).fetchone()[0] == "busy"  # a concurrent retry
        assert conn.execute(claim, ("B",)).fetchall() == []  # its group is busy: not even the next one
        assert conn.execute("SELECT pgmemory_internal.renew_lease('l-a', %s, 'B', '1 hour')", (eid,)).fetchone()[0] is False
        conn.execute("UPDATE pgmemory.episodes SET lease_until = clock_timestamp() - interval '1 second'"
                     " WHERE id = %s", (eid,))
        assert conn.execute(claim, ("B",)).fetchall() == [("l-a", eid)]
        assert conn.execute("SELECT pgmemory_internal.renew_lease('l-a', %s, 'A', '1 hour')", (eid,)).fetchone()[0] is False
        row = conn.execute("SELECT status, lease_owner, attempts FROM pgmemory.episodes WHERE id = %s",
                           (eid,)).fetchone()
    assert row == ("processing", "B", 2)


@pytest.mark.parametrize("reachable_only", [False, True])
def test_claims_take_the_longest_waiting_free_group_and_its_earliest_episode(own_dsn, reachable_only):
    """The claim walks the groups with work in the queue index (issue 9: a few probes per group,
    not a pass over the backlog), yet keeps the order: the group waiting longest goes first
    whatever its name, a group with a live lease is skipped, a group's earliest episode first.
    So does the claim a worker makes while a Citus node is down (p_reachable_only: the groups with
    work read at once, reachable_queued_groups; on one node, all of them)."""
    waiting_long = [enqueue(own_dsn, "q-z", f"I live in town {i}.", f"2024-03-0{i}T00:00:00Z") for i in (2, 1)]
    busy = enqueue(own_dsn, "q-0", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    later = enqueue(own_dsn, "q-a", "I work at Initech.", "2024-01-01T00:00:00Z")
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgmemory_internal.lease_episode('q-0', %s, 'A', '1 hour')",
                            (busy,)).fetchone()[0] == "leased"
        claim = "SELECT * FROM pgmemory_internal.claim_episode(%s, '1 hour', '{}', %s)"
        assert conn.execute(claim, ("B", reachable_only)).fetchall() == [("q-z", waiting_long[1])]  # its earlier time
        assert conn.execute(claim, ("C", reachable_only)).fetchall() == [("q-a", later)]
        assert conn.execute(claim, ("D", reachable_only)).fetchall() == []  # every group with work is busy


def test_an_older_database_gets_the_queue_indexes_and_claims_from_its_backlog(own_dsn):
    """Migration 0300 upgrades a database without the queue's per-group indexes; the episodes
    enqueued before the upgrade are claimed in order afterwards."""
    first = enqueue(own_dsn, "u-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    enqueue(own_dsn, "u-a", "I live in Lima.", "2024-01-02T00:00:00Z")
    with psycopg.connect(own_dsn) as conn:
        conn.execute("DROP INDEX pgmemory.episodes_queue_age")
        conn.execute("DROP INDEX pgmemory.episodes_leased")
        conn.execute("DELETE FROM pgmemory.schema_migrations WHERE version = 300")
        conn.execute("DELETE FROM pgmemory.settings WHERE key = 'sql_fingerprint'")
        conn.commit()
        report = init_database(conn, DIM)
        conn.commit()
        assert "0300_queue_heads.sql" in report.migrations_applied
        assert {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'pgmemory'"
                                           " AND tablename = 'episodes'")} >= {"episodes_queue_age", "episodes_leased"}
        assert conn.execute("SELECT * FROM pgmemory_internal.claim_episode('W', '1 hour')").fetchall() == [
            ("u-a", first)]


async def test_enqueue_episode_python_api(own_dsn):
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        eid = await memory.enqueue_episode("py", "I work at Acme Corp.", actor="Zoe",
                                           reference_time="2024-01-01T00:00:00+00:00", episode_id="p1")
        assert eid == episode_uuid("py", "p1")
        with pytest.raises(InvalidInput, match="no time zone"):
            await memory.enqueue_episode("py", "x", reference_time="2024-01-01T00:00:00")
        stats = await memory.worker(drain=True).run()
        assert (stats.done, (await memory.episode_status("p1", "py"))["status"]) == (1, "done")
    finally:
        await memory.close()


def test_sync_memory_runs_a_worker(own_dsn):
    """README: SyncMemory has Memory's methods, blocking. Its `worker` had none (a script had to
    drop to asyncio for the queue): now it runs the worker to its end and returns the stats."""
    from pgmemory import SyncMemory

    with SyncMemory(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        memory.enqueue_episodes([dict(group_id="sync", content=f"I work at Acme Corp {i}.", actor="Zoe",
                                      reference_time=f"2024-01-0{i}T00:00:00+00:00", episode_id=f"s{i}")
                                 for i in (1, 2)])
        with pytest.raises(InvalidInput, match="concurrency"):
            memory.worker(concurrency=0, drain=True)
        seen = []
        stats = memory.worker(drain=True, on_progress=lambda s: seen.append(s.done))
        assert (stats.done, stats.failed) == (2, 0) and seen
        assert [memory.episode_status(f"s{i}", "sync")["status"] for i in (1, 2)] == ["done", "done"]


async def test_the_wake_up_names_no_group_and_still_wakes_the_worker(own_dsn):
    """Session 14: any login may LISTEN on pgmemory_episodes, and the NOTIFY of enqueue_episode
    carried the group id, so a login of one group learnt every other group's writes. The payload
    is empty now; an idle worker still wakes on it (long before its poll) and processes the group."""
    tag = uuid.uuid4().hex[:8]
    role = f"spy_{tag}"
    with psycopg.connect(own_dsn) as conn:
        grants.grant(conn, role, [f"spy-group-{tag}"], create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(own_dsn)
    spy = psycopg.connect(f"postgresql://{role}:pw@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}",
                          autocommit=True)
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        spy.execute("LISTEN pgmemory_episodes")
        worker = memory.worker(poll_seconds=120)
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(1)  # the worker found the queue empty and sleeps until woken
        await memory.enqueue_episode("secret-customer", "I work at Acme Corp.", actor="Zoe",
                                     reference_time="2024-01-01T00:00:00+00:00", episode_id="s1")
        deadline = time.monotonic() + 30
        while (await memory.episode_status("s1", "secret-customer"))["status"] != "done":
            assert time.monotonic() < deadline, "the worker was not woken by the notification"
            await asyncio.sleep(0.1)
        worker.stop()
        assert (await running).done == 1
        assert [n.payload for n in spy.notifies(timeout=1, stop_after=1)] == [""]
    finally:
        await memory.close()
        spy.close()
        with psycopg.connect(own_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


async def test_worker_outlives_lost_connections_and_gives_interrupted_episodes_back(own_dsn):
    """Postgres dropping the worker's connections (a restart, a failover; here its backends are
    terminated, 57P01, again and again) neither stops the worker nor fails an episode: the ones
    interrupted go back to 'pending' and are processed again, in each group's order."""
    for day in range(1, 41):
        enqueue(own_dsn, "g-lost", f"I visited Town{day}.", f"2024-01-{(day - 1) % 28 + 1:02d}T{day % 24:02d}:00:00Z")
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    worker = memory.worker(concurrency=2, poll_seconds=0.2)
    run = asyncio.create_task(worker.run())
    kills = 0
    try:
        with psycopg.connect(own_dsn, autocommit=True) as admin:
            for _ in range(400):
                done = admin.execute("SELECT count(*) FROM pgmemory.episodes WHERE status = 'done'").fetchone()[0]
                if done == 40:
                    break
                if kills < 8 and done >= 4 * kills:
                    kills += admin.execute(
                        "SELECT count(*) > 0 FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()) t").fetchone()[0]
                assert not run.done(), run.exception()
                await asyncio.sleep(0.1)
        states = {r["status"] for r in episodes(own_dsn)}
        assert kills >= 4 and states == {"done"}, (kills, states)
        # After its listener's connection was lost too, an enqueue still wakes it at once.
        enqueue(own_dsn, "g-lost", "I visited Town99.", "2024-03-01T00:00:00Z")
        for _ in range(200):
            if {r["status"] for r in episodes(own_dsn)} == {"done"}:
                break
            await asyncio.sleep(0.05)
        assert {r["status"] for r in episodes(own_dsn)} == {"done"}
    finally:
        worker.stop()
        stats = await run
        await memory.close()
    assert stats.failed == 0 and all(e.startswith("communities of group") for e in stats.errors), stats.errors


async def test_a_poisoned_episode_fails_after_its_lost_attempts_and_its_group_goes_on(own_dsn):
    """An episode whose every lease ended unfinished (the worker killed mid-episode each time, as
    an OOM kill of a huge extraction would) is failed once it took queue_max_attempts (5) leases,
    instead of being claimed forever ahead of its group's later episodes."""
    poison = enqueue(own_dsn, "p-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z", episode_id="poison")
    enqueue(own_dsn, "p-a", "I live in Lima.", "2024-02-01T00:00:00Z", episode_id="next")
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        for attempt in range(1, 6):
            # Each lease taken by a claimer that then dies: its lease simply expires.
            (claimed,) = conn.execute("SELECT episode_id FROM pgmemory_internal.claim_episode(%s, '1 hour')",
                                      (f"dead-{attempt}",)).fetchone()
            assert claimed == poison
            conn.execute("UPDATE pgmemory.episodes SET lease_until = clock_timestamp() - interval '1 s'"
                         " WHERE id = %s", (poison,))
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        stats = await memory.worker(drain=True, poll_seconds=0.1).run()
        status = await memory.episode_status(poison, "p-a")
        assert (status["status"], status["attempts"]) == ("failed", 5)
        assert "gave up after 5 attempts" in status["error"]
        assert (await memory.episode_status("next", "p-a"))["status"] == "done" and stats.done == 1
        # `pgmemory retry` still tries it (and here it finishes).
        await memory.retry("p-a")
        assert (await memory.episode_status(poison, "p-a"))["status"] == "done"
    finally:
        await memory.close()


async def test_an_episode_stored_with_a_time_no_driver_reads_fails_alone(own_dsn):
    """A pending episode written straight into the table (not through enqueue_episode, which
    refuses such times) with a reference time Python cannot hold stopped the worker at its claim:
    it now fails with the reason, and the other groups' episodes are processed."""
    enqueue(own_dsn, "g-ok", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    bad = uuid.uuid4()
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, source_description, valid_at)"
                     " VALUES (%s, 'g-bad', 'message', 'I live in Lima.', 'Zoe', '', '20000-01-01T00:00:00Z')", (bad,))
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        stats = await asyncio.wait_for(memory.worker(concurrency=2, drain=True).run(), 60)
    finally:
        await memory.close()
    assert (stats.done, stats.failed) == (1, 1)
    with psycopg.connect(own_dsn) as conn:
        rows = dict(conn.execute("SELECT group_id, status || ': ' || coalesce(error, '') FROM pgmemory.episodes").fetchall())
    assert rows["g-ok"] == "done: "
    assert rows["g-bad"].startswith("failed: ") and "reference_time" in rows["g-bad"] and "out of range" in rows["g-bad"]


async def test_a_group_held_busy_by_another_session_is_set_aside_not_failed(own_dsn, monkeypatch):
    """An app's own open transaction holding its group's write lock past lock_timeout: the worker
    gives that episode back (pending, the attempt not counted), processes the other groups
    meanwhile, and processes it once the lock is free; nothing is failed."""
    monkeypatch.setenv("PGMEMORY_LOCK_TIMEOUT", "0.3")
    busy = enqueue(own_dsn, "g-busy", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    for group in ("g-free1", "g-free2"):
        enqueue(own_dsn, group, "I live in Lima.", "2024-02-01T00:00:00Z")
    holder = psycopg.connect(own_dsn)
    holder.execute("SELECT pgmemory_internal.lock_group('g-busy')")  # held until commit
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    run = None
    try:
        run = asyncio.create_task(memory.worker(drain=True, poll_seconds=0.2).run())

        def status(group):
            return {r["group_id"]: r for r in episodes(own_dsn)}[group]
        await asyncio.to_thread(
            wait_until, lambda: status("g-free1")["status"] == status("g-free2")["status"] == "done",
            "the free groups processed while g-busy is held", 60)
        seen = set()
        for _ in range(20):  # g-busy is tried again after each pause, and set aside again
            held = status("g-busy")
            seen.add((held["status"], held["attempts"]))
            await asyncio.sleep(0.1)
        # between tries pending with no attempt counted; during a try processing with one
        assert seen <= {("pending", 0), ("processing", 1)} and ("pending", 0) in seen
        assert not run.done()  # draining waits for the set-aside group instead of leaving it
        holder.commit()
        stats = await asyncio.wait_for(run, 60)
    finally:
        holder.close()
        if run is not None and not run.done():
            run.cancel()
        await memory.close()
    assert (stats.done, stats.failed) == (3, 0) and stats.set_aside >= 2
    done = status("g-busy")
    assert (done["id"], done["status"], done["attempts"]) == (busy, "done", 1)


async def test_turns_enqueued_in_one_transaction_with_one_time_are_processed_in_enqueue_order(own_dsn):
    """A chat session's turns often share one reference time (LoCoMo stamps every turn with the
    session's start) and are enqueued in one transaction (Memory.enqueue_episodes, an app's own
    BEGIN ... COMMIT), so they share recorded_at (now()) too: the claim then fell back to the
    episode's id, a hash, and processed them in an arbitrary order (here "I left Acme" before
    "I work at Acme" in some groups), unlike add_episodes. Enqueue order (seq) breaks the tie."""
    turns = [f"Turn {n}: I visited Town{n}." for n in range(1, 9)]
    with psycopg.connect(own_dsn) as conn:  # one transaction
        for turn in turns:
            conn.execute(ENQUEUE, ("t-one", turn, "message", "Zoe", "2024-01-01T00:00:00Z", "", None))
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    batch = [{"group_id": f"t-{n}", "content": content, "actor": "Ivy", "reference_time": "2024-01-01T00:00:00+00:00"}
             for n in range(6) for content in ("I work at Acme Corp.", "I left Acme Corp and now work at Globex.")]
    await memory.enqueue_episodes(batch)
    seen: list[tuple[str, str]] = []
    process = memory.ingestor.process

    async def recorded(ep, **kwargs):
        seen.append((ep.group_id, ep.content))
        return await process(ep, **kwargs)

    memory.ingestor.process = recorded
    try:
        stats = await memory.worker(drain=True).run()
    finally:
        await memory.close()
    assert (stats.done, stats.failed) == (8 + 12, 0)
    assert [c for g, c in seen if g == "t-one"] == turns
    for n in range(6):
        assert [c for g, c in seen if g == f"t-{n}"] == ["I work at Acme Corp.", "I left Acme Corp and now work at Globex."]


def _pid_free_here(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def test_a_live_lease_of_a_process_in_another_pid_namespace_is_not_taken(own_dsn):
    """A lease owner names its host and pid, and a worker ended at once the leases of "this host's"
    processes that no longer run. A process with the same host name whose pid this worker cannot
    see (another container on the host network, `hostNetwork` pods, a second machine with the same
    name) looked dead: its live lease was ended and its episode processed a second time while it
    still worked on it. Here the holder runs in its own pid namespace (unshare) and keeps its lease."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"):
        pytest.skip("needs root and unshare to start a process in another pid namespace")
    eid = enqueue(own_dsn, "ns-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    last = next(p for p in range(pid_max - 50, 400, -997) if _pid_free_here(p + 1) and _pid_free_here(p + 2))
    holder_code = ("import sys, time, psycopg\nfrom pgmemory.ingest.pipeline import worker_id\nowner = worker_id()\n"
                   "conn = psycopg.connect(sys.argv[1], autocommit=True)\n"
                   "state = conn.execute(\"SELECT pgmemory_internal.lease_episode('ns-a', %s, %s, '1 hour')\","
                   " (sys.argv[2], owner)).fetchone()[0]\nprint(state, owner, flush=True)\ntime.sleep(120)\n")
    script = f'echo {last} > /proc/sys/kernel/ns_last_pid && "$0" -c "$1" "$2" "$3"; :'
    holder = subprocess.Popen(["unshare", "-fp", "--kill-child", "--mount-proc", "sh", "-c", script, sys.executable, holder_code,
                               own_dsn, str(eid)], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line = holder.stdout.readline().split()
        if not line:
            pytest.skip(f"could not start a process in another pid namespace: {holder.stderr.read()[-300:]}")
        state, owner = line
        assert state == "leased" and _pid_free_here(int(owner.split(":")[1])), owner

        async def drain() -> tuple:
            memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
            try:
                return await memory.worker(drain=True, poll_seconds=0.1).run(), await memory.episode_status(eid, "ns-a")
            finally:
                await memory.close()

        stats, status = asyncio.run(drain())
        assert (stats.done, status["status"], status["attempts"]) == (0, "processing", 1)
        assert episodes(own_dsn)[0]["lease_owner"] == owner
    finally:
        holder.kill()
        holder.wait(10)


def test_a_worker_on_a_read_only_login_stops_with_one_line(own_dsn):
    """`pgmemory worker` (and ingest, retry) run with a read-only login (pgmemory grant without
    --app) printed a 40-line traceback ending in "permission denied for table group_locks"; it now
    stops with one line saying the login may only read and how to get a read-write one, and the
    episode stays pending for a worker that may write."""
    tag = uuid.uuid4().hex[:8]
    role = f"ro_{tag}"
    with psycopg.connect(own_dsn) as conn:
        grants.grant(conn, role, ["ro-a"], create_password="pw")
    assert cli(own_dsn, "worker", "--drain").wait(120) == 0  # the owner records the embedder first
    enqueue(own_dsn, "ro-a", "I work at Acme Corp.", "2024-01-01T00:00:00Z")
    info = psycopg.conninfo.conninfo_to_dict(own_dsn)
    login = f"postgresql://{role}:pw@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"
    try:
        out, err = cli(login, "worker", "--drain").communicate(timeout=120)
        (line,) = err.strip().splitlines()
        assert line.startswith("pgmemory: error: ") and f"login {role} may only read" in line, err
        assert "pgmemory grant" in line and "--app" in line
        assert [(r["status"], r["attempts"]) for r in episodes(own_dsn)] == [("pending", 0)]
        with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ep-{tag}.jsonl"), "w") as f:
            f.write('{"group_id": "ro-a", "content": "I live in Lima.", "reference_time": "2024-01-02T00:00:00Z"}\n')
        proc = cli(login, "ingest", f.name)
        out, err = proc.communicate(timeout=120)
        (line,) = err.strip().splitlines()
        assert proc.returncode == 2 and "may only read" in line and "--app" in line, err
    finally:
        with psycopg.connect(own_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_sql_enqueue_strips_whitespace_as_python_does(own_dsn):
    """enqueue_episode said it validates like the Python API, but trimmed only spaces where Python
    strips every whitespace character (str.strip): a content of no-break or ideographic spaces was
    queued, an actor of a tab accepted, and an actor with a trailing newline (a line read from a
    file) stored with it, so its derived id differed from Python's for the same episode."""
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        for args, message in [
            (("ws", "\u00a0\u3000\u2009", "message", None, when, "", None), "episode content is empty"),
            (("ws", "Hi.", "message", "\t\n", when, "", None), "actor must be a non-empty string"),
            (("ws", "Hi.", "message", "\u3000", when, "", None), "actor must be a non-empty string"),
            (("ws", "Hi.", "message", None, when, "", "\t"), "episode_id must be a UUID or a non-empty string"),
        ]:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
                conn.execute(ENQUEUE, args)
        eid = conn.execute(ENQUEUE, ("ws", "I work at Acme Corp.", "message", "Zoe\n", when, "", None)).fetchone()[0]
        assert eid == default_episode_uuid("ws", "Zoe", when, "I work at Acme Corp.")
        # The same episode again, its actor written another way, is the same episode.
        assert conn.execute(ENQUEUE, ("ws", "I work at Acme Corp.", "message", "\u00a0Zoe", when, "", None)
                            ).fetchone()[0] == eid
        assert conn.execute(ENQUEUE, ("ws", "I work at Acme Corp.", "message", "Zoe\r\n", when, "", "w1")
                            ).fetchone()[0] == episode_uuid("ws", "w1")
        conn.execute(ENQUEUE, ("ws", "I work at Acme Corp.", "message", "Zoe", when, "", "w1"))  # the same actor
        assert conn.execute("SELECT array_agg(DISTINCT actor) FROM pgmemory.episodes WHERE group_id = 'ws'"
                            ).fetchone()[0] == ["Zoe"]


@pytest.mark.parametrize("actor, code", [("Alice\nMallory", "000A"), ("Al\x1bice", "001B"), ("Al\u0085ice", "0085")])
def test_an_actor_with_a_control_character_is_refused_by_python_and_sql_alike(own_dsn, actor, code):
    """A speaker's name is one line: "Alice\nMallory" became an entity whose name printed as two lines
    of a context. Python's validation and enqueue_episode refuse it with the same line."""
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    message = f"actor contains a control character (U+{code}): a speaker's name is one line"
    with pytest.raises(InvalidInput, match=re.escape(message)):
        validate_episode("cc", "Hi.", actor=actor, reference_time=when)
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=re.escape(message)):
            conn.execute(ENQUEUE, ("cc", "Hi.", "message", actor, when, "", None))
        assert conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = 'cc'").fetchone() == (0,)
    assert validate_episode("cc", "Hi.", actor=" Alice\n", reference_time=when).actor == "Alice"  # ends stripped


async def test_retry_leaves_a_group_a_worker_is_processing_to_it(own_dsn):
    """`pgmemory retry` (run to re-try failed episodes while workers run) re-ran every pending
    episode too, leasing each one alone: with a worker processing a group's first episode, retry
    processed the group's second and third meanwhile, ahead of the first. A group another process
    is working on now keeps its order: retry leaves its episodes to it ("busy")."""
    first = enqueue(own_dsn, "rt", "I visited Town1.", "2024-01-01T00:00:00Z")
    enqueue(own_dsn, "rt", "I visited Town2.", "2024-01-02T00:00:00Z")
    enqueue(own_dsn, "rt", "I visited Town3.", "2024-01-03T00:00:00Z")
    enqueue(own_dsn, "rt-free", "I visited Town4.", "2024-01-01T00:00:00Z")
    failed = enqueue(own_dsn, "rt", "I visited Town0.", "2023-12-01T00:00:00Z")
    with psycopg.connect(own_dsn, autocommit=True) as conn:  # a worker (elsewhere) is on Town1
        conn.execute("UPDATE pgmemory.episodes SET status = 'failed', error = 'x' WHERE id = %s", (failed,))
        assert conn.execute("SELECT episode_id FROM pgmemory_internal.claim_episode('elsewhere:1:w', '1 hour')"
                            ).fetchone() == (first,)
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        results = await memory.retry()
        by_group = {}
        for r in results:
            by_group.setdefault(r.group_id, []).append(r.status)
        # (a failed episode, already out of its group's order, is retried meanwhile)
        assert by_group == {"rt": ["done", "busy", "busy"], "rt-free": ["done"]}
        # Once the worker is done with Town1, retry (or a worker) takes the rest, in order.
        with psycopg.connect(own_dsn, autocommit=True) as conn:
            conn.execute("SELECT pgmemory_internal.end_attempt('rt', %s, 'elsewhere:1:w', NULL, 0, 0, 0, NULL)", (first,))
        assert [r.status for r in await memory.retry("rt")] == ["done"] * 3
    finally:
        await memory.close()
    assert {(r["group_id"], r["status"]) for r in episodes(own_dsn)} == {("rt", "done"), ("rt-free", "done")}


def test_a_second_signal_gives_the_current_episode_back_at_once(own_dsn, fake_openai):
    """On SIGINT/SIGTERM a worker finishes its current episode for up to --grace-seconds (30):
    it said nothing meanwhile, and a second Ctrl-C was ignored, so an impatient user waited the
    whole grace period or reached for kill -9. It now says it is stopping, and a second signal
    gives the episode back at once."""
    enqueue(own_dsn, "s-c", "I work at Acme Corp.", "2024-01-01T00:00:00Z", actor="Ivy")
    fake_openai.script(Delay(60, Reply(EXTRACTION)))
    proc = cli(own_dsn, "worker", llm=fake_openai.base_url)
    wait_until(lambda: len(fake_openai.requests) == 1 or proc.poll() is not None, "the worker's LLM call")
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    assert proc.poll() is None  # still finishing its episode
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 10, "the second signal did not stop the worker"
    assert proc.returncode == 0, err
    assert "stopping" in err and "again" in err
    (row,) = episodes(own_dsn)
    assert (row["status"], row["lease_owner"], row["llm_calls"]) == ("pending", None, 1)


async def test_json_episodes_python_accepts_are_queued_and_too_deep_ones_refused_in_one_line(own_dsn):
    """A json episode holding an escaped NUL ("\\u0000", valid JSON that Python accepts) was refused
    by enqueue_episode with Postgres' own 22P05 "unsupported Unicode escape sequence" (its check
    converted the text to jsonb), and one nested 25,000 deep raised "stack depth limit exceeded"
    with a hint to raise max_stack_depth; Python's own check raised a bare RecursionError. One
    nested 600 deep was stored by SQL and failed by the worker's Python: both surfaces now take
    500 levels (brackets inside strings not counted) and refuse one more in the same line."""
    nul = '{"name": "Ivy", "note": "a\\u0000b"}'
    deepest = '{"k": "[[[\\"[[", "v": ' + "[" * 499 + "1" + "]" * 499 + "}"
    assert json_depth(deepest) == MAX_JSON_DEPTH == 500
    too_deep = {501: "[" * 501 + "]" * 501, 25_000: "[" * 25_000 + "]" * 25_000}
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        eid = conn.execute(ENQUEUE, ("js", nul, "json", None, "2024-01-01T00:00:00Z", "", None)).fetchone()[0]
        deep_id = conn.execute(ENQUEUE, ("js", deepest, "json", None, "2024-01-01T00:00:00Z", "", None)).fetchone()[0]
        for depth, text in too_deep.items():
            with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
                conn.execute(ENQUEUE, ("js", text, "json", None, "2024-01-02T00:00:00Z", "", None))
            assert refused.value.diag.message_primary == \
                f"json episode nests {depth} levels of arrays and objects; the limit is 500"
            assert refused.value.diag.message_hint is None
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        assert await memory.enqueue_episode("js", nul, kind="json", reference_time="2024-01-01T00:00:00Z") == eid
        assert await memory.enqueue_episode("js", deepest, kind="json", reference_time="2024-01-01T00:00:00Z") == deep_id
        for depth, text in too_deep.items():
            with pytest.raises(InvalidInput, match=f"^json episode nests {depth} levels of arrays and objects; "
                                                   "the limit is 500$"):
                await memory.enqueue_episode("js", text, kind="json", reference_time="2024-01-02T00:00:00Z")
    finally:
        await memory.close()


def test_json_depth_is_counted_alike_in_sql_and_python(own_dsn):
    """enqueue_episode and Python refuse the same json episodes: the two depth counts agree on
    random texts of brackets, strings with escaped quotes and backslashes, and other characters."""
    rng = random.Random(11)
    parts = ["[", "]", "{", "}", '"', '\\"', "\\\\", "a", ",", ":", " ", "é"]
    texts = ["".join(rng.choice(parts) for _ in range(rng.randint(0, 60))) for _ in range(300)]
    with psycopg.connect(own_dsn) as conn:
        found = conn.execute("SELECT array_agg(pgmemory_internal.json_depth(t) ORDER BY n)"
                             " FROM unnest(%s::text[]) WITH ORDINALITY AS x (t, n)", (texts,)).fetchone()[0]
    assert found == [json_depth(t) for t in texts]
    assert len(set(found)) > 5  # (the texts reach several depths, negative ones too)


@pytest.mark.parametrize("status", [503, 401])
async def test_an_llm_outage_does_not_fail_the_whole_queue(own_dsn, fake_openai, status):
    """The LLM provider unreachable or overloaded (HTTP 503 after every retry): each episode the
    worker claims fails at once and the worker moves on to the next, so a few minutes of outage
    turn the whole backlog 'failed', and `pgmemory retry` later runs them after the group's
    later episodes. What a user wants: the episodes wait (pending) until the provider answers.
    The same for a key the provider refuses (HTTP 401, a rotated or mistyped key): until an
    operator fixes it, each claimed episode failed, and the whole queue with them."""
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.providers.llm import LLMClient
    from tests.fake_openai import Status

    fake_openai.responder = lambda body: Status(status, "overloaded" if status == 503 else "Incorrect API key")
    for n in range(3):
        for group in (f"out-a{status}", f"out-b{status}"):
            enqueue(own_dsn, group, f"I visited Town{n}.", f"2024-01-0{n + 1}T00:00:00Z")
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5, max_retries=1,
                       base_delay=0.01)
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))
    try:
        worker = memory.worker(poll_seconds=0.2, communities=False)
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(3)
        assert fake_openai.requests  # the worker did try
        assert {r["status"] for r in episodes(own_dsn)} == {"pending"}
        assert worker.stats.provider_waits >= 1 and worker.stats.failed == 0
        # The provider answers again: the same worker, still running, processes every episode.
        from bench.scripted_llm import ScriptedModel

        fake_openai.responder = ScriptedModel()
        await until(lambda: {r["status"] for r in episodes(own_dsn)} == {"done"})
        worker.stop()
        await running
    finally:
        await memory.close()
    rows = episodes(own_dsn)
    assert {r["status"] for r in rows} == {"done"}
    assert max(r["attempts"] for r in rows) == 1  # (a give-back for an outage is not an attempt)


async def test_usage_of_an_attempt_postgres_left_unended_is_counted_once_it_is_back(own_dsn, fake_openai):
    """Postgres away from just after the LLM answered until after the attempt should have ended: the
    worker gave the episode back with no usage once the server was back, so the billed extraction
    call was missing from the episode's cost. It now ends that attempt with its usage. (Its own
    database: the worker takes every pending episode there, and the cut must be this one's.)"""
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.providers.llm import LLMClient
    from tests.servers import AnswerCutter
    from tests.test_ingest_llm import REF, TEXT, _cost, extraction_reply

    group = "away"
    # (cut at the entity candidates' answer, read after the extraction call: every connection goes)
    cutter = await AnswerCutter(own_dsn, b"exact\x00", then_refuse=True).start()
    fake_openai.script(extraction_reply(), extraction_reply())  # the attempt cut, then the one that applies
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5, max_retries=0)
    try:
        async with await Memory.open(cutter.dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client)) as memory:
            await memory.enqueue_episode(group, TEXT, actor="Alice", reference_time=REF, episode_id="away")
            worker = memory.worker(poll_seconds=0.1, communities=False)
            task = asyncio.create_task(worker.run())
            await until(lambda: cutter.cuts, seconds=10)
            assert cutter.cuts == 1
            await asyncio.sleep(0.5)  # the worker meets a server that is away
            await cutter.reopen()

            async def done() -> bool:
                return (await _cost(own_dsn, group, "away"))[0] == "done"

            await until(done, seconds=15)
            worker.stop()
            await asyncio.wait_for(task, 30)
    finally:
        await cutter.stop()
    assert await _cost(own_dsn, group, "away") == ("done", 2, 20, 10)


async def test_a_worker_waits_out_too_many_connections(own_dsn):
    """Postgres refusing new connections because its slots are full (SQLSTATE 53300: max_connections,
    or a role's or database's CONNECTION LIMIT, reached by other workers and the app) is a passing
    state of the server, like a restart: a slot that met it at its claim raised, so the worker died
    with a traceback (and an episode that met it mid-way was failed). It now waits and goes on."""
    tag = uuid.uuid4().hex[:8]
    role = f"lim_{tag}"
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        grants.grant(conn, role, ["*"], kind="app", create_password="pw")
        conn.execute(psycopg.sql.SQL("ALTER ROLE {} CONNECTION LIMIT 3").format(psycopg.sql.Identifier(role)))
    for n in range(10):
        for group in ("tm-a", "tm-b", "tm-c", "tm-d"):
            enqueue(own_dsn, group, f"I visited Town{n}.", f"2024-01-{n + 1:02d}T00:00:00Z")
    info = psycopg.conninfo.conninfo_to_dict(own_dsn)
    login = f"postgresql://{role}:pw@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"
    await (await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())).close()  # (the owner
    # records the embedder first)
    memory = await Memory.open(login, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=8)
    try:
        stats = await asyncio.wait_for(memory.worker(concurrency=6, drain=True, poll_seconds=0.2,
                                                     communities=False).run(), 120)
    finally:
        await memory.close()
        with psycopg.connect(own_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
    assert stats.failed == 0, stats.errors[:3]
    assert {r["status"] for r in episodes(own_dsn)} == {"done"}


async def test_an_episode_the_llm_always_times_out_on_fails_and_its_group_lets_the_others_go(own_dsn, fake_openai,
                                                                                            monkeypatch):
    """An episode the LLM never answers in time (too long for the model, or a prompt its server
    chokes on) while it answers every other: each timeout looked like an outage, so the episode was
    given back (its attempt not counted) and claimed again first, for ever: the worker's only slot
    never reached the other group, and the episode never failed. Now a group given back for its
    provider is set aside like a busy one, and an episode given back while other episodes were done
    meanwhile (the provider is up) fails at its claim after three such give-backs, naming its failure."""
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.ingest import worker as queue_worker
    from pgmemory.providers.llm import LLMClient

    monkeypatch.setattr(queue_worker, "PROVIDER_FIRST_PAUSE", 0.1)  # (pauses of seconds, in tenths)
    monkeypatch.setattr(queue_worker, "SET_ASIDE_FIRST_SECONDS", 0.1)
    from bench.scripted_llm import ScriptedModel

    model = ScriptedModel()
    fake_openai.responder = lambda body: Delay(2, EXTRACTION) if "POISON" in str(body["messages"]) else model(body)
    poison = enqueue(own_dsn, "slow-a", "POISON, a very long text.", "2024-01-01T00:00:00Z")
    for n in range(3):
        enqueue(own_dsn, "slow-b", f"I visited Town{n}.", f"2024-01-0{n + 1}T00:00:00Z")
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=0.3, max_retries=0)
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))
    try:
        worker = memory.worker(poll_seconds=0.1, communities=False)
        running = asyncio.create_task(worker.run())
        await until(lambda: {r["status"] for r in episodes(own_dsn)} <= {"done", "failed"}, seconds=40)
        worker.stop()
        await running
    finally:
        await memory.close()
    rows = {r["id"]: r for r in episodes(own_dsn)}
    assert [r["status"] for r in rows.values() if r["group_id"] == "slow-b"] == ["done"] * 3, worker.stats
    assert rows[poison]["status"] == "failed"
    with psycopg.connect(own_dsn) as conn:
        error = conn.execute("SELECT error FROM pgmemory.episodes WHERE id = %s", (poison,)).fetchone()[0]
    assert "timed out" in error and "\n" not in error
    # Given back once, then three times after the other group's episodes were done; the next claim fails it.
    assert len([r for r in fake_openai.requests if "POISON" in str(r.body["messages"])]) == 5
    assert worker.stats.llm_calls == len(fake_openai.requests)  # (given back or failed, a call is billed)
