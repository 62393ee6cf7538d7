"""A Memory opened without a DSN on the embedded server runs as the restricted app login: init
as the owner, everything else subject to row-level security; the login's own connections can
narrow what they see but never widen what it was granted."""
from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import asyncpg
import psycopg
import pytest

from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.app_login import APP_LOGIN, SECRET_FILE, app_dsn
from pgmemory.storage.embedded import embedded_dsn
from pgmemory.storage.doctor import run_checks


@pytest.fixture
def own_server(tmp_path, monkeypatch):
    """An embedded server of its own as the default (no PGMEMORY_DSN), stopped afterwards."""
    data_dir = tmp_path / "pgdata"
    owner = embedded_dsn(data_dir)
    monkeypatch.setenv("PGMEMORY_DATA_DIR", str(data_dir))
    monkeypatch.delenv("PGMEMORY_DSN", raising=False)
    yield data_dir, owner
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user="pgserver" if os.geteuid() == 0 else None,
           timeout=60)


async def test_default_memory_runs_as_the_app_login_and_cannot_widen_it(own_server):
    data_dir, owner = own_server
    async with Memory.open(embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        for group, line in (("team-a", "I work at Acme in Boston."), ("team-b", "I work at Globex in Berlin.")):
            await memory.add_episode(group, line, actor="Alice", reference_time=datetime(2024, 1, 1, tzinfo=timezone.utc))
        assert stat.S_IMODE((data_dir / SECRET_FILE).stat().st_mode) == 0o600
        async with memory.pool.acquire() as conn:
            assert await conn.fetchval("SELECT current_user") == APP_LOGIN
            # Narrowed to team-a, raw SQL on the Memory's own connection reads nothing of team-b.
            await conn.execute("SELECT set_config('pgmemory.groups', '[\"team-a\"]', false)")
            for table in ("episodes", "facts", "entities", "episode_mentions"):
                assert await conn.fetchval(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = 'team-b'") == 0
                assert await conn.fetchval(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = 'team-a'") > 0
            # What it may see is not its own to change.
            for widen in ("INSERT INTO pgmemory.role_groups (role_name, group_id) VALUES (current_user, 'team-b')",
                          "UPDATE pgmemory.role_groups SET group_id = 'team-b'",
                          f"ALTER ROLE {APP_LOGIN} BYPASSRLS",
                          "SET ROLE postgres"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(widen)
            await conn.execute("SET row_security = off")  # refused to read instead of bypassing
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                await conn.fetchval("SELECT count(*) FROM pgmemory.facts")
            await conn.execute("RESET row_security")
            await conn.execute("SELECT set_config('pgmemory.groups', '', false)")
        # Its own API still serves every group it writes.
        assert (await memory.search("Globex Berlin", group_ids=["team-b"])).facts
    # Processes opening at once find the login made (under the schema lock) and change nothing.
    with ThreadPoolExecutor(4) as pool:
        dsns = set(pool.map(lambda _: app_dsn(owner, data_dir), range(4)))
    assert len(dsns) == 1
    with psycopg.connect(dsns.pop()) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (APP_LOGIN,)
        # doctor as the login itself: no superuser-only setting read (it died with a traceback)
        checks = {c.name: c for c in run_checks(conn)}
        assert "not readable" in checks["shared_preload_libraries"].detail
        assert all(c.status != "fail" for c in checks.values()), [c for c in checks.values() if c.status == "fail"]
    with psycopg.connect(owner) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,)
        assert conn.execute("SELECT count(DISTINCT group_id) FROM pgmemory.episodes").fetchone() == (2,)
        assert {c.name: c.status for c in run_checks(conn, embedded=True)}["app login"] == "ok"
        owner_check = {c.name: c for c in run_checks(conn)}["app login"]
        assert owner_check.status == "warn" and "pgmemory grant app_user '*' --app --create" in owner_check.fix


async def test_the_app_login_erases_an_episode_without_an_error(own_server):
    """An erase through the default Memory (the app login, no right on the graph mirror's schema)
    succeeds and says so (it used to commit, then fail naming pgmemory_graph in its VACUUM), and
    VACUUMs the episodes' table (MAINTAIN: Postgres skipped it for a non-owner, with a warning)."""
    _, owner = own_server
    vacuums = "SELECT vacuum_count FROM pg_stat_all_tables WHERE relid = 'pgmemory.episodes'::regclass"
    async with Memory.open(embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        for eid, line in (("x1", "Ann works at Hooli."), ("x2", "Bob works at Hooli.")):
            await memory.add_episode("g-erase", line, actor="Ann", episode_id=eid,
                                     reference_time=datetime(2024, 1, 1, tzinfo=timezone.utc))
        with psycopg.connect(owner, autocommit=True) as conn:
            before = conn.execute(vacuums).fetchone()[0]
        out = await memory.delete_episode("g-erase", "x1", erase=True)
        assert out.erased
        assert [e.content for e in await memory.get_episodes("g-erase")] == ["Bob works at Hooli."]
        with psycopg.connect(owner, autocommit=True) as conn:
            assert conn.execute(vacuums).fetchone()[0] > before
