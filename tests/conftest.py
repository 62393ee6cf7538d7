"""Shared fixtures: one real embedded Postgres per test session, fresh databases on it."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
import pytest

from pgmemory.config import Settings
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.setup import init_database
from tests.servers import BareServer, create_database, drop_database, ensure_server_user

DIM = 384


@pytest.fixture(scope="session")
def admin_dsn(tmp_path_factory):
    """DSN of the test server: PGMEMORY_TEST_DSN if set, else a fresh embedded server,
    stopped when the session ends."""
    explicit = os.environ.get("PGMEMORY_TEST_DSN")
    if explicit:
        yield explicit
        return
    data_dir = Path(tmp_path_factory.mktemp("pgdata"))
    yield resolve_dsn(Settings(dsn=None, data_dir=data_dir))
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user="pgserver" if os.geteuid() == 0 else None,
           timeout=60)


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
async def memory(db_dsn):
    """A Memory on the initialised database with the offline extractor and the hash embedder."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    m = await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    yield m
    await m.close()


@pytest.fixture
def memory_sync_factory(db_dsn):
    """Open SyncMemory objects on the initialised database (hash embedder unless given)."""
    from pgmemory import SyncMemory
    from pgmemory.providers.embedder import HashEmbedder

    def open_memory(**options):
        options.setdefault("embedder", HashEmbedder())
        return SyncMemory(db_dsn, **options)
    return open_memory


@pytest.fixture
def fake_openai():
    """A local fake OpenAI-compatible server (tests/fake_openai.py), stopped after the test."""
    from tests.fake_openai import FakeOpenAI

    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


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


@pytest.fixture(params=["offline", "llm"])
async def mem(request, db_dsn, fake_openai):
    """A Memory in each extractor mode: the offline rules, and the LLM extractor against the fake
    OpenAI server answering like the rules (tests/belief.py)."""
    from tests.belief import open_memory

    m = await open_memory(request.param, db_dsn, fake_openai)
    yield m
    await m.close()


def _initialised_database(admin_dsn):
    """A brand-new database initialised as `pgmemory init` does, dropped afterwards."""
    dsn = create_database(admin_dsn)
    with psycopg.connect(dsn) as conn:
        init_database(conn, DIM)
    yield dsn
    drop_database(admin_dsn, dsn)


@pytest.fixture(scope="session")
def served_dsn(admin_dsn):
    """An initialised database of the server tests (REST, MCP) only: their in-process queue workers
    then see no other test's pending episodes."""
    yield from _initialised_database(admin_dsn)


@pytest.fixture
def own_dsn(admin_dsn):
    """An initialised database of the test's own: a draining queue worker there takes only this
    test's episodes (the session's database holds other tests')."""
    yield from _initialised_database(admin_dsn)
