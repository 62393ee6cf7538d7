"""Does the default recipe gain from communities? LoCoMo dev recall with and without them.

Run after `pgmemory eval locomo FILE` on the same database (it ingests each conversation into
group eval-locomo-<id> and, since issue 12, builds its communities). For every question, the
default recipe (combined_hybrid_rrf: facts, entities, communities, episodes) and the same recipe
without the communities kind are searched, one at a time, alternating which goes first; the
ranked turns are formed as the eval does (pgmemory/eval/retrieval.py) and recall@5/10/20 is
reported overall and for multi-hop questions, with the search latency median of each.

    PGMEMORY_DATA_DIR=/tmp/pgm-eval python -m bench.communities_locomo ../shared/data/locomo/locomo-dev.json
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

from pgmemory import Memory
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import episode_map, group_id
from pgmemory.eval.metrics import recall_at_k
from pgmemory.eval.retrieval import rank_turns
from pgmemory.search.config import RECIPES

KS = (5, 10, 20)


async def run(path: Path) -> None:
    with_communities = RECIPES["combined_hybrid_rrf"]
    without = replace(with_communities, kinds=tuple(k for k in with_communities.kinds if k != "communities"))
    configs = {"with communities": with_communities, "without": without}
    recalls: dict[str, dict[str, dict[int, list[float]]]] = {n: {"overall": {k: [] for k in KS},
                                                                "multi-hop": {k: [] for k in KS}} for n in configs}
    latency: dict[str, list[float]] = {n: [] for n in configs}
    found = {n: 0 for n in configs}
    async with await Memory.open() as memory:
        for conv in load_conversations("locomo", path):
            group = group_id("locomo", conv.conversation_id)
            turns = episode_map(group, conv)
            count = await memory.pool.fetchval("SELECT count(*) FROM pgmemory.communities"
                                               " WHERE group_id = $1 AND ended_at IS NULL", group)
            print(f"{conv.conversation_id}: {count} current communities")
            for i, q in enumerate(conv.questions):
                order = list(configs) if i % 2 == 0 else list(reversed(configs))
                for name in order:
                    started = time.perf_counter()
                    results = await memory.search(q.question, group_ids=[group], limit=max(KS), config=configs[name])
                    latency[name].append((time.perf_counter() - started) * 1000)
                    found[name] += bool(results.communities)
                    ranked = rank_turns(results, turns, max(KS)).ids
                    for k in KS:
                        r = recall_at_k(ranked, q.evidence, k)
                        if r is not None:
                            recalls[name]["overall"][k].append(r)
                            if q.category == "multi-hop":
                                recalls[name]["multi-hop"][k].append(r)
    for name in configs:
        parts = [f"{scope} " + ", ".join(f"R@{k} {100 * statistics.fmean(v[k]):.1f}" for k in KS)
                 + f" (n={len(v[KS[0]])})" for scope, v in recalls[name].items()]
        print(f"{name:17s} {'; '.join(parts)}; search p50 {statistics.median(latency[name]):.1f} ms; "
              f"questions with a community hit {found[name]}")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="the LoCoMo JSON file the eval ingested")
    asyncio.run(run(p.parse_args(argv).path))


if __name__ == "__main__":
    main()
