"""Shared fixtures: one real embedded Postgres per test session, fresh databases on it."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
import pytest

from pgmemory.storage.connect import resolve_dsn
from pgmemory.config import Settings
from pgmemory.storage.setup import init_database
from tests.servers import BareServer, create_database, drop_database, ensure_server_user

DIM = 384


@pytest.fixture(scope="session")
def admin_dsn(tmp_path_factory) -> str:
    """DSN of the test server: PGMEMORY_TEST_DSN if set, else a fresh embedded server."""
    explicit = os.environ.get("PGMEMORY_TEST_DSN")
    if explicit:
        return explicit
    data_dir = tmp_path_factory.mktemp("pgdata")
    return resolve_dsn(Settings(dsn=None, data_dir=Path(data_dir)))


@pytest.fixture
def empty_dsn(admin_dsn):
    """A brand-new empty database (no extensions, no schema), dropped afterwards."""
    dsn = create_database(admin_dsn)
    yield dsn
    drop_database(admin_dsn, dsn)


@pytest.fixture(scope="session")
def db_dsn(admin_dsn) -> str:
    """A database initialised once for the session; tests isolate by group id."""
    dsn = create_database(admin_dsn)
    with psycopg.connect(dsn) as conn:
        init_database(conn, DIM)
    return dsn


@pytest.fixture
def conn(db_dsn):
    """A psycopg connection to the initialised database."""
    with psycopg.connect(db_dsn) as c:
        yield c


@pytest.fixture
def group() -> str:
    """A group id no other test uses."""
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def server_without_age(tmp_path_factory):
    """A PostgreSQL server that has pgvector but neither AGE nor pg_textsearch."""
    ensure_server_user()
    server = BareServer(tmp_path_factory.mktemp("noage"), without=("age", "pg_textsearch"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server_without_vector(tmp_path_factory):
    """A PostgreSQL server without pgvector."""
    ensure_server_user()
    server = BareServer(tmp_path_factory.mktemp("novector"), without=("vector", "vectorscale"))
    yield server
    server.stop()
