"""Upgrading a Citus cluster initialised by an older pgmemory: `pgmemory init` of this version.

The code of an older commit (`git archive` of its pgmemory/, sql/ and migrations/, run in a
child process) initialises pgmemory on a Citus database and ingests a few episodes; this
version's init then runs on the same database, and `upgrade` checks what a user relies on:
the pending migrations applied, every table distributed or reference (none left local), every
routable function delegated, doctor healthy, and the old group's memory still answering,
updated by a new episode, next to a new group. Used by tests/test_citus.py (in a second
database of the suite's cluster) and bench/citus_upgrade.py (on a fresh cluster, timed).
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from pgmemory.extract.rules import RuleExtractor
from pgmemory.memory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage import citus
from pgmemory.storage.doctor import healthy, run_checks
from pgmemory.storage.setup import init_database
from tests.citus_cluster import ROOT, CitusUnavailable

DIM = 384
# The last commit before migrations 0200, 0201 and 0210 (0210 moves the internal functions to
# the schema pgmemory_internal, which on Citus must move distributed functions).
OLD_COMMIT = "f419940"
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
# An end stated after the fact: the older rules placed it when said, and it ended Acme then.
with psycopg.connect(dsn) as conn:
    conn.execute("SELECT pgmemory.add_fact('old-group', 'Ann', 'WORKS_FOR', 'Initech', 'Ann worked at Initech.',"
                 " p_valid_to => '2023-06-01Z', p_functional => true, p_reference_time => '2024-01-05Z')")
""" % (DIM, DIM)


def load_avg() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def old_tree(commit: str, dest: Path) -> Path:
    """The pgmemory/, sql/ and migrations/ of `commit`, extracted under dest (needs the
    repository's git history: CitusUnavailable says why not)."""
    try:
        archive = subprocess.run(["git", "archive", commit, "pgmemory", "sql", "migrations"], cwd=ROOT,
                                 capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CitusUnavailable(f"git archive {commit} failed: {exc}") from None
    if archive.returncode != 0:
        raise CitusUnavailable(f"the repository has no commit {commit} (git archive: "
                               f"{archive.stderr.decode(errors='replace').strip()[-300:]})")
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def upgrade(dsn: str, old: Path, say: Callable[[str], None] = lambda line: None) -> None:
    """Initialise `dsn` (a Citus coordinator's empty database) with the code in `old` and ingest
    with it, then run this version's init there and check the result (AssertionError names the
    failed check). `say` gets one line per step with its wall time and the load average."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", OLD_SIDE, dsn], cwd=old, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(old)}, timeout=900)
    assert done.returncode == 0, f"the old version's init and ingest failed: {done.stderr[-2000:]}"
    say(f"old version: init and 3 episodes {time.perf_counter() - started:.1f} s; {load_avg()}")
    old_migrations = done.stdout.split()[1].split(",")
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        report = init_database(conn, DIM)
        say(f"init of this version on it: {time.perf_counter() - started:.1f} s, applied "
            f"{', '.join(report.migrations_applied) or 'no migration'}; {load_avg()}")
        assert report.distributed and report.migrations_applied, report
        assert not set(report.migrations_applied) & set(old_migrations), "a migration ran twice"
        dist = citus.report(conn)
        assert dist.local == [] and dist.not_delegated == [] and dist.colocation_groups == 1, dist
        say(f"{len(dist.distributed)} distributed and {len(dist.reference)} reference tables, "
            f"{len(dist.delegated)} delegated functions, none local or left on the coordinator")
        acme_open = conn.execute(
            "SELECT upper_inf(f.valid) FROM pgmemory.facts f JOIN pgmemory.entities e"
            " ON e.group_id = f.group_id AND e.id = f.target_id"
            " WHERE f.group_id = 'old-group' AND e.name = 'Acme Corp' AND upper_inf(f.recorded)").fetchall()
        assert acme_open == [(True,)], f"Ann's job at Acme not re-folded open after the upgrade: {acme_open}"
        checks = run_checks(conn)
        assert healthy(checks), "doctor: " + "; ".join(f"{c.name} {c.status}" for c in checks if c.status != "ok")
    started = time.perf_counter()
    asyncio.run(use(dsn))
    say(f"the old group updated and searched, alone and with a new group: {time.perf_counter() - started:.1f} s")


async def use(dsn: str) -> None:
    """The old group's memory after the upgrade: updated by a new episode, searched with a new group."""
    async with await Memory.open(dsn, embedder=HashEmbedder(dim=DIM), extractor=RuleExtractor()) as m:
        result = await m.add_episode("old-group", "I left Acme Corp and now work at Globex.", actor="Ann",
                                     reference_time=datetime(2024, 2, 1, tzinfo=UTC))
        assert result.status == "done" and result.facts_invalidated == 1, result
        await m.add_episode("new-group", "I work at Initech.", actor="Bo", reference_time=datetime(2024, 2, 1, tzinfo=UTC))
        found = await m.search("where does Ann work", group_ids="old-group", limit=5)
        assert found.facts[0].fact == "Ann works for Globex.", found.facts
        both = await m.search("where does she work", group_ids=["old-group", "new-group"], limit=10)
        assert {f.group_id for f in both.facts} == {"old-group", "new-group"}, both.facts
