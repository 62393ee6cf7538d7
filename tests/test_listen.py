"""`pgmemory listen`: the embedded server accepts TCP on loopback with password authentication
only when asked, keeps it across restarts, and goes back to its socket with --off."""
from __future__ import annotations

import os
import socket

import asyncpg
import psycopg
import pytest

from pgmemory.errors import InvalidInput
from pgmemory.storage import listen
from pgmemory.storage.embedded import embedded_dsn
from pgmemory.surfaces.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def own_server(tmp_path):
    """An embedded server of its own (listening changes restart it), stopped afterwards."""
    data_dir = tmp_path / "pgdata"
    dsn = embedded_dsn(data_dir)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE bi_reader LOGIN PASSWORD 'open sesame'")
    yield data_dir
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user="pgserver" if os.geteuid() == 0 else None,
           timeout=60)


def tcp(port: int, password: str | None) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=port, user="bi_reader", dbname="postgres", password=password,
                           connect_timeout=5)


def test_listen_on_loopback_with_passwords_then_off(own_server, capsys, monkeypatch):
    port = free_port()
    with pytest.raises(psycopg.OperationalError):  # socket only by default
        tcp(port, "open sesame")
    monkeypatch.setenv("PGMEMORY_DATA_DIR", str(own_server))
    monkeypatch.delenv("PGMEMORY_DSN", raising=False)
    assert main(["listen", "--port", str(port)]) == 0
    with tcp(port, "open sesame") as conn:
        assert conn.execute("SELECT current_user, inet_server_addr()::text").fetchone() == ("bi_reader",
                                                                                             "127.0.0.1/32")
    for wrong in (None, "guess"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            tcp(port, wrong)
    capsys.readouterr()
    assert main(["dsn", "--tcp", "--user", "bi_reader"]) == 0
    assert capsys.readouterr().out.strip() == f"postgresql://bi_reader@127.0.0.1:{port}/postgres"
    # The socket DSN follows the server to its new port; the owner still connects there.
    with psycopg.connect(embedded_dsn(own_server)) as conn:
        assert conn.execute("SELECT current_setting('port')::int").fetchone() == (port,)
    assert main(["listen", "--off"]) == 0
    with pytest.raises(psycopg.OperationalError):
        tcp(port, "open sesame")
    with psycopg.connect(embedded_dsn(own_server)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


async def test_a_running_process_follows_the_server_to_its_new_port(own_server, monkeypatch):
    """`pgmemory listen` restarts the server on another port, which moves its socket: a pool and a
    DSN made before (a running `pgmemory serve` or worker) reconnect there, not fail until restarted."""
    import asyncio

    from pgmemory.storage.connect import connect, create_pool

    old_dsn = embedded_dsn(own_server)
    pool = await create_pool(old_dsn, max_size=2)
    try:
        assert await pool.fetchval("SELECT current_setting('port')::int") == 5432
        monkeypatch.setenv("PGMEMORY_DATA_DIR", str(own_server))
        monkeypatch.delenv("PGMEMORY_DSN", raising=False)
        for args, port in ((["listen", "--port", str(new := free_port())], new), (["listen", "--off"], 5432)):
            assert await asyncio.to_thread(main, args) == 0
            for _ in range(3):  # the idle connection the restart ended fails once
                try:
                    assert await pool.fetchval("SELECT current_setting('port')::int") == port
                    break
                except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                    await asyncio.sleep(0.2)
            else:
                pytest.fail(f"the pool did not reconnect after {args}")
            with connect(old_dsn) as conn:
                assert conn.execute("SELECT current_setting('port')::int").fetchone() == (port,)
    finally:
        await pool.close()


def test_listen_refuses_bad_addresses_and_other_servers(monkeypatch, capsys):
    with pytest.raises(InvalidInput, match="--host must be an IP address"):
        listen.check_address("localhost; rm -rf /", 55432)
    with pytest.raises(InvalidInput, match="--port must be between 1024 and 65535"):
        listen.check_address("127.0.0.1", 80)
    monkeypatch.setenv("PGMEMORY_DSN", "postgresql://someone@db.example.com/x")
    assert main(["listen"]) == 2
    assert "is for the embedded server" in capsys.readouterr().err
