"""Search latency of one SearchConfig setting's values, as a user sees it, in the same run.

The LoCoMo questions of a benchmark file (its conversations ingested as `pgmemory eval` does,
groups reused) are searched one at a time with each value of the field, interleaved question by
question (the order of the values alternating), with the query embedding, through
Memory.search; prints p50/p95 per value, the ratio to the first value and the 1-minute load
average. Recall is `python -m pgmemory.eval.crossval`'s business, not this script's.

    PGMEMORY_DATA_DIR=/tmp/pgm-eval python -m bench.search_setting ../shared/data/locomo/locomo-dev.json \
        --field prf_weight --values 0,0.5 --rounds 2

`--list-questions` times only the questions that name a category of several things
(pgmemory.search.categories.category: the ones `members_weight` changes).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from bench.search_latency import log, pct
from pgmemory.eval.crossval import _parse_values
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import group_id, ingest_conversation
from pgmemory.memory import Memory, default_extractor
from pgmemory.search.categories import category
from pgmemory.search.config import resolve_config


async def run(path: Path, recipe: str, field: str, values: list, rounds: int,
              list_questions: bool = False) -> dict[str, dict[str, float]]:
    """value -> latency percentiles (ms) over every question (or the list questions), `rounds` times each."""
    conversations = load_conversations("locomo", path, ())
    configs = [resolve_config(recipe, **{field: v}) for v in values]
    times: dict[int, list[float]] = {i: [] for i in range(len(values))}
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        asked = []
        for c in conversations:
            await ingest_conversation(memory, "locomo", c, lambda: None)
            asked += [(group_id("locomo", c.conversation_id), q.question) for q in c.questions
                      if not list_questions or category(q.question)]
        await memory.search(asked[0][1], group_ids=[asked[0][0]], config=configs[0])  # warm-up, untimed
        load = os.getloadavg()[0]
        for r in range(rounds):
            for n, (group, question) in enumerate(asked):
                order = list(range(len(values)))
                if (n + r) % 2:
                    order.reverse()
                for i in order:
                    started = time.perf_counter()
                    await memory.search(question, group_ids=[group], limit=20, config=configs[i])
                    times[i].append((time.perf_counter() - started) * 1000)
    out = {str(values[i]): pct(t) for i, t in times.items()}
    base = out[str(values[0])]
    for value, p in out.items():
        log(f"{field}={value:<6} n={p['n']} p50 {p['p50']:7.2f} ms ({p['p50'] / base['p50']:.2f}x) "
            f"p95 {p['p95']:7.2f} ms ({p['p95'] / base['p95']:.2f}x) | load 1m {load:.2f} -> {os.getloadavg()[0]:.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="a LoCoMo file")
    ap.add_argument("--recipe", default="combined_hybrid_rrf")
    ap.add_argument("--field", required=True, help="a numeric SearchConfig field")
    ap.add_argument("--values", required=True, help="comma-separated values; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=1, help="passes over all questions")
    ap.add_argument("--list-questions", action="store_true", help="only the questions naming a category")
    args = ap.parse_args()
    asyncio.run(run(args.path, args.recipe, args.field, _parse_values(args.field, args.values), args.rounds,
                    args.list_questions))


if __name__ == "__main__":
    main()
