"""Migration runner: idempotent, checksum-guarded, atomic."""
from __future__ import annotations

import dataclasses

import psycopg
import pytest

from pgmemory.errors import MigrationError
from pgmemory.storage import migrate


def test_second_run_applies_nothing(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        first = migrate.apply_migrations(conn)
        conn.commit()
        second = migrate.apply_migrations(conn)
        conn.commit()
        versions = conn.execute("SELECT version, checksum FROM pgmemory.schema_migrations").fetchall()
    assert first == [m.name for m in migrate.load_migrations()]
    assert second == []
    assert [v for v, _ in versions] == [m.version for m in migrate.load_migrations()]
    assert versions[0][1] == migrate.load_migrations()[0].checksum


def test_edited_migration_is_refused(empty_dsn):
    migrations = migrate.load_migrations()
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        migrate.apply_migrations(conn, migrations)
        conn.commit()
        edited = [dataclasses.replace(migrations[0], sql=migrations[0].sql + "\n-- edited\n"),
                  *migrations[1:]]
        with pytest.raises(MigrationError, match=r"0001_schema\.sql was edited after it was applied"):
            migrate.apply_migrations(conn, edited)


def test_failing_migration_leaves_nothing(empty_dsn):
    broken = [migrate.Migration(1, "0001_broken.sql", "CREATE TABLE pgmemory.a (x int); SELECT 1/0;")]
    with psycopg.connect(empty_dsn) as conn:
        with pytest.raises(MigrationError, match="0001_broken.sql failed: division by zero"):
            with conn.transaction():
                migrate.apply_migrations(conn, broken)
        assert conn.execute("SELECT to_regclass('pgmemory.a')").fetchone()[0] is None
        assert conn.execute("SELECT to_regnamespace('pgmemory')").fetchone()[0] is None


def test_badly_named_file_is_refused(tmp_path):
    (tmp_path / "0001_ok.sql").write_text("SELECT 1;")
    (tmp_path / "2_bad.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"2_bad\.sql is not named NNNN_name\.sql"):
        migrate.load_migrations(tmp_path)
