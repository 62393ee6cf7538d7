"""Recall of episode-vector recipes (issue 15): the turn before in an episode's vector without a
second text in the encode. The dev conversations are ingested once (or their eval groups reused);
then each recipe's vectors are written over the episodes' stored vectors and the non-adversarial
questions are searched and scored as `python -m pgmemory.eval.crossval` scores them (R@k and
per category). The weight is chosen by leave-one-conversation-out, as crossval does.

    python -m bench.episode_vectors ../shared/data/locomo/locomo-dev.json --weights 0.25,0.5,0.75,1

Recipes: `own` (the episode's own "actor: content", no context), `concat` (the turn before, cut to
400 characters, on the line above the own text: session 5's shipped PREVIOUS_TURNS = 1, a second
text in the encode), `blend w` (normalise(own vector + w x the turn before's own vector): the turn
before's vector is the one its own ingestion computed, so no extra encode), `blend2 w` (also the
turn two before, at w^2), `chain w` (normalise(own + w x the turn before's STORED vector, itself a
blend: a decaying sum of the conversation so far).
"""
from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import numpy as np

from pgmemory.eval.crossval import folds
from pgmemory.eval.ingestion import episode_map, ingest_conversation
from pgmemory.eval.metrics import DEFAULT_KS, mean, recall_at_k
from pgmemory.eval.retrieval import rank_turns
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import group_id
from pgmemory.eval.readers import Conversation
from pgmemory.ingest.episode import episode_uuid
from pgmemory.memory import Memory, default_extractor
from pgmemory.search.config import resolve_config

WINDOW_S = 1800
CONCAT_CHARS = 400


def spoken(speaker: str, text: str) -> str:
    return f"{speaker}: {text}"


def befores(conv: Conversation) -> list[list[int]]:
    """Per turn, the indices of the turns just before it in its session (nearest first)."""
    out = []
    for i, t in enumerate(conv.turns):
        prev = []
        for j in range(i - 1, max(-1, i - 4), -1):
            if (t.time - conv.turns[j].time).total_seconds() > WINDOW_S:
                break
            prev.append(j)
        out.append(prev)
    return out


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


async def recipes(memory: Memory, conv: Conversation, weights: list[float],
                  families: tuple[str, ...]) -> dict[str, list[np.ndarray]]:
    """Recipe name -> one vector per turn."""
    own_texts = [spoken(t.speaker, t.text) for t in conv.turns]
    before = befores(conv)
    concat_texts = [f"{own_texts[b[0]][:CONCAT_CHARS]}\n{own_texts[i]}" if b else own_texts[i]
                    for i, b in enumerate(before)]
    own = [np.array(v) for v in await memory.embedder.embed(own_texts)]
    concat = [np.array(v) for v in await memory.embedder.embed(concat_texts)]
    out = {"own": own, "concat": concat}
    for w in weights:
        if "blend" in families:
            out[f"blend {w}"] = [unit(own[i] + (w * own[b[0]] if b else 0)) for i, b in enumerate(before)]
        if "blend2" in families:
            out[f"blend2 {w}"] = [unit(own[i] + sum(w ** (k + 1) * own[j] for k, j in enumerate(b[:2])))
                                  for i, b in enumerate(before)]
        if "chain" in families:
            chain: list[np.ndarray] = []
            for i, b in enumerate(before):
                chain.append(unit(own[i] + w * chain[b[0]]) if b else own[i])
            out[f"chain {w}"] = chain
    return out


async def write_vectors(memory: Memory, conv: Conversation, vectors: list[np.ndarray]) -> None:
    group = group_id("locomo", conv.conversation_id)
    rows = [(group, episode_uuid(group, t.turn_id), v.astype(np.float32).tolist())
            for t, v in zip(conv.turns, vectors)]
    async with memory.pool.acquire() as conn, conn.transaction():
        await conn.executemany("UPDATE pgmemory.episodes SET embedding = $3 WHERE group_id = $1 AND id = $2", rows)


async def score(memory: Memory, conv: Conversation, config, k: int) -> dict[str, float | None]:
    """Mean recall@k overall ("all") and per category of the non-adversarial questions with
    evidence, turns ranked as the harness ranks them (crossval's scoring, without its ingestion)."""
    group = group_id("locomo", conv.conversation_id)
    turn_of = episode_map(group, conv)
    scores: dict[str, list[float | None]] = {}
    for q in conv.questions:
        if not q.evidence or q.adversarial:
            continue
        results = await memory.search(q.question, group_ids=[group], limit=max(DEFAULT_KS), config=config)
        recall = recall_at_k(rank_turns(results, turn_of, max(DEFAULT_KS)).ids, q.evidence, k)
        scores.setdefault("all", []).append(recall)
        scores.setdefault(q.category, []).append(recall)
    return {name: mean(values) for name, values in sorted(scores.items())}


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


async def main(args: argparse.Namespace) -> None:
    conversations = load_conversations("locomo", Path(args.path))
    tables: dict[str, dict[str, dict]] = {}
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        for conv in conversations:
            await ingest_conversation(memory, "locomo", conv, lambda: None)  # once: scoring never re-ingests
            table = {}
            for name, vectors in (await recipes(memory, conv, args.weights, args.families)).items():
                await write_vectors(memory, conv, vectors)
                table[name] = await score(memory, conv, resolve_config(args.recipe), args.k)
                print(f"load {os.getloadavg()[0]:.1f} {conv.conversation_id} {name}: R@{args.k} "
                      f"{pct(table[name]['all'])} multi-hop {pct(table[name].get('multi-hop'))}", flush=True)
            tables[conv.conversation_id] = table
    names = list(next(iter(tables.values())))
    print(f"\n| recipe | " + " | ".join(tables) + " | " + " | ".join(f"{c} multi-hop" for c in tables) + " |")
    print("|---|" + "---|" * (2 * len(tables)))
    for name in names:
        print(f"| {name} | " + " | ".join(pct(t[name]["all"]) for t in tables.values()) + " | "
              + " | ".join(pct(t[name].get("multi-hop")) for t in tables.values()) + " |")
    for family in args.families:
        sub = {c: {n: s for n, s in t.items() if n.split()[0] == family or n == "concat"} for c, t in tables.items()}
        print(f"\n{family}: weight chosen on the other conversation (ties keep concat)")
        print(f"| held out | chosen | R@{args.k} concat -> chosen | multi-hop concat -> chosen | own R@{args.k} |")
        print("|---|---|---|---|---|")
        for f in folds(sub, "concat"):
            own = tables[f["held_out"]]["own"]
            print(f"| {f['held_out']} | {f['chosen']} | {pct(f['before']['all'])} -> {pct(f['after']['all'])} | "
                  f"{pct(f['before'].get('multi-hop'))} -> {pct(f['after'].get('multi-hop'))} | {pct(own['all'])} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.episode_vectors", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a LoCoMo file")
    parser.add_argument("--weights", type=lambda v: [float(x) for x in v.split(",")], default=[0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--families", type=lambda v: tuple(v.split(",")), default=("blend", "blend2", "chain"),
                        help="blend only, or blend,blend2,chain (default)")
    parser.add_argument("--recipe", default="combined_hybrid_rrf")
    parser.add_argument("--k", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
