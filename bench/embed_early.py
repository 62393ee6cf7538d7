"""The episode's own-text encode started before the raw store (current) against started after the
read of the turns before it (session 5's order), paired per episode in one process (issue 15).

    PGMEMORY_DATA_DIR=/tmp/pgm-embed python -m bench.embed_early --kind chat --turns 150
    PGMEMORY_DATA_DIR=/tmp/pgm-embed python -m bench.embed_early --kind long --turns 40

Both orders ingest the same turns (LoCoMo chat turns, or ~1,100-character turns as in bench.embed)
into two groups of one fresh database, with the local embedder and the offline extractor, turn by
turn alternating which order goes first; per order the wall p50 per episode and the median of the
paired differences (early - late), which a shared machine's drifting load does not bias. The
first 5 turns are warm-up. The 1-minute load average is printed.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from bench.embed import LOCOMO, long_turns
from bench.ingest import create_database, drop_database
from pgmemory import Memory
from pgmemory.eval.readers import read_locomo
from pgmemory.ingest import pipeline
from pgmemory.memory import default_extractor
from pgmemory.providers.embedder import LocalEmbedder
from pgmemory.storage.connect import resolve_dsn

EARLY = pipeline.Ingestor.ingest


async def late(self, ep, *, entity_types=None, edge_types=None):
    """Session 5's order: nothing started before the raw store; the encode starts after the read."""
    return await pipeline.Ingestor._ingest(self, ep, None, entity_types, edge_types)


async def run(args: argparse.Namespace) -> None:
    admin = resolve_dsn()
    db, dsn = create_database(admin, "embed_early")
    try:
        convs = read_locomo(args.locomo)
        turns = ([(t.speaker, t.text) for t in convs[0].turns][: args.turns] if args.kind == "chat"
                 else long_turns(convs[-1], args.turns))
        embedder = LocalEmbedder()
        await embedder.embed(["warm up"])
        load_start = os.getloadavg()[0]
        times: dict[str, list[float]] = {"early": [], "late": []}
        async with await Memory.open(dsn, embedder=embedder, extractor=default_extractor()) as memory:
            groups = {"early": f"early-{uuid.uuid4().hex[:6]}", "late": f"late-{uuid.uuid4().hex[:6]}"}
            base = datetime(2023, 5, 1, tzinfo=timezone.utc).timestamp()
            try:
                for i, (speaker, text) in enumerate(turns):
                    for order in (("early", "late") if i % 2 == 0 else ("late", "early")):
                        pipeline.Ingestor.ingest = EARLY if order == "early" else late
                        started = time.perf_counter()
                        result = await memory.add_episode(groups[order], text, actor=speaker,
                                                          reference_time=datetime.fromtimestamp(base + 60 * i, timezone.utc))
                        times[order].append((time.perf_counter() - started) * 1000)
                        assert result.status == "done"
            finally:
                pipeline.Ingestor.ingest = EARLY
        early, late_ = times["early"][5:], times["late"][5:]
        diff = statistics.median(a - b for a, b in zip(early, late_))
        print(f"{args.kind} turns, n={len(early)}, load {load_start:.1f}-{os.getloadavg()[0]:.1f}: early start p50 "
              f"{statistics.median(early):.1f} ms, after the read p50 {statistics.median(late_):.1f} ms, "
              f"median paired difference {diff:+.1f} ms")
    finally:
        drop_database(admin, db)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m bench.embed_early", description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=("chat", "long"), default="chat")
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    asyncio.run(run(ap.parse_args()))
