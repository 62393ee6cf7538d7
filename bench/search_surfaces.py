"""What a search costs through each surface, on a database `bench.search_latency` built and kept
(`--keep`): per query, interleaved, the default recipe's `Memory.search`, `Memory.context` (only the
kinds it shows are searched), the context as it was built before (the search of every kind of the
recipe, rendered; its text must be the same), `POST /v1/search` through the REST app in process
(ASGI, no socket, no API key) and the JSON of a search's results (`results_json`). Embedding
excluded (precomputed vectors).

    PGMEMORY_DATA_DIR=... python -m bench.search_surfaces --scenario 10k --queries 200
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from pgmemory import Memory
from pgmemory.config import Settings
from pgmemory.extract.rules import RuleExtractor
from pgmemory.search.context import build_context
from pgmemory.storage.connect import resolve_dsn
from pgmemory.surfaces.wire import results_json

from bench.search_latency import DIM, PrecomputedEmbedder, Scenario, db_dsn, db_exists, make_queries


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):7.2f} / {ordered[int(0.95 * (len(ordered) - 1))]:7.2f}"


async def measure(dsn: str, scenario: Scenario, n: int, episodes: bool, warmup: int = 20) -> None:
    import httpx

    from pgmemory.surfaces.rest import create_app

    queries, _ = make_queries(dsn, scenario, n + warmup)
    embedder = PrecomputedEmbedder(DIM)
    memory = await Memory.open(dsn, embedder=embedder, extractor=RuleExtractor(), pool_size=2)
    app = create_app(memory, worker_concurrency=0, auth=False)
    times: dict[str, list[float]] = {"search": [], "context": [], "context before": [], "REST /v1/search": [],
                                     "results_json": []}
    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://bench") as http:
            for i, q in enumerate(queries):
                embedder.current = q.vector
                took, texts = {}, {}
                order = ["search", "context", "context before", "REST /v1/search"]
                for name in order[i % 4:] + order[:i % 4]:  # each goes first a quarter of the time
                    started = time.perf_counter()
                    if name == "search":
                        results = await memory.search(q.text, group_ids=[q.group])
                        searched = time.perf_counter()
                        results_json(results)
                        took["results_json"] = (time.perf_counter() - searched) * 1000
                        took[name] = (searched - started) * 1000
                        continue
                    if name == "context":
                        texts[name] = await memory.context(q.text, group_ids=[q.group], episodes=episodes)
                    elif name == "context before":
                        texts[name] = build_context(await memory.search(q.text, group_ids=[q.group]),
                                                    episodes=episodes)
                    else:
                        r = await http.post("/v1/search", json={"query": q.text, "group_ids": [q.group]})
                        r.raise_for_status()
                    took[name] = (time.perf_counter() - started) * 1000
                if texts["context"] != texts["context before"]:
                    raise SystemExit(f"different context for {q.text!r}")
                if i >= warmup:
                    for name, ms in took.items():
                        times[name].append(ms)
    finally:
        await memory.close()
    print(f"{scenario.name}, default recipe, {n} queries, context episodes={episodes}: p50 / p95 ms "
          "(the two contexts: the same text)")
    for name, values in times.items():
        print(f"  {name:16s} {_ms(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="10k", help="a kept bench.search_latency one-group scenario: 10k, 100k, ...")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--episodes", action="store_true", help="contexts with the raw episodes shown")
    args = parser.parse_args()
    facts = int(args.scenario.lower().replace("k", "000").replace("m", "000000"))
    scenario = Scenario(args.scenario, 1, facts)
    server = resolve_dsn(Settings.from_env())
    if not db_exists(server, scenario.db):
        raise SystemExit(f"no database {scenario.db}: run bench.search_latency --sizes {facts} --keep first")
    asyncio.run(measure(db_dsn(server, scenario.db), scenario, args.queries, args.episodes))


if __name__ == "__main__":
    main()
