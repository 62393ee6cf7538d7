"""HNSW build parameters (m, ef_construction) against insert cost and recall (issue 9): the vectors
of a kept ingest database's table (episodes or facts) are copied into a scratch table; for each
parameter pair the index is built on all but the last --held vectors, which are then inserted
one by one through the index (timed, in one transaction, as ingestion adds them), and each held
vector's 10 nearest by the index (hnsw.ef_search as the server has it) are compared with the exact
10 nearest (recall@10). The scratch table is dropped at the end.

    python -m bench.ingest_profile --episodes 10000 --keep      # prints the kept database's DSN
    python -m bench.hnsw_build_params DSN --table episodes --held 300
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

PARAMS = ((16, 64), (16, 32), (8, 32), (8, 16))  # pgvector's default first


def measure(conn: psycopg.Connection, m: int, efc: int, base: list[str], held: list[str],
            dim: int) -> tuple[float, float, float]:
    """(median ms per insert, mean ms per insert, recall@10) for one parameter pair."""
    conn.execute("DROP TABLE IF EXISTS public.bench_hnsw_params")
    conn.execute(f"CREATE TABLE public.bench_hnsw_params (id bigserial PRIMARY KEY, v vector({int(dim)}))")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO public.bench_hnsw_params (v) VALUES (%s::vector)", [(v,) for v in base])
    conn.execute(f"CREATE INDEX ON public.bench_hnsw_params USING hnsw (v vector_cosine_ops)"
                 f" WITH (m = {int(m)}, ef_construction = {int(efc)})")
    conn.commit()
    times = []
    for v in held:
        started = time.perf_counter()
        conn.execute("INSERT INTO public.bench_hnsw_params (v) VALUES (%s::vector)", (v,))
        times.append((time.perf_counter() - started) * 1000)
    conn.commit()
    recall = []
    for v in held:
        approx = {r[0] for r in conn.execute(
            "SELECT id FROM public.bench_hnsw_params ORDER BY v <=> %s::vector LIMIT 10", (v,))}
        conn.execute("SET LOCAL enable_indexscan = off")
        exact = {r[0] for r in conn.execute(
            "SELECT id FROM public.bench_hnsw_params ORDER BY v <=> %s::vector LIMIT 10", (v,))}
        conn.rollback()
        recall.append(len(approx & exact) / 10)
    return statistics.median(times), statistics.mean(times), statistics.mean(recall)


def main() -> None:
    """Entry point: python -m bench.hnsw_build_params DSN [--table episodes|facts] [--held N]."""
    p = argparse.ArgumentParser(description="HNSW build parameters: insert cost and recall@10")
    p.add_argument("dsn")
    p.add_argument("--table", choices=("episodes", "facts"), default="episodes")
    p.add_argument("--held", type=int, default=300)
    args = p.parse_args()
    with psycopg.connect(args.dsn) as conn:
        order = "seq" if args.table == "episodes" else "version_id"
        vectors = [r[0] for r in conn.execute(
            f"SELECT embedding::text FROM pgmemory.{args.table} WHERE embedding IS NOT NULL ORDER BY {order}")]
        dim = conn.execute(f"SELECT vector_dims(embedding) FROM pgmemory.{args.table} WHERE embedding IS NOT NULL"
                           " LIMIT 1").fetchone()[0]
        ef_search = conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone()[0]
        base, held = vectors[:-args.held], vectors[-args.held:]
        print(f"{args.table}: index built on {len(base)} vectors, {len(held)} inserted and queried;"
              f" hnsw.ef_search {ef_search}; 1-minute load {os.getloadavg()[0]:.2f}", flush=True)
        try:
            for m, efc in PARAMS:
                median, mean, recall = measure(conn, m, efc, base, held, dim)
                print(f"  m={m:2d} ef_construction={efc:3d}: insert median {median:.3f} ms, mean {mean:.3f} ms;"
                      f" recall@10 {recall:.4f}; load {os.getloadavg()[0]:.2f}", flush=True)
        finally:
            conn.rollback()
            conn.execute("DROP TABLE IF EXISTS public.bench_hnsw_params")
            conn.commit()


if __name__ == "__main__":
    main()
