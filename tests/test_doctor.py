"""`pgmemory doctor` and connection errors, through the real CLI."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psycopg

from pgmemory.storage.doctor import healthy, run_checks


def run_cli(*args: str, dsn: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PGMEMORY_DSN": dsn, "PGMEMORY_EMBEDDER": "hash"}
    return subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_doctor_healthy_after_init(db_dsn):
    result = run_cli("doctor", dsn=db_dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ok  ] age                        1.7.0" in result.stdout
    assert "[ok  ] embedding_dim              384" in result.stdout
    assert result.stdout.strip().endswith("healthy")


def test_doctor_on_database_without_extensions(empty_dsn):
    result = run_cli("doctor", dsn=empty_dsn)
    assert result.returncode == 1
    assert "[FAIL] vector" in result.stdout and "not created in this database" in result.stdout
    assert "[FAIL] schema" in result.stdout and "fix: run `pgmemory init`" in result.stdout


def test_doctor_on_server_without_pgvector(server_without_vector):
    with psycopg.connect(server_without_vector.dsn) as conn:
        checks = {c.name: c for c in run_checks(conn)}
        assert not healthy(list(checks.values()))
    assert checks["vector"].status == "fail"
    assert "postgresql-NN-pgvector" in checks["vector"].fix
    result = run_cli("init", dsn=server_without_vector.dsn)
    assert result.returncode == 2
    assert "pgvector extension is not installed" in result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_without_age_warns_but_is_healthy(server_without_age):
    assert run_cli("init", dsn=server_without_age.dsn).returncode == 0
    result = run_cli("doctor", dsn=server_without_age.dsn)
    assert result.returncode == 0, result.stdout
    assert "[WARN] age" in result.stdout and "recursive SQL" in result.stdout


def test_closed_port_is_named_without_traceback():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_cli("doctor", dsn=f"postgresql://postgres@127.0.0.1:{port}/postgres")
    assert result.returncode == 2
    assert f"cannot connect to Postgres at 127.0.0.1:{port}" in result.stderr
    assert "PGMEMORY_DSN" in result.stderr and "Traceback" not in result.stderr


def test_silent_server_times_out_within_five_seconds():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the TCP handshake, never answers
        port = listener.getsockname()[1]
        started = time.monotonic()
        result = run_cli("doctor", dsn=f"postgresql://postgres@127.0.0.1:{port}/postgres")
        elapsed = time.monotonic() - started
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr
    assert elapsed < 15  # 5 s connect timeout plus interpreter start-up
