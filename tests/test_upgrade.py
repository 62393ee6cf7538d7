"""A database left by an older pgmemory, met by today's code through a login that is not the owner
(an app login made with `pgmemory grant --app`): every surface says in one line that the owner must
run `pgmemory init`, and doctor does not call such a database healthy."""
from __future__ import annotations

import psycopg
import pytest

from pgmemory.errors import MigrationError, SetupError
from pgmemory.storage import grants, migrate
from pgmemory.storage.app_login import login_dsn
from pgmemory.storage.setup import init_database
from tests.test_cli import run_cli

DIM = 384
APP = "upgrade_app"


@pytest.fixture
def older_database(empty_dsn):
    """An initialised database with an app login, then made to look as an older pgmemory left it:
    its last migration not applied (the table's row gone), its stored SQL another version's."""
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, DIM, embedder=f"hash:{DIM}")
        grants.grant(conn, APP, ["g"], kind="app", create_password="pw")
        last = migrate.load_migrations()[-1]
        conn.execute("DELETE FROM pgmemory.schema_migrations WHERE version = %s", (last.version,))
        conn.execute("UPDATE pgmemory.settings SET value = to_jsonb('older'::text) WHERE key = 'sql_fingerprint'")
        conn.commit()
    yield login_dsn(empty_dsn, APP, "pw")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {APP}")
        conn.execute(f"DROP ROLE {APP}")


def test_init_by_an_app_login_names_the_owner(older_database):
    result = run_cli("init", dsn=older_database)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "run `pgmemory init` as the database owner" in result.stderr
    assert "pgmemory grant" not in result.stderr  # the login already is a read-write one


def test_init_database_by_an_app_login_raises_setup_error(older_database):
    with psycopg.connect(older_database) as conn:
        with pytest.raises(SetupError, match=r"as the database owner"):
            init_database(conn, DIM, embedder=f"hash:{DIM}")


def test_doctor_by_an_app_login_reports_the_pending_upgrade(older_database):
    result = run_cli("doctor", dsn=older_database)
    assert result.returncode == 1, result.stdout
    assert "[FAIL] migrations" in result.stdout and "1 pending" in result.stdout
    assert "[FAIL] stored SQL" in result.stdout
    assert "fix: run `pgmemory init` as the database owner" in result.stdout


def test_doctor_reports_stored_sql_of_another_version(db_dsn):
    """Only sql/ changed between the versions (no new migration): the owner's doctor says so too."""
    with psycopg.connect(db_dsn) as conn:
        stored = conn.execute("SELECT value FROM pgmemory.settings WHERE key = 'sql_fingerprint'").fetchone()[0]
        conn.execute("UPDATE pgmemory.settings SET value = to_jsonb('older'::text) WHERE key = 'sql_fingerprint'")
        conn.commit()
        try:
            result = run_cli("doctor", dsn=db_dsn)
        finally:
            conn.execute("UPDATE pgmemory.settings SET value = to_jsonb(%s::text) WHERE key = 'sql_fingerprint'",
                         (stored,))
            conn.commit()
    assert result.returncode == 1, result.stdout
    assert "[FAIL] stored SQL" in result.stdout
    assert run_cli("doctor", dsn=db_dsn).returncode == 0


def test_an_older_pgmemory_refuses_a_database_a_newer_one_upgraded(empty_dsn):
    """A process of the previous version that opens the database again after the upgrade (a
    rolling deploy, a restart) must not put its stored SQL back over the newer schema."""
    from pgmemory.memory import ensure_initialised

    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, DIM, embedder=f"hash:{DIM}")
        conn.execute("UPDATE pgmemory.settings SET value = to_jsonb('newer'::text) WHERE key = 'sql_fingerprint'")
        conn.execute("INSERT INTO pgmemory.schema_migrations (version, name, checksum)"
                     " VALUES (9999, '9999_from_the_future.sql', 'x')")
        conn.commit()
    for surface in (lambda: run_cli("init", dsn=empty_dsn), lambda: run_cli("search", "x", "--group", "g", dsn=empty_dsn)):
        result = surface()
        assert result.returncode == 2, result.stdout + result.stderr
        assert "upgraded by a newer pgmemory (migration 9999_from_the_future.sql" in result.stderr
        assert "Traceback" not in result.stderr
    with pytest.raises(MigrationError, match="newer pgmemory"):
        ensure_initialised(empty_dsn, DIM, f"hash:{DIM}")
    with psycopg.connect(empty_dsn) as conn:  # the newer version's stored SQL was left alone
        assert conn.execute("SELECT value FROM pgmemory.settings WHERE key = 'sql_fingerprint'").fetchone()[0] == "newer"
    doctor = run_cli("doctor", dsn=empty_dsn)
    assert doctor.returncode == 1 and "[FAIL] migrations" in doctor.stdout
    assert "install the pgmemory version that upgraded it" in doctor.stdout
