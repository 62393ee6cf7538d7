"""Transaction time never runs backwards under concurrent writers of one group.

A version is recorded at now(), the start of the writing transaction. A writer whose transaction
began before another writer of the group committed a version (an app's transaction, or a
statement that started before the group lock it waits for inside the function) must not close
that version at its earlier now(): that ended the version before it began (SQLSTATE 22000 from
tstzrange) or silently dropped an entity version. It is refused with serialization_failure
(40001) instead, and our own writers (Memory.add_fact, Memory.retract_fact, the ingestion apply)
retry in a new transaction.
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import datetime, timezone

import asyncpg
import psycopg
import pytest

from pgmemory.ingest.pipeline import SERIALIZATION_ATTEMPTS, retry_serialization

ADD = ("SELECT pgmemory.add_fact(%s, %s, 'WORKS_FOR', %s, %s, p_valid_from => %s, p_functional => true)")
RETRY_MESSAGE = "changed after this transaction began (a concurrent writer): retry the transaction"


def utc(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=timezone.utc)


def new_group() -> str:
    return "tx-" + uuid.uuid4().hex[:10]


def works_for(conn, group: str, person: str, company: str, since: str):
    return conn.execute(ADD, (group, person, company, f"{person} works for {company}.", utc(since))).fetchone()[0]


def assert_history_consistent(conn, group: str) -> None:
    """Every recorded range of the group's fact and entity versions is non-empty (it began before
    it ended), one version of a fact or entity is current at a time, and an entity's current row
    was recorded after all its past versions."""
    bad = conn.execute("SELECT version_id, recorded FROM pgmemory.facts"
                       " WHERE group_id = %s AND (isempty(recorded) OR lower_inf(recorded))", (group,)).fetchall()
    assert bad == []
    overlaps = conn.execute(
        "SELECT a.id, a.recorded, b.recorded FROM pgmemory.facts a JOIN pgmemory.facts b"
        " ON b.group_id = a.group_id AND b.id = a.id AND b.version_id > a.version_id AND b.recorded && a.recorded"
        " WHERE a.group_id = %s", (group,)).fetchall()
    assert overlaps == []
    believed = conn.execute("SELECT id, count(*) FROM pgmemory.facts WHERE group_id = %s AND upper_inf(recorded)"
                            " GROUP BY id HAVING count(*) <> 1", (group,)).fetchall()
    assert believed == []
    bad = conn.execute("SELECT entity_id, recorded FROM pgmemory.entity_versions"
                       " WHERE group_id = %s AND (isempty(recorded) OR upper_inf(recorded))", (group,)).fetchall()
    assert bad == []
    late = conn.execute(
        "SELECT e.id, e.updated_at, v.recorded FROM pgmemory.entities e JOIN pgmemory.entity_versions v"
        " ON v.group_id = e.group_id AND v.entity_id = e.id"
        " WHERE e.group_id = %s AND upper(v.recorded) > e.updated_at", (group,)).fetchall()
    assert late == []


def believed_targets(conn, group: str, person: str) -> list[tuple[str, datetime | None]]:
    return conn.execute(
        "SELECT target, valid_to FROM pgmemory.believed_facts WHERE group_id = %s AND source = %s"
        " AND relation = 'WORKS_FOR' ORDER BY valid_from", (group, person)).fetchall()


# --- SQL writers: the explicit-transaction case (repro_5) and single statements ----------------

def test_app_transaction_begun_before_a_concurrent_write_gets_40001_then_a_retry_succeeds(db_dsn):
    group = new_group()
    with psycopg.connect(db_dsn) as app, psycopg.connect(db_dsn, autocommit=True) as other:
        app.execute("SELECT now()")  # the app's transaction begins: its time is t1
        time.sleep(0.02)
        works_for(other, group, "Maya", "Acme", "2020-01-01")  # committed, recorded from t2 > t1
        with pytest.raises(psycopg.errors.SerializationFailure) as caught:
            works_for(app, group, "Maya", "Globex", "2022-01-01")  # would end Acme's version at t1 < t2
        assert RETRY_MESSAGE in str(caught.value).splitlines()[0]
        app.rollback()
        works_for(app, group, "Maya", "Globex", "2022-01-01")  # the retry: a new transaction
        app.commit()
        assert believed_targets(other, group, "Maya") == [("Acme", utc("2022-01-01")), ("Globex", None)]
        assert_history_consistent(other, group)


def started_statement(db_dsn, sql: str, params) -> tuple[threading.Thread, dict]:
    """Run `sql` on its own autocommit connection in a thread; returns once its statement has
    started (it sleeps first: `... FROM pg_sleep(1)`), so its now() precedes what runs next."""
    out: dict = {}
    ready = threading.Event()

    def run():
        with psycopg.connect(db_dsn, autocommit=True) as c:
            out["pid"] = c.info.backend_pid
            ready.set()
            try:
                out["row"] = c.execute(sql, params).fetchone()
            except psycopg.Error as exc:
                out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait(10)
    with psycopg.connect(db_dsn, autocommit=True) as watch:
        for _ in range(500):
            if watch.execute("SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = %s",
                             (out["pid"],)).fetchone()[0]:
                break
            time.sleep(0.01)
    return thread, out


def test_single_statement_started_before_a_concurrent_add_fact_gets_40001(db_dsn):
    """add_fact takes the group lock inside the function: a statement that started (now() = t1)
    before another add_fact committed (t2 > t1) waits for the lock and then sees its version."""
    group = new_group()
    late = ADD + " FROM pg_sleep(1)"  # the statement starts, then reaches add_fact (and its lock)
    thread, out = started_statement(db_dsn, late, (group, "Maya", "Globex", "Maya works for Globex.",
                                                   utc("2022-01-01")))
    with psycopg.connect(db_dsn, autocommit=True) as other:
        works_for(other, group, "Maya", "Acme", "2020-01-01")
        thread.join(30)
        assert isinstance(out.get("error"), psycopg.errors.SerializationFailure), out
        assert RETRY_MESSAGE in str(out["error"]).splitlines()[0]
        assert believed_targets(other, group, "Maya") == [("Acme", None)]  # nothing half-written
        assert_history_consistent(other, group)


def test_a_new_fact_about_an_entity_changed_since_the_statement_began_gets_40001(db_dsn):
    """Without closing any fact version: the entity's summary changed at t2 (a concurrent add_fact);
    updating it at t1 < t2 would drop that entity version from the history (it was silent)."""
    group = new_group()
    late = ("SELECT pgmemory.add_fact(%s, 'Maya', 'LIVES_IN', 'Paris', 'Maya lives in Paris.')"
            " FROM pg_sleep(1)")
    thread, out = started_statement(db_dsn, late, (group,))
    with psycopg.connect(db_dsn, autocommit=True) as other:
        works_for(other, group, "Maya", "Acme", "2020-01-01")
        thread.join(30)
        assert isinstance(out.get("error"), psycopg.errors.SerializationFailure), out
        assert "entity" in str(out["error"]) and RETRY_MESSAGE in str(out["error"])
        assert_history_consistent(other, group)


def test_concurrent_add_fact_from_two_connections_both_apply_with_the_documented_retry(db_dsn):
    """Two SQL writers of one group racing (the first one's statement began before the second
    committed): the one refused with 40001 retries, as docs/sql.md tells SQL writers to."""
    group = new_group()

    def add_retrying(conn, sql, params) -> dict:
        for attempt in range(1, 6):
            try:
                return conn.execute(sql, params).fetchone()[0]
            except psycopg.errors.SerializationFailure:
                assert attempt < 5
                time.sleep(0.01 * attempt)

    results: dict = {}

    def first():
        with psycopg.connect(db_dsn, autocommit=True) as c:
            results["first"] = add_retrying(c, ADD + " FROM pg_sleep(%s)",
                                            (group, "Maya", "Globex", "Maya works for Globex.",
                                             utc("2022-01-01"), 0.5))

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.1)
    with psycopg.connect(db_dsn, autocommit=True) as second:
        results["second"] = add_retrying(second, ADD, (group, "Maya", "Acme", "Maya works for Acme.",
                                                       utc("2020-01-01")))
        thread.join(30)
        assert results["first"]["action"] == "created" and results["second"]["action"] == "created"
        assert believed_targets(second, group, "Maya") == [("Acme", utc("2022-01-01")), ("Globex", None)]
        assert_history_consistent(second, group)


def test_retract_and_delete_of_a_version_recorded_later_get_40001(db_dsn, memory_sync_factory):
    group = new_group()
    with memory_sync_factory() as m:
        m.add_episode(group, "I work at Acme.", actor="Alice", episode_id="e1",
                      reference_time=utc("2021-01-01"))
    with psycopg.connect(db_dsn) as app, psycopg.connect(db_dsn, autocommit=True) as other:
        fid = other.execute("SELECT id FROM pgmemory.believed_facts WHERE group_id = %s AND target = 'Acme'",
                            (group,)).fetchone()[0]
        app.execute("SELECT now()")
        time.sleep(0.02)
        # Another writer extends the fact (an earlier start): a new version recorded after t1.
        works_for(other, group, "Alice", "Acme", "2019-01-01")
        with pytest.raises(psycopg.errors.SerializationFailure, match="retry the transaction"):
            app.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, fid))
        app.rollback()
        app.execute("SELECT now()")
        time.sleep(0.02)
        works_for(other, group, "Alice", "Acme", "2018-01-01")
        eid = other.execute("SELECT id FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchone()[0]
        with pytest.raises(psycopg.errors.SerializationFailure, match="retry the transaction"):
            app.execute("SELECT pgmemory.delete_episode(%s, %s)", (group, eid))
        app.rollback()
        app.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, fid))
        app.commit()
        assert believed_targets(other, group, "Alice") == []
        assert_history_consistent(other, group)


# --- Our Python writers retry -------------------------------------------------------------------

class RacingPool:
    """A Memory's pool with one injected race: the first statement containing `statement` runs in a
    transaction that begins (its now() is fixed), lets `race` commit another writer's change, and
    then runs the statement (rolled back if it fails, as it would be in autocommit)."""

    def __init__(self, pool: asyncpg.Pool, race, statement: str) -> None:
        self._pool = pool
        self._race = race
        self._statement = statement
        self.raced = 0

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def acquire(self):
        return _Acquire(self)

    async def release(self, conn) -> None:
        await self._pool.release(conn._conn if isinstance(conn, _Intercept) else conn)


class _Acquire:
    """pool.acquire(): awaited (then released with pool.release) or used with `async with`."""

    def __init__(self, pool: RacingPool) -> None:
        self._racing = pool
        self._conn = None

    async def _get(self):
        return _Intercept(await self._racing._pool.acquire(), self._racing)

    def __await__(self):
        return self._get().__await__()

    async def __aenter__(self):
        self._conn = await self._get()
        return self._conn

    async def __aexit__(self, *exc) -> None:
        await self._racing.release(self._conn)


class _Intercept:
    def __init__(self, conn, pool: RacingPool) -> None:
        self._conn = conn
        self._racing = pool

    def __getattr__(self, name):
        return getattr(self._conn, name)

    async def _run(self, method: str, query: str, *args):
        racing = self._racing
        if racing.raced or racing._statement not in query:
            return await getattr(self._conn, method)(query, *args)
        racing.raced += 1
        tr = self._conn.transaction()  # a savepoint when the caller's transaction is open
        await tr.start()
        try:
            await self._conn.fetchval("SELECT now()")
            await asyncio.to_thread(racing._race)
            out = await getattr(self._conn, method)(query, *args)
        except BaseException:
            await tr.rollback()
            raise
        await tr.commit()
        return out

    async def fetchval(self, query: str, *args):
        return await self._run("fetchval", query, *args)

    async def execute(self, query: str, *args):
        return await self._run("execute", query, *args)


async def test_memory_add_fact_retries_a_serialization_failure(memory, db_dsn):
    group = new_group()

    def race():
        with psycopg.connect(db_dsn, autocommit=True) as other:
            works_for(other, group, "Maya", "Acme", "2020-01-01")

    pool, memory.pool = memory.pool, RacingPool(memory.pool, race, "pgmemory.add_fact")
    try:
        out = await memory.add_fact(group, "Maya", "WORKS_FOR", "Globex", "Maya works for Globex.",
                                    valid_from=utc("2022-01-01"), functional=True)
    finally:
        memory.pool = pool
    assert out["action"] == "created" and len(out["ended"]) == 1
    with psycopg.connect(db_dsn) as conn:
        assert believed_targets(conn, group, "Maya") == [("Acme", utc("2022-01-01")), ("Globex", None)]
        assert_history_consistent(conn, group)


async def test_memory_retract_fact_retries_a_serialization_failure(memory, db_dsn):
    group = new_group()
    fid = (await memory.add_fact(group, "Maya", "WORKS_FOR", "Acme", "Maya works for Acme.",
                                 valid_from=utc("2020-01-01")))["fact_id"]

    def race():  # another writer extends the fact: a new version of it, recorded after our start
        with psycopg.connect(db_dsn, autocommit=True) as other:
            works_for(other, group, "Maya", "Acme", "2019-01-01")

    pool, memory.pool = memory.pool, RacingPool(memory.pool, race, "pgmemory.retract_fact")
    try:
        out = await memory.retract_fact(group, fid)
    finally:
        memory.pool = pool
    assert out["action"] == "withdrawn"
    with psycopg.connect(db_dsn) as conn:
        assert believed_targets(conn, group, "Maya") == []
        assert_history_consistent(conn, group)


async def test_memory_delete_episode_retries_a_serialization_failure(memory, db_dsn):
    group = new_group()
    await memory.add_episode(group, "I work at Acme.", actor="Alice", episode_id="e1",
                             reference_time=utc("2021-01-01"))

    def race():  # another writer extends the episode's fact: a version recorded after our start
        with psycopg.connect(db_dsn, autocommit=True) as other:
            works_for(other, group, "Alice", "Acme", "2019-01-01")

    pool, memory.pool = memory.pool, RacingPool(memory.pool, race, "pgmemory.delete_episode")
    try:
        await memory.delete_episode(group, "e1")
    finally:
        memory.pool = pool
    with psycopg.connect(db_dsn) as conn:  # the other writer's statement remains
        assert [t for t, _ in believed_targets(conn, group, "Alice")] == ["Acme"]
        assert_history_consistent(conn, group)


async def test_memory_add_fact_gives_up_after_bounded_attempts():
    calls = []

    async def always_refused():
        calls.append(time.monotonic())
        raise asyncpg.SerializationError("fact x changed after this transaction began")

    with pytest.raises(asyncpg.SerializationError):
        await retry_serialization(always_refused)
    assert len(calls) == SERIALIZATION_ATTEMPTS
    assert all(b > a for a, b in zip(calls, calls[1:]))


async def test_ingestion_apply_retries_when_a_writer_commits_before_its_lock(memory, db_dsn):
    """The apply that re-decides under the group lock (a local extractor, after a first apply found
    the group changed) begins its transaction before taking the lock: a writer that commits in
    between recorded versions after the apply's time, which the apply then contradicts."""
    group = new_group()
    races = []

    def bump():  # any write of the group: the first apply finds the group changed
        with psycopg.connect(db_dsn, autocommit=True) as other:
            other.execute("SELECT pgmemory.add_fact(%s, 'Bob', 'KNOWS', 'Carol', 'Bob knows Carol.')", (group,))
        races.append("bump")

    def race():  # between the apply's BEGIN and its lock: Alice's job the episode contradicts
        with psycopg.connect(db_dsn, autocommit=True) as other:
            works_for(other, group, "Alice", "Globex", "2020-01-01")
        races.append("race")

    ingestor = memory.ingestor
    pool = ingestor.pool
    first_apply = RacingPool(pool, bump, "apply_if_unchanged")
    before_lock = RacingPool(pool, race, "lock_group")

    class Both:
        def __getattr__(self, name):
            return getattr(pool, name)

        def acquire(self):
            return (first_apply if not first_apply.raced else before_lock).acquire()

        async def release(self, conn):
            await before_lock.release(conn)

    ingestor.pool = Both()
    try:
        result = await memory.add_episode(group, "I work at Initech.", actor="Alice", episode_id="e1",
                                          reference_time=utc("2021-06-01"))
    finally:
        ingestor.pool = pool
    assert races == ["bump", "race"]
    assert result.status == "done" and result.decide_rounds >= 2
    with psycopg.connect(db_dsn) as conn:
        assert believed_targets(conn, group, "Alice") == [("Globex", utc("2021-06-01")), ("Initech", None)]
        assert_history_consistent(conn, group)


async def test_concurrent_memory_writers_of_one_group_all_apply(memory, db_dsn):
    """Many add_fact calls and an episode on one group at once: all succeed (retrying 40001 when
    they collide) and the history stays consistent."""
    group = new_group()
    people = [f"P{i}" for i in range(6)]
    writes = [memory.add_fact(group, p, "WORKS_FOR", c, f"{p} works for {c}.", valid_from=utc(f"202{k}-01-01"),
                              functional=True)
              for k, c in enumerate(["Acme", "Globex", "Initech"]) for p in people]
    writes.append(memory.add_episode(group, "I work at Hooli.", actor="P0", episode_id="e1",
                                     reference_time=utc("2024-01-01")))
    await asyncio.gather(*writes)
    with psycopg.connect(db_dsn) as conn:
        assert_history_consistent(conn, group)
        for p in people:
            current = [t for t, end in believed_targets(conn, group, p) if end is None]
            assert len(current) == 1
