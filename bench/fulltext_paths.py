"""text_top_k's two exact paths side by side: the steps (bounds over sets of lexemes) and the one
pass (every document holding a query lexeme scored), per kind, interleaved query by query, split
by the path the cost bound picks by default (`pgmemory.text_probe_rows`, sql/fulltext/tsvector.sql)
— so the bound can be checked: the path it picks should be the faster one.

    PGMEMORY_DATA_DIR=/tmp/search-pgdata python -m bench.fulltext_paths \
        --locomo ../shared/data/locomo/locomo-dev.json --scenarios 100k --queries 150
"""
from __future__ import annotations

import argparse
import os
import time

import psycopg

from bench.fulltext_kinds import CALLS, K
from bench.search_latency import log, pct
from bench.text_queries import add_options, query_sets

TERMS = "SELECT count(DISTINCT tq), coalesce(sum(df), 0) FROM pgmemory_internal.bm25_terms(%s, %s::text[], %s, %s)"
PROBE_ROWS = 100  # the default of pgmemory.text_probe_rows
FORCE = {"steps": "0", "one pass": "1e9"}


def one_pass_by_default(lexemes: int, postings: int) -> bool:
    """text_top_k's default choice (its cost bound, repeated here to label the queries)."""
    n = min(lexemes, 10)
    return postings <= PROBE_ROWS * (min(2 * n, (1 << n) - 1) + 1)


def measure(dsn: str, name: str, queries: list[tuple[str, str]], warmup: int) -> None:
    """Per kind: both paths on every query (order alternating), p50/p95 and the total per default choice."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for kind, call in CALLS.items():
            sql = call.format(s="pgmemory_internal")
            times: dict[tuple[bool, str], list[float]] = {}
            for n, (g, q) in enumerate(queries):
                lexemes, postings = conn.execute(TERMS, (kind, [g], q, K)).fetchone()
                chosen = one_pass_by_default(lexemes, postings)
                for path in (FORCE if n % 2 else list(FORCE)[::-1]):
                    conn.execute("SELECT set_config('pgmemory.text_probe_rows', %s, false)", (FORCE[path],))
                    started = time.perf_counter()
                    conn.execute(sql, {"g": [g], "q": q}).fetchall()
                    if n >= warmup:
                        times.setdefault((chosen, path), []).append((time.perf_counter() - started) * 1000)
            for chosen in (True, False):
                steps, one = times.get((chosen, "steps")), times.get((chosen, "one pass"))
                if steps:
                    s, o = pct(steps), pct(one)
                    log(f"  {name} {kind:8s} default {'one pass' if chosen else 'steps   '} n={s['n']:3d} | steps p50 "
                        f"{s['p50']:7.2f} p95 {s['p95']:7.2f} | one pass p50 {o['p50']:7.2f} p95 {o['p95']:7.2f} ms"
                        f" | total {sum(steps):8.1f} vs {sum(one):8.1f} ms | load {os.getloadavg()[0]:.2f}")


def main() -> None:
    """Parse the options, measure LoCoMo and each loaded scenario."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(ap)
    args = ap.parse_args()
    for name, dsn, queries in query_sets(args):
        measure(dsn, name, queries, args.warmup)


if __name__ == "__main__":
    main()
