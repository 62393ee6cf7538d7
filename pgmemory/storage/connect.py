"""Connections: resolve the DSN (explicit or embedded), open psycopg / asyncpg with clear errors.

psycopg 3 serves the synchronous surfaces (migrations, CLI admin); asyncpg the
engine's hot paths. Both fail fast with DatabaseUnavailable naming host and port.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
from pgvector.asyncpg import register_vector

from pgmemory.config import Settings, Timeouts
from pgmemory.errors import DatabaseUnavailable, WorkerUnreachable, error_line, exception_chain
from pgmemory.storage.embedded import current_dsn, embedded_dsn
from pgmemory.storage.request_groups import NarrowingConnection

CONNECT_TIMEOUT_S = 5
# A pooled query (and the cancel request sent when it times out) waits at most the statement
# timeout plus this long for an answer: the server's statement_timeout answers first when it
# runs, so only a server that stopped answering (frozen, or a network that drops packets) meets
# it, and is then unavailable instead of holding the caller for ever.
ANSWER_MARGIN_S = 5.0
# Session settings of every connection besides the timeouts. On a Citus coordinator, how long a
# call waits for a new connection to a worker (Citus's default is 30 s): a worker that stopped
# answering then fails it within CONNECT_TIMEOUT_S, naming the node. (A placeholder elsewhere.)
CITUS_SETTINGS = {"citus.node_connection_timeout": f"{CONNECT_TIMEOUT_S * 1000}ms"}


def resolve_dsn(settings: Settings | None = None) -> str:
    """The DSN to use: PGMEMORY_DSN if set, else the embedded server's (started if needed)."""
    settings = settings or Settings.from_env()
    if settings.dsn:
        return settings.dsn
    return embedded_dsn(settings.data_dir)


def describe_target(dsn: str) -> str:
    """Human name of the server a DSN points at, without the password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    if str(host).startswith("/"):
        return f"unix socket {host} (port {port})"
    return f"{host}:{port}"


# The server's refusals when its connection slots are taken (53300; psycopg gives no sqlstate then).
_SLOTS_TAKEN = re.compile(r"too many (clients|connections)|remaining connection slots are reserved")


def _unavailable(dsn: str, exc: Exception) -> DatabaseUnavailable:
    reason = error_line(exc)
    if isinstance(exc, asyncpg.exceptions.TooManyConnectionsError) or _SLOTS_TAKEN.search(reason):
        return DatabaseUnavailable(
            f"cannot connect to Postgres at {describe_target(dsn)}: every connection slot is taken "
            f"({reason.rsplit('FATAL:', 1)[-1].strip()}). Close idle clients (pg_stat_activity) or raise "
            "max_connections (or the login's CONNECTION LIMIT), then run the command again.")
    return DatabaseUnavailable(
        f"cannot connect to Postgres at {describe_target(dsn)}: {reason}. "
        "Check that the server is running and reachable and that PGMEMORY_DSN is right, "
        "or unset PGMEMORY_DSN to use the embedded server.")


def _server_answers(dsn: str) -> bool:
    """Does the server answer a new connection within CONNECT_TIMEOUT_S (any answer, a refusal
    included)? Only a frozen or unreachable one does not."""
    try:
        psycopg.connect(current_dsn(dsn), connect_timeout=CONNECT_TIMEOUT_S, autocommit=True).close()
    except psycopg.OperationalError as exc:
        return "timeout expired" not in str(exc)
    return True


class AnsweringConnection(psycopg.Connection):
    """A psycopg connection that gives up on a server that stopped answering. Its statement timeout
    answers for the server while it runs; a frozen server (a hung host, a partition) answers
    nothing, and psycopg would wait for ever. So while a call waits longer than the statement
    timeout + ANSWER_MARGIN_S, a new connection asks the server: no answer within
    CONNECT_TIMEOUT_S, and the call's socket is shut (TimeoutError: "did not answer"); an answer
    (a long query: init builds indexes without a statement timeout) and it waits on, asking again
    after as long. (asyncpg's pools bound their calls with command_timeout instead.)"""

    probe_dsn: str | None = None
    bound_s: float = 0.0

    def wait(self, gen, interval: float = 0.1, timeout: float | None = None):  # type: ignore[override]
        try:
            fd = self.pgconn.socket
        except psycopg.OperationalError:  # (no socket: closed or broken; psycopg says which)
            fd = None
        if not self.probe_dsn or fd is None:
            return super().wait(gen, interval, timeout)
        done, cut = threading.Event(), threading.Event()

        def watch() -> None:
            while not done.wait(self.bound_s):
                # (done again: this call got its answer while the probe waited; the socket now
                # serves the next call, which has its own watch)
                if not _server_answers(self.probe_dsn) and not done.is_set():
                    cut.set()
                    with contextlib.suppress(OSError):
                        with socket.socket(fileno=os.dup(fd)) as sock:
                            sock.shutdown(socket.SHUT_RDWR)  # the waiting call wakes to a closed socket
                    return

        threading.Thread(target=watch, daemon=True, name="pgmemory-answer-watch").start()
        try:
            return super().wait(gen, interval, timeout)
        except psycopg.OperationalError as exc:
            if cut.is_set():
                raise TimeoutError(f"no answer within {self.bound_s:g} s, nor to a new connection within "
                                   f"{CONNECT_TIMEOUT_S} s") from exc
            raise
        finally:
            done.set()


def connect(dsn: str, *, autocommit: bool = False) -> psycopg.Connection:
    """Open a psycopg connection with the statement and lock timeouts (config.Timeouts),
    failing within CONNECT_TIMEOUT_S with a clear error; a call on it that the server stops
    answering fails too (AnsweringConnection)."""
    timeouts = Timeouts.from_env()
    options = " ".join(f"-c {k}={v}" for k, v in {**timeouts.server_settings(), **CITUS_SETTINGS}.items())
    try:
        conn = AnsweringConnection.connect(current_dsn(dsn), autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S,
                                           options=options)
    except psycopg.ProgrammingError as exc:
        raise DatabaseUnavailable(f"invalid DSN: {exc}") from None
    except psycopg.OperationalError as exc:
        raise _unavailable(dsn, exc) from None
    conn.probe_dsn, conn.bound_s = dsn, timeouts.statement_s + ANSWER_MARGIN_S
    return conn


# Errors that mean the server went away (killed, restarted, unreachable), not a bad request.
# asyncpg's InternalClientError ("cannot switch to state ...") is what a pooled connection whose
# server died mid-protocol raises.
_CONNECTION_LOST = (OSError, asyncpg.PostgresConnectionError, asyncpg.exceptions.ConnectionDoesNotExistError,
                    asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.CrashShutdownError,
                    asyncpg.exceptions.CannotConnectNowError, asyncpg.exceptions.InternalClientError)


def _protocol_interrupted(e: BaseException) -> bool:
    """asyncpg's protocol left mid-operation by a dropped socket: "cannot switch to state N;
    another operation is in progress" (seen when the server is killed under load)."""
    return isinstance(e, asyncpg.exceptions.InternalClientError) and "another operation" in str(e)


def connection_lost(exc: BaseException) -> BaseException | None:
    """The lost-connection error behind `exc` (itself, a cause or context, or a member of an
    exception group), or None when the server did not go away."""
    for e in exception_chain(exc):
        if isinstance(e, (WorkerUnreachable, *_CONNECTION_LOST)) or _protocol_interrupted(e):
            return e
        if isinstance(e, psycopg.OperationalError) and (e.sqlstate is None or e.sqlstate[:2] in ("08", "57")):
            return e
    return None


def postgres_lost(exc: BaseException) -> bool:
    """Did `exc` come from losing Postgres (not, say, an LLM or embedding endpoint that refused a
    connection)? Like connection_lost, but an OSError counts only when asyncpg raised it (its
    traceback passes through asyncpg), so a worker gives back episodes for a database restart
    and still marks failed the ones an unreachable provider failed. A server whose connection
    slots are full (53300: max_connections or a CONNECTION LIMIT, taken by other clients) is
    unavailable for now too: waited out the same way."""
    for e in exception_chain(exc):
        if isinstance(e, WorkerUnreachable):  # (a Citus worker that stopped answering: its groups wait)
            return True
        if isinstance(e, (asyncpg.PostgresConnectionError, asyncpg.exceptions.OperatorInterventionError,
                          asyncpg.exceptions.TooManyConnectionsError)) \
                and not isinstance(e, asyncpg.exceptions.QueryCanceledError):
            return True
        if isinstance(e, asyncpg.InterfaceError) and "connection is closed" in str(e) or _protocol_interrupted(e):
            return True
        if isinstance(e, OSError) and any("/asyncpg/" in frame.filename.replace("\\", "/")
                                          for frame in traceback.extract_tb(e.__traceback__)):
            return True
    return False


# Citus's errors for a worker the coordinator cannot reach (connection_management.c,
# remote_commands.c): "connection to the remote node user@host:port failed[ with ...]",
# "connection establishment for node host:port failed"; and a worker's own shutdown relayed, whose
# context names it ("while executing command on host:port").
_REMOTE_NODE = re.compile(r"connection to the remote node (?:[^@\s]*@)?(\S+:\d+) failed"
                          r"|connection establishment for node (\S+:\d+) failed"
                          r"|could not establish any connections to the node (\S+:\d+) after")
_REMOTE_CONTEXT = re.compile(r"while executing command on (\S+:\d+)")


def unreachable_node(exc: BaseException) -> str | None:
    """The Citus worker (host:port) that an error says the coordinator could not reach, else None.
    The coordinator answered: only the groups whose shards that worker holds are affected."""
    for e in exception_chain(exc):
        if isinstance(e, WorkerUnreachable):
            return e.node
        state = getattr(e, "sqlstate", None)
        if not isinstance(state, str) or not isinstance(e, (asyncpg.PostgresError, psycopg.Error)):
            continue
        if state.startswith("08"):
            found = _REMOTE_NODE.search(error_line(e))
            if found:
                return next(node for node in found.groups() if node)
        if state in ("57P01", "57P02", "57P03"):  # the worker shutting down, relayed by the coordinator
            context = getattr(e, "context", None) or getattr(getattr(e, "diag", None), "context", None) or ""
            found = _REMOTE_CONTEXT.search(context)
            if found:
                return found.group(1)
    return None


def unavailable_reason(exc: BaseException) -> str:
    """Why Postgres is unavailable, in a few words: no connection could be made, the connection
    was lost, (a client-side timeout, ANSWER_MARGIN_S) the server stopped answering, or (Citus) a
    worker the coordinator needs for the call is unreachable."""
    node = unreachable_node(exc)
    if node is not None:
        return f"Citus worker {node} is unreachable (the coordinator answers; start the worker)"
    if isinstance(exc, TimeoutError):
        return "Postgres did not answer (the server is frozen, overloaded or unreachable)"
    if isinstance(exc, (ConnectionRefusedError, FileNotFoundError, asyncpg.exceptions.CannotConnectNowError)):
        # (a pool connects on first use: its first query meets a server that is down or starting)
        return "cannot connect to Postgres (is the server running?)"
    return "lost the connection to Postgres"


def lost_connection_error(exc: BaseException) -> DatabaseUnavailable:
    """The one-line error for a server that went away (or stopped answering) mid-command."""
    reason = error_line(exc)
    node = unreachable_node(exc)
    return DatabaseUnavailable(
        f"database unavailable: {unavailable_reason(exc)} ({reason}). Nothing half-written was "
        f"kept; once {'the server' if node is None else 'the worker'} is back, run the same command again "
        "(and `pgmemory retry` for episodes left pending)")


def _json_dumps(value: object) -> str:
    return json.dumps(value, default=str)


class WorkerProbe:
    """Which Citus workers stopped answering, asked of the coordinator on a connection of its own
    (citus.unreachable_workers: a new connection to each worker, CONNECT_TIMEOUT_S to answer).
    One probe at a time per pool; its answer serves the calls that time out meanwhile."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()
        self._last: tuple[float, list[str]] = (0.0, [])

    async def silent_workers(self) -> list[str]:
        """The workers that do not answer now ("host:port (reason)"); [] when all answer or the
        coordinator does not answer either (then it is the one lost)."""
        async with self._lock:
            at, found = self._last
            if time.monotonic() - at > CONNECT_TIMEOUT_S:
                found = await asyncio.to_thread(self._probe)
                self._last = (time.monotonic(), found)
            if found and self.pool is not None:
                # Idle pooled sessions hold connections to the silent worker, which a call would
                # wait on again: replaced by new ones, whose new connection to it fails within
                # CONNECT_TIMEOUT_S (CITUS_SETTINGS), naming it.
                await self.pool.expire_connections()
            return found

    def _probe(self) -> list[str]:
        from pgmemory.storage.citus import unreachable_workers

        try:
            with connect(self.dsn, autocommit=True) as conn:
                # (the workers' connections are given CONNECT_TIMEOUT_S, whatever the statement timeout)
                conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{2 * CONNECT_TIMEOUT_S}s",))
                return unreachable_workers(conn, CONNECT_TIMEOUT_S * 1000)
        except (DatabaseUnavailable, psycopg.Error, OSError):
            return []


class PoolConnection(NarrowingConnection):
    """The pools' connection (a NarrowingConnection). On a Citus coordinator a call that got no
    answer in time (TimeoutError: the statement timeout + ANSWER_MARGIN_S, or its own) is asked
    about: the coordinator answers but waits on a worker that stopped answering (a hung host, a
    partition; it waits on an open connection with no timeout), so the call fails with
    WorkerUnreachable naming that worker, and this session, stuck until the worker answers, is
    dropped at once instead of waiting as long again for its cancel."""

    _probe: WorkerProbe | None = None  # set by the pool's init on a Citus coordinator

    async def _narrowed(self, run: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        probe = self._probe
        if probe is None:
            return await super()._narrowed(run, query, *args, **kwargs)

        async def answered(*a: Any, **k: Any) -> Any:
            try:
                return await run(*a, **k)
            except TimeoutError as exc:
                silent = await probe.silent_workers()
                if not silent:
                    raise
                self.terminate()
                nodes = [worker.split(" ", 1)[0] for worker in silent]
                raise WorkerUnreachable(
                    f"database unavailable: Citus worker {', '.join(nodes)} did not answer (the call got no answer "
                    f"in time, nor did a new connection from the coordinator within {CONNECT_TIMEOUT_S} s: a hung "
                    "host or a network partition; the coordinator answers)", nodes[0]) from exc
        return await super()._narrowed(answered, query, *args, **kwargs)


async def _init_async_connection(conn: asyncpg.Connection, probe: WorkerProbe | None = None) -> None:
    schema, citus = await conn.fetchrow(
        "SELECT (SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
        "         WHERE t.typname = 'vector'),"
        "       EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')")
    if schema:
        await register_vector(conn, schema=schema)
    await conn.set_type_codec("jsonb", encoder=_json_dumps, decoder=json.loads, schema="pg_catalog")
    if citus and isinstance(conn, PoolConnection):
        conn._probe = probe


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release hook: asyncpg still rolls back an open transaction; pgmemory sets no
    session state (locks are transaction-scoped, no LISTEN, no session SET), so the default
    RESET ALL / UNLISTEN round trip on every release is skipped."""


async def create_pool(dsn: str, *, min_size: int = 0, max_size: int = 10,
                      on_acquire: Callable[[asyncpg.Connection], Awaitable[None]] | None = None) -> asyncpg.Pool:
    """Open an asyncpg pool with the vector and jsonb codecs registered and the statement and
    lock timeouts (config.Timeouts) set on every connection at start-up (no extra round trip).
    No connection floor by default: asyncpg would keep reconnecting a dead server in the
    background and log a traceback for each attempt. `on_acquire` runs on a connection each time
    it is handed out (in the acquiring task: it may read that task's context variables; the
    connections are NarrowingConnection, which a server's hook narrows on Citus). A query
    with no timeout of its own is given up after the statement timeout + ANSWER_MARGIN_S (TimeoutError;
    on Citus, WorkerUnreachable when a worker stopped answering: PoolConnection)."""
    timeouts = Timeouts.from_env()
    probe = WorkerProbe(dsn)

    async def init(conn: asyncpg.Connection) -> None:
        await _init_async_connection(conn, probe)

    async def connect_now(dsn: str, **kwargs: Any) -> asyncpg.Connection:
        return await asyncpg.connect(current_dsn(dsn), **kwargs)  # (the embedded server may have moved port)
    try:
        probe.pool = await asyncpg.create_pool(
            dsn, connect=connect_now, min_size=min_size, max_size=max_size, timeout=CONNECT_TIMEOUT_S,
            init=init, reset=_keep_session, setup=on_acquire, connection_class=PoolConnection,
            command_timeout=timeouts.statement_s + ANSWER_MARGIN_S,
            server_settings={**timeouts.server_settings(), **CITUS_SETTINGS})
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise _unavailable(dsn, exc) from None
    return probe.pool
