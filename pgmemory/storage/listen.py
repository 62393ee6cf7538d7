"""Opt-in TCP for the embedded server (`pgmemory listen`), so BI tools can connect.

pgserver starts Postgres on a Unix socket only (`-h ""` on its command line). Listening is
recorded in the data directory (pgmemory_listen.json) and applied by restarting the server with
`-h HOST -p PORT`; every later start of the embedded server re-applies it. Before the first TCP
connection is possible, every `host` line of pg_hba.conf requires a password (scram-sha-256);
socket connections of the owner stay as they were.
"""
from __future__ import annotations

import ipaddress
import json
import shlex
from pathlib import Path

from pgmemory.errors import InvalidInput, SetupError

LISTEN_FILE = "pgmemory_listen.json"
DEFAULT_HOST = "127.0.0.1"


def requested(data_dir: Path) -> dict | None:
    """{"host", "port"} when TCP listening is switched on for this data directory, else None."""
    try:
        return json.loads((data_dir / LISTEN_FILE).read_text())
    except (OSError, ValueError):
        return None


def check_address(host: object, port: object) -> tuple[str, int]:
    """A literal IP address and a port between 1024 and 65535."""
    try:
        ipaddress.ip_address(host)
    except (TypeError, ValueError):
        raise InvalidInput(f"--host must be an IP address such as 127.0.0.1, got {host!r}") from None
    if not isinstance(port, int) or isinstance(port, bool) or not 1024 <= port <= 65535:
        raise InvalidInput(f"--port must be between 1024 and 65535, got {port!r}")
    return str(host), port


def require_passwords(data_dir: Path) -> None:
    """Every `host` rule of pg_hba.conf authenticates with scram-sha-256 (trust on TCP would let
    anyone who reaches the port in as any role)."""
    hba = data_dir / "pg_hba.conf"
    lines = hba.read_text().splitlines()
    changed = []
    for line in lines:
        fields = line.split()
        if fields and fields[0].startswith("host") and fields[-1] in ("trust", "password", "md5"):
            line = line[: line.rstrip().rfind(fields[-1])] + "scram-sha-256"
        changed.append(line)
    if changed != lines:
        hba.write_text("\n".join(changed) + "\n")


def _options(data_dir: Path, host: str | None, port: int | None) -> str:
    """The server's current command-line options (postmaster.opts) with -h/-p replaced."""
    words = shlex.split((data_dir / "postmaster.opts").read_text())[1:]
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("-h", "-p", "-D"):
            skip = True
            continue
        kept.append(word)
    kept += ["-h", host or ""] + (["-p", str(port)] if port else [])
    return " ".join(shlex.quote(w) for w in kept)


def listening(data_dir: Path) -> tuple[str, int] | None:
    """(address, port) the running server listens on over TCP, from postmaster.pid."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 6 or not lines[5].strip():
        return None
    return lines[5].strip(), int(lines[3])


def apply(server, data_dir: Path) -> None:
    """Restart the embedded server if what it listens on differs from what is requested."""
    from pgserver._commands import pg_ctl

    want = requested(data_dir)
    target = (want["host"], want["port"]) if want else None
    if listening(data_dir) == target:
        return
    if want:
        require_passwords(data_dir)
    with server._lock:
        try:
            pg_ctl(["-w", "-l", str(server.log), "-o", _options(data_dir, *(target or (None, None))), "restart"],
                   pgdata=server.pgdata, user=server.system_user, timeout=60)
        except Exception as exc:  # noqa: BLE001 - pg_ctl fails in several ways; the log says why
            raise SetupError(f"the embedded server did not restart listening on {target}: {exc}; "
                             f"see {server.log}") from None
        server.ensure_postgres_running()


def record(data_dir: Path, host: str | None, port: int | None) -> None:
    """Record the request (None: socket only); `embedded.start` applies it to the server."""
    path = data_dir / LISTEN_FILE
    if host is None:
        path.unlink(missing_ok=True)
    else:
        host, port = check_address(host, port)
        path.write_text(json.dumps({"host": host, "port": port}))


def tcp_dsn(data_dir: Path, user: str, database: str = "postgres") -> str:
    """postgresql://USER@HOST:PORT/DB for a BI tool (no password in it)."""
    from urllib.parse import quote

    want = requested(data_dir)
    if not want:
        raise InvalidInput("the embedded server does not listen on TCP: run `pgmemory listen` first")
    host = f"[{want['host']}]" if ":" in want["host"] else want["host"]
    return f"postgresql://{quote(user, safe='')}@{host}:{want['port']}/{quote(database, safe='')}"
