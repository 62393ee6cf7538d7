"""Full-text top k per kind (facts, entities, episodes): the current functions against a baseline
revision's, interleaved in one run on the same data, with a check that both return the same hits.

The baseline's `*_text_hits` and the `text_top_k` / `text_scores` they call (sql/fulltext/tsvector.sql
at --baseline, read with `git show`) are created as session-temporary functions (pg_temp), so the
database keeps the current ones. Data:
the LoCoMo groups and questions of the default database (as `search_latency --locomo` left them)
and the one-group scenarios of `search_latency` named by --scenarios (default 100k), if loaded.
Besides wall times, the server process's CPU time per call (from /proc, when the server runs on
this machine): on a shared machine it moves far less with the load than wall time does.

    PGMEMORY_DATA_DIR=/tmp/pgm-bench-search python -m bench.fulltext_kinds \
        --locomo /work/shared/data/locomo/locomo-dev.json --baseline HEAD~1
"""
from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import time
from pathlib import Path

from bench.search_latency import log, pct
from bench.stats import backend_cpu_s
from bench.text_queries import add_options, query_sets
from pgmemory.storage.connect import connect

K = 30  # what search_candidates asks of each kind
BOUNDS = "ARRAY[NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL]::timestamptz[]"
CALLS = {  # kind -> the call with the default filters of a search now (schema placeholder {s})
    "facts": f"SELECT * FROM {{s}}.fact_text_hits(%(g)s::text[], %(q)s, {K}, now(), NULL, false, '{{{{}}}}', {BOUNDS})",
    "entities": f"SELECT * FROM {{s}}.entity_text_hits(%(g)s::text[], %(q)s, {K}, NULL, '{{{{}}}}'::text[])",
    "episodes": f"SELECT * FROM {{s}}.episode_text_hits(%(g)s::text[], %(q)s, {K}, NULL, NULL)",
}


def baseline_functions(rev: str) -> str:
    """The baseline's *_text_hits, episode_lexeme_hits and text_one_pass definitions, and the
    text_scored / text_top_k / text_scores / bm25_terms / bm25_term_rows they call (those it has),
    renamed into pg_temp (calls among them too; the other helpers, such as bm25_share, stay
    current), with text_top_k's generic plans as init sets them."""
    root = Path(__file__).parent.parent
    text = subprocess.run(["git", "show", f"{rev}:sql/fulltext/tsvector.sql"], cwd=root, check=True,
                          capture_output=True, text=True).stdout
    chunks = re.split(r"(?=^CREATE OR REPLACE FUNCTION )", text, flags=re.M)
    names = (r"(fact_text_hits|entity_text_hits|episode_text_hits|episode_lexeme_hits|text_one_pass|text_scored|text_top_k"
             r"|text_scores|bm25_terms|bm25_term_rows)")
    wanted = [c[:c.index("$$;", c.index("AS $$")) + 3] for c in chunks
              if re.match(rf"CREATE OR REPLACE FUNCTION pgmemory_internal\.{names}\(", c)]
    body = re.sub(rf"pgmemory_internal\.{names}\(", r"pg_temp.\1(", "\n".join(wanted))
    if "pg_temp.text_top_k(" in body:
        body += ("\nALTER FUNCTION pg_temp.text_top_k(text, text[], text, integer, timestamptz, timestamptz,"
                 " timestamptz, boolean, text[], timestamptz[], text[]) SET plan_cache_mode = force_generic_plan;")
    return body


def same_hits(a: list[tuple], b: list[tuple]) -> bool:
    """Equal scores in order, and the same rows above the k-th score (exact ties may differ)."""
    if len(a) != len(b) or not all(math.isclose(x[1], y[1], rel_tol=1e-9) for x, y in zip(a, b)):
        return False
    cut = a[-1][1] * (1 + 1e-9) if a else 0
    return {x[0] for x in a if x[1] > cut} == {y[0] for y in b if y[1] > cut}


def measure(dsn: str, name: str, queries: list[tuple[str, str]], rev: str, warmup: int) -> None:
    """Time baseline and current per kind, interleaved query by query; print p50/p95, the server's
    mean CPU time per call, and ratios."""
    with connect(dsn) as conn:
        conn.execute(baseline_functions(rev))
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        for kind, call in CALLS.items():
            times: dict[str, list[float]] = {"baseline": [], "current": []}
            cpu: dict[str, float] = {"baseline": 0.0, "current": 0.0}
            differ = 0
            for n, (g, q) in enumerate(queries):
                hits = {}
                order = (("baseline", "pg_temp"), ("current", "pgmemory_internal"))
                for label, schema in order if n % 2 else order[::-1]:  # neither always reads cold rows
                    cpu_before = backend_cpu_s(pid)
                    started = time.perf_counter()
                    hits[label] = conn.execute(call.format(s=schema), {"g": [g], "q": q}).fetchall()
                    if n >= warmup:
                        times[label].append((time.perf_counter() - started) * 1000)
                        cpu_after = backend_cpu_s(pid)
                        if cpu_before is not None and cpu_after is not None:
                            cpu[label] += cpu_after - cpu_before
                differ += not same_hits(hits["baseline"], hits["current"])
            b, c = pct(times["baseline"]), pct(times["current"])
            cb, cc = (cpu[label] * 1000 / max(len(times[label]), 1) for label in ("baseline", "current"))
            log(f"  {name} {kind:8s} n={b['n']} baseline p50 {b['p50']:7.2f} p95 {b['p95']:7.2f} | current p50 "
                f"{c['p50']:7.2f} p95 {c['p95']:7.2f} ms | ratio p50 {c['p50'] / max(b['p50'], 1e-9):.2f} p95 "
                f"{c['p95'] / max(b['p95'], 1e-9):.2f} | server CPU per call {cb:.2f} -> {cc:.2f} ms "
                f"(x{cc / max(cb, 1e-9):.2f}) | results differ: {differ} | load {os.getloadavg()[0]:.2f}")
        conn.rollback()


def main() -> None:
    """Parse the options, then measure LoCoMo (if given) and the scenarios asked for (if loaded)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(ap)
    ap.add_argument("--baseline", default="HEAD~1", help="git revision of the baseline functions")
    args = ap.parse_args()
    for name, dsn, queries in query_sets(args):
        measure(dsn, name, queries, args.baseline, args.warmup)


if __name__ == "__main__":
    main()
