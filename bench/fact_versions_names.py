"""What naming fact versions as recorded costs the analyst view pgmemory.fact_versions.

Loads one synthetic group of N fact versions (bench.search_data, as bench.search_latency does),
renames R of its entities (their facts were recorded before, so the view looks up their old
names), and installs the fact_versions view of each baseline commit next to the working tree's
(schema bench_<commit>, same tables), then times the same queries on each, interleaved in random
order per round: count(*) of the group, the names of every believed fact, the versions believed
at a past transaction time (FOR SYSTEM_TIME AS OF), and the versions whose source has a given
name. Prints client wall ms (query and fetch) medians and p95 per view, and each view's median
as a multiple of the first baseline's.

    PGMEMORY_DATA_DIR=/tmp/pgdata python -m bench.fact_versions_names --base main --base 2645e0f
"""
from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import time
from pathlib import Path

import psycopg
from psycopg import sql

from bench.search_data import DIM
from bench.search_latency import Scenario, db_dsn, db_exists, load_scenario
from bench.stats import percentile
from pgmemory.storage.connect import connect, resolve_dsn
from pgmemory.storage.setup import ensure_current

ROOT = Path(__file__).parent.parent
GROUP = "bench"
QUERIES = {
    "count(*)": "SELECT count(*) FROM {v} WHERE group_id = %(g)s",
    "names of believed": "SELECT source, relation, target FROM {v} WHERE group_id = %(g)s AND believed",
    "as of T'": "SELECT source, relation, target FROM {v} WHERE group_id = %(g)s AND recorded @> %(at)s::timestamptz",
    "source = old name": "SELECT relation, target FROM {v} WHERE group_id = %(g)s AND source = %(name)s",
}


def view_of(commit: str) -> str:
    """The CREATE VIEW pgmemory.fact_versions statement of sql/80_analyst_views.sql at a commit."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:sql/80_analyst_views.sql"],
                          capture_output=True, text=True, check=True).stdout
    found = re.search(r"CREATE OR REPLACE VIEW pgmemory\.fact_versions AS.*?;\n", text, re.S)
    if not found:
        raise SystemExit(f"no fact_versions view in {commit}:sql/80_analyst_views.sql")
    return found.group(0)


def install_baseline(conn: psycopg.Connection, commit: str) -> str:
    """Create the commit's fact_versions as bench_<commit>.fact_versions; its qualified name."""
    schema = f"bench_{re.sub(r'[^a-z0-9]', '_', commit.lower())}"
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {s} CASCADE").format(s=sql.Identifier(schema)))
    conn.execute(sql.SQL("CREATE SCHEMA {s}").format(s=sql.Identifier(schema)))
    body = view_of(commit).replace("VIEW pgmemory.fact_versions", f"VIEW {schema}.fact_versions", 1)
    conn.execute(body)
    # As init leaves the real one: the caller's rights (row-level security applies), readable by analysts.
    conn.execute(sql.SQL("ALTER VIEW {s}.fact_versions SET (security_invoker = true)").format(s=sql.Identifier(schema)))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {s} TO pgmemory_analyst").format(s=sql.Identifier(schema)))
    conn.execute(sql.SQL("GRANT SELECT ON {s}.fact_versions TO pgmemory_analyst").format(s=sql.Identifier(schema)))
    conn.commit()
    return f"{schema}.fact_versions"


def rename(conn: psycopg.Connection, n: int, seed: int) -> tuple[int, str, object]:
    """Rename n random entities of the group that have facts (their name + ' Jr'), once; returns
    (fact versions touching a renamed entity, one old name, a transaction time before the renames)."""
    at = conn.execute("SELECT max(lower(recorded)) FROM pgmemory.facts WHERE group_id = %s", (GROUP,)).fetchone()[0]
    done = conn.execute("SELECT count(*) FROM pgmemory.entities WHERE group_id = %s AND renamed", (GROUP,)).fetchone()[0]
    if done < n:
        ids = [r[0] for r in conn.execute(
            "SELECT e.id FROM pgmemory.entities e WHERE e.group_id = %s AND NOT e.renamed"
            "   AND EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.group_id = e.group_id AND f.source_id = e.id)"
            " ORDER BY e.id", (GROUP,)).fetchall()]
        for entity in random.Random(seed).sample(ids, n - done):
            conn.execute("UPDATE pgmemory.entities SET name = name || ' Jr' WHERE group_id = %s AND id = %s",
                         (GROUP, entity))
            conn.commit()
        conn.execute("ANALYZE pgmemory.entities, pgmemory.entity_versions")
        conn.commit()
    touching = conn.execute(
        "SELECT count(*) FROM pgmemory.facts f WHERE f.group_id = %s AND EXISTS (SELECT 1 FROM pgmemory.entities e"
        "  WHERE e.group_id = f.group_id AND e.id IN (f.source_id, f.target_id) AND e.renamed)", (GROUP,)).fetchone()[0]
    old = conn.execute("SELECT min(v.name) FROM pgmemory.entity_versions v JOIN pgmemory.entities e"
                       " ON e.group_id = v.group_id AND e.id = v.entity_id AND e.renamed AND e.name <> v.name"
                       " WHERE v.group_id = %s", (GROUP,)).fetchone()[0]
    conn.rollback()
    return touching, old, at


def main() -> None:
    """Entry point: python -m bench.fact_versions_names [--base COMMIT ...] [--facts N] [--renamed R]."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", action="append", help="baseline commit(s) whose view to compare (default: main)")
    p.add_argument("--facts", type=int, default=50_000, help="fact versions of the group")
    p.add_argument("--renamed", type=int, default=20, help="entities of the group renamed")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--role", help="SET ROLE to this role for the queries (pgmemory_reader: under row-level security)")
    p.add_argument("--reuse", action="store_true", help="reuse the loaded database (bench_search_fvnames<N>)")
    args = p.parse_args()
    bases = args.base or ["main"]
    server = resolve_dsn()
    sc = Scenario(f"fvnames{args.facts}", 1, args.facts)
    if not (args.reuse and db_exists(server, sc.db)):
        load_scenario(server, sc)
    dsn = db_dsn(server, sc.db)
    with connect(dsn) as conn:
        ensure_current(conn, DIM)  # the working tree's migrations and views
        conn.commit()
        touching, old_name, at = rename(conn, args.renamed, seed=5)
        views = {commit: install_baseline(conn, commit) for commit in bases}
        views["this tree"] = "pgmemory.fact_versions"
        facts = conn.execute("SELECT count(*) FROM pgmemory.facts WHERE group_id = %s", (GROUP,)).fetchone()[0]
        conn.rollback()
        if args.role:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(args.role)))
            conn.commit()
        params = {"g": GROUP, "at": at, "name": old_name}
        answers: dict[tuple[str, str], int] = {}
        runs: dict[tuple[str, str], list[float]] = {(v, q): [] for v in views for q in QUERIES}
        for rnd in range(args.rounds + 2):  # two warm-up rounds
            for v, q in random.sample(list(runs), len(runs)):
                query = sql.SQL(QUERIES[q]).format(v=sql.SQL(views[v]))  # view names from this script only
                started = time.perf_counter()
                rows = conn.execute(query, params).fetchall()
                ms = (time.perf_counter() - started) * 1000
                conn.rollback()
                answers[(v, q)] = rows[0][0] if q == "count(*)" else len(rows)
                if rnd >= 2:
                    runs[(v, q)].append(ms)
    print(f"one group of {facts} fact versions, {args.renamed} entities renamed ({touching} fact versions touch one);"
          f" {args.rounds} rounds; role {args.role or 'owner'}; load average (1 min) {os.getloadavg()[0]:.1f}")
    print(f"{'query':20s} {'view':24s} {'rows':>6s} {'median ms':>10s} {'p95 ms':>8s} {'x ' + bases[0]:>10s}")
    for q in QUERIES:
        base = statistics.median(runs[(bases[0], q)])
        for v in views:
            ms = runs[(v, q)]
            print(f"{q:20s} {v:24s} {answers[(v, q)]:6d} {statistics.median(ms):10.2f} {percentile(ms, 95):8.2f}"
                  f" {statistics.median(ms) / base:10.2f}")


if __name__ == "__main__":
    main()
