"""Upgrading a Citus cluster initialised by an older pgmemory: `pgmemory init` of this version.

Starts a coordinator + 2 workers (tests/citus_cluster.py), initialises pgmemory there with the
code of an older commit (`git archive` of its pgmemory/, sql/ and migrations/, run in a child
process) and ingests a few episodes with it, then runs this version's init on the same database
and checks what a user relies on: the pending migrations applied, every table distributed or
reference (none left local), every routable function delegated, doctor healthy, and the old
group's memory still answering, updated by a new episode, next to a new group. Prints each
step's wall time with the 1-minute load average; exits non-zero on a failed check.

    /work/main/.venv/bin/python -m bench.citus_upgrade --from f419940

The default commit is the last before migrations 0200, 0201 and 0210 (0210 moves the internal
functions to the schema pgmemory_internal, which on Citus must move distributed functions).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage import citus
from pgmemory.storage.doctor import healthy, run_checks
from pgmemory.storage.setup import init_database
from tests.citus_cluster import ROOT, start_cluster

DIM = 384
OLD_SIDE = """
import asyncio, sys
from datetime import UTC, datetime, timedelta
import psycopg
from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.setup import init_database

dsn = sys.argv[1]
with psycopg.connect(dsn) as conn:
    print("migrations", ",".join(init_database(conn, %d).migrations_applied))

async def ingest():
    m = await Memory.open(dsn, embedder=HashEmbedder(dim=%d), extractor=RuleExtractor())
    for i, text in enumerate(["I work at Acme Corp.", "I moved to Lisbon.", "My friend Bob lives in Paris."]):
        assert (await m.add_episode("old-group", text, actor="Ann",
                                    reference_time=datetime(2024, 1, 1 + i, tzinfo=UTC))).status == "done"
    await m.close()
asyncio.run(ingest())
""" % (DIM, DIM)


def load_avg() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def check(ok: bool, what: str) -> None:
    print(f"{'ok' if ok else 'FAILED'}: {what}", flush=True)
    if not ok:
        raise SystemExit(1)


async def use(dsn: str) -> None:
    """The old group's memory after the upgrade: updated by a new episode, searched with a new group."""
    async with await Memory.open(dsn, embedder=HashEmbedder(dim=DIM), extractor=RuleExtractor()) as m:
        result = await m.add_episode("old-group", "I left Acme Corp and now work at Globex.", actor="Ann",
                                     reference_time=datetime(2024, 2, 1, tzinfo=UTC))
        check(result.status == "done" and result.facts_invalidated == 1, "a new episode ends the old employer")
        await m.add_episode("new-group", "I work at Initech.", actor="Bo", reference_time=datetime(2024, 2, 1, tzinfo=UTC))
        found = await m.search("where does Ann work", group_ids="old-group", limit=5)
        check(found.facts[0].fact == "Ann works for Globex.", f"search of the old group: {found.facts[0].fact!r}")
        both = await m.search("where does she work", group_ids=["old-group", "new-group"], limit=10)
        check({f.group_id for f in both.facts} == {"old-group", "new-group"}, "a search of the old and a new group")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="commit", default="f419940", help="the older pgmemory commit")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pgmemory-citus-upgrade-"))
    old = root / "old"
    old.mkdir()
    archive = subprocess.run(["git", "archive", args.commit, "pgmemory", "sql", "migrations"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    (root / "cluster").mkdir()
    cluster = start_cluster(root / "cluster")
    try:
        dsn = cluster.coordinator_dsn
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", OLD_SIDE, dsn], cwd=old, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(old)})
        check(done.returncode == 0, f"pgmemory {args.commit} initialised the cluster and ingested "
                                    f"({time.perf_counter() - started:.1f} s; {load_avg()}) {done.stderr[-2000:]}")
        old_migrations = done.stdout.split()[1].split(",")
        with psycopg.connect(dsn) as conn:
            started = time.perf_counter()
            report = init_database(conn, DIM)
            print(f"init of this version on it: {time.perf_counter() - started:.1f} s, applied "
                  f"{', '.join(report.migrations_applied) or 'no migration'}; {load_avg()}", flush=True)
            check(report.distributed and report.migrations_applied and not set(report.migrations_applied)
                  & set(old_migrations), "the migrations the old version lacked were applied")
            dist = citus.report(conn)
            check(dist.local == [] and dist.not_delegated == [] and dist.colocation_groups == 1,
                  f"{len(dist.distributed)} distributed and {len(dist.reference)} reference tables, "
                  f"{len(dist.delegated)} delegated functions, none local or left on the coordinator")
            checks = run_checks(conn)
            check(healthy(checks), "doctor: " + "; ".join(f"{c.name} {c.status}" for c in checks if c.status != "ok"))
        asyncio.run(use(dsn))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
