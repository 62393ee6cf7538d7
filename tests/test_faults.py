"""Fault battery: kill -9 the writer, or the Postgres server, at random points of an ingest
(several seeds); after recovery (the same ingest again, then `retry`) the current facts equal
a clean run's (compared by digest). Killing the server prints one "database unavailable" line.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pgmemory import Memory
from pgmemory.config import Settings
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.setup import init_database
from tests.conftest import DIM
from tests.test_concurrency import chronology

BOUND_S = 120
CURRENT_FACTS = """
    SELECT f.group_id, s.name, f.relation, t.name, f.fact, lower(f.valid)::text, upper(f.valid)::text
      FROM pgmemory.facts f JOIN pgmemory.entities s ON s.id = f.source_id
      JOIN pgmemory.entities t ON t.id = f.target_id
     WHERE upper_inf(f.recorded) ORDER BY 1, 2, 3, 4, 5, 6
"""


def episodes() -> list[dict]:
    """Three groups of four people changing jobs ("I left X last week and now work at Y")."""
    return [{"group_id": f"faults-{g}", **ep, "reference_time": ep["reference_time"].isoformat()}
            for g in range(3) for p in range(4) for ep in chronology(p + g, 5)]


class Digest(tuple):
    """(sha256, row count) of the current facts; compares by those two, shows the rows on failure."""

    def __new__(cls, rows: list) -> "Digest":
        found = super().__new__(cls, (hashlib.sha256(json.dumps(rows).encode()).hexdigest(), len(rows)))
        found.rows = rows
        return found



def assert_same_facts(found: Digest, clean: Digest) -> None:
    """Equal digests, or the rows that differ (recovered run: +, clean run: -)."""
    if found != clean:
        mine, theirs = set(map(tuple, found.rows)), set(map(tuple, clean.rows))
        pytest.fail("current facts differ from a clean run:\n" + "\n".join(
            [f"+ {r}" for r in sorted(mine - theirs)] + [f"- {r}" for r in sorted(theirs - mine)]))


def digest(dsn: str) -> Digest:
    with psycopg.connect(dsn) as conn:
        rows = [list(r) for r in conn.execute(CURRENT_FACTS).fetchall()]
    return Digest(rows)


def done_count(dsn: str) -> int:
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE status = 'done'").fetchone()[0]
    except psycopg.OperationalError:
        return 0


async def ingest_in_process(dsn: str, items: list[dict]) -> None:
    """Recovery as a user runs it: the same ingest again, then `retry`. An episode whose lease was
    still in flight when the writer died may come back "busy" from the ingest; retry finishes it."""
    async with await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        results = await memory.add_episodes(items)
        assert all(r.status in ("done", "skipped", "busy") for r in results), results
        assert all(r.status == "done" for r in await memory.retry())
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT status, count(*) FROM pgmemory.episodes WHERE status <> 'done'"
                            " GROUP BY 1").fetchall()
    assert left == [], left


@pytest.fixture(scope="module")
def clean_digest(admin_dsn, tmp_path_factory):
    from tests.servers import create_database, drop_database

    import asyncio

    dsn = create_database(admin_dsn)
    try:
        with psycopg.connect(dsn) as conn:
            init_database(conn, DIM)
        asyncio.run(ingest_in_process(dsn, episodes()))
        found = digest(dsn)
    finally:
        drop_database(admin_dsn, dsn)
    assert found[1] > 12  # every person has a current job, plus the ended ones
    return found


def start_cli_ingest(path: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", "ingest", str(path)],
                            env={**os.environ, "PGMEMORY_EMBEDDER": "hash", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until_done(dsn: str, at_least: int, proc: subprocess.Popen, *, progress: bool = False) -> None:
    """Until `at_least` episodes are done; with `progress`, also one more than were done when the
    server (started again by `proc`) first answered, so that `proc` is past its start-up: a
    previous round may already have done `at_least`, and a kill while the command opens its
    database is another failure than a kill mid-ingest."""
    deadline = time.monotonic() + BOUND_S
    if progress:
        while (base := done_count(dsn)) == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        at_least = max(at_least, base + 1)
    while done_count(dsn) < at_least:
        if proc.poll() is not None:
            return  # finished before the chosen point: the kill then hits nothing, still valid
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"fewer than {at_least} episodes done within {BOUND_S} s")
        time.sleep(0.05)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_writer_killed_at_a_random_point_recovers_to_the_clean_facts(seed, empty_dsn, tmp_path,
                                                                           clean_digest):
    rng = random.Random(seed)
    data = tmp_path / "episodes.jsonl"
    data.write_text("\n".join(json.dumps(e) for e in episodes()) + "\n")
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, DIM)
    proc = start_cli_ingest(data, {"PGMEMORY_DSN": empty_dsn})
    wait_until_done(empty_dsn, rng.randint(1, 45), proc)
    time.sleep(rng.random() * 0.2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    await ingest_in_process(empty_dsn, episodes())  # recovery: the same ingest, then retry
    assert_same_facts(digest(empty_dsn), clean_digest)


def kill_server(postmaster: int) -> None:
    """A crash of the whole server: the postmaster and every backend. (SIGKILL of the postmaster
    alone leaves the backends serving open connections until they notice, so a fast ingest could
    finish its work on them.)"""
    os.kill(postmaster, signal.SIGSTOP)  # no new backend from here on
    signal_each(children(postmaster), signal.SIGKILL)
    os.kill(postmaster, signal.SIGKILL)


def freeze(postmaster: int) -> list[int]:
    """Every process of the server stopped (SIGSTOP), the postmaster first so that no new child
    starts; returns those stopped, for `thaw`."""
    os.kill(postmaster, signal.SIGSTOP)
    return [postmaster, *signal_each(children(postmaster), signal.SIGSTOP)]


def thaw(pids: list[int]) -> None:
    """The processes `freeze` stopped run again."""
    signal_each(pids, signal.SIGCONT)


def signal_each(pids: list[int], sig: int) -> list[int]:
    """`sig` sent to each process still there (a backend or helper may end between being listed
    and being signalled); returns those it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        reached.append(pid)
    return reached


def children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (the postmaster's: backends and helpers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def test_server_killed_mid_ingest_is_one_line_and_recovers(tmp_path, clean_digest):
    from pgserver._commands import pg_ctl

    data = tmp_path / "pgdata"
    dsn = resolve_dsn(Settings(None, data))
    env = {"PGMEMORY_DATA_DIR": str(data)}
    user = "pgserver" if os.geteuid() == 0 else None
    jsonl = tmp_path / "episodes.jsonl"
    jsonl.write_text("\n".join(json.dumps(e) for e in episodes()) + "\n")
    try:
        with psycopg.connect(dsn) as conn:
            init_database(conn, DIM)
        for seed in (1, 2):
            proc = start_cli_ingest(jsonl, env)
            wait_until_done(dsn, 10 * seed + random.Random(seed).randint(0, 9), proc, progress=seed > 1)
            if proc.poll() is not None:
                break
            kill_server(int((data / "postmaster.pid").read_text().split()[0]))
            out, err = proc.communicate(timeout=BOUND_S)
            errors = [line for line in err.splitlines() if "error" in line.lower()]
            assert proc.returncode == 2, err
            assert "Traceback" not in err
            assert len(errors) == 1 and errors[0].startswith("pgmemory: error: database unavailable:"), err
            assert "run the same command again" in errors[0]  # which starts the server again
        rerun = start_cli_ingest(jsonl, env)
        out, err = rerun.communicate(timeout=BOUND_S)
        assert rerun.returncode == 0, err
        retry = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "retry"], capture_output=True,
                               text=True, timeout=BOUND_S,
                               env={**os.environ, "PGMEMORY_EMBEDDER": "hash", **env})
        assert retry.returncode == 0, retry.stderr
        assert_same_facts(digest(dsn), clean_digest)
    finally:
        if (data / "postmaster.pid").exists():
            try:
                pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=user, timeout=60)
            except subprocess.CalledProcessError:
                pass  # the last kill left no server to stop


async def opened() -> Memory:
    return await Memory.open()


def test_a_server_with_every_slot_taken_is_one_line(tmp_path, monkeypatch):
    """Other clients hold every connection slot of the embedded server: a command says so in one
    line naming the fix (no traceback from the server's start-up, no 'server is back' advice),
    and Memory.open raises DatabaseUnavailable; once a slot is free the same command runs."""
    from pgserver._commands import pg_ctl

    from pgmemory.errors import DatabaseUnavailable

    data = tmp_path / "pgdata"
    dsn = resolve_dsn(Settings(None, data))
    user = "pgserver" if os.geteuid() == 0 else None
    env = {**os.environ, "PGMEMORY_DATA_DIR": str(data), "PGMEMORY_EMBEDDER": "hash"}
    holders: list[psycopg.Connection] = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET max_connections = 6")
        pg_ctl(["-w", "-l", str(data / "log"), "restart"], pgdata=data, user=user, timeout=60)
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            while True:
                holders.append(psycopg.connect(dsn, connect_timeout=5))
        doctor = [sys.executable, "-m", "pgmemory.surfaces.cli", "doctor"]
        full = subprocess.run(doctor, capture_output=True, text=True, timeout=BOUND_S, env=env)
        assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr
        [line] = full.stderr.splitlines()
        assert line.startswith("pgmemory: error: cannot connect to Postgres at ") and \
            "every connection slot is taken" in line and "max_connections" in line, line
        monkeypatch.setenv("PGMEMORY_DATA_DIR", str(data))
        monkeypatch.setenv("PGMEMORY_EMBEDDER", "hash")
        with pytest.raises(DatabaseUnavailable, match="every connection slot is taken"):
            asyncio.run(opened())
        holders.pop().close()
        freed = subprocess.run(doctor, capture_output=True, text=True, timeout=BOUND_S, env=env)
        assert "every connection slot is taken" not in freed.stderr, freed.stderr
    finally:
        for conn in holders:
            conn.close()
        if (data / "postmaster.pid").exists():
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)


async def test_a_frozen_server_fails_a_call_instead_of_holding_it(tmp_path, monkeypatch):
    """A server that stops answering (every process SIGSTOPped: a hung host, a partition that
    drops packets) on connections the pool already holds: a Python call and a REST request end
    with "Postgres did not answer" after the statement timeout and a margin, not never; once the
    server answers again the same memory serves (the stuck connections were dropped)."""
    import httpx
    from pgserver._commands import pg_ctl

    from pgmemory.storage.connect import ANSWER_MARGIN_S, connection_lost, unavailable_reason
    from pgmemory.surfaces.rest import create_app

    data = tmp_path / "pgdata"
    dsn = resolve_dsn(Settings(None, data))
    user = "pgserver" if os.geteuid() == 0 else None
    monkeypatch.setenv("PGMEMORY_STATEMENT_TIMEOUT", "1")
    frozen: list[int] = []
    try:
        memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=2)
        try:
            app = create_app(memory, worker_concurrency=0, auth=False)
            async with app.router.lifespan_context(app), httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
                await memory.add_episode("frozen", "Ann: I work at Acme.", reference_time="2024-01-01T00:00:00Z")
                # Both pooled connections open and idle, as a serving process has them.
                await asyncio.gather(*(memory.get_episodes("frozen") for _ in range(4)))
                postmaster = int((data / "postmaster.pid").read_text().split()[0])
                frozen = freeze(postmaster)
                bound = 4 * (1 + ANSWER_MARGIN_S) + 30  # the hang guard: a bound, not a timing assert
                with pytest.raises(Exception) as raised:
                    await asyncio.wait_for(memory.get_episodes("frozen"), bound)
                lost = connection_lost(raised.value)
                assert lost is not None and "did not answer" in unavailable_reason(lost), repr(raised.value)
                r = await asyncio.wait_for(client.get("/v1/groups/frozen/episodes"), bound)
                assert r.status_code == 503 and "Postgres did not answer" in r.json()["error"]["message"], r.text
                thaw(frozen)
                frozen = []
                [episode] = await asyncio.wait_for(memory.get_episodes("frozen"), bound)
                assert episode.content == "Ann: I work at Acme."
                assert (await client.get("/v1/groups/frozen/episodes")).status_code == 200
        finally:
            thaw(frozen)
            await memory.close()
    finally:
        if (data / "postmaster.pid").exists():
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)


def test_a_frozen_server_fails_a_psycopg_call_and_a_long_query_is_waited_for(tmp_path, monkeypatch):
    """The command line's connections (init, doctor, grant, `pgmemory sql`: psycopg) waited for ever
    on a server that stopped answering (every process SIGSTOPped): a call now ends with "did not
    answer" once the statement timeout and a margin have passed and a new connection got no answer
    either. A query that runs long on a server that answers (no statement timeout: init's index
    builds) is waited for."""
    import threading

    from pgserver._commands import pg_ctl

    from pgmemory.storage import connect as connect_module
    from pgmemory.storage.connect import connect, connection_lost, unavailable_reason

    data = tmp_path / "pgdata"
    dsn = resolve_dsn(Settings(None, data))
    user = "pgserver" if os.geteuid() == 0 else None
    monkeypatch.setenv("PGMEMORY_STATEMENT_TIMEOUT", "1")
    monkeypatch.setattr(connect_module, "ANSWER_MARGIN_S", 0.5)  # (a bound of 1.5 s here)
    frozen: list[int] = []
    try:
        with connect(dsn, autocommit=True) as conn:
            conn.execute("SET statement_timeout = 0")
            assert conn.execute("SELECT pg_sleep(3), 'waited'").fetchone()[1] == "waited"  # > the bound: answered
            postmaster = int((data / "postmaster.pid").read_text().split()[0])
            frozen = freeze(postmaster)
            outcome: list[BaseException | None] = []

            def call() -> None:
                try:
                    conn.execute("SELECT 1")
                    outcome.append(None)
                except BaseException as exc:  # noqa: BLE001 - what the call raised is the result
                    outcome.append(exc)

            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            caller.join(60)  # the hang guard: a bound, not a timing assert
            assert outcome and outcome[0] is not None, "the call on a frozen server did not end"
            lost = connection_lost(outcome[0])
            assert lost is not None and "did not answer" in unavailable_reason(lost), repr(outcome[0])
            thaw(frozen)
            frozen = []
        with connect(dsn) as conn:  # the server, answering again, serves
            assert conn.execute("SELECT 1").fetchone()[0] == 1
    finally:
        thaw(frozen)
        if (data / "postmaster.pid").exists():
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)
