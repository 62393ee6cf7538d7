"""Guards: statement and lock timeouts on every connection, so a stuck lock is an error, not a hang;
`doctor` lists backends stuck waiting on locks."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest

from pgmemory import Memory
from pgmemory.errors import DatabaseTimeout, InvalidInput
from pgmemory.extract.rules import RuleExtractor
from pgmemory.ingest.pipeline import IngestError
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import connect
from pgmemory.storage.doctor import lock_waiters, run_checks
from tests.support import utc


async def test_every_connection_carries_the_configured_timeouts(db_dsn, monkeypatch):
    monkeypatch.setenv("PGMEMORY_STATEMENT_TIMEOUT", "123")
    monkeypatch.setenv("PGMEMORY_LOCK_TIMEOUT", "7.5")
    memory = await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        async with memory.pool.acquire() as conn:
            pooled = (await conn.fetchval("SHOW statement_timeout"), await conn.fetchval("SHOW lock_timeout"))
    finally:
        await memory.close()
    with connect(db_dsn) as conn:
        admin = tuple(conn.execute(f"SHOW {name}").fetchone()[0] for name in ("statement_timeout", "lock_timeout"))
    assert pooled == admin == ("123s", "7500ms")
    monkeypatch.setenv("PGMEMORY_LOCK_TIMEOUT", "soon")
    with pytest.raises(InvalidInput, match="PGMEMORY_LOCK_TIMEOUT must be a number of seconds"):
        connect(db_dsn)


async def test_a_held_group_lock_fails_the_writer_instead_of_hanging_it(db_dsn, group, monkeypatch):
    monkeypatch.setenv("PGMEMORY_LOCK_TIMEOUT", "0.3")
    memory = await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        with psycopg.connect(db_dsn) as holder:
            holder.execute("SELECT pgmemory_internal.lock_group(%s)", (group,))
            with pytest.raises(IngestError, match="lock timeout"):
                await memory.add_episode(group, "I work at Acme Corp.", actor="Ivy",
                                         reference_time=utc("2024-01-01"), episode_id="e1")
            assert (await memory.episode_status("e1", group))["status"] == "failed"
        assert [r.status for r in await memory.retry(group)] == ["done"]
    finally:
        await memory.close()


async def test_a_search_stuck_behind_a_lock_is_cancelled_with_a_clear_error(db_dsn, group, monkeypatch):
    monkeypatch.setenv("PGMEMORY_SEARCH_TIMEOUT", "0.5")
    memory = await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        with psycopg.connect(db_dsn) as holder:
            holder.execute("LOCK TABLE pgmemory.facts IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(DatabaseTimeout, match="search took longer than 0.5 s"):
                await memory.search("where does Ivy work", group_ids=[group])
        assert (await memory.search("where does Ivy work", group_ids=[group])).facts == []
    finally:
        await memory.close()


def test_doctor_reports_backends_waiting_on_locks(db_dsn, group):
    with psycopg.connect(db_dsn) as holder, psycopg.connect(db_dsn) as doctor:
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (group,))
        waiter_pid = []

        def wait() -> None:
            with psycopg.connect(db_dsn, autocommit=True) as waiter:
                waiter_pid.append(waiter.info.backend_pid)
                waiter.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (group,))

        thread = threading.Thread(target=wait)
        thread.start()
        try:
            for _ in range(3000):  # until the waiter reaches the lock
                if lock_waiters(doctor, timedelta(0)):
                    break
                time.sleep(0.01)
            checks = {c.name: c for c in run_checks(doctor, lock_wait=timedelta(0))}
            quiet = {c.name: c for c in run_checks(doctor)}  # the default: longer than a minute
        finally:
            holder.rollback()
            thread.join(30)
    assert checks["lock waits"].status == "warn"
    assert f"pid {waiter_pid[0]} on Lock:advisory" in checks["lock waits"].detail
    assert "pg_cancel_backend" in checks["lock waits"].fix
    assert quiet["lock waits"].status == "ok"
