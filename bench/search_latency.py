"""Search latency without query embedding, on synthetic graphs bulk-loaded into fresh databases.

For each scenario (one group of N facts, or G groups of F facts) this creates a database
bench_search_<name> on the embedded server, loads it with binary COPY (indexes dropped during the
load and rebuilt after, each build timed; triggers off, see search_data.StreamingLoader), then
times Memory.search (embedder returns a precomputed vector) and the raw
`SELECT * FROM pgmemory.search_candidates(...)` for three recipes, prints p50/p95/p99 next to the
issue's targets, saves EXPLAIN (ANALYZE, BUFFERS) of the candidate queries, and compares BFS in
recursive SQL with BFS through AGE on a graph loaded with the mirror triggers on.

    PGMEMORY_DATA_DIR=/tmp/pgm-bench-search python -m bench.search_latency --sizes 10000,100000
    ... --sizes 1000000 --groups 10000x100 --queries 200 --keep
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import psycopg

from bench import search_vocab as V
from bench.search_data import (
    COLUMNS,
    DIM,
    NOISE,
    Generator,
    StreamingLoader,
    build_indexes,
    centroids,
    drop_secondary_indexes,
    load_triggered,
)
from bench.stats import percentile
from pgmemory.eval.ingestion import group_id as eval_group
from pgmemory.eval.ingestion import ingest_conversation
from pgmemory.eval.readers import read_locomo
from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory, default_extractor
from pgmemory.search.candidates import options
from pgmemory.search.config import SearchConfig, SearchFilters, resolve_config
from pgmemory.search.context import build_context
from pgmemory.search.engine import check_request, run_search
from pgmemory.storage.connect import connect, resolve_dsn
from pgmemory.storage.setup import ensure_current, init_database
from pgmemory.storage.vectors import vector_literals

RESULTS = Path(__file__).parent / "results"
RECIPES = ("combined_hybrid_rrf", "edge_hybrid_rrf", "combined_hybrid_bfs_rrf")
WARMUP = 20
SLOW_RECIPE_BUDGET_S = 150.0
QUOTED = ("graphiti-core + Kuzu (quoted in issue 4, not measured here): "
          "p95 22 ms at 329 facts, 75 ms at 1,646 facts, growing linearly")
RAW_SQL = ("SELECT kind, id, version_id, ranks, detail"
           " FROM pgmemory.search_candidates($1, $2, $3::text::vector, $4::jsonb)")


@dataclass(frozen=True)
class Scenario:
    """One database to build: `groups` groups of `facts_per_group` fact versions each."""

    name: str
    groups: int
    facts_per_group: int

    @property
    def db(self) -> str:
        """Database name on the embedded server."""
        return f"bench_search_{self.name}"

    @property
    def facts(self) -> int:
        """Fact versions in total."""
        return self.groups * self.facts_per_group

    def group_id(self, i: int) -> str:
        """Group id of the i-th group."""
        return "bench" if self.groups == 1 else f"bench-{i:05d}"


@dataclass
class Query:
    """One benchmark query: group, text and its precomputed embedding."""

    group: str
    text: str
    vector: list[float]


class PrecomputedEmbedder:
    """An Embedder returning the vector set for the next call, instantly (no model time)."""

    def __init__(self, dim: int = DIM, name: str = "bench-precomputed") -> None:
        self.dim = dim
        self.name = name  # a real embedder's name, on a database built with it (LoCoMo)
        self.current: list[float] = [0.0] * dim
        self.seconds = 0.0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """The current vector for every text."""
        started = time.perf_counter()
        out = [self.current for _ in texts]
        self.seconds += time.perf_counter() - started
        return out


def log(msg: str) -> None:
    """Print with a timestamp, flushed (runs are long and often in the background)."""
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)


def db_dsn(server_dsn: str, db: str) -> str:
    """The server's URI DSN with another database name."""
    parts = urlsplit(server_dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + db, parts.query, parts.fragment))


def sql_fingerprint() -> str:
    """Short hash of migrations/ and sql/ as they are on disk now (what init applies)."""
    root = Path(__file__).parent.parent
    h = hashlib.sha256()
    for path in sorted([*root.glob("migrations/*.sql"), *root.glob("sql/**/*.sql")]):
        h.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return h.hexdigest()[:12]


def db_exists(server_dsn: str, db: str) -> bool:
    """Whether the database exists and holds a loaded pgmemory schema."""
    with connect(server_dsn, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
            return False
    with connect(db_dsn(server_dsn, db)) as conn:
        reg = conn.execute("SELECT to_regclass('pgmemory.facts')").fetchone()[0]
        return reg is not None and conn.execute("SELECT count(*) > 0 FROM pgmemory.facts").fetchone()[0]


def fresh_database(server_dsn: str, db: str) -> str:
    """Drop and create the database; return its DSN."""
    with connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{db}"')
    return db_dsn(server_dsn, db)


def table_stats(conn: psycopg.Connection) -> dict[str, Any]:
    """Rows and total size (MB) per loaded table, and fact version kinds."""
    out: dict[str, Any] = {}
    for table in COLUMNS:
        if conn.execute("SELECT to_regclass(%s)", (f"pgmemory.{table}",)).fetchone()[0] is None:
            continue  # a reused database of an older version: its next init creates the table
        rows, size = conn.execute(
            f"SELECT count(*), pg_total_relation_size('pgmemory.{table}') FROM pgmemory.{table}").fetchone()
        out[table] = {"rows": rows, "mb": round(size / 2**20, 1)}
    current, superseded, ended, unknown = conn.execute(
        "SELECT count(*) FILTER (WHERE upper_inf(recorded)), count(*) FILTER (WHERE NOT upper_inf(recorded)),"
        " count(*) FILTER (WHERE upper_inf(recorded) AND NOT upper_inf(valid)),"
        " count(*) FILTER (WHERE lower_inf(valid)) FROM pgmemory.facts").fetchone()
    out["fact_versions"] = {"believed": current, "superseded": superseded, "believed_but_ended": ended,
                            "unknown_start": unknown}
    return out


def load_scenario(server_dsn: str, sc: Scenario) -> dict[str, Any]:
    """Fresh database, init, drop secondary indexes, COPY everything, rebuild indexes, VACUUM ANALYZE."""
    dsn = fresh_database(server_dsn, sc.db)
    info: dict[str, Any] = {"database": sc.db, "sql_fingerprint": sql_fingerprint()}
    started = time.perf_counter()
    with connect(dsn) as conn:
        init_database(conn, DIM)
        info["init_s"] = round(time.perf_counter() - started, 2)
        indexes = drop_secondary_indexes(conn)
    log(f"  {sc.name}: init {info['init_s']} s; dropped {len(indexes)} secondary indexes; loading "
        f"{sc.groups} group(s) x {sc.facts_per_group} fact versions (binary COPY, triggers and FK checks "
        "off via session_replication_role = replica)")
    gen = Generator(seed=sum(map(ord, sc.name)))
    started = time.perf_counter()
    with StreamingLoader(dsn) as loader:
        for i in range(sc.groups):
            _, rows = gen.group(sc.group_id(i), sc.facts_per_group)
            for table, row in rows:
                loader.write(table, row)
            if sc.groups > 1 and (i + 1) % max(1, sc.groups // 10) == 0:
                log(f"    {i + 1} groups generated")
    info["copy_s"] = round(time.perf_counter() - started, 2)
    log(f"  {sc.name}: COPY of {gen.counts} took {info['copy_s']} s; building indexes")
    started = time.perf_counter()
    with connect(dsn) as conn:
        info["indexes"] = build_indexes(conn, indexes, log=log)
    info["index_build_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    with connect(dsn) as conn:  # the load bypassed the triggers that keep BM25's statistics
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        conn.commit()
    info["text_stats_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    with connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        info["vacuum_analyze_s"] = round(time.perf_counter() - started, 2)
        info["tables"] = table_stats(conn)
    info["triggers"] = ("AGE mirror, entity-version and FK triggers did not fire during the load "
                        "(session_replication_role = replica): the AGE graph of this database is empty; "
                        "search_candidates does not use it (BFS there is recursive SQL)")
    log(f"  {sc.name}: indexes {info['index_build_s']} s, VACUUM ANALYZE {info['vacuum_analyze_s']} s; "
        f"tables {json.dumps(info['tables'])}")
    return info


def make_queries(dsn: str, sc: Scenario, n: int, seed: int = 11) -> tuple[list[Query], list[tuple[str, Any]]]:
    """n queries (group, text from the group's entity names, vector near the named entity's topic)
    and person seeds for BFS, sampled from the loaded database."""
    rnd = random.Random(seed)
    rng = np.random.default_rng(seed)
    cents = centroids()
    groups = [sc.group_id(rnd.randrange(sc.groups)) for _ in range(n)]
    with connect(dsn) as conn:
        conn.execute("SELECT setseed(0.11)")  # the same queries in every run on the same data
        rows = conn.execute(
            "SELECT e.group_id, e.labels[2], e.name, e.id, v.name_embedding::text FROM pgmemory.entities e"
            " JOIN pgmemory.entity_name_vectors v ON v.group_id = e.group_id AND v.entity_id = e.id"
            " WHERE e.group_id = ANY (%s) ORDER BY random(), e.id LIMIT 20000", (sorted(set(groups)),)).fetchall()
    by_group: dict[str, dict[str, list[tuple[str, Any, np.ndarray]]]] = {}
    for g, label, name, id_, emb in rows:
        by_group.setdefault(g, {}).setdefault(label, []).append(
            (name, id_, np.array(json.loads(emb), dtype=np.float32)))
    queries, seeds = [], []
    for g in groups:
        ents = by_group[g]
        options_ = [(t, labels) for t, labels in V.QUERY_TEMPLATES
                    if all(lab == "Role" or ents.get(lab) for lab in labels)]
        template, labels = options_[rnd.randrange(len(options_))]
        words, topic = [], None
        for lab in labels:
            if lab == "Role":
                words.append(V.ROLES[rnd.randrange(len(V.ROLES))])
                continue
            name, id_, emb = ents[lab][rnd.randrange(len(ents[lab]))]
            words.append(name)
            if topic is None:
                topic = int(np.argmax(cents @ emb))
        v = cents[topic] + rng.standard_normal(DIM).astype(np.float32) * NOISE * 0.8
        queries.append(Query(g, template.format(*words), (v / np.linalg.norm(v)).tolist()))
        people = ents.get("Person", [])
        if people:
            seeds.append((g, people[rnd.randrange(len(people))][1]))
    return queries, seeds


def pct(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/mean/max in ms (rounded to 0.01)."""
    return {"n": len(values), "p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2),
            "p99": round(percentile(values, 99), 2), "mean": round(statistics.fmean(values), 2),
            "max": round(max(values), 2)}


# The floor: what Postgres itself takes for the bare top-k of each kind and method a recipe
# uses, one statement each, with only the group filter (issue 17).
FLOOR_K = 10
FLOOR_TABLES = {"facts": ("pgmemory.facts", "version_id", "embedding"),
                "entities": ("pgmemory.entities", "id", None),
                "communities": ("pgmemory.communities", "id", "name_embedding"),
                "episodes": ("pgmemory.episodes", "id", "embedding")}
# Entity name vectors live apart from the entity rows (migration 0350).
FLOOR_VECTORS = {"entities": ("pgmemory.entity_name_vectors", "entity_id", "name_embedding")}
STAGES = ("sql", "decode", "rerank", "context")


def floor_probes(config: SearchConfig, or_probes: bool = True) -> list[tuple[str, str, str, bool]]:
    """(name, 'cosine' | 'fulltext', SQL, counted in the floor) of the bare top-k probes for the
    recipe's kinds and methods: pgvector ORDER BY <=> LIMIT k; tsvector @@ plainto_tsquery (all the
    query's lexemes, Postgres' own default) ORDER BY ts_rank_cd LIMIT k, the floor; and, shown but
    not counted, the same with an OR of the lexemes (what the recipe matches, and far slower on
    common words; `or_probes` False leaves them out). Parameters: $1 group, $2 vector literal or
    query text, $3 k."""
    out = []
    for kind in config.kinds:
        table, key, col = FLOOR_TABLES[kind]
        if "cosine" in config.methods:
            vtable, vkey, vcol = FLOOR_VECTORS.get(kind, (table, key, col))
            out.append((f"{kind}.cosine", "cosine", f"SELECT {vkey} FROM {vtable} WHERE group_id = $1"
                        f" ORDER BY {vcol} <=> $2::text::vector LIMIT $3", True))
        if "fulltext" in config.methods:
            for name, query, counted in (("fulltext", "plainto_tsquery('english', $2)", True),
                                         ("fulltext_or", "pgmemory_internal.or_tsquery($2)", False))[:2 if or_probes else 1]:
                out.append((f"{kind}.{name}", "fulltext",
                            f"SELECT t.{key} FROM {table} t, {query} q"
                            f" WHERE t.group_id = $1 AND t.tsv @@ q ORDER BY ts_rank_cd(t.tsv, q) DESC LIMIT $3",
                            counted))
    return out


async def _timed(mem: Memory, embedder: PrecomputedEmbedder, probe_conn: asyncpg.Connection, q: Query,
                 recipe: str, opts: dict[str, Any], probes: list[tuple[str, str, str, bool]], raw_first: bool,
                 filters: SearchFilters) -> dict[str, Any]:
    """One query: the floor probes (ms each), the raw search_candidates call (ms), Memory.search
    (ms, embedding excluded) with its stages, and the context built from its results; the raw
    call and the search alternate which goes first, so neither always pays cold buffers."""
    vec = vector_literals([q.vector])[0]
    out: dict[str, Any] = {"probes": {}}
    for name, method, sql, _ in probes:
        started = time.perf_counter()
        await probe_conn.fetch(sql, q.group, vec if method == "cosine" else q.text, FLOOR_K)
        out["probes"][name] = (time.perf_counter() - started) * 1000

    async def raw_call() -> None:
        async with mem.pool.acquire() as conn:
            started = time.perf_counter()
            out["rows"] = await conn.fetch(RAW_SQL, [q.group], q.text, vec, opts)
            out["raw"] = (time.perf_counter() - started) * 1000

    async def api_call() -> None:
        # Memory.search's own body, with the stage timings switched on.
        embedder.current = q.vector
        timings: dict[str, float] = {}
        started = time.perf_counter()
        groups = check_request(q.text, [q.group], 10)
        results = await run_search(mem.pool, embedder, None, q.text, groups, 10, resolve_config(recipe),
                                   filters, timings, layout=mem.layout)
        searched = time.perf_counter()
        build_context(results, episodes=True)
        done = time.perf_counter()
        out["api"] = (searched - started - timings["embed"]) * 1000
        out["stages"] = {k: v * 1000 for k, v in timings.items() if k != "embed"}
        out["stages"]["context"] = (done - searched) * 1000

    if raw_first:
        await raw_call()
        await api_call()
    else:
        await api_call()
        await raw_call()
    return out


def call_options(cfg: SearchConfig, filters: SearchFilters, q: Query) -> dict[str, Any]:
    """The options of the raw call, as Memory.search asks for its limit of 10 and this query."""
    return options(cfg, filters, with_embeddings=cfg.reranker == "mmr", limit=10, query=q.text)


async def measure(dsn: str, queries: list[Query], recipes: tuple[str, ...],
                  filters: SearchFilters | None = None, embedder_name: str = "bench-precomputed",
                  or_probes: bool = True) -> dict[str, Any]:
    """Per recipe, on the same queries, interleaved: the floor (bare top-k per kind and method the
    recipe uses), the raw search_candidates call, Memory.search (no embedding time) with its stages
    (SQL candidate call, row decoding, reranking) and the context built from its results."""
    filters = filters or SearchFilters()
    embedder = PrecomputedEmbedder(len(queries[0].vector), embedder_name)
    mem = await Memory.open(dsn, embedder=embedder, extractor=RuleExtractor(), pool_size=2)
    probe_conn = await asyncpg.connect(dsn)
    await probe_conn.execute("SET hnsw.iterative_scan = relaxed_order")  # as search_candidates does
    out: dict[str, Any] = {}
    try:
        for recipe in recipes:
            cfg = resolve_config(recipe)
            probes = floor_probes(cfg, or_probes)
            raw_ms, api_ms, counts = [], [], Counter()
            probe_ms: dict[str, list[float]] = {name: [] for name, *_ in probes}
            counted = {name for name, _, _, c in probes if c}
            floor_ms: list[float] = []
            stage_ms: dict[str, list[float]] = {st: [] for st in STAGES}
            load_before = os.getloadavg()[0]

            started = time.perf_counter()
            for i, q in enumerate(queries[:WARMUP]):
                await _timed(mem, embedder, probe_conn, q, recipe, call_options(cfg, filters, q), probes, i % 2 == 0, filters)
            per_query = (time.perf_counter() - started) / WARMUP
            n = len(queries)
            if per_query * n > SLOW_RECIPE_BUDGET_S:
                n = max(30, int(SLOW_RECIPE_BUDGET_S / per_query))
            for i, q in enumerate(queries[:n]):
                t = await _timed(mem, embedder, probe_conn, q, recipe, call_options(cfg, filters, q), probes, i % 2 == 0, filters)
                raw_ms.append(t["raw"])
                api_ms.append(t["api"])
                for name, ms in t["probes"].items():
                    probe_ms[name].append(ms)
                floor_ms.append(sum(ms for name, ms in t["probes"].items() if name in counted))
                for st in STAGES:
                    stage_ms[st].append(t["stages"].get(st, 0.0))
                for r in t["rows"]:
                    for method in r["ranks"]:
                        counts[f"{r['kind']}.{method}"] += 1
            probes_pct = {name: pct(v) for name, v in probe_ms.items()}
            floor_p95 = round(sum(p["p95"] for name, p in probes_pct.items() if name in counted), 2)
            api = pct(api_ms)
            out[recipe] = {
                "queries": n, "reduced_from": len(queries) if n < len(queries) else None,
                "raw_sql_ms": pct(raw_ms), "memory_search_ms": api,
                "floor": {"k": FLOOR_K, "probes_ms": probes_pct, "counted": sorted(counted),
                          "sum_of_p95_ms": floor_p95,
                          "per_query_sum_ms": pct(floor_ms)},
                "p95_over_floor": round(api["p95"] / floor_p95, 2) if floor_p95 else None,
                "p95_over_per_query_floor": (round(api["p95"] / pct(floor_ms)["p95"], 2)
                                             if pct(floor_ms)["p95"] else None),
                "stages_ms": {st: pct(v) for st, v in stage_ms.items()},
                "candidates_per_query": {k: round(v / n, 1) for k, v in sorted(counts.items())},
                "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
            r = out[recipe]
            log(f"    {recipe:<24} n={n:<4} floor p95 {floor_p95:6.2f} ms ({len(counted)} probes) | raw SQL p50 "
                f"{r['raw_sql_ms']['p50']:7.2f} p95 {r['raw_sql_ms']['p95']:7.2f} | Memory.search p50 "
                f"{api['p50']:7.2f} p95 {api['p95']:7.2f} ms = {r['p95_over_floor']}x floor | stages p50 "
                + ", ".join(f"{st} {r['stages_ms'][st]['p50']:.2f}" for st in STAGES)
                + f" | load {r['loadavg_1m']}")
            log("      rows returned per method (facts: only those RRF can keep in the top 10) "
                f"{r['candidates_per_query']}; floor probes p50/p95 "
                + ", ".join(f"{k} {v['p50']:.2f}/{v['p95']:.2f}" for k, v in probes_pct.items()))
    finally:
        await probe_conn.close()
        await mem.close()
    return out


BOUNDS = "'{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}'::timestamptz[]"


def explain_queries(q: Query, now: datetime) -> list[tuple[str, str, dict[str, Any]]]:
    """The candidate queries of search_candidates with the values it would bind (default filters, k=30)."""
    p = {"g": [q.group], "q": q.text, "v": vector_literals([q.vector])[0], "now": now}
    in_view = (f"pgmemory_internal.fact_in_view(f.valid, f.recorded, f.relation, %(now)s::timestamptz, NULL::timestamptz,"
               f" false, '{{}}'::text[], {BOUNDS})")
    return [
        ("facts cosine (HNSW, iterative scan)",
         (f"SELECT f.version_id, f.embedding <=> %(v)s::vector AS d FROM pgmemory.facts f"
         f" WHERE f.group_id = ANY (%(g)s::text[]) AND {in_view}"
         f" ORDER BY f.embedding <=> %(v)s::vector LIMIT 30"), p),
        ("facts full text (fact_text_hits: text_top_k, plpgsql, its own statements not shown)",
         (f"SELECT * FROM pgmemory_internal.fact_text_hits(%(g)s::text[], %(q)s, 30, %(now)s::timestamptz, NULL, false,"
         f" '{{}}'::text[], {BOUNDS})"), p),
        ("entities cosine",
         ("SELECT v.entity_id, v.name_embedding <=> %(v)s::vector AS d FROM pgmemory.entity_name_vectors v"
         " WHERE v.group_id = ANY (%(g)s::text[]) ORDER BY v.name_embedding <=> %(v)s::vector LIMIT 30"), p),
        ("entities full text (entity_text_hits: text_top_k, plpgsql)",
         "SELECT * FROM pgmemory_internal.entity_text_hits(%(g)s::text[], %(q)s, 30, NULL, '{}'::text[])", p),
        ("episodes cosine",
         ("SELECT ep.id, ep.embedding <=> %(v)s::vector AS d FROM pgmemory.episodes ep"
         " WHERE ep.group_id = ANY (%(g)s::text[]) ORDER BY ep.embedding <=> %(v)s::vector LIMIT 30"), p),
        ("episodes full text (episode_text_hits: text_top_k, plpgsql)",
         "SELECT * FROM pgmemory_internal.episode_text_hits(%(g)s::text[], %(q)s, 30, NULL, NULL)", p),
        ("communities cosine",
         ("SELECT cm.id, cm.name_embedding <=> %(v)s::vector AS d FROM pgmemory.communities cm"
         " WHERE cm.group_id = ANY (%(g)s::text[]) ORDER BY cm.name_embedding <=> %(v)s::vector LIMIT 30"), p),
        ("communities full text (tsvector)",
         ("SELECT cm.id, ts_rank_cd(cm.tsv, pgmemory_internal.or_tsquery(%(q)s)) AS s FROM pgmemory.communities cm"
         " WHERE cm.group_id = ANY (%(g)s::text[]) AND cm.tsv @@ pgmemory_internal.or_tsquery(%(q)s)"
         " ORDER BY 2 DESC LIMIT 30"), p),
        ("BFS seeds (entities of the 3 latest episodes)",
         ("SELECT DISTINCT m.entity_id FROM pgmemory.episode_mentions m WHERE m.episode_id IN ("
         " SELECT e.id FROM pgmemory.episodes e WHERE e.group_id = ANY (%(g)s::text[]) AND e.status = 'done'"
         " ORDER BY e.valid_at DESC LIMIT 3)"), p),
        ("BFS depth 2 from those seeds (bfs_entities, recursive SQL)",
         ("SELECT count(*), max(distance) FROM pgmemory.bfs_entities(%(g)s::text[], ARRAY("
         "SELECT DISTINCT m.entity_id FROM pgmemory.episode_mentions m WHERE m.episode_id IN ("
         " SELECT e.id FROM pgmemory.episodes e WHERE e.group_id = ANY (%(g)s::text[]) AND e.status = 'done'"
         " ORDER BY e.valid_at DESC LIMIT 3)), 2, %(now)s::timestamptz, NULL)"), p),
        ("whole call: search_candidates, default recipe",
         ("SELECT count(*) FROM pgmemory.search_candidates(%(g)s::text[], %(q)s, %(v)s::vector,"
         " '{\"kinds\": [\"facts\", \"entities\", \"communities\", \"episodes\"],"
         " \"methods\": [\"cosine\", \"fulltext\"], \"candidates\": 30}'::jsonb)"), p),
    ]


VECTOR_LITERAL = re.compile(r"'\[[-0-9.e,]+\]'")
NODE = re.compile(r"(Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan|Parallel Seq Scan|Custom Scan"
                  r"|Function Scan|CTE Scan|WorkTable Scan)[^\n(]*")


def short(text: str) -> str:
    """Plan or SQL text with the 384-d vector literal elided."""
    return VECTOR_LITERAL.sub("'[<384-d query vector>]'", text)


def explain(dsn: str, sc: Scenario, q: Query) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of every candidate query, with and without a forced generic plan
    for the fact queries; written to bench/results/explain-<scenario>.txt."""
    now = datetime.now(UTC)
    lines = [f"# scenario {sc.name}: {sc.groups} group(s) x {sc.facts_per_group} fact versions",
             (f"# query group={q.group!r} text={q.text!r}; hnsw.iterative_scan = relaxed_order "
             "(as search_candidates sets it)"), ""]
    highlights: dict[str, Any] = {}
    with connect(dsn) as conn:
        cur = psycopg.ClientCursor(conn)
        cur.execute("SET hnsw.iterative_scan = relaxed_order")
        for title, sql, params in explain_queries(q, now):
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            plan = short("\n".join(r[0] for r in cur.fetchall()))
            lines += [f"## {title}", "", short(cur.mogrify(sql, params)), "", plan, ""]
            ms = re.search(r"Execution Time: ([\d.]+) ms", plan)
            highlights[title] = {"nodes": sorted({m.group(0).strip() for m in NODE.finditer(plan)}),
                                 "execution_ms": float(ms.group(1)) if ms else None}
        conn.rollback()
        for title, sql, params in explain_queries(q, now)[:2]:
            generic = re.sub(r"%\((\w+)\)s", lambda m: {"g": "$1", "q": "$2", "v": "$3", "now": "$4"}[m.group(1)],
                             sql)
            cur.execute("SET hnsw.iterative_scan = relaxed_order")
            cur.execute("SET plan_cache_mode = force_generic_plan")
            cur.execute(f"PREPARE p(text[], text, vector, timestamptz) AS {generic}")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) EXECUTE p(%(g)s::text[], %(q)s, %(v)s::vector, %(now)s)", params)
            plan = short("\n".join(r[0] for r in cur.fetchall()))
            lines += [(f"## {title} -- GENERIC plan (plan_cache_mode = force_generic_plan; plpgsql may switch "
                      "to it after 5 calls)"), "", plan, ""]
            ms = re.search(r"Execution Time: ([\d.]+) ms", plan)
            highlights[title + " [generic plan]"] = {
                "nodes": sorted({m.group(0).strip() for m in NODE.finditer(plan)}),
                "execution_ms": float(ms.group(1)) if ms else None}
            cur.execute("DEALLOCATE p")
            conn.rollback()
    path = RESULTS / f"explain-{sc.name}.txt"
    path.write_text("\n".join(lines))
    log(f"  EXPLAIN written to {path}")
    for title, h in highlights.items():
        log(f"    {title:<62} {h['execution_ms']!s:>9} ms  {'; '.join(h['nodes'])}")
    return {"file": str(path.relative_to(Path(__file__).parent.parent)), "highlights": highlights}


def run_scenario(server_dsn: str, sc: Scenario, n_queries: int, keep: bool, reuse: bool,
                 recipes: tuple[str, ...] = RECIPES, filters: SearchFilters | None = None,
                 or_probes: bool = True) -> dict[str, Any]:
    """Load (or reuse) the scenario's database, measure, explain, save JSON, maybe drop."""
    log(f"scenario {sc.name}: {sc.groups} group(s) x {sc.facts_per_group} = {sc.facts} fact versions")
    if reuse and db_exists(server_dsn, sc.db):
        dsn = db_dsn(server_dsn, sc.db)
        with connect(dsn) as conn:
            started = time.perf_counter()
            ensure_current(conn, DIM)  # pending migrations and changed SQL, before anything reads the tables
            log(f"  {sc.db}: init checked in {time.perf_counter() - started:.1f} s")
            load = {"database": sc.db, "reused": True, "tables": table_stats(conn)}
        prev = RESULTS / f"search-{sc.name}.json"
        if prev.exists():
            old = json.loads(prev.read_text()).get("load", {})
            load.update({k: v for k, v in old.items() if k not in load})
        log(f"  reusing {sc.db}")
    else:
        load = load_scenario(server_dsn, sc)
        dsn = db_dsn(server_dsn, sc.db)
    queries, _ = make_queries(dsn, sc, n_queries + WARMUP)
    measured = queries[WARMUP:] + queries[:WARMUP]
    log(f"  {len(queries)} queries (first {WARMUP} as warm-up), e.g. {measured[0].text!r}, {measured[1].text!r}")
    latency = asyncio.run(measure(dsn, measured, recipes, filters, or_probes=or_probes))
    plans = explain(dsn, sc, measured[0])
    result = {"scenario": sc.name, "groups": sc.groups, "facts_per_group": sc.facts_per_group,
              "fact_versions": sc.facts, "cpus": os.cpu_count(), "load": load, "latency": latency,
              "explain": plans, "embedding": "precomputed (excluded from timings)", "quoted": QUOTED,
              "filters": filters.to_options() if filters else None,
              "date": datetime.now(UTC).isoformat(timespec="seconds")}
    suffix = "-asof" if filters and (filters.as_of or filters.known_at) else ""
    (RESULTS / f"search-{sc.name}{suffix}.json").write_text(json.dumps(result, indent=2, default=str))
    if not keep:
        with connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{sc.db}" WITH (FORCE)')
    return result


async def locomo_queries(dsn: str, path: Path) -> tuple[list[Query], str, dict[str, Any]]:
    """The file's conversations ingested as `pgmemory eval` ingests them (complete groups are
    reused), and every question as a query, its vector computed now by the configured embedder
    (PGMEMORY_EMBEDDER), so only search is timed later. Returns the queries, the embedder's name
    and the table sizes."""
    conversations = read_locomo(path)
    async with await Memory.open(dsn, extractor=default_extractor(None)) as mem:
        reingested = False
        for c in conversations:
            report = await ingest_conversation(mem, "locomo", c, lambda: None)
            reingested |= not report.reused
            log(f"  {c.conversation_id}: {'reused' if report.reused else f'ingested in {report.seconds} s'}")
        if reingested:  # an erased group's dead rows stay in the HNSW indexes the floor probes read
            async with mem.pool.acquire() as conn:
                await conn.execute("VACUUM (ANALYZE) pgmemory.episodes, pgmemory.facts, pgmemory.entities,"
                                   " pgmemory.entity_name_vectors, pgmemory.communities")
        asked = [(eval_group("locomo", c.conversation_id), q.question) for c in conversations for q in c.questions]
        vectors = await mem.embedder.embed([text for _, text in asked])
        name = mem.embedder.name
        async with mem.pool.acquire() as conn:
            sizes = {r["t"]: r["n"] for r in await conn.fetch(
                "SELECT 'episodes' t, count(*) n FROM pgmemory.episodes UNION ALL"
                " SELECT 'facts', count(*) FROM pgmemory.facts UNION ALL"
                " SELECT 'entities', count(*) FROM pgmemory.entities UNION ALL"
                " SELECT 'communities', count(*) FROM pgmemory.communities")}
            sizes["episodes_per_group"] = {r["group_id"]: r["n"] for r in await conn.fetch(
                "SELECT group_id, count(*) n FROM pgmemory.episodes WHERE group_id = ANY ($1) GROUP BY 1",
                sorted({g for g, _ in asked}))}
    queries = [Query(g, text, list(map(float, v))) for (g, text), v in zip(asked, vectors)]
    random.Random(7).shuffle(queries)
    return queries, name, sizes


def run_locomo(path: Path, n_queries: int, recipes: tuple[str, ...], filters: SearchFilters | None,
               or_probes: bool = True) -> dict[str, Any]:
    """LoCoMo scale: the real conversations and questions, on the configured server's database."""
    dsn = resolve_dsn()
    log(f"scenario locomo: {path}")
    queries, embedder_name, sizes = asyncio.run(locomo_queries(dsn, path))
    measured = queries[WARMUP:WARMUP + n_queries] + queries[:WARMUP]
    log(f"  {len(measured) - WARMUP} questions measured (+{WARMUP} warm-up), embedder {embedder_name}; {sizes}")
    latency = asyncio.run(measure(dsn, measured, recipes, filters, embedder_name, or_probes))
    sc = Scenario("locomo", len(sizes["episodes_per_group"]), 0)
    plans = explain(dsn, sc, measured[0])
    result = {"scenario": "locomo", "file": str(path), "tables": sizes, "cpus": os.cpu_count(),
              "latency": latency, "explain": plans, "embedder": embedder_name,
              "embedding": "precomputed (excluded from timings)",
              "date": datetime.now(UTC).isoformat(timespec="seconds")}
    (RESULTS / "search-locomo.json").write_text(json.dumps(result, indent=2, default=str))
    return result


BFS_GROUPS = (("bfs-one", 1, 10000), ("bfs-small", 100, 100))
DEPTHS = (1, 2, 3)
BFS_SEEDS = 20
AGE_TIMEOUT = "60s"
BFS_SQL = "SELECT entity_id, distance FROM pgmemory.bfs_entities(%s, %s, %s)"
BFS_AGE = "SELECT entity_id, distance FROM pgmemory.bfs_entities_age(%s, %s, %s)"


def run_bfs(server_dsn: str, keep: bool) -> dict[str, Any]:
    """BFS in recursive SQL vs AGE Cypher (as Memory.bfs runs them), on graphs loaded with triggers on."""
    db = "bench_search_bfs"
    dsn = fresh_database(server_dsn, db)
    gen = Generator(seed=5)
    rows: list[tuple[str, tuple]] = []
    groups: dict[str, list[str]] = {}
    for name, n_groups, per_group in BFS_GROUPS:
        for i in range(n_groups):
            g = name if n_groups == 1 else f"{name}-{i:03d}"
            groups.setdefault(name, []).append(g)
            rows.extend(gen.group(g, per_group)[1])
    with connect(dsn) as conn:
        init_database(conn, DIM)
        mode = conn.execute("SELECT pgmemory_internal.setting('graph_mode') #>> '{}'").fetchone()[0]
        if mode != "age":
            raise SystemExit("BFS comparison needs Apache AGE on the server")
        started = time.perf_counter()
        per_table = load_triggered(conn, rows)
        load_s = round(time.perf_counter() - started, 2)
    with connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        edges = conn.execute("SELECT count(*) FROM pgmemory_graph.\"RELATES_TO\"").fetchone()[0]
        believed = conn.execute("SELECT count(*) FROM pgmemory.facts WHERE upper_inf(recorded)").fetchone()[0]
    log(f"BFS graph loaded WITH mirror triggers in {load_s} s ({per_table}); {edges} RELATES_TO edges in AGE "
        f"for {believed} believed facts")
    out: dict[str, Any] = {"load_s": load_s, "load_per_table_s": per_table, "age_edges": edges,
                           "believed_facts": believed, "graphs": {}}
    rnd = random.Random(3)
    with connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET statement_timeout = '{AGE_TIMEOUT}'")
        for name, n_groups, per_group in BFS_GROUPS:
            degree = conn.execute(
                "SELECT round(avg(d), 1), max(d) FROM (SELECT x, count(*) d FROM (SELECT source_id x FROM"
                " pgmemory.facts WHERE group_id = ANY (%s) AND upper_inf(recorded) UNION ALL SELECT target_id"
                " FROM pgmemory.facts WHERE group_id = ANY (%s) AND upper_inf(recorded)) s GROUP BY x) t",
                (groups[name], groups[name])).fetchone()
            seeds = []
            for _ in range(BFS_SEEDS):
                g = groups[name][rnd.randrange(len(groups[name]))]
                seed = conn.execute("SELECT id FROM pgmemory.entities WHERE group_id = %s AND 'Person' = ANY (labels)"
                                    " ORDER BY random() LIMIT 1", (g,)).fetchone()[0]
                seeds.append((g, seed))
            conn.execute(BFS_SQL, ([seeds[0][0]], [seeds[0][1]], 1)).fetchall()
            conn.execute(BFS_AGE, ([seeds[0][0]], [seeds[0][1]], 1)).fetchall()
            graph = {"groups": n_groups, "facts_per_group": per_group,
                     "entity_degree_avg_max": [float(degree[0]), degree[1]], "depths": {}}
            for depth in DEPTHS:
                sql_ms, age_ms, same, reached, timeouts = [], [], 0, [], 0
                for g, seed in seeds:
                    started = time.perf_counter()
                    a = dict(conn.execute(BFS_SQL, ([g], [seed], depth)).fetchall())
                    sql_ms.append((time.perf_counter() - started) * 1000)
                    reached.append(len(a))
                    if timeouts:
                        continue
                    started = time.perf_counter()
                    try:
                        b = dict(conn.execute(BFS_AGE, ([g], [seed], depth)).fetchall())
                    except psycopg.errors.QueryCanceled:
                        timeouts += 1
                        continue
                    age_ms.append((time.perf_counter() - started) * 1000)
                    same += a == b
                res = {"sql_ms": pct(sql_ms), "age_ms": pct(age_ms) if age_ms else None,
                       "identical": f"{same}/{len(age_ms)}", "age_timeouts": timeouts,
                       "reached_median": statistics.median(reached)}
                graph["depths"][depth] = res
                log(f"  BFS {name:<9} depth {depth}: SQL p50 {res['sql_ms']['p50']:8.2f} p95 "
                    f"{res['sql_ms']['p95']:8.2f} ms | AGE "
                    + (f"p50 {res['age_ms']['p50']:8.2f} p95 {res['age_ms']['p95']:8.2f} ms" if age_ms
                       else f"timed out ({AGE_TIMEOUT})")
                    + f" | identical {res['identical']} | reached median {res['reached_median']}")
            out["graphs"][name] = graph
    (RESULTS / "search-bfs.json").write_text(json.dumps(out, indent=2, default=str))
    if not keep:
        with connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return out


FLOOR_RATIO = {"combined_hybrid_rrf": 3.0, "edge_hybrid_rrf": 2.0}  # issue 17: p95 <= ratio x floor


def print_summary(results: list[tuple[Scenario, dict[str, Any]]]) -> None:
    """One table of every scenario and recipe: floor, raw SQL, Memory.search, ratio, stages."""
    print()
    print("| scenario | fact versions | recipe | n | floor p95 ms (sum of probe p95s) | raw SQL p50 / p95 ms"
          " | Memory.search p50 / p95 ms | p95 / floor (/ per-query floor p95) | goal | stages p50 ms: sql / decode / rerank / context"
          " | context p95 ms | load 1m |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for sc, res in results:
        for recipe, r in res["latency"].items():
            raw, api, st = r["raw_sql_ms"], r["memory_search_ms"], r["stages_ms"]
            goal = FLOOR_RATIO.get(recipe)
            verdict = "" if goal is None else f"<= {goal:g}x {'yes' if r['p95_over_floor'] <= goal else 'NO'}"
            facts = f"{sc.facts:,}" if sc.facts else "LoCoMo"
            print(f"| {sc.name} | {facts} | {recipe} | {r['queries']} | {r['floor']['sum_of_p95_ms']} | "
                  f"{raw['p50']} / {raw['p95']} | {api['p50']} / {api['p95']} | {r['p95_over_floor']}x "
                  f"({r['p95_over_per_query_floor']}x) | {verdict} | "
                  f"{st['sql']['p50']} / {st['decode']['p50']} / {st['rerank']['p50']} / {st['context']['p50']} | "
                  f"{st['context']['p95']} | {r['loadavg_1m'][0]}-{r['loadavg_1m'][1]} |")
    print("\nFloor: bare top-10 per kind and method the recipe uses (pgvector <=>; tsvector @@ plainto_tsquery + "
          "ts_rank_cd), one statement each, only the group filter, summed over the probes' p95s as issue 17 does "
          "(the p95 of the per-query sums is in the JSON); embedding excluded everywhere. Goal (issue 17): "
          "default recipe p95 <= 3x floor, edge-only <= 2x; context <= 2 ms over search.")


def parse_groups(text: str) -> tuple[int, int]:
    """'10000x100' -> (10000, 100)."""
    g, f = text.lower().split("x")
    return int(g), int(f)


def main() -> None:
    """CLI."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000",
                    help="one-group synthetic sizes in fact versions, e.g. 100000,1000000 ('' for none)")
    ap.add_argument("--locomo", type=Path, help="also measure at LoCoMo scale on this file (e.g. "
                    "../shared/data/locomo/locomo-dev.json), ingested as `pgmemory eval` does")
    ap.add_argument("--groups", default="", help="many-groups scenario, e.g. 10000x100 ('' for none)")
    ap.add_argument("--queries", type=int, default=200, help="measured queries per recipe (after warm-up)")
    ap.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    ap.add_argument("--reuse", action="store_true", help="reuse a loaded database of the same name (implies --keep)")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="search recipes to time")
    ap.add_argument("--bfs", action=argparse.BooleanOptionalAction, default=True,
                    help="run the SQL vs AGE BFS comparison")
    ap.add_argument("--or-probes", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the OR full-text probes (shown, not counted in the floor; seconds each at 1M)")
    ap.add_argument("--as-of", help="valid time T of every search (ISO 8601 with zone), e.g. 2020-06-01T00:00Z")
    ap.add_argument("--known-at", help="transaction time T' of every search (ISO 8601 with zone)")
    args = ap.parse_args()
    os.environ.setdefault("PGMEMORY_STATEMENT_TIMEOUT", "86400")  # index builds over millions of rows
    filters = SearchFilters(
        as_of=datetime.fromisoformat(args.as_of.replace("Z", "+00:00")) if args.as_of else None,
        known_at=datetime.fromisoformat(args.known_at.replace("Z", "+00:00")) if args.known_at else None)
    scenarios = [Scenario(_size_name(int(s)), 1, int(s)) for s in args.sizes.split(",") if s.strip()]
    if args.groups:
        g, f = parse_groups(args.groups)
        scenarios.append(Scenario(f"{g}x{f}", g, f))
    RESULTS.mkdir(exist_ok=True)
    server_dsn = resolve_dsn()
    log(f"server {server_dsn}; {os.cpu_count()} CPUs; loadavg {os.getloadavg()}")
    results = []
    recipes = tuple(r for r in args.recipes.split(",") if r)
    if args.locomo:
        res = run_locomo(args.locomo, args.queries, recipes, filters, args.or_probes)
        results.append((Scenario("locomo", len(res["tables"]["episodes_per_group"]), 0), res))
    for sc in scenarios:
        results.append((sc, run_scenario(server_dsn, sc, args.queries, args.keep or args.reuse, args.reuse,
                                         recipes, filters, args.or_probes)))
    if results:
        print_summary(results)
    if args.bfs:
        run_bfs(server_dsn, args.keep)


def _size_name(n: int) -> str:
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


if __name__ == "__main__":
    main()
