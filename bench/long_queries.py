"""Search latency of long queries (an agent pasting a document as its query), before and after the
bound on full-text query lexemes, in the same run.

Each size's database (bench_longq_<episodes>, the synthetic chat of bench/synthetic.py ingested
offline with the hash embedder; kept and reused) is searched with queries of W distinct words (the
text of consecutive episodes, from a random one on, with words of an English list when the chat's
own run short; at most MAX_QUERY_CHARS), and with ordinary short questions. Each query runs
through Memory.search (default recipe; with --as-of also as of a time) once per value of --bounds
(pgmemory.text_max_lexemes on the pool's connections; 0 = no bound, what searches did before it),
interleaved, the order alternating; prints median and p95 per (size, words, bound), the ratios to
the first bound, how often the episode the text starts with is among the 10 episodes found, and
how many queries found the same results (ids and scores of every kind) with every bound.

    PGMEMORY_DATA_DIR=/tmp/pgm-longq python -m bench.long_queries --sizes 1000,10000 --words 50,200,600 \
        --bounds 0,16,32,64 --as-of
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench import search_vocab as V
from bench.search_latency import db_dsn, log, pct
from bench.synthetic import generate
from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.search.config import MAX_QUERY_CHARS, SearchFilters
from pgmemory.storage.connect import resolve_dsn

GROUP = "bench"
# Ordinary questions of the synthetic chat's kind (a few lexemes each).
SHORT = ("where does Maya work now", "when did Omar move to Lisbon", "what is Priya's favourite food",
         "who is Tomas married to", "what does Omar like to do on weekends", "did Maya visit Tokyo")


def database(server: str, episodes: int) -> str:
    """The DSN of bench_longq_<episodes>, created and filled with the synthetic chat when missing."""
    name = f"bench_longq_{episodes}"
    with psycopg.connect(server, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    dsn = db_dsn(server, name)
    if exists:
        with psycopg.connect(dsn) as conn:
            held = conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = %s", (GROUP,)).fetchone()[0]
        if held == episodes:
            return dsn
    asyncio.run(load(dsn, episodes))
    return dsn


async def load(dsn: str, episodes: int) -> None:
    """Ingest the synthetic chat offline (episodes are keyed: a load cut short resumes)."""
    started = time.perf_counter()
    async with Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=3) as memory:
        await memory.add_episodes(generate(episodes, group_id=GROUP), concurrency=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    log(f"loaded {episodes} episodes in {time.perf_counter() - started:.0f} s")


def filler() -> list[str]:
    """Words of the search benchmark's lists (names, cities, hobbies, ...), one each, in a fixed order."""
    words: dict[str, None] = {}
    for name in ("HOBBIES", "CITIES", "FIRST", "LAST", "COMPANY_HEAD", "COMPANY_TAIL", "SCHOOLS", "CLUBS", "ROLES",
                 "FIELDS", "PLACES", "MONTHS"):
        for item in getattr(V, name):
            for w in re.findall(r"[A-Za-z]+", item):
                words.setdefault(w.lower(), None)
    return list(words)


def long_query(contents: list[str], start: int, words: int, extra: list[str]) -> str:
    """A pasted document of `words` distinct words: the episode at `start` and those after it, word
    by word, then words of `extra` (the chat's vocabulary is small), at most MAX_QUERY_CHARS long."""
    out: list[str] = []
    seen: set[str] = set()
    pool = (w for i in range(start, start + len(contents)) for w in contents[i % len(contents)].split())
    for w in itertools.chain(pool, extra):
        key = re.sub(r"\W+", "", w.lower())
        if len(" ".join(out + [w])) > MAX_QUERY_CHARS:
            break
        if key in seen and len(out) >= len(contents[start].split()):
            continue  # past the copied episode, each word once (the document's repeats add no lexeme)
        out.append(w)
        seen.add(key)
        if len(seen) >= words:
            break
    return " ".join(out)


async def open_with_bound(dsn: str, bound: int) -> Memory:
    """A Memory whose connections search with pgmemory.text_max_lexemes = bound (0: no bound)."""
    async def setting(conn) -> None:
        await conn.execute("SELECT set_config('pgmemory.text_max_lexemes', $1, false)", str(bound))
    return await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=2, on_acquire=setting)


async def measure(dsn: str, size: int, words: list[int], queries: int, bounds: list[int], as_of: bool,
                  seed: int) -> None:
    """Time Memory.search with each bound, interleaved query by query, and print the figures."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, content FROM pgmemory.episodes WHERE group_id = %s ORDER BY valid_at, seq",
                            (GROUP,)).fetchall()
        ids, contents = [r[0] for r in rows], [r[1] for r in rows]
        rng, extra = random.Random(seed), filler()
        asked: list[tuple[str, str, Any]] = [("short", q, None) for q in SHORT * max(1, queries // len(SHORT))]
        for w in words:
            for _ in range(queries):
                start = rng.randrange(len(contents))
                asked.append((f"{w} words", long_query(contents, start, w, extra), ids[start]))
        lexemes = {text: conn.execute(
            "SELECT cardinality(tsvector_to_array(to_tsvector('english', %s))),"
            "       (SELECT count(*) FROM pgmemory.term_stats t WHERE t.group_id = %s AND t.kind = 'episodes'"
            "           AND t.term = ANY (tsvector_to_array(to_tsvector('english', %s))))",
            (text, GROUP, text)).fetchone() for _, text, _ in asked}
    memories = [await open_with_bound(dsn, b) for b in bounds]
    filters = [None] + ([SearchFilters(as_of=datetime(2100, 1, 1, tzinfo=UTC))] if as_of else [])
    times: dict[tuple[str, int, int], list[float]] = {}
    in_top: dict[tuple[str, int, int], int] = {}
    same: dict[tuple[str, int], list[bool]] = {}
    try:
        for m in memories:  # warm-up, untimed
            for _, text, _ in asked[:3]:
                await m.search(text, group_ids=[GROUP])
        load = os.getloadavg()[0]
        for n, (label, text, source) in enumerate(asked):
            for f, flt in enumerate(filters):
                order = list(range(len(bounds)))
                if n % 2:
                    order.reverse()
                found = {}
                for i in order:
                    started = time.perf_counter()
                    found[i] = await memories[i].search(text, group_ids=[GROUP], filters=flt)
                    times.setdefault((label, f, i), []).append((time.perf_counter() - started) * 1000)
                    if source is not None and source in [h.id for h in found[i].episodes]:
                        in_top[(label, f, i)] = in_top.get((label, f, i), 0) + 1
                same.setdefault((label, f), []).append(all(
                    [(h.id, h.score) for h in found[i].episodes + found[i].facts + found[i].entities]
                    == [(h.id, h.score) for h in found[0].episodes + found[0].facts + found[0].entities]
                    for i in found))
    finally:
        for m in memories:
            await m.close()
    log(f"{size} episodes | load 1m {load:.2f} -> {os.getloadavg()[0]:.2f} | Memory.search, default recipe, "
        f"hash embedder | bounds {bounds} (pgmemory.text_max_lexemes; the first is the baseline)")
    labels = list(dict.fromkeys(label for label, _, _ in asked))
    for label in labels:
        texts = [t for lb, t, _ in asked if lb == label]
        lex = [lexemes[t] for t in texts]
        for f, flt in enumerate(filters):
            base = pct(times[(label, f, 0)])
            n = len(texts)
            head = (f"  {label:>9}{' as of' if flt else '':6} n={n:<3} lexemes {statistics.median(x[0] for x in lex):>4.0f} "
                    f"(known {statistics.median(x[1] for x in lex):>3.0f}) chars {statistics.median(len(t) for t in texts):>5.0f}")
            cells = []
            for i, b in enumerate(bounds):
                p = pct(times[(label, f, i)])
                cells.append(f"bound {b}: p50 {p['p50']:8.2f} p95 {p['p95']:8.2f} ms"
                             + ("" if i == 0 else f" (x{p['p50'] / base['p50']:.3f} / x{p['p95'] / base['p95']:.3f})")
                             + ("" if label == "short" else f" copied turn in top 10 {in_top.get((label, f, i), 0)}/{n}"))
            identical = sum(same[(label, f)])
            print(head + " | " + " | ".join(cells) + f" | results identical {identical}/{n}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="episodes per database, comma-separated")
    ap.add_argument("--words", default="50,200,600", help="distinct words of the long queries, comma-separated")
    ap.add_argument("--queries", type=int, default=20, help="long queries per word count (and short ones)")
    ap.add_argument("--bounds", default="0,32", help="pgmemory.text_max_lexemes values; the first is the baseline")
    ap.add_argument("--as-of", action="store_true", help="also search as of a time (the as-of entity full text)")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    server = resolve_dsn()
    for size in (int(s) for s in args.sizes.split(",")):
        dsn = database(server, size)
        asyncio.run(measure(dsn, size, [int(w) for w in args.words.split(",")], args.queries,
                            [int(b) for b in args.bounds.split(",")], args.as_of, args.seed))


if __name__ == "__main__":
    main()
