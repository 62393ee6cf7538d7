"""Deleting episodes: cost of a retract and of an erase vs ingesting one episode, same run.

Ingests N synthetic chat episodes (bench/synthetic.py, one group, offline extractor, hash
embedder) into a FRESH database on the server pgmemory resolves to, then deletes K random
episodes one at a time (retract), then K others with erase=True, timing each call (wall time
of Memory.delete_episode: the re-fold, summaries, and for erase the VACUUM of the text tables).

    python -m bench.delete --episodes 1000 --deletes 50
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from bench.ingest import create_database, drop_database
from bench.stats import summary
from bench.synthetic import generate
from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import resolve_dsn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=1000, help="episodes to ingest (default 1000)")
    p.add_argument("--deletes", type=int, default=50, help="episodes retracted, and as many erased (default 50)")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


async def run(args: argparse.Namespace, dsn: str) -> None:
    memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        episodes = generate(args.episodes, seed=args.seed)
        results = await memory.add_episodes(episodes, concurrency=1)
        ingest_ms = [r.db_seconds * 1000 for r in results if getattr(r, "status", "") == "done"]
        ids = [(r.group_id, r.episode_id) for r in results if getattr(r, "status", "") == "done"]
        chosen = random.Random(args.seed).sample(ids, min(len(ids), 2 * args.deletes))
        timings: dict[str, list[float]] = {"retract": [], "erase": []}
        changed = {"retract": 0, "erase": 0}
        for i, (group, eid) in enumerate(chosen):
            kind = "retract" if i < len(chosen) // 2 else "erase"
            started = time.perf_counter()
            out = await memory.delete_episode(group, eid, erase=kind == "erase")
            timings[kind].append((time.perf_counter() - started) * 1000)
            changed[kind] += out.facts_retracted + out.facts_changed + out.facts_removed
    finally:
        await memory.close()
    base = summary(ingest_ms)
    print(f"ingest DB-side per episode: median {base['median']} ms, p95 {base['p95']} ms ({len(ingest_ms)} episodes)")
    for kind, values in timings.items():
        s = summary(values)
        print(f"{kind:8s} per episode: median {s['median']} ms, p95 {s['p95']} ms ({len(values)} deletes, "
              f"{changed[kind]} facts changed); median x{s['median'] / base['median']:.1f} an ingest")
    print(f"load average (1 min) at end {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    admin = resolve_dsn()
    name, dsn = create_database(admin, "delete")
    try:
        asyncio.run(run(args, dsn))
    finally:
        drop_database(admin, name)


if __name__ == "__main__":
    main()
