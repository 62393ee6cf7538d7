"""What one fact version write costs, part by part, on a kept benchmark database.

Runs N `pgmemory.record_fact` calls (a new version of N random believed facts, as a new fact) or
N `pgmemory.correct_fact` calls (close the believed version, write a new one) in one statement
under EXPLAIN (ANALYZE, BUFFERS, WAL), in a rolled-back transaction, once as is and once with
each part removed inside that transaction (an index, the AGE mirror trigger, the BM25 statistics
triggers, the foreign keys). Rounds are interleaved in random order; prints medians per write of
execution ms, shared-buffer gets and WAL kB, and what each removal saves. Buffer gets and WAL do
not follow the machine's load; the ms do. (HNSW and GIN entries of rolled-back rows stay in the
index until vacuum, so later rounds insert into a slightly larger graph.)

    python -m bench.ingest_profile --episodes 1500 --bucket 1500 --keep   # prints the kept DSN
    python -m bench.fact_version_cost DSN --writes 40 --rounds 5 --call correct_fact
"""
from __future__ import annotations

import argparse
import os
import random
import statistics

import psycopg

CALLS = {
    "record_fact": ("pgmemory.record_fact(gen_random_uuid(), f.group_id, f.source_id, f.target_id, f.relation,"
                    " f.fact || ' again', now() - interval '1 day', NULL, f.embedding, '{}', NULL, f.lineage)"),
    "correct_fact": "pgmemory.correct_fact(f.group_id, f.id, lower(f.valid), now() + interval '100 years')",
}
PARTS = {
    "all triggers": "ALTER TABLE pgmemory.facts DISABLE TRIGGER USER",
    "AGE mirror trigger": "ALTER TABLE pgmemory.facts DISABLE TRIGGER mirror_fact",
    "BM25 statistics triggers": ("ALTER TABLE pgmemory.facts DISABLE TRIGGER facts_text_stats_ins,"
                                 " DISABLE TRIGGER facts_text_stats_upd"),
    "foreign keys": "ALTER TABLE pgmemory.facts DROP CONSTRAINT facts_source_fkey, DROP CONSTRAINT facts_target_fkey",
}


def measure(conn: psycopg.Connection, call: str, version_ids: list[int], removal: str | None) -> tuple[float, ...]:
    """(ms, buffer gets, WAL kB) per write with one part removed (None: as is), rolled back."""
    with conn.transaction(force_rollback=True):
        if removal:
            conn.execute(removal)
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) SELECT {CALLS[call]}"
                            " FROM pgmemory.facts f WHERE f.version_id = ANY (%s)", (version_ids,)).fetchone()[0][0]
    top, n = plan["Plan"], len(version_ids)
    return (plan["Execution Time"] / n, (top["Shared Hit Blocks"] + top["Shared Read Blocks"]) / n,
            top["WAL Bytes"] / n / 1024)


def main() -> None:
    """Entry point: python -m bench.fact_version_cost DSN [--writes N] [--rounds R] [--call C]."""
    p = argparse.ArgumentParser(description="cost of one fact version write, part by part")
    p.add_argument("dsn", help="a kept benchmark database (bench.ingest_profile --keep)")
    p.add_argument("--writes", type=int, default=40, help="fact versions written per measurement")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--call", choices=sorted(CALLS), default="record_fact")
    args = p.parse_args()
    with psycopg.connect(args.dsn) as conn:
        indexes = [r[0] for r in conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'pgmemory.facts'::regclass"
            " AND NOT indisunique").fetchall()]
        version_ids = [r[0] for r in conn.execute(
            "SELECT version_id FROM pgmemory.facts WHERE upper_inf(recorded) ORDER BY random() LIMIT %s",
            (args.writes,)).fetchall()]
        conn.rollback()
        removals: dict[str, str | None] = {"(as is)": None, **PARTS}
        removals.update({f"index {i}": f"DROP INDEX {i}" for i in indexes})
        runs: dict[str, list[tuple[float, ...]]] = {name: [] for name in removals}
        for _ in range(args.rounds):
            for name in random.sample(list(removals), len(removals)):
                runs[name].append(measure(conn, args.call, version_ids, removals[name]))
    med = {name: [statistics.median(r[i] for r in rs) for i in range(3)] for name, rs in runs.items()}
    base = med["(as is)"]
    print(f"{args.call} x {len(version_ids)} per statement, {args.rounds} rounds; load average (1 min) "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'without':44s} {'ms/write':>8s} {'gets/write':>10s} {'WAL kB':>7s} | saves ms, gets, WAL kB")
    for name, m in sorted(med.items(), key=lambda kv: kv[1][1]):
        print(f"{name:44s} {m[0]:8.3f} {m[1]:10.1f} {m[2]:7.2f} | {base[0] - m[0]:6.3f} {base[1] - m[1]:7.1f} "
              f"{base[2] - m[2]:5.2f}")


if __name__ == "__main__":
    main()
