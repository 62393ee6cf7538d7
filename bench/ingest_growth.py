"""Growth of the DB-side cost per episode from a small graph to a large one, measured side by side.

bench.ingest compares its first and last buckets, ingested minutes apart: on a shared machine the
load moves in between, and the same code measured x0.96 to x1.33 in three quiet runs. Here two
fresh databases are loaded with the same synthetic conversation (bench/synthetic.py, one group,
offline extractor, hash embedder), one to --small episodes and one to --large; then each takes its
own next --probe episodes, one at a time and alternately (small, large, large, small, ...), so a
change of load hits both alike (both vacuumed and checkpointed first). Reported per round and in all: the median and p95 of
EpisodeResult.db_seconds on each, their ratio (large / small: 1.0 is flat), the same with the raw
episode's INSERT (EpisodeResult.store_seconds: it runs in its own transaction before extraction,
outside db_seconds), and shared-buffer gets per probe episode on each (a count of work that does
not follow the load).

With --same-probes both sides take the same probe episodes (the large side's next ones): what the
episodes say is then the same, and only the graph they land on differs (a control for the mix of
work the story's later episodes bring, such as more statements that extend an existing fact).

    python -m bench.ingest_growth --small 1000 --large 10000 --probe 600 --rounds 3 [--same-probes]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from typing import Any

import psycopg

from bench.ingest import create_database, drop_database, machine, work_counters
from bench.stats import summary
from bench.synthetic import generate
from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.ingest.pipeline import EpisodeResult
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import resolve_dsn


async def load(memory: Memory, episodes: list[dict[str, Any]], label: str) -> None:
    """Ingest the episodes that build one side's graph, with a progress line per 1,000."""
    started = time.perf_counter()
    for at in range(0, len(episodes), 1000):
        await memory.add_episodes(episodes[at:at + 1000])
        print(f"   {label}: {at + len(episodes[at:at + 1000])} episodes loaded"
              f" ({time.perf_counter() - started:.0f} s)", flush=True)


async def counted_gets(memory: Memory) -> int:
    """Shared-buffer gets of the side's database so far, with every pooled backend's pending counts
    reported first (an idle backend reports them only some seconds later)."""
    async with contextlib.AsyncExitStack() as stack:
        conns = [await stack.enter_async_context(memory.pool.acquire()) for _ in range(memory.pool.get_max_size())]
        for conn in conns:
            await conn.execute("SELECT pg_stat_force_next_flush()")
    await asyncio.sleep(0.3)
    return (await work_counters(memory))[1]


async def function_times(memory: Memory) -> dict[str, tuple[int, float]]:
    """(calls, self ms) of every tracked stored function of the side's database so far."""
    await counted_gets(memory)  # (reports the pooled backends' pending counts)
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch("SELECT schemaname || '.' || funcname AS f, sum(calls) AS c, sum(self_time) AS s"
                                " FROM pg_stat_user_functions GROUP BY 1")
    return {r["f"]: (int(r["c"]), float(r["s"])) for r in rows}


async def one(memory: Memory, episode: dict[str, Any]) -> tuple[float, float]:
    """DB-side ms of one probe episode, without and with its raw INSERT."""
    [result] = await memory.add_episodes([episode])
    if not isinstance(result, EpisodeResult):
        raise RuntimeError(f"probe episode failed: {result}")
    return result.db_seconds * 1000, (result.db_seconds + result.store_seconds) * 1000


async def main_async(args: argparse.Namespace) -> None:
    """Load both sides, then probe them alternately and print the growth."""
    admin = await asyncio.to_thread(resolve_dsn)
    info = machine(admin)
    print(f"machine: nproc {info['nproc']}, {info['cpu']}; pgmemory {info['commit']}; load average (1 min) "
          f"{info['loadavg_1m_at_start']}", flush=True)
    episodes = generate(args.large + args.probe, seed=args.seed)
    sides = {"small": (args.small, None), "large": (args.large, None)}
    names, memories = {}, {}
    try:
        for side, (size, _) in sides.items():
            names[side], dsn = create_database(admin, f"growth_{side}")
            if args.functions:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(psycopg.sql.SQL("ALTER DATABASE {} SET track_functions = 'all'").format(
                        psycopg.sql.Identifier(names[side])))
            memories[side] = await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=2)
            await load(memories[side], episodes[:size], f"{side} ({size})")
            if args.drop_hnsw:
                async with memories[side].pool.acquire() as conn:
                    await conn.execute("DROP INDEX pgmemory.episodes_embedding_hnsw, pgmemory.facts_embedding_hnsw")
        # Settled before probing: the large side's autovacuum would otherwise run beside round 1.
        for side in memories:
            async with memories[side].pool.acquire() as conn:
                await conn.execute("VACUUM ANALYZE")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        funcs = {side: await function_times(memories[side]) for side in memories}
        per_round = -(-args.probe // args.rounds)
        rows = []
        all_ms: dict[str, list[float]] = {"small": [], "large": []}
        all_gets = {"small": 0, "large": 0}
        with_store: dict[str, list[float]] = {"small": [], "large": []}
        for r in range(args.rounds):
            ms: dict[str, list[float]] = {"small": [], "large": []}
            gets = {side: -(await counted_gets(memories[side])) for side in ms}
            for i in range(r * per_round, min(args.probe, (r + 1) * per_round)):
                order = ("small", "large") if i % 2 == 0 else ("large", "small")
                for side in order:
                    size = args.small if side == "small" and not args.same_probes else args.large
                    db_ms, stored_ms = await one(memories[side], episodes[size + i])
                    ms[side].append(db_ms)
                    with_store[side].append(stored_ms)
            for side in ms:
                gets[side] += await counted_gets(memories[side])
                all_ms[side] += ms[side]
                all_gets[side] += gets[side]
            n = len(ms["small"])
            row = {side: summary(ms[side]) for side in ms}
            rows.append(row)
            print(f"   round {r + 1}: {n} probes each | median small {row['small']['median']:.2f} ms, large "
                  f"{row['large']['median']:.2f} ms (x{row['large']['median'] / row['small']['median']:.2f}) | "
                  f"p95 {row['small']['p95']:.2f} -> {row['large']['p95']:.2f} | buffer gets/ep "
                  f"{gets['small'] / n:.0f} -> {gets['large'] / n:.0f} (x{gets['large'] / max(gets['small'], 1):.2f})"
                  f" | load {os.getloadavg()[0]:.2f}", flush=True)
        total = {side: summary(all_ms[side]) for side in all_ms}
        ratios = [row["large"]["median"] / row["small"]["median"] for row in rows]
        print(f"-- at {args.small} vs {args.large} episodes, {len(all_ms['small'])} alternate probes each:")
        print(f"   DB-side median {total['small']['median']:.2f} -> {total['large']['median']:.2f} ms "
              f"(x{total['large']['median'] / total['small']['median']:.2f}; rounds "
              f"{', '.join(f'x{x:.2f}' for x in ratios)}, median x{statistics.median(ratios):.2f})")
        print(f"   p95 {total['small']['p95']:.2f} -> {total['large']['p95']:.2f} ms; mean "
              f"{total['small']['mean']:.2f} -> {total['large']['mean']:.2f} ms")
        stored = {side: summary(with_store[side]) for side in with_store}
        print(f"   with the raw episode INSERT (EpisodeResult.store_seconds, its own transaction): median "
              f"{stored['small']['median']:.2f} -> {stored['large']['median']:.2f} ms "
              f"(x{stored['large']['median'] / stored['small']['median']:.2f}), mean "
              f"{stored['small']['mean']:.2f} -> {stored['large']['mean']:.2f} ms")
        print(f"   buffer gets per episode {all_gets['small'] / len(all_ms['small']):.0f} -> "
              f"{all_gets['large'] / len(all_ms['large']):.0f} "
              f"(x{all_gets['large'] / max(all_gets['small'], 1):.2f})")
        if args.functions:
            n = len(all_ms["small"])
            after = {side: await function_times(memories[side]) for side in memories}
            delta = {side: {f: (after[side][f][0] - funcs[side].get(f, (0, 0))[0],
                                after[side][f][1] - funcs[side].get(f, (0, 0))[1]) for f in after[side]}
                     for side in after}
            print("   stored functions, self ms per probe episode (calls per episode), small -> large:")
            for f in sorted(delta["large"], key=lambda f: -delta["large"][f][1])[:args.functions]:
                small = delta["small"].get(f, (0, 0.0))
                large = delta["large"][f]
                print(f"   {small[1] / n:7.3f} ({small[0] / n:4.2f}) -> {large[1] / n:7.3f} ({large[0] / n:4.2f})  {f}")
    finally:
        for memory in memories.values():
            await memory.close()
        if not args.keep:
            for name in names.values():
                drop_database(admin, name)


def main(argv: list[str] | None = None) -> None:
    """python -m bench.ingest_growth [--small N] [--large N] [--probe N] [--rounds R] [--keep]."""
    p = argparse.ArgumentParser(description="DB-side cost per episode at a small and a large graph, side by side")
    p.add_argument("--small", type=int, default=1000, help="episodes loaded into the small side (default 1000)")
    p.add_argument("--large", type=int, default=10000, help="episodes loaded into the large side (default 10000)")
    p.add_argument("--probe", type=int, default=600, help="probe episodes per side (default 600)")
    p.add_argument("--rounds", type=int, default=3, help="rounds the probes are reported in (default 3)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep both databases")
    p.add_argument("--functions", type=int, default=0, metavar="K",
                   help="track stored functions and list the K with the most self time on the large side")
    p.add_argument("--drop-hnsw", action="store_true",
                   help="diagnostic: drop the episodes' and facts' HNSW indexes after loading (what grows besides them)")
    p.add_argument("--same-probes", action="store_true",
                   help="both sides take the same probe episodes (the large side's next): only the graph differs")
    args = p.parse_args(argv)
    if not 0 < args.small < args.large or args.probe < args.rounds or args.rounds < 1:
        p.error("need 0 < --small < --large and --probe >= --rounds >= 1")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
