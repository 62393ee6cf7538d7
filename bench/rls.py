"""What row-level security costs search: the raw `pgmemory.search_candidates` call as the owner
(not subject to RLS), as a login granted the searched groups by name, and as a login granted every
group ('*'), interleaved query by query on the same database so machine noise hits all three.

    PGMEMORY_DATA_DIR=/tmp/pgm-bench-rls python -m bench.rls --groups 100x1000 --queries 300
    ... --reuse   # keep and reuse the loaded database (bench_search_<scenario>)

Prints p50/p95 per role and the p95 ratio against the owner (target: <= 1.10), with the 1-minute
load average before and after each recipe.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import time

import asyncpg
import psycopg

from bench.search_latency import (RAW_SQL, Scenario, db_exists, db_dsn, load_scenario, log, make_queries,
                                  parse_groups, pct)
from pgmemory.search.candidates import options
from pgmemory.search.config import SearchFilters, resolve_config
from pgmemory.storage import grants
from pgmemory.storage.connect import connect, resolve_dsn
from pgmemory.storage.vectors import vector_literals

RECIPES = ("combined_hybrid_rrf", "edge_hybrid_rrf")
WARMUP = 20
PASSWORD = "bench-rls"


def login_dsn(dsn: str, role: str) -> str:
    """The database's URI DSN with another user and password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}:{PASSWORD}@{host}", parts.path, parts.query, parts.fragment))


def make_logins(dsn: str, groups: list[str]) -> dict[str, str]:
    """Two app logins: one granted the groups by name, one granted '*'. Returns role -> DSN."""
    out = {}
    with connect(dsn) as conn:
        for role, granted in (("bench_rls_named", groups), ("bench_rls_all", ["*"])):
            grants.revoke(conn, role, None)
            grants.grant(conn, role, granted, kind="app", create_password=PASSWORD)
            conn.execute(psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(PASSWORD)))
            conn.commit()
            out[role] = login_dsn(dsn, role)
    return out


async def _conn(dsn: str) -> asyncpg.Connection:
    from pgmemory.storage.connect import _init_async_connection

    conn = await asyncpg.connect(dsn)
    await _init_async_connection(conn)
    return conn


async def measure(dsns: dict[str, str], queries, recipe: str) -> dict[str, dict]:
    """Per role: latencies of the raw candidate call, every query run by each role in turn
    (rotating who goes first)."""
    opts = options(resolve_config(recipe), SearchFilters(), with_embeddings=False)
    conns = {name: await _conn(dsn) for name, dsn in dsns.items()}
    names = list(conns)
    times: dict[str, list[float]] = {n: [] for n in names}
    rows_seen: dict[str, int] = {n: 0 for n in names}
    try:
        for i, q in enumerate(queries):
            vec = vector_literals([q.vector])[0]
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                started = time.perf_counter()
                rows = await conns[name].fetch(RAW_SQL, [q.group], q.text, vec, opts)
                if i >= WARMUP:
                    times[name].append((time.perf_counter() - started) * 1000)
                    rows_seen[name] += len(rows)
    finally:
        for c in conns.values():
            await c.close()
    return {n: {**pct(times[n]), "rows": rows_seen[n]} for n in names}


def main() -> None:
    """CLI."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default="100x1000", help="groups x fact versions per group (default 100x1000)")
    ap.add_argument("--queries", type=int, default=300, help="measured queries per recipe (after warm-up)")
    ap.add_argument("--reuse", action="store_true", help="reuse a loaded database of the same scenario")
    args = ap.parse_args()
    os.environ.setdefault("PGMEMORY_STATEMENT_TIMEOUT", "86400")
    g, f = parse_groups(args.groups)
    sc = Scenario(f"{g}x{f}", g, f)
    server = resolve_dsn()
    log(f"server {server}; {os.cpu_count()} CPUs; loadavg {os.getloadavg()}")
    if not (args.reuse and db_exists(server, sc.db)):
        load_scenario(server, sc)
    dsn = db_dsn(server, sc.db)
    logins = make_logins(dsn, [sc.group_id(i) for i in range(sc.groups)])
    queries, _ = make_queries(dsn, sc, args.queries + WARMUP)
    dsns = {"owner (no RLS)": dsn, "login, groups by name": logins["bench_rls_named"],
            "login, '*'": logins["bench_rls_all"]}
    for recipe in RECIPES:
        before = os.getloadavg()[0]
        out = asyncio.run(measure(dsns, queries, recipe))
        after = os.getloadavg()[0]
        base = out["owner (no RLS)"]["p95"]
        log(f"{recipe} ({sc.facts} fact versions, {sc.groups} groups; {args.queries} queries; "
            f"loadavg 1m {before:.2f} -> {after:.2f})")
        for name, s in out.items():
            log(f"  {name:<24} p50 {s['p50']:7.2f}  p95 {s['p95']:7.2f} ms  p95 ratio {s['p95'] / base:5.2f}"
                f"  rows {s['rows']}")
        if len({s["rows"] for s in out.values()}) != 1:
            log("  WARNING: the roles returned different numbers of rows")


if __name__ == "__main__":
    main()
