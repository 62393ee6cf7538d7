"""What the AGE graph mirror costs ingestion: the same synthetic chat (bench/synthetic.py, offline
extractor, hash embedder) ingested into two fresh databases, one with the mirror on and one with
it off (`init --graph-mirror off`), episode by episode in turn so machine noise hits both.

    PGMEMORY_DATA_DIR=/tmp/pgm-bench-mirror python -m bench.graph_mirror --episodes 300

Prints the DB-side time per episode (EpisodeResult.db_seconds: extraction and embedding
excluded) as median / p95 for each, the ratio and the difference per episode, with the 1-minute
load average before and after.
"""
from __future__ import annotations

import argparse
import asyncio
import os

import psycopg

from bench.ingest import create_database, drop_database
from bench.stats import percentile
from bench.synthetic import generate
from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.setup import init_database

DIM = 384


async def run(episodes: list[dict], dsns: dict[str, str]) -> dict[str, list[float]]:
    """db_seconds (ms) per episode per database, alternating which database goes first."""
    memories = {k: await Memory.open(d, embedder=HashEmbedder(DIM), extractor=RuleExtractor(), pool_size=2)
                for k, d in dsns.items()}
    times: dict[str, list[float]] = {k: [] for k in dsns}
    try:
        names = list(dsns)
        for i, ep in enumerate(episodes):
            for name in (names if i % 2 == 0 else names[::-1]):
                fields = {k: v for k, v in ep.items() if k != "group_id"}
                result = await memories[name].add_episode(ep["group_id"], fields.pop("content"), **fields)
                times[name].append(result.db_seconds * 1000)
    finally:
        for m in memories.values():
            await m.close()
    return times


def main() -> None:
    """CLI."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=300, help="episodes ingested into each database")
    args = ap.parse_args()
    admin = resolve_dsn()
    created = {}
    try:
        for mode, mirror in (("mirror_on", True), ("mirror_off", False)):
            name, dsn = create_database(admin, mode)
            created[mode] = (name, dsn)
            with psycopg.connect(dsn) as conn:
                init_database(conn, DIM, embedder=HashEmbedder(DIM).name, graph_mirror=mirror)
        before = os.getloadavg()[0]
        times = asyncio.run(run(generate(args.episodes), {k: d for k, (_, d) in created.items()}))
        after = os.getloadavg()[0]
        print(f"{args.episodes} episodes into each database; loadavg 1m {before:.2f} -> {after:.2f}")
        stats = {k: (percentile(v, 50), percentile(v, 95)) for k, v in times.items()}
        for k, (p50, p95) in stats.items():
            print(f"  {k:<11} DB time per episode: median {p50:7.2f} ms  p95 {p95:7.2f} ms")
        (on50, on95), (off50, off95) = stats["mirror_on"], stats["mirror_off"]
        print(f"  mirror cost: median +{on50 - off50:.2f} ms/episode ({on50 / off50:.2f}x), "
              f"p95 +{on95 - off95:.2f} ms ({on95 / off95:.2f}x)")
    finally:
        for name, _ in created.values():
            drop_database(admin, name)


if __name__ == "__main__":
    main()
