"""pgmemory.search_candidates of a baseline revision against the current one, interleaved query by
query in one session on the same data, with a check that both return the same rows.

The baseline's search_candidates (sql/70_search.sql at --baseline, read with `git show`) is created
as a session-temporary function (pg_temp); the functions it calls (full text, BFS, ...) are the
current ones, so this measures the body of search_candidates only, unless --with-fulltext: then the
baseline's full-text functions too (bench/fulltext_kinds.py copies them) and its search_candidates
calls those. Besides wall times, the server's CPU time per call (bench/stats.py). Data: the LoCoMo groups of the
default database (as `search_latency --locomo` left them, questions embedded now with the local
model) or a loaded search_latency scenario (`--scenario 100k`, `1m`). The baseline call is not told
the limit, so a recipe whose pool follows the limit (candidates=None) gets the default pool (30)
there; `--baseline-candidates N` tells it the limit too and gives it N candidates per method, so
only the pools differ. With --limit, the overlap of each kind's top LIMIT with the baseline's is
printed. Both copies run as the installed search_candidates does (SECURITY DEFINER and its
search_path, when init set them), so neither pays a function entry the other does not.
--as-memory times the call as Memory.search makes it on one node: the group's search_group (the
baseline's own definition, in pg_temp, calling its search_candidates) with the query vector in
pgvector's binary format, instead of search_candidates with a text literal.

    PGMEMORY_DATA_DIR=/tmp/pgm-bench-search python -m bench.search_ab --baseline HEAD~1 \
        --scenario 100k --recipe edge_hybrid_rrf --queries 100 [--limit 10] [--as-memory]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import asyncpg
from pgvector.asyncpg import register_vector

from bench.fulltext_kinds import baseline_functions
from bench.search_latency import Scenario, db_dsn, log, make_queries, pct
from bench.stats import backend_cpu_s
from pgmemory.eval.ingestion import group_id as eval_group
from pgmemory.eval.readers import read_locomo
from pgmemory.search import rerank
from pgmemory.search.candidates import decode, options
from pgmemory.search.engine import _rerank
from pgmemory.search.config import SearchFilters, resolve_config
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.vectors import vector_literals

CALL = "SELECT kind, id, version_id, ranks, detail FROM {fn}(ARRAY[$1], $2, $3::text::vector, $4::jsonb)"
# --as-memory: what Memory.search sends for one group on one node (candidates.SEARCH_ONE_NODE).
CALL_GROUP = "SELECT kind, id, version_id, ranks, detail FROM {fn}($1, $2, $3::vector, $4::jsonb) c"


def _defined(text: str, name: str) -> str:
    """The CREATE statement of function `name` in a SQL file's text (its $$ body included)."""
    start = text.index(f"CREATE OR REPLACE FUNCTION {name}(")
    return text[start:text.index("$$;", text.index("AS $$", start)) + 3]


def baseline_function(rev: str, with_fulltext: bool = False, as_memory: bool = False) -> str:
    """The baseline's search_candidates, renamed pg_temp.search_candidates; with_fulltext: preceded by
    the baseline's full-text functions in pg_temp, which it then calls; as_memory: followed by the
    baseline's search_group as pg_temp.search_group, calling that copy."""
    root = Path(__file__).parent.parent
    text = subprocess.run(["git", "show", f"{rev}:sql/70_search.sql"], cwd=root, check=True,
                          capture_output=True, text=True).stdout
    body = _defined(text, "pgmemory.search_candidates").replace(
        "pgmemory.search_candidates(", "pg_temp.search_candidates(", 1)
    if as_memory:
        body += "\n" + _defined(text, "pgmemory.search_group").replace(
            "pgmemory.search_group(", "pg_temp.search_group(", 1).replace(
            "pgmemory.search_candidates(", "pg_temp.search_candidates(")
    if not with_fulltext:
        return body
    for name in ("fact_text_hits", "entity_text_hits", "episode_text_hits", "episode_lexeme_hits", "text_one_pass"):
        body = body.replace(f"pgmemory_internal.{name}(", f"pg_temp.{name}(")
    return baseline_functions(rev) + "\n" + body


async def run_as_installed(conn: asyncpg.Connection) -> None:
    """Give pg_temp.search_candidates the installed one's SECURITY DEFINER and search_path (init
    sets them where it can: sql/catalog/tenancy.sql), so both pay the same function entry."""
    row = await conn.fetchrow(
        "SELECT p.prosecdef, (SELECT c FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\\_path=%') AS path"
        " FROM pg_proc p WHERE p.oid = 'pgmemory.search_candidates(text[], text, vector, jsonb)'::regprocedure")
    signature = "pg_temp.search_candidates(text[], text, vector, jsonb)"
    if row["path"]:  # as pg_get_functiondef would write it: a list of quoted or plain schema names
        await conn.execute(f"ALTER FUNCTION {signature} SET search_path = {row['path'].split('=', 1)[1]}")
    if row["prosecdef"]:
        await conn.execute(f"ALTER FUNCTION {signature} SECURITY DEFINER")


async def locomo_queries(dsn: str, path: Path, n: int) -> list[tuple[str, str, list[float]]]:
    """(group, question, MiniLM vector) of n shuffled LoCoMo questions."""
    from pgmemory.providers.embedder import LocalEmbedder

    asked = [(eval_group("locomo", c.conversation_id), q.question) for c in read_locomo(path) for q in c.questions]
    random.Random(7).shuffle(asked)
    asked = asked[:n]
    vectors = await LocalEmbedder(cache_entries=0).embed([q for _, q in asked])
    return [(g, q, list(map(float, v))) for (g, q), v in zip(asked, vectors)]


async def top(rows: list, query: str, config, limit: int) -> list[tuple]:
    """What a search returns from these rows: each kind's hits reranked as run_search does, cut to
    the limit."""
    found = decode(rows)
    out = []
    for kind in ("facts", "entities", "communities", "episodes"):
        hits = rerank.described_first(await _rerank(getattr(found, kind), query, None, limit, config, None))
        out.append((kind, [(str(h.id), getattr(h, "version_id", None), round(h.score, 12)) for h in hits[:limit]]))
    return out


async def measure(dsn: str, queries: list[tuple[str, str, list[float]]], rev: str, recipe: str, warmup: int,
                  with_fulltext: bool = False, limit: int | None = None,
                  baseline_candidates: int | None = None, as_memory: bool = False) -> None:
    """Time baseline and current on every query (the order alternating), print p50/p95, the server's
    mean CPU time per call, and ratios. With `limit`, the current call is told the result limit
    (options(limit=...)), each call's time includes decoding its rows into hits, and what is compared is
    each kind's top `limit` after RRF."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(baseline_function(rev, with_fulltext, as_memory))
        await run_as_installed(conn)
        await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
        if as_memory:
            await register_vector(conn)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        cpu: dict[str, float] = {"baseline": 0.0, "current": 0.0}
        config = resolve_config(recipe)
        def opts(label: str, query: str | None) -> dict:
            """The call's options; each is given the query's words (a list question's members)."""
            if label == "current":
                return options(config, SearchFilters(), with_embeddings=False, limit=limit, query=query)
            if baseline_candidates:
                return options(replace(config, candidates=baseline_candidates), SearchFilters(),
                               with_embeddings=False, limit=limit, query=query)
            return options(config, SearchFilters(), with_embeddings=False, query=query)
        times: dict[str, list[float]] = {"baseline": [], "current": []}
        differ = 0
        overlap: dict[str, list[float]] = {}
        for n, (g, q, v) in enumerate(queries):
            rows = {}
            order = ("baseline", "current") if n % 2 else ("current", "baseline")
            for label in order:
                fn = f"{'pg_temp' if label == 'baseline' else 'pgmemory'}.search_{'group' if as_memory else 'candidates'}"
                cpu_before = backend_cpu_s(pid)
                started = time.perf_counter()
                call_opts = opts(label, q)
                if as_memory:
                    found = await conn.fetch(CALL_GROUP.format(fn=fn), g, q, v, call_opts)
                else:
                    found = await conn.fetch(CALL.format(fn=fn), g, q, vector_literals([v])[0], call_opts)
                if limit is not None:
                    found = await top(found, q, config, limit)
                if n >= warmup:
                    times[label].append((time.perf_counter() - started) * 1000)
                    cpu_after = backend_cpu_s(pid)
                    if cpu_before is not None and cpu_after is not None:
                        cpu[label] += cpu_after - cpu_before
                rows[label] = found if limit is not None else sorted(
                    (r["kind"], str(r["id"]), r["version_id"], json.dumps(r["ranks"], sort_keys=True),
                     json.dumps(r["detail"], sort_keys=True)) for r in found)
            differ += rows["baseline"] != rows["current"]
            if limit is not None and n >= warmup:  # each kind's top `limit` ids: the share the current call keeps
                for (kind, b_hits), (_, c_hits) in zip(rows["baseline"], rows["current"]):
                    if b_hits:
                        kept = {h[0] for h in b_hits} & {h[0] for h in c_hits}
                        overlap.setdefault(kind, []).append(len(kept) / len(b_hits))
        b, c = pct(times["baseline"]), pct(times["current"])
        cb, cc = (cpu[label] * 1000 / max(len(times[label]), 1) for label in ("baseline", "current"))
        log(f"  {recipe} n={b['n']} baseline p50 {b['p50']:7.2f} p95 {b['p95']:7.2f} | current p50 {c['p50']:7.2f} "
            f"p95 {c['p95']:7.2f} ms | ratio p50 {c['p50'] / max(b['p50'], 1e-9):.2f} p95 "
            f"{c['p95'] / max(b['p95'], 1e-9):.2f} | server CPU per call {cb:.2f} -> {cc:.2f} ms (x{cc / max(cb, 1e-9):.2f})"
            f" | queries whose rows differ: {differ} | load {os.getloadavg()[0]:.2f}")
        for kind, shares in overlap.items():
            log(f"  {kind}: overlap@{limit} with the baseline's top {limit} {100 * sum(shares) / len(shares):.2f}% "
                f"({sum(s < 1 for s in shares)} of {len(shares)} queries not the same set)")
    finally:
        await conn.close()


def main() -> None:
    """Parse the options, pick the data set, measure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD~1", help="git revision of the baseline search_candidates")
    ap.add_argument("--scenario", default="locomo", help="locomo, or a loaded search_latency scenario (100k, 1m)")
    ap.add_argument("--locomo", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data"
                    / "locomo" / "locomo-dev.json", help="LoCoMo file whose conversations are in the default database")
    ap.add_argument("--recipe", default="combined_hybrid_rrf")
    ap.add_argument("--queries", type=int, default=100, help="measured queries (after warm-up)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--limit", type=int, help="tell the current call the result limit, include decoding, and "
                    "compare each kind's top LIMIT after RRF (Memory.search's default limit is 10)")
    ap.add_argument("--baseline-candidates", type=int,
                    help="tell the baseline call the limit too, with this many candidates per method")
    ap.add_argument("--with-fulltext", action="store_true",
                    help="the baseline's full-text functions too (text_top_k, text_one_pass and the *_text_hits it calls)")
    ap.add_argument("--as-memory", action="store_true",
                    help="call search_group with the vector in binary, as Memory.search does on one node")
    args = ap.parse_args()
    server = resolve_dsn()
    total = args.queries + args.warmup
    if args.scenario == "locomo":
        dsn = server
        queries = asyncio.run(locomo_queries(dsn, args.locomo, total))
    else:
        sc = Scenario(args.scenario, 1, 1)
        dsn = db_dsn(server, sc.db)
        queries = [(q.group, q.text, q.vector) for q in make_queries(dsn, sc, total)[0]]
    log(f"scenario {args.scenario}: baseline {args.baseline}, {args.queries} queries after {args.warmup} warm-up")
    asyncio.run(measure(dsn, queries, args.baseline, args.recipe, args.warmup, args.with_fulltext, args.limit,
                        args.baseline_candidates, args.as_memory))


if __name__ == "__main__":
    main()
