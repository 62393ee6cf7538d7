"""What the episode's final UPDATE costs, part by part (issue 9): on a kept ingest database, fresh
copies of its latest episodes (status 'processing', leased, no vector, as a raw episode is) get
the apply's UPDATE as is, or without its vector, or without its queue state, or only its cost
counters; in rolled-back transactions, interleaved rounds, medians. The vectors are the latest
episodes' own, slightly moved, so each is a new element of the HNSW graph (an identical vector is
only added to its twin's element, which costs less). Prints how many of the updates were HOT.

    python -m bench.ingest_profile --episodes 3000 --keep      # prints the kept database's DSN
    python -m bench.episode_update_cost DSN --rows 60 --rounds 7
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import psycopg

SET_STATE = "status = 'done', error = NULL, lease_owner = NULL, lease_until = NULL"
SET_COST = "llm_calls = llm_calls + 0, prompt_tokens = prompt_tokens + 0, completion_tokens = completion_tokens + 0"
VARIANTS = {  # name: (SET clause, with the vector)
    "as is (state + cost + vector)": (f"{SET_STATE}, {SET_COST}, embedding = %s::vector", True),
    "vector, no state change": (f"{SET_COST}, embedding = %s::vector", True),
    "state, no vector": (f"{SET_STATE}, {SET_COST}", False),
    "cost counters only": (SET_COST, False),
}


def moved(vector: str, rnd: random.Random) -> str:
    """The pgvector text of `vector` with every component moved by up to 1e-3."""
    return "[" + ",".join(repr(float(x) + rnd.uniform(-1e-3, 1e-3)) for x in vector.strip("[]").split(",")) + "]"


def one_round(conn: psycopg.Connection, group: str, rows: int, vectors: list[str], name: str) -> tuple[float, int]:
    """ms per UPDATE of one variant over `rows` fresh copies, and how many were HOT; rolled back."""
    set_clause, with_vector = VARIANTS[name]
    conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, source_description, valid_at,"
                 "                               status, lease_owner, lease_until, attempts)"
                 " SELECT gen_random_uuid(), group_id, kind, content, actor, source_description, valid_at,"
                 "        'processing', 'bench', now() + interval '5 minutes', 1"
                 "   FROM pgmemory.episodes WHERE group_id = %s ORDER BY seq DESC LIMIT %s", (group, rows))
    ids = [r[0] for r in conn.execute("SELECT id FROM pgmemory.episodes WHERE group_id = %s AND lease_owner = 'bench'",
                                      (group,))]
    hot_before = conn.execute("SELECT pg_stat_get_xact_tuples_hot_updated('pgmemory.episodes'::regclass)").fetchone()[0]
    sql = f"UPDATE pgmemory.episodes SET {set_clause} WHERE group_id = %s AND id = %s"
    started = time.perf_counter()
    for episode, vector in zip(ids, vectors):
        conn.execute(sql, (vector, group, episode) if with_vector else (group, episode))
    ms = (time.perf_counter() - started) * 1000 / len(ids)
    hot = conn.execute("SELECT pg_stat_get_xact_tuples_hot_updated('pgmemory.episodes'::regclass)").fetchone()[0]
    conn.rollback()
    return ms, hot - hot_before


def main() -> None:
    """Entry point: python -m bench.episode_update_cost DSN [--rows N] [--rounds R]."""
    p = argparse.ArgumentParser(description="the episode's final UPDATE, part by part")
    p.add_argument("dsn")
    p.add_argument("--rows", type=int, default=60)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    rnd = random.Random(7)
    with psycopg.connect(args.dsn) as conn:
        group = conn.execute("SELECT group_id FROM pgmemory.episodes GROUP BY 1 ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
        latest = [r[0] for r in conn.execute(
            "SELECT embedding::text FROM pgmemory.episodes WHERE group_id = %s AND embedding IS NOT NULL"
            " ORDER BY seq DESC LIMIT %s", (group, args.rows))]
        conn.rollback()
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        hot: dict[str, int] = {name: 0 for name in VARIANTS}
        for r in range(args.rounds):
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                ms, n_hot = one_round(conn, group, args.rows, [moved(v, rnd) for v in latest], name)
                times[name].append(ms)
                hot[name] += n_hot
        episodes = conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchone()[0]
    print(f"{episodes} episodes in group {group!r}; {args.rows} updates x {args.rounds} rounds;"
          f" 1-minute load {os.getloadavg()[0]:.2f}")
    for name in VARIANTS:
        print(f"  {name:32s} median {statistics.median(times[name]):.3f} ms/update"
              f" (rounds {min(times[name]):.3f}-{max(times[name]):.3f}), HOT {hot[name]} of {args.rows * args.rounds}")


if __name__ == "__main__":
    main()
