"""Issue 9: young tables get planner statistics while a group is ingested, not a minute later
when autovacuum looks (plans made for near-empty tables read several times the rows)."""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import psycopg

from pgmemory.storage.setup import init_database

TABLES = ("entities", "episodes", "facts")


def analyse_counts(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute(
        "SELECT relname, analyze_count + autoanalyze_count FROM pg_stat_user_tables"
        " WHERE schemaname = 'pgmemory' AND relname = ANY (%s)", (list(TABLES),)).fetchall())


def flush_statistics(conn: psycopg.Connection) -> None:
    """Make this backend's table counters visible to others now (they are flushed at most once a second)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.commit()
    conn.execute("SELECT 1")
    conn.commit()


def test_refresh_statistics_analyses_a_table_that_outgrew_its_statistics_once(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name)"
                     " SELECT gen_random_uuid(), 'g', 'entity ' || i FROM generate_series(1, 120) i")
        conn.commit()
        flush_statistics(conn)
        first = conn.execute("SELECT pgmemory_internal.refresh_statistics()").fetchone()[0]
        conn.commit()
        assert "entities" in first
        assert conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'pgmemory.entities'::regclass"
                            ).fetchone() == (120,)
        # Nothing changed since: not analysed again (each growth by its own size costs one ANALYZE).
        flush_statistics(conn)
        again = conn.execute("SELECT pgmemory_internal.refresh_statistics()").fetchone()[0]
        assert "entities" not in again


async def test_ingesting_a_new_group_analyses_its_tables_without_autovacuum(empty_dsn):
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        for table in TABLES:
            conn.execute(psycopg.sql.SQL("ALTER TABLE pgmemory.{} SET (autovacuum_enabled = false)")
                         .format(psycopg.sql.Identifier(table)))
        conn.commit()
        assert analyse_counts(conn) == {t: 0 for t in TABLES}

    memory = await Memory.open(empty_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        start = datetime(2026, 1, 1, tzinfo=timezone.utc)
        for i in range(100):
            # A backend reports its table counters at most once a second, and 100 episodes now take
            # less: a pause after every 25 lets the next ones report what came before, as a longer
            # ingest does by itself.
            if i and i % 25 == 0:
                await asyncio.sleep(1.2)
            await memory.add_episode("g", f"I met Person{i} at Company{i % 7} today.", actor="Alice",
                                     reference_time=start + timedelta(minutes=i))
    finally:
        await memory.close()

    # The pool's backends report their counters as they exit, which may end after close() returns.
    deadline = time.monotonic() + 10
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        while True:
            counts = analyse_counts(conn)
            if counts["episodes"] >= 1 and counts["entities"] >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
            conn.execute("SELECT pg_stat_clear_snapshot()")
    assert counts["episodes"] >= 1 and counts["entities"] >= 1, counts
