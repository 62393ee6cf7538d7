"""HNSW build parameters and element type against insert cost, probe latency and recall (issue 9).

The vectors of an ingest database's table (episodes or facts) are copied into a scratch table;
for each (element type, m, ef_construction) the index is built on all but the last --held
vectors, which are then inserted one by one through the index (timed, in one transaction, as
ingestion adds them; with the backend's CPU time and the WAL written per insert), and each held
vector's 10 nearest by the index (hnsw.ef_search as the server has it, or each of --ef-search; probe latency timed) are
compared with the exact 10 nearest by the full-precision vectors (recall@10). Element types:
`vector` indexes the column itself (vector_cosine_ops); `halfvec` indexes the expression
`v::halfvec(D)` (halfvec_cosine_ops: 2 bytes per component) and the probe orders by the same
expression; `diskann` is pgvectorscale's StreamingDiskANN index (the embedded server ships the
extension; each m/ef_construction pair is read as num_neighbors/search_list_size, its defaults
50/100; probes at its default query settings); `none` builds no index (the insert's other costs).
Rounds alternate the order of the types so that load drifts hit both. --distinct keeps each vector once (a fact's closed and
later versions repeat its vector: what an index of one element per distinct vector would cost).
--source reads the vectors from another database (read only), e.g. a search benchmark's. The
scratch table is dropped at the end.

    python -m bench.ingest_profile --episodes 10000 --keep      # prints the kept database's DSN
    python -m bench.hnsw_build_params DSN --table episodes --held 300
    python -m bench.hnsw_build_params DSN --table episodes --held 500 --types vector,halfvec --params 16/64 --rounds 6
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import psycopg

from bench.stats import backend_cpu_s, percentile

PARAMS = ((16, 64), (16, 32), (8, 32), (8, 16))  # pgvector's default first
TYPES = ("vector", "halfvec", "diskann", "none")


@dataclass
class Run:
    """One build + held inserts + probes."""
    insert_ms: list[float]
    cpu_ms: float | None  # backend CPU per insert
    cpu_new_ms: list[float]  # backend CPU of each insert of a vector not yet in the table
    cpu_dup_ms: list[float]  # ... of a vector already in it (pgvector adds the row to its element)
    wal_kb: float  # WAL per insert
    probe_ms: dict[int, list[float]]  # by hnsw.ef_search
    recall: dict[int, float]  # by hnsw.ef_search
    index_bytes: int


def index_expression(kind: str, dim: int) -> tuple[str, str]:
    """(indexed expression, operator class) of one element type."""
    if kind == "halfvec":
        return f"(v::halfvec({int(dim)}))", "halfvec_cosine_ops"
    return "v", "vector_cosine_ops"


def measure(conn: psycopg.Connection, kind: str, m: int, efc: int, base: list[str], held: list[str],
            dim: int, ef_search: list[int]) -> Run:
    """Build, insert the held vectors, probe with each of them: one element type and parameter pair."""
    expr, opclass = index_expression(kind, dim)
    conn.execute("DROP TABLE IF EXISTS public.bench_hnsw_params")
    conn.execute(f"CREATE TABLE public.bench_hnsw_params (id bigserial PRIMARY KEY, v vector({int(dim)}))")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO public.bench_hnsw_params (v) VALUES (%s::vector)", [(v,) for v in base])
    if kind == "diskann":
        conn.execute("CREATE EXTENSION IF NOT EXISTS vectorscale")
        conn.execute(f"CREATE INDEX bench_hnsw_params_v ON public.bench_hnsw_params USING diskann ({expr} {opclass})"
                     f" WITH (num_neighbors = {int(m)}, search_list_size = {int(efc)})")
    elif kind != "none":
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute(f"CREATE INDEX bench_hnsw_params_v ON public.bench_hnsw_params USING hnsw ({expr} {opclass})"
                     f" WITH (m = {int(m)}, ef_construction = {int(efc)})")
    conn.commit()
    times: list[float] = []
    per_insert: dict[bool, list[float]] = {False: [], True: []}
    seen = set(base)
    pid = conn.info.backend_pid
    wal_before = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
    cpu_before = backend_cpu_s(pid)
    for v in held:
        started, cpu_started = time.perf_counter(), backend_cpu_s(pid)
        conn.execute("INSERT INTO public.bench_hnsw_params (v) VALUES (%s::vector)", (v,))
        times.append((time.perf_counter() - started) * 1000)
        if cpu_started is not None:
            per_insert[v in seen].append((backend_cpu_s(pid) - cpu_started) * 1000)
        seen.add(v)
    cpu_after = backend_cpu_s(pid)
    cpu = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) * 1000 / len(held)
    wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", (wal_before,)).fetchone()[0]
    conn.commit()
    if kind == "none":
        return Run(times, cpu, per_insert[False], per_insert[True], float(wal) / 1024 / len(held), {}, {}, 0)
    size = conn.execute("SELECT pg_relation_size('public.bench_hnsw_params_v')").fetchone()[0]
    order = (f"v::halfvec({int(dim)}) <=> %s::vector::halfvec({int(dim)})" if kind == "halfvec" else "v <=> %s::vector")
    probe = f"SELECT id FROM public.bench_hnsw_params ORDER BY {order} LIMIT 10"
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + probe, (held[0],)))
    assert "bench_hnsw_params_v" in plan, plan  # the probe must read the index it measures
    exact = []
    for v in held:
        conn.execute("SET LOCAL enable_indexscan = off")
        exact.append({r[0] for r in conn.execute(
            "SELECT id FROM public.bench_hnsw_params ORDER BY v <=> %s::vector LIMIT 10", (v,))})
        conn.rollback()
    probes: dict[int, list[float]] = {}
    recall: dict[int, float] = {}
    for ef in ef_search:
        conn.execute(f"SET hnsw.ef_search = {int(ef)}")
        found = []
        for v, nearest in zip(held, exact):
            started = time.perf_counter()
            approx = {r[0] for r in conn.execute(probe, (v,))}
            probes.setdefault(ef, []).append((time.perf_counter() - started) * 1000)
            found.append(len(approx & nearest) / 10)
        conn.rollback()
        recall[ef] = statistics.mean(found)
    conn.execute("RESET hnsw.ef_search")
    return Run(times, cpu, per_insert[False], per_insert[True], float(wal) / 1024 / len(held), probes, recall, size)


def parse_params(text: str) -> tuple[tuple[int, int], ...]:
    """'16/64,8/32' -> ((16, 64), (8, 32))."""
    return tuple((int(m), int(e)) for m, e in (pair.split("/") for pair in text.split(",")))


def read_vectors(dsn: str, table: str, distinct: bool) -> tuple[list[str], int]:
    """The table's vectors in the order they were written (each once with `distinct`), and D."""
    order = "seq" if table == "episodes" else "version_id"
    with psycopg.connect(dsn) as conn:
        vectors = [r[0] for r in conn.execute(
            f"SELECT embedding::text FROM pgmemory.{table} WHERE embedding IS NOT NULL ORDER BY {order}")]
        dim = conn.execute(f"SELECT vector_dims(embedding) FROM pgmemory.{table} WHERE embedding IS NOT NULL"
                           " LIMIT 1").fetchone()[0]
    return (list(dict.fromkeys(vectors)) if distinct else vectors), dim


def line(r: Run) -> str:
    """One run's figures."""
    cpu = "n/a" if r.cpu_ms is None else f"{r.cpu_ms:.3f}"
    probe = "".join(f"; ef_search {ef}: probe p50 {percentile(ms, 50):.3f} p95 {percentile(ms, 95):.3f} ms,"
                    f" recall@10 {r.recall[ef]:.4f}" for ef, ms in r.probe_ms.items())
    probe += f"; index {r.index_bytes / 2**20:.1f} MiB" if r.index_bytes else ""
    split = "".join(f"; {label} {len(xs)}: CPU median {statistics.median(xs):.3f} ms"
                    for label, xs in (("new vectors", r.cpu_new_ms), ("repeated vectors", r.cpu_dup_ms)) if xs)
    return (f"insert median {statistics.median(r.insert_ms):.3f} ms, backend CPU {cpu} ms,"
            f" WAL {r.wal_kb:.1f} kB per insert{split}{probe}")


def main() -> None:
    """Entry point: python -m bench.hnsw_build_params DSN [--table episodes|facts] [--held N] [--types ...]."""
    p = argparse.ArgumentParser(description="HNSW build parameters and element type: insert cost and recall@10")
    p.add_argument("dsn", help="the database the scratch table is made in (and the vectors read from)")
    p.add_argument("--source", help="read the vectors from this database instead (read only)")
    p.add_argument("--table", choices=("episodes", "facts"), default="episodes")
    p.add_argument("--held", type=int, default=300)
    p.add_argument("--limit", type=int, default=0, help="use only the first N vectors (0: all)")
    p.add_argument("--distinct", action="store_true", help="each vector once")
    p.add_argument("--types", default="vector", help="comma-separated element types: vector, halfvec, none")
    p.add_argument("--params", default=",".join(f"{m}/{e}" for m, e in PARAMS), help="m/ef_construction,...")
    p.add_argument("--ef-search", default="", help="hnsw.ef_search values to probe with (default: the server's)")
    p.add_argument("--rounds", type=int, default=1, help="rounds over every type and pair (figures pooled)")
    args = p.parse_args()
    if "diskann" not in args.types and any(efc < 2 * m for m, efc in parse_params(args.params)):
        p.error("pgvector needs ef_construction >= 2 * m")
    kinds = [k for k in args.types.split(",") if k]
    if not kinds or any(k not in TYPES for k in kinds):
        p.error(f"--types takes {', '.join(TYPES)}")
    vectors, dim = read_vectors(args.source or args.dsn, args.table, args.distinct)
    if args.limit:
        vectors = vectors[:args.limit]
    base, held = vectors[:-args.held], vectors[-args.held:]
    with psycopg.connect(args.dsn) as conn:
        conn.execute("SELECT '[1]'::vector")  # loads pgvector, whose settings are read next
        ef_search = [int(x) for x in args.ef_search.split(",") if x] or [
            int(conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone()[0])]
        print(f"{args.table}{' (distinct vectors)' if args.distinct else ''}: index built on {len(base)} vectors,"
              f" {len(held)} inserted and queried; hnsw.ef_search {ef_search}; 1-minute load {os.getloadavg()[0]:.2f}",
              flush=True)
        runs: dict[tuple[str, int, int], list[Run]] = {}
        try:
            for r in range(args.rounds):
                for m, efc in parse_params(args.params):
                    for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                        run = measure(conn, kind, m, efc, base, held, dim, ef_search)
                        runs.setdefault((kind, m, efc), []).append(run)
                        print(f"  round {r + 1} {kind:7s} m={m:2d} ef_construction={efc:3d}: {line(run)};"
                              f" load {os.getloadavg()[0]:.2f}", flush=True)
        finally:
            conn.rollback()
            conn.execute("DROP TABLE IF EXISTS public.bench_hnsw_params")
            conn.commit()
    if args.rounds > 1:
        print("pooled over rounds (insert and probe times pooled; CPU: median of the rounds; recall: mean):")
        for (kind, m, efc), rs in runs.items():
            cpus = [r.cpu_ms for r in rs if r.cpu_ms is not None]
            pooled = Run([t for r in rs for t in r.insert_ms], statistics.median(cpus) if cpus else None,
                         [t for r in rs for t in r.cpu_new_ms], [t for r in rs for t in r.cpu_dup_ms],
                         statistics.mean(r.wal_kb for r in rs),
                         {ef: [t for r in rs for t in r.probe_ms[ef]] for ef in rs[0].probe_ms},
                         {ef: statistics.mean(r.recall[ef] for r in rs) for ef in rs[0].recall}, rs[-1].index_bytes)
            print(f"  {kind:7s} m={m:2d} ef_construction={efc:3d}: {line(pooled)}")


if __name__ == "__main__":
    main()
