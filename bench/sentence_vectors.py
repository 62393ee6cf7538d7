"""Sentence vectors for the episodes' cosine list (issue 13), measured through the real search:
an episode is ranked by its best sentence ("actor: sentence", blended with the turn before as the
shipped episode vectors are) instead of by one vector of its whole text, which a long chat turn
dilutes ("Yep, Caroline. Taking care of ourselves is vital. I'm off to go swimming with the kids.
Talk to you soon!").

Nothing in pgmemory stores sentence vectors, so this bench builds them in a scratch table and, for
the duration of the run only, re-creates the search function from sql/70_search.sql with the
episodes' cosine list read from that table when it holds rows for the group (the best 4 k
sentences, grouped to their episodes, k episodes); the unpatched file is re-applied at the end.
Everything else (full text, facts, neighbours, fusion, speakers) is the shipped search. Every
non-adversarial question with evidence is searched through `Memory.search` and scored as `python
-m pgmemory.eval.crossval` scores a setting (R@10 of the turns ranked as the harness ranks them);
a variant is chosen by leave-one-conversation-out (`crossval.folds`, ties keep the shipped search).
It also times what the sentence vectors would cost at ingestion: the encode of each turn's own
text against the encode of its sentences, one call per turn as ingestion makes them, same run.

    python -m bench.sentence_vectors ../shared/data/locomo/locomo-dev.json

Variants: `sentences` (only the sentence vectors), `sentences+own` (the sentences and the stored
episode vector: an episode ranks by the best of them), each with the cosine list's RRF weight 0.5
(the recipe's), 0.75 or 1.0, for every question or for list questions only (`is_list_question` of
bench/rerank_directions.py: "What/Which <plural noun> ...", "both", "in common", "how many times";
the others keep the shipped search).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from bench.episode_vectors import pct, unit
from bench.rerank_directions import is_list_question, sentences
from pgmemory.eval.crossval import folds
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import episode_map, group_id, ingest_conversation
from pgmemory.eval.metrics import DEFAULT_KS, mean, recall_at_k
from pgmemory.eval.readers import Conversation
from pgmemory.eval.retrieval import rank_turns
from pgmemory.ingest.embed_episode import PREVIOUS_WEIGHT
from pgmemory.ingest.episode import episode_uuid
from pgmemory.memory import Memory, default_extractor
from pgmemory.search.config import resolve_config
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.migrate import SQL_DIR, split_statements

SEARCH_SQL = SQL_DIR / "70_search.sql"
TABLE = "pgmemory.bench_episode_sentences"
SHIPPED_COSINE = """            epi_cos := ARRAY(
                SELECT ep.id FROM pgmemory.episodes ep
                 WHERE (ep.group_id = one OR one IS NULL AND ep.group_id = ANY (p_groups))
                   AND (known_at IS NULL OR ep.recorded_at <= known_at)
                   AND (as_of IS NULL OR ep.valid_at <= as_of)
                 ORDER BY ep.embedding <=> p_embedding LIMIT k);"""
SENTENCE_COSINE = f"""            IF EXISTS (SELECT FROM {TABLE} sx WHERE sx.group_id = one) THEN
                epi_cos := ARRAY(
                    SELECT sx.episode_id FROM (SELECT x.episode_id, x.embedding <=> p_embedding AS d
                                                 FROM {TABLE} x WHERE x.group_id = one
                                                ORDER BY d LIMIT 4 * k) sx
                     GROUP BY sx.episode_id ORDER BY min(sx.d), sx.episode_id LIMIT k);
            ELSE
{SHIPPED_COSINE}
            END IF;"""
COSINE_WEIGHTS = (0.5, 0.75, 1.0)
CAPTIONS = True  # a photo's caption is a sentence of its own (--captions attached: part of the one before)


async def run_script(conn: asyncpg.Connection, text: str) -> None:
    for statement in split_statements(text):
        await conn.execute(statement)


async def sentence_rows(memory: Memory, conv: Conversation) -> dict[str, list[tuple]]:
    """Variant -> rows (group, episode id, vector) of the scratch table."""
    group = group_id("locomo", conv.conversation_id)
    own = np.array(await memory.embedder.embed([f"{t.speaker}: {t.text}" for t in conv.turns]))
    split = [(i, f"{t.speaker}: {s}") for i, t in enumerate(conv.turns) for s in sentences(t.text, CAPTIONS)]
    plain = np.array(await memory.embedder.embed([s for _, s in split]))
    before = [i - 1 if i and conv.turns[i - 1].session_id == t.session_id else None
              for i, t in enumerate(conv.turns)]

    def blended(i: int, v: np.ndarray) -> np.ndarray:
        return unit(v + (PREVIOUS_WEIGHT * own[before[i]] if before[i] is not None else 0))

    ids = [episode_uuid(group, t.turn_id) for t in conv.turns]
    sent = [(group, ids[i], blended(i, v).astype(np.float32)) for (i, _), v in zip(split, plain)]
    stored = [(group, ids[i], blended(i, own[i]).astype(np.float32)) for i in range(len(ids))]
    return {"sentences": sent, "sentences+own": sent + stored}


async def per_question(memory: Memory, conv: Conversation, config) -> list[tuple[str, bool, float]]:
    """(category, list question?, R@10) of every non-adversarial question with evidence."""
    group = group_id("locomo", conv.conversation_id)
    turn_of = episode_map(group, conv)
    out = []
    for q in conv.questions:
        if q.evidence and not q.adversarial:
            results = await memory.search(q.question, group_ids=[group], limit=max(DEFAULT_KS), config=config)
            out.append((q.category, is_list_question(q.question),
                        recall_at_k(rank_turns(results, turn_of, max(DEFAULT_KS)).ids, q.evidence, 10)))
    return out


def summary(rows: list[tuple[str, bool, float]]) -> dict[str, float | None]:
    out = {"all": mean(r for _, _, r in rows)}
    for cat in sorted({c for c, _, _ in rows}):
        out[cat] = mean(r for c, _, r in rows if c == cat)
    return out


async def encode_cost(memory: Memory, conv: Conversation, turns: int) -> tuple[float, float]:
    """Median ms of one encode call per turn: its own text, then its sentences (no cache)."""
    encode = memory.embedder._encode  # the model itself, past the embedder's cache
    own, split = [], []
    for t in conv.turns[:turns]:
        started = time.perf_counter()
        await encode([f"{t.speaker}: {t.text}"])
        own.append(1000 * (time.perf_counter() - started))
        started = time.perf_counter()
        await encode([f"{t.speaker}: {s}" for s in sentences(t.text, CAPTIONS)])
        split.append(1000 * (time.perf_counter() - started))
    return statistics.median(own), statistics.median(split)


async def main(args: argparse.Namespace) -> None:
    conversations = load_conversations("locomo", Path(args.path))
    shipped = SEARCH_SQL.read_text()
    assert SHIPPED_COSINE in shipped, "sql/70_search.sql changed: update SHIPPED_COSINE"
    per: dict[str, dict[str, list]] = {}
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        admin = await asyncpg.connect(resolve_dsn())
        await register_vector(admin)
        try:
            await admin.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (group_id text, episode_id uuid, embedding vector(384))")
            await admin.execute(f"TRUNCATE {TABLE}")
            await admin.execute(f"GRANT SELECT ON {TABLE} TO PUBLIC")
            await run_script(admin, shipped.replace(SHIPPED_COSINE, SENTENCE_COSINE))
            base_weights = dict(resolve_config(args.recipe).method_weights)
            for conv in conversations:
                await ingest_conversation(memory, "locomo", conv, lambda: None)
                group = group_id("locomo", conv.conversation_id)
                if args.cost_turns:
                    own_ms, split_ms = await encode_cost(memory, conv, args.cost_turns)
                    n_sent = sum(len(sentences(t.text, CAPTIONS)) for t in conv.turns)
                    print(f"load {os.getloadavg()[0]:.1f} {conv.conversation_id}: {len(conv.turns)} turns, {n_sent} "
                          f"sentences ({n_sent / len(conv.turns):.2f} per turn); encode per turn ({args.cost_turns} "
                          f"turns) median: own text {own_ms:.1f} ms, its sentences {split_ms:.1f} ms "
                          f"(x{split_ms / own_ms:.2f})", flush=True)
                variants = {"shipped": [], **await sentence_rows(memory, conv)}
                table = per.setdefault(conv.conversation_id, {})
                for name, rows in variants.items():
                    await admin.execute(f"DELETE FROM {TABLE} WHERE group_id = $1", group)
                    if rows:
                        await admin.executemany(f"INSERT INTO {TABLE} VALUES ($1, $2, $3)", rows)
                    for w in COSINE_WEIGHTS if rows else (base_weights["cosine"],):
                        config = resolve_config(args.recipe, method_weights=tuple({**base_weights, "cosine": w}.items()))
                        table[f"{name} {w}"] = await per_question(memory, conv, config)
                        print(f"load {os.getloadavg()[0]:.1f} {conv.conversation_id} {name} cosine {w}: "
                              + " ".join(f"{k} {pct(x)}" for k, x in summary(table[f'{name} {w}']).items()), flush=True)
                await admin.execute(f"DELETE FROM {TABLE} WHERE group_id = $1", group)
        finally:
            await run_script(admin, shipped)
            await admin.execute(f"DROP TABLE IF EXISTS {TABLE}")
            await admin.close()
    base = f"shipped {dict(resolve_config(args.recipe).method_weights)['cosine']}"
    tables: dict[str, dict[str, dict]] = {}
    for conv, variants in per.items():
        for name, rows in variants.items():
            tables.setdefault(conv, {})[name] = summary(rows)
            if name != base:  # list questions take the variant, the others the shipped search
                mixed = [(c, lst, r if lst else b) for (c, lst, r), (_, _, b) in zip(rows, variants[base])]
                tables[conv][f"list only: {name}"] = summary(mixed)
    cats = ["all", "multi-hop", "single-hop", "temporal", "open-domain"]
    print("\n| variant (cosine weight) | " + " | ".join(f"{c} {x}" for x in cats for c in tables) + " |")
    print("|---|" + "---|" * (len(cats) * len(tables)))
    for name in next(iter(tables.values())):
        print(f"| {name} | " + " | ".join(pct(t[name].get(x)) for x in cats for t in tables.values()) + " |")
    print("\n| held out | chosen on the other | R@10 before -> after | multi-hop before -> after |\n|---|---|---|---|")
    for f in folds(tables, base):
        print(f"| {f['held_out']} | {f['chosen']} | {pct(f['before']['all'])} -> {pct(f['after']['all'])} | "
              f"{pct(f['before'].get('multi-hop'))} -> {pct(f['after'].get('multi-hop'))} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.sentence_vectors", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a LoCoMo file")
    parser.add_argument("--recipe", default="combined_hybrid_rrf")
    parser.add_argument("--cost-turns", type=int, default=200, help="turns timed per conversation (0: none)")
    parser.add_argument("--captions", choices=("apart", "attached"), default="apart",
                        help="a photo's caption: a sentence of its own (default) or part of the sentence before")
    args = parser.parse_args()
    CAPTIONS = args.captions == "apart"
    asyncio.run(main(args))
