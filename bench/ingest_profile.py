"""Where ingestion's DB-side time goes, per bucket of episodes: statements and stored functions.

Ingests the synthetic chats (offline extractor, hash embedder) into a fresh database with
track_functions = 'all', timing every statement the pipeline sends (asyncpg query logger) and
reading pg_stat_user_functions (self time of each stored function and trigger) and dead tuples
per bucket, so a statement whose cost grows with the graph shows up by name.

    python -m bench.ingest_profile --episodes 5000 --bucket 1000
"""
from __future__ import annotations

import argparse
import asyncio
import re
import time
from collections import Counter
from typing import Any

import asyncpg
import psycopg

from bench.ingest import create_database, drop_database
from bench.synthetic import generate
from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import _init_async_connection, _keep_session, resolve_dsn
from pgmemory.memory import ensure_initialised

TABLES = ("entities", "facts", "episodes", "entity_versions", "fact_episodes", "episode_mentions")


def statement_key(query: str) -> str:
    """A short, stable name for a statement: its first words, whitespace collapsed."""
    text = re.sub(r"\s+", " ", query).strip()
    match = re.search(r"pgmemory\.(\w+)\(", text)
    return match.group(1) if match and text.upper().startswith("SELECT") else text[:60]


class StatementTimes:
    """Total client-side seconds and calls per statement key."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def log(self, record: Any) -> None:
        """asyncpg query-logger callback."""
        key = statement_key(record.query)
        self.seconds[key] += record.elapsed
        self.calls[key] += 1


async def function_stats(conn: asyncpg.Connection) -> dict[str, tuple[int, float, float]]:
    """(calls, total ms, self ms) of every tracked function."""
    rows = await conn.fetch("SELECT schemaname || '.' || funcname AS f, sum(calls) c, sum(total_time) t,"
                            " sum(self_time) s FROM pg_stat_user_functions GROUP BY 1")
    return {r["f"]: (r["c"], r["t"], r["s"]) for r in rows}


async def table_stats(conn: asyncpg.Connection) -> dict[str, tuple[int, int, int]]:
    """(live, dead, autovacuum count) of the pgmemory tables."""
    rows = await conn.fetch("SELECT relname, n_live_tup, n_dead_tup, autovacuum_count + vacuum_count AS v"
                            " FROM pg_stat_user_tables WHERE schemaname = 'pgmemory' AND relname = ANY($1)",
                            list(TABLES))
    return {r["relname"]: (r["n_live_tup"], r["n_dead_tup"], r["v"]) for r in rows}


def print_bucket(label: str, n: int, db_ms: list[float], stmts: StatementTimes, before: StatementTimes,
                 funcs: dict, funcs_before: dict, tables: dict, top: int = 8) -> None:
    """Per-episode mean ms of the `top` statements and functions of one bucket."""
    db_ms.sort()
    print(f"\n{label}: db_seconds median {db_ms[len(db_ms) // 2]:.2f} ms")
    deltas = {k: (stmts.seconds[k] - before.seconds[k], stmts.calls[k] - before.calls[k]) for k in stmts.seconds}
    for key, (sec, calls) in sorted(deltas.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"   stmt {sec * 1000 / n:7.3f} ms/ep  {calls / n:5.2f} calls/ep  {key}")
    fdeltas = {k: (v[0] - funcs_before.get(k, (0, 0, 0))[0], v[2] - funcs_before.get(k, (0, 0, 0))[2])
               for k, v in funcs.items()}
    for key, (calls, self_ms) in sorted(fdeltas.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"   func {self_ms / n:7.3f} ms/ep self  {calls / n:5.2f} calls/ep  {key}")
    print("   tables (live/dead/vacuums): " + ", ".join(f"{t} {v[0]}/{v[1]}/{v[2]}" for t, v in sorted(tables.items())))


async def main_async(args: argparse.Namespace) -> None:
    """Ingest bucket by bucket and print where the DB-side time went."""
    admin = await asyncio.to_thread(resolve_dsn)
    name, dsn = create_database(admin, "profile")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("ALTER DATABASE {} SET track_functions = 'all'").format(
            psycopg.sql.Identifier(name)))
    stmts = StatementTimes()

    async def init(conn: asyncpg.Connection) -> None:
        await _init_async_connection(conn)
        conn.add_query_logger(stmts.log)

    embedder = HashEmbedder()
    await asyncio.to_thread(ensure_initialised, dsn, embedder.dim)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=3, init=init, reset=_keep_session)  # as create_pool
    memory = Memory(pool, embedder, RuleExtractor())
    stats_conn = await asyncpg.connect(dsn)
    episodes = generate(args.episodes, seed=args.seed)
    try:
        for at in range(0, len(episodes), args.bucket):
            batch = episodes[at:at + args.bucket]
            before = StatementTimes()
            before.seconds, before.calls = stmts.seconds.copy(), stmts.calls.copy()
            funcs_before = await function_stats(stats_conn)
            results = await memory.add_episodes(batch)
            time.sleep(1.2)  # let backends flush their function statistics
            db_ms = [r.db_seconds * 1000 for r in results if isinstance(r, EpisodeResult)]
            failed = sum(isinstance(r, IngestError) for r in results)
            print_bucket(f"episodes {at + 1}-{at + len(batch)} ({failed} failed)", len(batch), db_ms, stmts, before,
                         await function_stats(stats_conn), funcs_before, await table_stats(stats_conn), args.top)
    finally:
        await stats_conn.close()
        await pool.close()
        if args.keep:
            print(f"\nkept database: {dsn}")
        else:
            drop_database(admin, name)


def main() -> None:
    """Entry point: python -m bench.ingest_profile [--episodes N] [--bucket B] [--keep] [--top K]."""
    p = argparse.ArgumentParser(description="profile ingestion's DB-side time by statement and function")
    p.add_argument("--episodes", type=int, default=5000)
    p.add_argument("--bucket", type=int, default=1000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--top", type=int, default=8, help="statements and functions listed per bucket")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
