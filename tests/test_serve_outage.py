"""Both servers while their Postgres is stopped and after it is back, as real processes on a
throwaway embedded server: a REST client on one kept-alive connection gets a JSON 503 for every
request (not a reset connection after the first), an MCP call a one-line 'database unavailable',
and both serve again once the server is up, without a restart."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import httpx
import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pgmemory.config import Settings
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.setup import init_database

BOUND_S = 120  # a bound on waits (start-up, shutdown), not a timing assert


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def outage(tmp_path_factory):
    """An embedded server of its own (stopped and started by the tests), initialised, with a key
    for group 'up'; yields (env for `pgmemory` commands, stop(), start(), key)."""
    from pgserver._commands import pg_ctl

    data = tmp_path_factory.mktemp("outage") / "pgdata"
    dsn = resolve_dsn(Settings(None, data))
    with psycopg.connect(dsn) as conn:
        init_database(conn, 384)
    env = {**os.environ, "PGMEMORY_DATA_DIR": str(data), "PGMEMORY_EMBEDDER": "hash"}
    for name in ("PGMEMORY_DSN", "PGMEMORY_LLM_BASE_URL", "OPENAI_API_KEY"):
        env.pop(name, None)
    user = "pgserver" if os.geteuid() == 0 else None
    made = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "keys", "create", "outage",
                           "--write", "up"], env=env, capture_output=True, text=True, timeout=BOUND_S)
    assert made.returncode == 0, made.stderr
    key = made.stdout.split("secret (shown once, store it now): ")[1].strip()

    def stop() -> None:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)

    def start() -> None:  # in another process: pgserver keeps this one's server as if still running
        started = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "dsn"], env=env,
                                 capture_output=True, text=True, timeout=BOUND_S)
        assert started.returncode == 0, started.stderr
    try:
        yield env, stop, start, key
    finally:
        if (data / "postmaster.pid").exists():
            stop()


def wait_for(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + BOUND_S
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)


def test_rest_answers_503_on_one_connection_while_postgres_is_down(outage):
    env, stop, start, key = outage
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", "serve", "--port", str(port),
                             "--workers", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{base}/health", proc)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            search = {"query": "where does Ann live", "group_ids": ["up"]}
            assert client.post("/v1/search", json=search).status_code == 200
            stop()
            try:
                assert client.get("/health").json() == {"status": "ok"}
                ready = client.get("/ready")
                # The probe says why in words, as the other 503s do (not an exception's class name).
                assert ready.status_code == 503 and ready.json()["error"] == {
                    "code": "not_ready", "message": "database not ready: cannot connect to Postgres (is the server running?)"}
                # The same kept-alive connection, request after request: a JSON 503 each time.
                for method, url, body in [("POST", "/v1/search", search), ("GET", "/v1/groups/up/episodes", None),
                                          ("POST", "/v1/groups/up/episodes", {"content": "Ann: I live in Oslo."}),
                                          ("POST", "/v1/search", search)]:
                    r = client.request(method, url, json=body)
                    assert r.status_code == 503, (url, r.text)
                    assert r.json()["error"]["code"] == "database_unavailable"
            finally:
                start()
            assert client.get("/ready").json() == {"status": "ready"}
            r = client.post("/v1/groups/up/episodes?wait=true", json={
                "content": "Ann: I live in Oslo.", "reference_time": "2024-01-01T00:00:00Z"})
            assert r.status_code == 200 and r.json()["status"] == "done", r.text
            assert "Oslo" in client.post("/v1/search", json=search).text
    finally:
        proc.terminate()
        out = proc.communicate(timeout=BOUND_S)[0]
    assert "Traceback" not in out, out


async def test_mcp_says_database_unavailable_while_postgres_is_down(outage):
    env, stop, start, key = outage
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", "mcp", "--transport", "http", "--port",
                             str(port), "--group", "up", "--workers", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await asyncio.to_thread(wait_for, url, proc)
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
        async with Client(streamable_http_client(url, http_client=http)) as client:
            assert not (await client.call_tool("get_episodes", {})).is_error
            await asyncio.to_thread(stop)
            try:
                for tool, args in [("get_status", {}), ("get_episodes", {}), ("search_memory_facts", {"query": "Oslo"}),
                                   ("add_memory", {"name": "n", "episode_body": "Ann: I live in Oslo."})]:
                    result = await client.call_tool(tool, args)
                    [text] = [c.text for c in result.content]
                    if tool == "get_status" and not result.is_error:  # the health tool: its key still cached
                        assert result.structured_content["status"] == "error", text
                        continue
                    assert result.is_error and text.startswith(f"Error executing tool {tool}: database unavailable: "), \
                        (tool, text)
                    assert "\n" not in text
            finally:
                await asyncio.to_thread(start)
            result = await client.call_tool("get_status", {})
            assert not result.is_error and result.structured_content["status"] == "ok", result.content
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.communicate, timeout=BOUND_S)
