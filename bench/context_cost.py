"""What a `Memory.context` call costs next to a search, on a database `bench.search_latency` built
and kept (`--keep`): per query, interleaved, the default recipe's `Memory.search`, `Memory.context`
(only the kinds it shows are searched) and the context as it was built before (the search of every
kind of the recipe, rendered), whose text must be the same. Embedding excluded (precomputed vectors).

    PGMEMORY_DATA_DIR=... python -m bench.context_cost --scenario 10k --queries 200
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

from bench.search_latency import DIM, PrecomputedEmbedder, Scenario, db_dsn, db_exists, make_queries


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):7.2f} / {ordered[int(0.95 * (len(ordered) - 1))]:7.2f}"


async def measure(dsn: str, scenario: Scenario, n: int, episodes: bool, warmup: int = 20) -> None:
    queries, _ = make_queries(dsn, scenario, n + warmup)
    embedder = PrecomputedEmbedder(DIM)
    memory = await Memory.open(dsn, embedder=embedder, extractor=RuleExtractor(), pool_size=2)
    times: dict[str, list[float]] = {"search": [], "context": [], "context before": []}
    try:
        for i, q in enumerate(queries):
            embedder.current = q.vector
            took, texts = {}, {}
            order = ["search", "context", "context before"]
            for name in order[i % 3:] + order[:i % 3]:  # each goes first a third of the time
                started = time.perf_counter()
                if name == "search":
                    await memory.search(q.text, group_ids=[q.group])
                elif name == "context":
                    texts[name] = await memory.context(q.text, group_ids=[q.group], episodes=episodes)
                else:
                    results = await memory.search(q.text, group_ids=[q.group])
                    texts[name] = build_context(results, episodes=episodes)
                took[name] = (time.perf_counter() - started) * 1000
            if texts["context"] != texts["context before"]:
                raise SystemExit(f"different context for {q.text!r}")
            if i >= warmup:
                for name, ms in took.items():
                    times[name].append(ms)
    finally:
        await memory.close()
    print(f"{scenario.name}, default recipe, {n} queries, episodes={episodes}: p50 / p95 ms (same text: yes)")
    for name, values in times.items():
        print(f"  {name:15s} {_ms(values)}")


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
