"""Citus routing and overhead: a coordinator + 2 workers against one plain node, same run.

Starts both from the Citus build of tests/citus_cluster.py (same binaries and settings; the
one node has no citus), initialises pgmemory on each, bulk-loads G groups x F fact versions
(bench/search_data.Generator, binary COPY), then:
  1. EXPLAIN on the cluster of search_group and apply_if_unchanged for one group: how many
     tasks and on which worker (routing: one task, one worker);
  2. search latency (Memory.search, hash embedder) p50/p95 on each: one group per call, and
     --several groups per call (on the cluster each group's search on its worker at once,
     merged into one node's ranks: pgmemory/search/fanout.py);
  3. ingest (Memory.add_episode, offline extractor, one client) episodes/s on each.
Each figure is printed with the 1-minute load average (the machine is shared). With --server, a
third target: the cluster as `pgmemory serve` uses it, on a login under row-level security
granted every group, each call a request narrowed to its groups (storage/request_groups.py).

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
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector

from bench.search_data import COLUMNS, DIM, TABLE_ORDER, Generator, build_indexes, drop_secondary_indexes
from bench.stats import percentile
from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.search.candidates import fetch_candidates, options
from pgmemory.search.config import SearchFilters, resolve_config
from pgmemory.search.fanout import fanned_out_rows
from pgmemory.storage import grants
from pgmemory.storage.request_groups import NarrowToRequestGroups, narrow_to
from pgmemory.storage.setup import init_database
from tests.citus_cluster import start_cluster

CLUSTER = "cluster (1+2)"
SERVER = "cluster as a server"
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
        indexes = drop_secondary_indexes(conn)  # rebuilt after the load (HNSW inserts row by row are slow)
        register_vector(conn)
        # No triggers on this session (the one node's AGE mirror would dominate the load); the
        # BM25 statistics are rebuilt at the end.
        conn.execute("SET session_replication_role = replica")
        for i in range(groups):
            group = f"bench-{i:05d}"
            vocab, rows = gen.group(group, facts)
            people[group] = vocab.names["person"]
            by_table: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
            for table, row in rows:
                by_table[table].append(row)
            for table in TABLE_ORDER:
                cols, types = COLUMNS[table]
                with conn.cursor().copy(psycopg.sql.SQL("COPY pgmemory.{} ({}) FROM STDIN (FORMAT BINARY)").format(
                        psycopg.sql.Identifier(table),
                        psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, cols)))) as copy:
                    copy.set_types(list(types))
                    for row in by_table[table]:
                        copy.write_row(row)
            conn.commit()
        conn.execute("SET session_replication_role = DEFAULT")
        build_indexes(conn, indexes, log=lambda *_: None)
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    return people, time.perf_counter() - started


def explain(dsn: str, group: str) -> dict[str, str]:
    """How the cluster runs one group's search and apply: task count and nodes from EXPLAIN.
    The arguments are literals, as a client's bound values are when Citus plans the call (a
    volatile argument such as gen_random_uuid() would keep the call on the coordinator)."""
    out = {}
    sql = psycopg.sql
    with psycopg.connect(dsn, autocommit=True) as conn:  # Citus delegates calls outside transaction blocks
        for name, statement in (
                ("search_group", sql.SQL("EXPLAIN SELECT * FROM pgmemory.search_group({}, 'where does Ann work',"
                                         " NULL, '{{}}')").format(sql.Literal(group))),
                ("search_group with a metadata filter", sql.SQL(
                    "EXPLAIN SELECT * FROM pgmemory.search_group({}, 'where does Ann work', NULL,"
                    " '{{\"metadata\": {{\"topic\": \"work\"}}}}')").format(sql.Literal(group))),
                ("apply_if_unchanged", sql.SQL("EXPLAIN SELECT pgmemory_internal.apply_if_unchanged({}, {}, 'w', 0, '{{}}')")
                 .format(sql.Literal(group), sql.Literal(str(uuid.UUID(int=1)))))):
            plan = "\n".join(r[0] for r in conn.execute(statement).fetchall())
            tasks = re.findall(r"Task Count: (\d+)", plan)
            nodes = sorted(set(re.findall(r"Node: host=\S+ port=(\d+)", plan)))
            out[name] = f"Task Count {', '.join(tasks) or '?'}; worker port(s) {', '.join(nodes) or '?'}"
    return out


async def measure(targets: dict[str, str], people: dict[str, list[str]], queries: int,
                  episodes: int, several: int) -> dict[str, tuple[list[float], list[float], float]]:
    """Search latencies (ms) of one group and of `several` groups at once, and the ingest rate
    (episodes/s) per target, the targets interleaved call by call so both see the same machine
    load."""
    memories = {name: await Memory.open(dsn, embedder=HashEmbedder(dim=DIM), extractor=RuleExtractor(),
                                        on_acquire=NarrowToRequestGroups() if name == SERVER else None)
                for name, dsn in targets.items()}

    async def request(name: str, groups: list[str], call):
        """call() in a task of its own (every target alike), narrowed to `groups` for SERVER."""
        async def run():
            if name == SERVER:
                narrow_to(groups)
            return await call()
        return await asyncio.create_task(run())
    try:
        groups = sorted(people)
        rng = random.Random(5)
        timings: dict[str, list[float]] = {name: [] for name in targets}
        multi: dict[str, list[float]] = {name: [] for name in targets}
        # On the cluster, the candidate call alone for several groups: the fan-out from Python
        # (each group on its worker at once, merged) and search_candidates run on the
        # coordinator (each group routed in turn, ranks per group), alternated.
        raw: dict[str, list[float]] = {"fan-out": [], "search_candidates": []}
        cluster = memories[CLUSTER]
        opts = options(resolve_config(None), SearchFilters(), with_embeddings=False)
        for i in range(queries + 20):
            group = rng.choice(groups)
            query = f"where does {rng.choice(people[group])} work"
            chosen = rng.sample(groups, several)
            for name, memory in memories.items():
                started = time.perf_counter()
                await request(name, [group], lambda: memory.search(query, group_ids=group, limit=10))
                middle = time.perf_counter()
                await request(name, chosen, lambda: memory.search(query, group_ids=chosen, limit=10))
                if i >= 20:  # warm-up excluded
                    timings[name].append((middle - started) * 1000)
                    multi[name].append((time.perf_counter() - middle) * 1000)
            embedding = (await cluster.embedder.embed([query]))[0]
            started = time.perf_counter()
            await fanned_out_rows(cluster.pool, chosen, query, embedding, opts)
            middle = time.perf_counter()
            async with cluster.pool.acquire() as conn:
                await fetch_candidates(conn, chosen, query, embedding, opts)
            if i >= 20:
                raw["fan-out"].append((middle - started) * 1000)
                raw["search_candidates"].append((time.perf_counter() - middle) * 1000)
        spent = {name: 0.0 for name in targets}
        day = datetime(2025, 7, 1, tzinfo=UTC)
        for i in range(episodes):
            group = rng.choice(groups)
            text = rng.choice(SENTENCES).format(c=f"Company{rng.randrange(50)}", c2=f"Company{rng.randrange(50)}",
                                               p=f"Town{rng.randrange(30)}", f=rng.choice(people[group]),
                                               h=f"hobby{rng.randrange(20)}")
            actor = rng.choice(people[group])
            for name, memory in memories.items():
                started = time.perf_counter()
                # (an id each: the cluster's two targets share one database)
                await request(name, [group], lambda: memory.add_episode(
                    group, text, actor=actor, reference_time=day + timedelta(hours=i), episode_id=str(uuid.uuid4())))
                spent[name] += time.perf_counter() - started
        for name, values in raw.items():
            print(f"{CLUSTER}: candidates of {several} groups, {name}: p50 {statistics.median(values):.1f} ms, "
                  f"p95 {percentile(values, 95):.1f} ms; {load_avg()}", flush=True)
        return {name: (timings[name], multi[name], episodes / spent[name]) for name in targets}
    finally:
        for memory in memories.values():
            await memory.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--facts", type=int, default=500)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--several", type=int, default=5, help="groups per multi-group search")
    parser.add_argument("--server", action="store_true", help="also the cluster as a server uses it (see above)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pgmemory-bench-citus-"))
    (root / "one").mkdir()
    (root / "cluster").mkdir()
    one = start_cluster(root / "one", workers=0, citus=False)
    cluster = start_cluster(root / "cluster")
    try:
        targets = {"one node": one.coordinator_dsn, CLUSTER: cluster.coordinator_dsn}
        people = {}
        for name, dsn in targets.items():
            with psycopg.connect(dsn) as conn:
                started = time.perf_counter()
                report = init_database(conn, DIM)
                print(f"{name}: init {time.perf_counter() - started:.1f} s (graph {report.graph_mode}, "
                      f"distributed {report.distributed}); {load_avg()}", flush=True)
                if report.graph_mode == "age":  # the cluster has no AGE mirror: same work on both
                    for table, trigger in conn.execute(
                            "SELECT tgrelid::regclass::text, tgname FROM pg_trigger"
                            " WHERE tgname LIKE 'mirror\\_%' AND NOT tgisinternal").fetchall():
                        conn.execute(psycopg.sql.SQL("DROP TRIGGER {} ON {}").format(
                            psycopg.sql.Identifier(trigger), psycopg.sql.SQL(table)))
                    conn.commit()
            people, seconds = load(dsn, args.groups, args.facts)
            print(f"{name}: loaded {args.groups} groups x {args.facts} fact versions in {seconds:.1f} s; "
                  f"{load_avg()}", flush=True)
        for group in sorted(people)[:3]:
            for call, plan in explain(cluster.coordinator_dsn, group).items():
                print(f"cluster EXPLAIN {call}({group!r}, ...): {plan}")
        if args.server:
            with psycopg.connect(cluster.coordinator_dsn) as conn:
                grants.grant(conn, "bench_server", ["*"], kind="app", create_password="bench")
            targets[SERVER] = cluster.coordinator_dsn.replace("postgres@", "bench_server:bench@")
        measured = asyncio.run(measure(targets, people, args.queries, args.episodes, args.several))
        results = {}
        for name, (timings, multi, rate) in measured.items():
            results[name] = (statistics.median(timings), percentile(timings, 95),
                             statistics.median(multi), percentile(multi, 95), rate)
            print(f"{name}: search p50 {results[name][0]:.1f} ms, p95 {results[name][1]:.1f} ms; "
                  f"{args.several} groups at once p50 {results[name][2]:.1f} ms, p95 {results[name][3]:.1f} ms "
                  f"({args.queries} queries each); ingest {rate:.1f} episodes/s ({args.episodes}, one client, "
                  f"interleaved with the other target); {load_avg()}", flush=True)
        a, b = results["one node"], results[CLUSTER]
        print(f"cluster / one node: search p50 x{b[0] / a[0]:.2f}, p95 x{b[1] / a[1]:.2f}; "
              f"{args.several} groups p50 x{b[2] / a[2]:.2f}, p95 x{b[3] / a[3]:.2f}; "
              f"ingest time per episode x{a[4] / b[4]:.2f}; {load_avg()}")
        if SERVER in results:
            c = results[SERVER]
            print(f"cluster as a server / cluster: search p50 x{c[0] / b[0]:.2f}, p95 x{c[1] / b[1]:.2f}; "
                  f"{args.several} groups p50 x{c[2] / b[2]:.2f}, p95 x{c[3] / b[3]:.2f}; "
                  f"ingest time per episode x{b[4] / c[4]:.2f}; {load_avg()}")
    finally:
        cluster.stop()
        one.stop()


if __name__ == "__main__":
    main()
