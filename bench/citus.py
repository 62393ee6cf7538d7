"""Citus routing and overhead: a coordinator + 2 workers against one plain node, same run.

Starts both from the Citus build of tests/citus_cluster.py (same binaries and settings; the
one node has no citus), initialises pgmemory on each, bulk-loads G groups x F fact versions
(bench/search_data.Generator, binary COPY), then:
  1. EXPLAIN on the cluster of search_group and apply_if_unchanged for one group: how many
     tasks and on which worker (routing: one task, one worker);
  2. search latency (Memory.search, one group per call, hash embedder) p50/p95 on each;
  3. ingest (Memory.add_episode, offline extractor, one client) episodes/s on each.
Each figure is printed with the 1-minute load average (the machine is shared).

    /work/main/.venv/bin/python -m bench.citus --groups 200 --facts 500 --queries 300 --episodes 100
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector

from bench.search_data import COLUMNS, DIM, TABLE_ORDER, Generator
from bench.stats import percentile
from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.setup import init_database
from tests.citus_cluster import start_cluster

SENTENCES = ("I work at {c}.", "I moved to {p}.", "I left {c} last week and now work at {c2}.",
             "My friend {f} lives in {p}.", "I love {h}.")


def load_avg() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def load(dsn: str, groups: int, facts: int) -> tuple[dict[str, list[str]], float]:
    """COPY the synthetic groups; returns person names per group and the seconds taken."""
    gen = Generator(seed=11)
    people: dict[str, list[str]] = {}
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        for i in range(groups):
            group = f"bench-{i:05d}"
            vocab, rows = gen.group(group, facts)
            people[group] = vocab.names["person"]
            by_table: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
            for table, row in rows:
                by_table[table].append(row + (row[0],) if table == "facts" else row)
            for table in TABLE_ORDER:
                cols = COLUMNS[table][0] + (("lineage",) if table == "facts" else ())
                types = COLUMNS[table][1] + (("uuid",) if table == "facts" else ())
                with conn.cursor().copy(psycopg.sql.SQL("COPY pgmemory.{} ({}) FROM STDIN (FORMAT BINARY)").format(
                        psycopg.sql.Identifier(table),
                        psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, cols)))) as copy:
                    copy.set_types(list(types))
                    for row in by_table[table]:
                        copy.write_row(row)
            conn.commit()
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    return people, time.perf_counter() - started


def explain(dsn: str, group: str) -> dict[str, str]:
    """How the cluster runs one group's search and apply: task count and nodes from EXPLAIN."""
    out = {}
    with psycopg.connect(dsn) as conn:
        for name, statement in (
                ("search_group", "EXPLAIN SELECT * FROM pgmemory.search_group(%s, 'where does Ann work', NULL, '{}')"),
                ("apply_if_unchanged", "EXPLAIN SELECT pgmemory.apply_if_unchanged(%s, gen_random_uuid(), 'w', 0,"
                                       " '{}')")):
            plan = "\n".join(r[0] for r in conn.execute(statement, (group,)).fetchall())
            tasks = re.findall(r"Task Count: (\d+)", plan)
            nodes = sorted(set(re.findall(r"Node: host=\S+ port=(\d+)", plan)))
            out[name] = f"Task Count {', '.join(tasks) or '?'}; worker port(s) {', '.join(nodes) or '?'}"
    return out


async def search_latency(dsn: str, people: dict[str, list[str]], queries: int, rng: random.Random) -> list[float]:
    memory = await Memory.open(dsn, embedder=HashEmbedder(dim=DIM), extractor=RuleExtractor())
    try:
        groups = sorted(people)
        timings = []
        for i in range(queries + 20):
            group = rng.choice(groups)
            query = f"where does {rng.choice(people[group])} work"
            started = time.perf_counter()
            await memory.search(query, group_ids=group, limit=10)
            if i >= 20:  # warm-up excluded
                timings.append((time.perf_counter() - started) * 1000)
        return timings
    finally:
        await memory.close()


async def ingest_rate(dsn: str, people: dict[str, list[str]], episodes: int, rng: random.Random) -> float:
    memory = await Memory.open(dsn, embedder=HashEmbedder(dim=DIM), extractor=RuleExtractor())
    try:
        groups = sorted(people)
        day = datetime(2025, 7, 1, tzinfo=UTC)
        started = time.perf_counter()
        for i in range(episodes):
            group = rng.choice(groups)
            text = rng.choice(SENTENCES).format(c=f"Company{rng.randrange(50)}", c2=f"Company{rng.randrange(50)}",
                                               p=f"Town{rng.randrange(30)}", f=rng.choice(people[group]),
                                               h=f"hobby{rng.randrange(20)}")
            await memory.add_episode(group, text, actor=rng.choice(people[group]),
                                     reference_time=day + timedelta(hours=i))
        return episodes / (time.perf_counter() - started)
    finally:
        await memory.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--facts", type=int, default=500)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pgmemory-bench-citus-"))
    (root / "one").mkdir()
    (root / "cluster").mkdir()
    one = start_cluster(root / "one", workers=0, citus=False)
    cluster = start_cluster(root / "cluster")
    try:
        targets = {"one node": one.coordinator_dsn, "cluster (1+2)": cluster.coordinator_dsn}
        people = {}
        for name, dsn in targets.items():
            with psycopg.connect(dsn) as conn:
                started = time.perf_counter()
                report = init_database(conn, DIM)
                print(f"{name}: init {time.perf_counter() - started:.1f} s (graph {report.graph_mode}, "
                      f"distributed {report.distributed}); {load_avg()}", flush=True)
            people, seconds = load(dsn, args.groups, args.facts)
            print(f"{name}: loaded {args.groups} groups x {args.facts} fact versions in {seconds:.1f} s; "
                  f"{load_avg()}", flush=True)
        group = sorted(people)[0]
        for call, plan in explain(cluster.coordinator_dsn, group).items():
            print(f"cluster EXPLAIN {call}({group!r}, ...): {plan}")
        results = {}
        for name, dsn in targets.items():
            timings = asyncio.run(search_latency(dsn, people, args.queries, random.Random(5)))
            rate = asyncio.run(ingest_rate(dsn, people, args.episodes, random.Random(6)))
            results[name] = (statistics.median(timings), percentile(timings, 95), rate)
            print(f"{name}: search p50 {results[name][0]:.1f} ms, p95 {results[name][1]:.1f} ms "
                  f"({args.queries} queries); ingest {rate:.1f} episodes/s ({args.episodes}, one client); "
                  f"{load_avg()}", flush=True)
        (p50a, p95a, ra), (p50b, p95b, rb) = results["one node"], results["cluster (1+2)"]
        print(f"cluster / one node: search p50 x{p50b / p50a:.2f}, p95 x{p95b / p95a:.2f}; "
              f"ingest time per episode x{ra / rb:.2f}; {load_avg()}")
    finally:
        cluster.stop()
        one.stop()


if __name__ == "__main__":
    main()
