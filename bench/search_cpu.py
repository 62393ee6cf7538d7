"""Where the server's CPU goes in one search call: `perf` on the backend of one connection that runs
the call as Memory.search makes it on one node (search_group, the vector binary) for many
questions, each sample classified by the plpgsql functions on its stack.

Needs `perf` (linux-tools) allowed to attach to the server's processes (same user, or
kernel.perf_event_paranoid <= 1) and a server built with frame information (the embedded one
is). Data as bench/search_ab.py: the LoCoMo groups of the database (`search_latency --locomo`
left them) or a loaded scenario.

    PGMEMORY_DATA_DIR=/tmp/search-pgdata python -m bench.search_cpu --recipe edge_hybrid_rrf --calls 2500
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
from pgvector.asyncpg import register_vector

from bench.search_ab import CALL_GROUP, locomo_queries
from bench.search_latency import Scenario, db_dsn, log, make_queries
from pgmemory.search.candidates import options
from pgmemory.search.config import SearchFilters, resolve_config
from pgmemory.storage.connect import resolve_dsn

# Frames that mark the describe statements of search_candidates (joins, subqueries, JSON).
DESCRIBE = {"jsonb_build_object", "CteScanNext", "ExecHashJoin", "ExecSubPlan", "ExecNestLoop", "MultiExecHash",
            "ExecInitNestLoop", "ExecInitHashJoin", "ExecInitCteScan", "ExecInitSubPlan", "ExecWindowAgg"}
EXPRESSIONS = {"exec_eval_simple_expr", "ExecInterpExpr", "exec_assign_value", "ExecInitExprWithParams",
               "exec_eval_expr", "exec_assign_expr"}


def stacks(script: str) -> list[list[str]]:
    """`perf script` output as one list of function names per sample, leaf first."""
    samples: list[list[str]] = []
    for line in script.splitlines():
        if line and not line[0].isspace():
            samples.append([])
        elif samples and (m := re.match(r"\s+[0-9a-f]+ (\S+?)(\+0x[0-9a-f]+)? \(", line)):
            samples[-1].append(m.group(1))
    return [s for s in samples if s]


def part(frames: list[str]) -> str:
    """What a sample's stack was doing, by the plpgsql functions on it (search_candidates the
    outermost one: search_group is inlined on one node)."""
    levels = [i for i, name in enumerate(frames) if name == "plpgsql_exec_function"]
    if not levels:
        return "outside the function: bind, rows out, transaction"
    inner = frames[:levels[-1]]  # below search_candidates' frame
    if len(levels) >= 2:
        if any("role" in f.lower() for f in inner):
            return "session_groups"
        return "nested plpgsql: full text (text_top_k, bm25_terms, text_scores), ..."
    if "_SPI_execute_plan" in inner:
        if DESCRIBE & set(inner):
            return "statements: describe (joins, subqueries, JSON)"
        if {"FunctionNext", "ExecInitFunctionScan"} & set(inner):
            return "statements: a function's rows (the full-text wrapper)"
        return "statements: other (cosine, ...)"
    if EXPRESSIONS & set(inner):
        return "plpgsql expressions: DECLARE defaults, IF conditions, assignments"
    return "plpgsql other: block entry, statement dispatch"


async def profile(dsn: str, queries: list[tuple[str, str, list[float]]], recipe: str, calls: int,
                  frequency: int) -> tuple[list[list[str]], float]:
    """Run `calls` searches on one connection under `perf record`; the samples and ms per call."""
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    config = resolve_config(recipe)
    call = CALL_GROUP.format(fn="pgmemory.search_group")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        try:
            for g, q, v in queries[:20]:  # warm: plans cached, buffers read
                await conn.fetch(call, g, q, v, options(config, SearchFilters(), with_embeddings=False, limit=10, query=q))
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            perf = subprocess.Popen(["perf", "record", "-F", str(frequency), "--call-graph", "dwarf,16384",
                                     "-p", str(pid), "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            await asyncio.sleep(0.5)
            started = time.perf_counter()
            for i in range(calls):
                g, q, v = queries[i % len(queries)]
                await conn.fetch(call, g, q, v, options(config, SearchFilters(), with_embeddings=False, limit=10, query=q))
            per_call = (time.perf_counter() - started) * 1000 / calls
            perf.send_signal(signal.SIGINT)
            _, err = perf.communicate(timeout=120)
            if perf.returncode not in (0, -signal.SIGINT):
                raise SystemExit(f"perf record failed: {err.decode(errors='replace').strip()[:300]}")
        finally:
            await conn.close()
        script = subprocess.run(["perf", "script", "-i", str(data)], check=True, capture_output=True,
                                text=True).stdout
    return stacks(script), per_call


def main() -> None:
    """Parse the options, pick the data set, profile, print the shares."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="locomo", help="locomo, or a loaded search_latency scenario (100k, 1m)")
    ap.add_argument("--locomo", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data"
                    / "locomo" / "locomo-dev.json", help="LoCoMo file whose conversations are in the default database")
    ap.add_argument("--recipe", default="edge_hybrid_rrf")
    ap.add_argument("--calls", type=int, default=2500)
    ap.add_argument("--frequency", type=int, default=1500, help="perf samples per second")
    args = ap.parse_args()
    server = resolve_dsn()
    if args.scenario == "locomo":
        dsn = server
        queries = asyncio.run(locomo_queries(dsn, args.locomo, 150))
    else:
        sc = Scenario(args.scenario, 1, 1)
        dsn = db_dsn(server, sc.db)
        queries = [(q.group, q.text, q.vector) for q in make_queries(dsn, sc, 150)[0]]
    load = os.getloadavg()[0]
    samples, per_call = asyncio.run(profile(dsn, queries, args.recipe, args.calls, args.frequency))
    shares = collections.Counter(part(s) for s in samples)
    log(f"{args.scenario} {args.recipe}: {len(samples)} samples of the backend over {args.calls} calls "
        f"({per_call:.2f} ms a call, wall) | load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    for name, n in shares.most_common():
        log(f"  {100 * n / len(samples):5.1f}%  {name}")


if __name__ == "__main__":
    main()
