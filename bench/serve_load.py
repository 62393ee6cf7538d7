"""A bounded load test of the REST server on loopback: C concurrent clients mixing search (90%)
and add-episode (10%) for S seconds against a synthetic graph of N fact versions in G groups.

Each client holds an API key for one group and only asks for that group; every row of every answer
is checked to belong to it ("cross-key rows", must be 0). Baseline, measured in the same run
before the server starts: the same searches through Memory.search in this process (no HTTP, no
auth), with the same concurrency, so the ratio shows what the server layer costs. The query
embedder is the hash embedder in both (the model's time is not what is measured here).

    PGMEMORY_DATA_DIR=/tmp/pgm-bench-serve python -m bench.serve_load                 # 100k facts, 32 clients, 60 s
    PGMEMORY_DATA_DIR=/tmp/pgm-bench-serve python -m bench.serve_load --facts 10000 --groups 4 --seconds 15
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx

from bench.search_latency import Scenario, db_dsn, db_exists, load_scenario, log
from bench.stats import percentile
from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import connect, resolve_dsn
from pgmemory.surfaces.api_keys import create_key

WORDS = ("works", "lives", "likes", "studied", "member", "club", "city", "company", "school", "hobby")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def queries_for(dsn: str, groups: list[str], n: int, seed: int = 5) -> list[tuple[str, str]]:
    """(group, query text) pairs built from each group's entity names."""
    rnd = random.Random(seed)
    with connect(dsn) as conn:
        rows = conn.execute("SELECT group_id, name FROM pgmemory.entities WHERE group_id = ANY (%s)"
                            " ORDER BY random() LIMIT 20000", (groups,)).fetchall()
    names: dict[str, list[str]] = {}
    for g, name in rows:
        names.setdefault(g, []).append(name)
    out = []
    for _ in range(n):
        g = groups[rnd.randrange(len(groups))]
        out.append((g, f"{rnd.choice(names[g])} {rnd.choice(WORDS)}"))
    return out


def stats(latencies_ms: list[float], seconds: float) -> dict[str, Any]:
    if not latencies_ms:
        return {"n": 0}
    return {"n": len(latencies_ms), "req_per_s": round(len(latencies_ms) / seconds, 1),
            "p50_ms": round(percentile(latencies_ms, 50), 1), "p95_ms": round(percentile(latencies_ms, 95), 1),
            "p99_ms": round(percentile(latencies_ms, 99), 1)}


async def baseline(dsn: str, queries: list[tuple[str, str]], clients: int, seconds: float) -> dict[str, Any]:
    """Memory.search in this process, `clients` concurrent callers, for `seconds`."""
    memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=clients)
    lat: list[float] = []
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        k = i
        while time.monotonic() < stop:
            g, q = queries[k % len(queries)]
            k += clients
            t = time.perf_counter()
            await memory.search(q, group_ids=[g], limit=10)
            lat.append((time.perf_counter() - t) * 1000)
    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    await memory.close()
    return stats(lat, elapsed)


async def through_server(base: str, keys: dict[str, str], queries: list[tuple[str, str]], clients: int,
                         seconds: float, add_share: float) -> dict[str, Any]:
    """`clients` concurrent HTTP clients, each with the key of one group, for `seconds`."""
    lat: dict[str, list[float]] = {"search": [], "add": []}
    errors: Counter[str] = Counter()
    cross = 0
    stop = time.monotonic() + seconds
    groups = sorted(keys)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(i: int, http: httpx.AsyncClient) -> None:
        nonlocal cross
        rnd = random.Random(i)
        group = groups[i % len(groups)]
        mine = [q for g, q in queries if g == group] or [q for _, q in queries]
        headers = {"Authorization": f"Bearer {keys[group]}"}
        n = 0
        while time.monotonic() < stop:
            n += 1
            t = time.perf_counter()
            try:
                if rnd.random() < add_share:
                    r = await http.post(f"{base}/v1/groups/{group}/episodes", headers=headers, json={
                        "content": f"I visited {rnd.choice(mine).split()[0]} today ({i}-{n}).",
                        "actor": f"Client{i}", "reference_time": "2025-01-01T00:00:00Z"})
                    kind, ok = "add", r.status_code == 202
                else:
                    r = await http.post(f"{base}/v1/search", headers=headers,
                                        json={"query": rnd.choice(mine), "group_ids": [group], "limit": 10})
                    kind, ok = "search", r.status_code == 200
                    if ok:
                        body = r.json()
                        cross += sum(1 for k in ("facts", "entities", "communities", "episodes")
                                     for hit in body[k] if hit["group_id"] != group)
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
                continue
            if not ok:
                errors[f"{kind} {r.status_code}"] += 1
                continue
            lat[kind].append((time.perf_counter() - t) * 1000)

    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        started = time.monotonic()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        elapsed = time.monotonic() - started
    total = len(lat["search"]) + len(lat["add"])
    return {"req_per_s": round(total / elapsed, 1), "search": stats(lat["search"], elapsed),
            "add": stats(lat["add"], elapsed), "errors": dict(errors), "error_count": sum(errors.values()),
            "cross_key_rows": cross}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=100_000, help="fact versions in total (default 100000)")
    ap.add_argument("--groups", type=int, default=8, help="groups (one API key each; default 8)")
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    ap.add_argument("--seconds", type=float, default=60.0, help="duration of each phase (default 60)")
    ap.add_argument("--add-share", type=float, default=0.1, help="share of add-episode requests (default 0.1)")
    ap.add_argument("--server-workers", type=int, default=1, help="in-process queue workers of the server")
    ap.add_argument("--reuse", action="store_true", help="reuse the loaded database of a previous run")
    args = ap.parse_args()
    os.environ.setdefault("PGMEMORY_STATEMENT_TIMEOUT", "86400")
    server_dsn = resolve_dsn()
    sc = Scenario(f"serve_{args.groups}x{args.facts // args.groups}", args.groups, args.facts // args.groups)
    log(f"{os.cpu_count()} CPUs; loadavg {os.getloadavg()}")
    if not (args.reuse and db_exists(server_dsn, sc.db)):
        load_scenario(server_dsn, sc)
    dsn = db_dsn(server_dsn, sc.db)
    groups = [sc.group_id(i) for i in range(sc.groups)]
    queries = queries_for(dsn, groups, 2000)
    with connect(dsn) as conn:
        conn.execute("DELETE FROM pgmemory.api_keys")
        conn.commit()

    async def make_keys() -> dict[str, str]:
        memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=2)
        try:
            return {g: (await create_key(memory.pool, f"bench-{g}", read=[], write=[g]))[1] for g in groups}
        finally:
            await memory.close()
    keys = asyncio.run(make_keys())

    log(f"baseline: Memory.search in-process, {args.clients} concurrent, {args.seconds:g} s; "
        f"loadavg {os.getloadavg()[0]:.2f}")
    base = asyncio.run(baseline(dsn, queries, args.clients, args.seconds))
    log(f"  {json.dumps(base)}")

    port = free_port()
    env = {**os.environ, "PGMEMORY_DSN": dsn, "PGMEMORY_EMBEDDER": "hash"}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    server = subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", "serve", "--port", str(port),
                               "--workers", str(args.server_workers)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        log(f"server: {args.clients} clients, {1 - args.add_share:.0%} search / {args.add_share:.0%} add, "
            f"{args.seconds:g} s; loadavg {os.getloadavg()[0]:.2f}")
        served = asyncio.run(through_server(url, keys, queries, args.clients, args.seconds, args.add_share))
        log(f"  {json.dumps(served)}; loadavg {os.getloadavg()[0]:.2f}")
    finally:
        server.terminate()
        server.wait(timeout=60)
    ratio = served["search"].get("p50_ms", 0) / base["p50_ms"] if base.get("p50_ms") else float("nan")
    print(f"\nSUMMARY ({sc.facts} fact versions in {sc.groups} groups, {args.clients} clients, {args.seconds:g} s, "
          f"loadavg {os.getloadavg()[0]:.2f}):")
    print(f"  baseline Memory.search:  {base.get('req_per_s')} req/s, p50 {base.get('p50_ms')} ms, "
          f"p95 {base.get('p95_ms')} ms, p99 {base.get('p99_ms')} ms")
    print(f"  REST (search+add):       {served['req_per_s']} req/s; search p50 {served['search'].get('p50_ms')} ms, "
          f"p95 {served['search'].get('p95_ms')} ms, p99 {served['search'].get('p99_ms')} ms; add p50 "
          f"{served['add'].get('p50_ms')} ms, p95 {served['add'].get('p95_ms')} ms, p99 {served['add'].get('p99_ms')} ms")
    print(f"  errors {served['error_count']} {served['errors']}, cross-key rows {served['cross_key_rows']}, "
          f"search p50 REST / in-process {ratio:.2f}x")


if __name__ == "__main__":
    main()
