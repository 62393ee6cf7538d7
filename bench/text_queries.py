"""The data sets the full-text benchmarks (fulltext_kinds, fulltext_paths) measure, with their
shared options: the LoCoMo questions of the default database (as `search_latency --locomo` left
it) and the one-group `search_latency` scenarios named by --scenarios, where loaded; each
database brought to the current schema and stored SQL first."""
from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from pathlib import Path

from bench.search_data import DIM
from bench.search_latency import Scenario, db_dsn, db_exists, make_queries
from pgmemory.eval.ingestion import group_id as eval_group
from pgmemory.eval.readers import read_locomo
from pgmemory.storage.connect import connect, resolve_dsn
from pgmemory.storage.setup import ensure_current, pgmemory_setting


def add_options(ap: argparse.ArgumentParser) -> None:
    """--locomo, --scenarios, --queries, --warmup."""
    ap.add_argument("--locomo", type=Path, help="LoCoMo file whose conversations are loaded in the default database")
    ap.add_argument("--scenarios", default="100k", help="loaded one-group search_latency scenarios (e.g. 100k,1m)")
    ap.add_argument("--queries", type=int, default=150, help="measured queries per data set (after warm-up)")
    ap.add_argument("--warmup", type=int, default=20)


def query_sets(args: argparse.Namespace) -> Iterator[tuple[str, str, list[tuple[str, str]]]]:
    """(name, dsn, [(group, question)] of warm-up + measured queries) per data set asked for."""
    server = resolve_dsn()
    total = args.queries + args.warmup
    if args.locomo:
        asked = [(eval_group("locomo", c.conversation_id), q.question)
                 for c in read_locomo(args.locomo) for q in c.questions]
        random.Random(7).shuffle(asked)
        with connect(server) as conn:
            ensure_current(conn, pgmemory_setting(conn, "embedding_dim"))
        yield "locomo", server, asked[:total]
    for name in (n for n in args.scenarios.split(",") if n):
        sc = Scenario(name, 1, 1)
        if db_exists(server, sc.db):
            dsn = db_dsn(server, sc.db)
            with connect(dsn) as conn:
                ensure_current(conn, DIM)
            yield name, dsn, [(q.group, q.text) for q in make_queries(dsn, sc, total)[0]]
