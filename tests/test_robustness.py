"""A killed writer leaves nothing half-written; processes share one embedded server; the sync API."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pgmemory import SearchConfig
from pgmemory.extract.rules import RuleExtractor
from tests.fake_openai import Delay, Reply
from tests.support import utc

EXTRACTION = {
    "entities": [{"name": "Ivy"}, {"name": "Acme Corp"}],
    "facts": [{"source": "Ivy", "target": "Acme Corp", "relation_type": "WORKS_FOR",
               "fact": "Ivy works for Acme Corp.", "functional": True}],
}

WRITER = textwrap.dedent("""
    import asyncio, sys
    from datetime import datetime, timezone
    from pgmemory import Memory
    from pgmemory.providers.embedder import HashEmbedder

    async def main():
        memory = await Memory.open(sys.argv[1], embedder=HashEmbedder(), lease_seconds=1)
        await memory.add_episode(sys.argv[2], "I work at Acme Corp now.", actor="Ivy",
                                 reference_time=datetime(2024, 2, 1, tzinfo=timezone.utc), episode_id="late")
    asyncio.run(main())
""")


def counts(dsn: str, group: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM pgmemory.{t} WHERE group_id = %s", (group,)).fetchone()[0]
                for t in ("entities", "facts", "episode_mentions", "fact_episodes")}


def wait_for_expired_lease(dsn: str, group: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(200):
            if conn.execute("SELECT bool_and(lease_until <= clock_timestamp()) FROM pgmemory.episodes"
                            " WHERE group_id = %s AND status = 'processing'", (group,)).fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError("the lease did not expire")


def test_killed_mid_episode_leaves_no_partial_writes(db_dsn, group, fake_openai, memory_sync_factory):
    # First episode (offline) creates Ivy and her Acme job, so the LLM writer will need a judge call.
    with memory_sync_factory(extractor=RuleExtractor()) as memory:
        memory.add_episode(group, "I work at Acme Corp.", actor="Ivy",
                           reference_time=utc("2024-01-01"))
    before = counts(db_dsn, group)
    # The writer's judge call (no transaction or lock held while it waits) never returns in time.
    fake_openai.script(Reply(EXTRACTION), Delay(60, {"judgements": []}))
    env = {**os.environ, "PGMEMORY_LLM_BASE_URL": fake_openai.base_url, "PGMEMORY_LLM_API_KEY": "t"}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, db_dsn, group], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(fake_openai.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake_openai.requests) == 2, proc.stderr.read() if proc.poll() is not None else "timeout"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    time.sleep(0.5)  # the server notices the closed socket and rolls the transaction back
    assert counts(db_dsn, group) == before
    with memory_sync_factory(extractor=RuleExtractor()) as memory:
        # The killed writer's lease stops being renewed; once it has expired, retry takes the episode over.
        assert memory.episode_status("late", group)["status"] == "processing"
        wait_for_expired_lease(db_dsn, group)
        results = memory.retry(group)
        assert [r.status for r in results] == ["done"]
        found = memory.search("where does Ivy work", group_ids=[group],
                              config=SearchConfig(kinds=("facts",)))
    assert [f.target for f in found.facts] == ["Acme Corp"]
    assert counts(db_dsn, group)["fact_episodes"] == before["fact_episodes"] + 1


def test_processes_share_one_embedded_server(tmp_path: Path):
    probe = ("import sys; from pathlib import Path; from pgmemory.config import Settings; "
             "from pgmemory.storage.connect import resolve_dsn, connect; "
             "d = resolve_dsn(Settings(None, Path(sys.argv[1]))); "
             "c = connect(d); print(d, c.execute('select pg_postmaster_start_time()').fetchone()[0])")
    procs = [subprocess.Popen([sys.executable, "-c", probe, str(tmp_path / "data")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    lines = {o[0].strip() for o in outs}
    assert len(lines) == 1  # same DSN and the same postmaster for everyone
    dsn = lines.pop().split(" ")[0]
    subprocess.run([sys.executable, "-c", "import sys, psycopg; psycopg.connect(sys.argv[1]).close()", dsn],
                   check=True, timeout=30)
    from pgserver._commands import pg_ctl
    from pgserver.postgres_server import PostgresServer

    user = "pgserver" if os.geteuid() == 0 else None
    with PostgresServer._lock:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=tmp_path / "data", user=user)
