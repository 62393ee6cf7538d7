"""A real Citus cluster for tests: a coordinator and two workers on loopback ports.

Citus is on no package registry reachable here, so it is built from the vendored source
(the 'shared' folder: citus/build-citus.sh and vendor/citus-14.0.1.tar.gz) against the
embedded PostgreSQL, into the repository's ignored .cache/citus (only the first run pays,
~2 CPU-minutes). Where the shared folder is: $PGMEMORY_CITUS_SOURCE, else ../shared next
to the repository. $PGMEMORY_CITUS_DSN names an existing cluster's coordinator instead.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.servers import SERVER_USER, _quote, ensure_server_user

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "citus"
BUILD_SCRIPT = Path("citus") / "build-citus.sh"
TARBALL = Path("vendor") / "citus-14.0.1.tar.gz"
WORKERS = 2
DATABASE = "pgmemory"


class CitusUnavailable(Exception):
    """The cluster cannot be had here; the message says why."""


def shared_folder() -> Path:
    """The folder holding citus/build-citus.sh and vendor/citus-*.tar.gz."""
    explicit = os.environ.get("PGMEMORY_CITUS_SOURCE")
    folder = Path(explicit) if explicit else ROOT.parent / "shared"
    if not (folder / BUILD_SCRIPT).is_file() or not (folder / TARBALL).is_file():
        where = "PGMEMORY_CITUS_SOURCE" if explicit else "../shared next to the repository"
        raise CitusUnavailable(
            f"no vendored Citus source at {folder} ({where}: needs {BUILD_SCRIPT} and {TARBALL}); "
            "set PGMEMORY_CITUS_SOURCE to the folder holding them, or PGMEMORY_CITUS_DSN to a Citus coordinator")
    return folder


def build() -> tuple[Path, str]:
    """Build Citus into .cache/citus (skipped when already built); (bin dir, LD_LIBRARY_PATH)."""
    import sys

    script = shared_folder() / BUILD_SCRIPT
    result = subprocess.run(["bash", str(script), sys.executable, str(CACHE)], capture_output=True, text=True,
                            timeout=1800)
    if result.returncode != 0:
        raise CitusUnavailable(f"building Citus failed ({script}): {result.stderr.strip()[-2000:]}")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return Path(lines[-2]), lines[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    """A running coordinator and its workers; stop() ends them. workers=0 and citus=False is one
    plain PostgreSQL node of the same build and settings (the one-node baseline of bench/citus.py)."""

    root: Path
    bindir: Path
    libs: str
    workers: int = WORKERS
    citus: bool = True
    ports: list[int] = field(default_factory=list)

    @property
    def coordinator_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[0]}/{DATABASE}"

    def _run(self, exe: str, *args: str, timeout: int = 120) -> None:
        cmd = [str(self.bindir / exe), *args]
        env = {**os.environ, "LD_LIBRARY_PATH": self.libs}
        if os.geteuid() == 0:
            cmd = ["su", "-s", "/bin/sh", SERVER_USER, "-c",
                   f"LD_LIBRARY_PATH={_quote(self.libs)} " + " ".join(_quote(c) for c in cmd)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if result.returncode != 0:
            raise CitusUnavailable(f"{exe} failed: {(result.stderr or result.stdout).strip()[-1500:]}")

    def start(self) -> None:
        if os.geteuid() == 0:
            ensure_server_user()
            shutil.chown(self.root, SERVER_USER, SERVER_USER)
            for parent in self.root.parents:
                parent.chmod(parent.stat().st_mode | 0o055)
        for i in range(self.workers + 1):
            data = self.root / f"n{i}"
            self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=utf8",
                      "--no-sync")  # a throw-away cluster (fsync is off too): no flush of the new files
            with open(data / "postgresql.conf", "a") as conf:
                conf.write(("shared_preload_libraries = 'citus'\n" if self.citus else "") + "max_connections = 200\n"
                           "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                           "shared_buffers = 64MB\nmax_worker_processes = 32\n")
            self.ports.append(_free_port())
            self.start_node(i)
        if self.citus:
            create_database(self.ports, DATABASE)
        else:
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.ports[0]}/postgres", autocommit=True) as conn:
                conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(DATABASE)))

    def start_node(self, i: int) -> None:
        """Start node i (0: the coordinator) on its port."""
        self._run("pg_ctl", "-D", str(self.root / f"n{i}"), "-w", "-l", str(self.root / f"n{i}.log"),
                  "-o", f"-p {self.ports[i]} -h 127.0.0.1 -k {self.root}", "start")

    def stop_node(self, i: int) -> None:
        """Stop node i as an outage does (fast shutdown: its sessions are cut); start_node brings it back."""
        self._run("pg_ctl", "-D", str(self.root / f"n{i}"), "-m", "fast", "-w", "stop", timeout=60)

    def stop(self) -> None:
        for i in range(len(self.ports)):
            try:
                self._run("pg_ctl", "-D", str(self.root / f"n{i}"), "-m", "immediate", "stop", timeout=60)
            except CitusUnavailable:
                pass


def create_database(ports: list[int], name: str) -> str:
    """Create database `name` on every node of a running loopback cluster (coordinator first),
    with the citus extension, and register the workers in it: Citus keeps its node list per
    database. Returns the coordinator's DSN."""
    for port in ports:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/{name}", autocommit=True) as conn:
            conn.execute("CREATE EXTENSION citus")
    dsn = f"postgresql://postgres@127.0.0.1:{ports[0]}/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (ports[0],))
        for port in ports[1:]:
            conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
    return dsn


def node_ports(coordinator_dsn: str) -> list[int]:
    """The ports of a loopback cluster's nodes, coordinator first (from its node list)."""
    with psycopg.connect(coordinator_dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary' ORDER BY groupid <> 0, nodeport").fetchall()]


def start_cluster(root: Path, workers: int = WORKERS, citus: bool = True) -> Cluster:
    """Build (cached) and start a coordinator + `workers` workers under root (or, with
    citus=False, one plain node)."""
    bindir, libs = build()
    cluster = Cluster(root, bindir, libs, workers, citus)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster
