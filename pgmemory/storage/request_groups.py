"""The groups the request being served may see, carried to Postgres on every connection it uses.

A server sets them per request (`narrow_to`); with the database's row-level security installed
(`pgmemory_internal.requested_groups()`, sql/catalog/tenancy.sql) and a login that is subject to it, each
connection handed to that request is narrowed to them through the setting `pgmemory.groups`
(narrowing never widens what the login may see), so a query that forgot its group filter still
sees no other group. Connections used outside a request (the queue worker) are not narrowed.

On a Citus cluster the shards are read in the workers' own sessions, which never see a session
setting of the coordinator: Citus carries only `SET LOCAL` there, made inside a transaction block
under `citus.propagate_set_commands = 'local'`. So there a request's connection
(NarrowingConnection) runs each statement made outside a transaction in a transaction of its own,
and begins every transaction (its own or the code's) with those two SET LOCALs. A call of a
function that writes runs in it too: Citus then runs the writer on the coordinator (it delegates
only force-delegated functions inside a transaction, and the writers cannot be: their pushed-down
INSERT ... SELECTs), which reads the request's groups, so the writer refuses another group
(pgmemory_internal.check_request_group) and its queries, routed to the group's worker, carry them
too. Outside a transaction it was delegated to the worker, which never saw them: a request
narrowed to A wrote B (until 2026-12-04).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import asyncpg
from asyncpg.transaction import Transaction
from psycopg import sql as pgsql

from pgmemory.errors import WorkerUnreachable

REQUEST_GROUPS: ContextVar[tuple[str, ...] | None] = ContextVar("pgmemory_request_groups", default=None)

def narrow_to(groups: Sequence[str]) -> None:
    """The current request (task) may see only these groups."""
    REQUEST_GROUPS.set(tuple(groups))


def _requested() -> str:
    """The current request's groups as pgmemory.groups holds them ('' outside a request)."""
    groups = REQUEST_GROUPS.get()
    return "" if groups is None else json.dumps(list(groups))


async def apply_request_groups(conn: asyncpg.Connection) -> None:
    """Pool on_acquire hook: set pgmemory.groups on the connection for the acquiring request
    ('' outside a request: no narrowing)."""
    await conn.execute("SELECT set_config('pgmemory.groups', $1, false)", _requested())


def propagated_narrowing(groups: str) -> str:
    """The SET LOCALs that narrow a transaction to `groups` (a JSON array) on the coordinator and,
    through Citus, on every worker it reaches; the value quoted as a literal."""
    return ("SET LOCAL citus.propagate_set_commands = 'local'; "
            + pgsql.SQL("SET LOCAL pgmemory.groups = {}").format(pgsql.Literal(groups)).as_string())


async def database_narrows(conn: asyncpg.Connection) -> bool:
    """Is the row-level security that reads pgmemory.groups installed in this database?"""
    return await conn.fetchval("SELECT to_regprocedure('pgmemory_internal.requested_groups()') IS NOT NULL")


class _NarrowingTransaction(Transaction):
    """A transaction that, on a narrowed connection, begins with the narrowing SET LOCALs."""

    __slots__ = ()

    async def start(self) -> None:
        await super().start()
        narrowing = self._connection._narrowing
        if narrowing is not None and not self._nested:
            await asyncpg.Connection.execute(self._connection, narrowing)

    async def __aexit__(self, extype: Any, ex: Any, tb: Any) -> None:
        if isinstance(ex, WorkerUnreachable) and self._connection.is_closed():
            # The connection was dropped for a Citus worker that stopped answering (its session
            # rolls back): that error stands, not "the underlying connection is closed".
            self._managed = False
            return
        await super().__aexit__(extype, ex, tb)


class NarrowingConnection(asyncpg.Connection):
    """The pools' connection class: as asyncpg's until narrow_transactions() gives it the
    narrowing SET LOCALs (a request's connection on Citus); then a statement made outside a
    transaction runs in one of its own (as in autocommit: committed when it returns, rolled back
    when it fails), and every transaction begins with them.
    (A statement run through prepare() outside a transaction is not wrapped: no request path
    has one; a cursor needs a transaction, which begins with them.)"""

    _narrowing: str | None = None

    def narrow_transactions(self, narrowing: str | None) -> None:
        """Begin every transaction with `narrowing` from now on (None: as asyncpg does)."""
        self._narrowing = narrowing

    def transaction(self, *, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False) -> Transaction:
        self._check_open()
        return _NarrowingTransaction(self, isolation, readonly, deferrable)

    async def execute_outside_transactions(self, query: str) -> str:
        """execute(query), never wrapped in a transaction (see execute_outside_transactions)."""
        return await super().execute(query)

    async def _narrowed(self, run: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        # (asyncpg's own BEGIN and COMMIT come here too, with _top_xact set or a transaction open)
        if self._narrowing is None or self._top_xact is not None or self.is_in_transaction():
            return await run(query, *args, **kwargs)
        async with self.transaction():
            return await run(query, *args, **kwargs)

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        return await self._narrowed(super().execute, query, *args, timeout=timeout)

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> None:
        return await self._narrowed(super().executemany, command, args, timeout=timeout)

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> list:
        return await self._narrowed(super().fetch, query, *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await self._narrowed(super().fetchval, query, *args, **kwargs)

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await self._narrowed(super().fetchrow, query, *args, **kwargs)

    async def fetchmany(self, query: str, args: Any, **kwargs: Any) -> list:
        return await self._narrowed(super().fetchmany, query, args, **kwargs)


async def execute_outside_transactions(conn: asyncpg.Connection, query: str) -> None:
    """Run a statement that cannot run in a transaction block (VACUUM) never wrapped in one by a
    narrowed connection: it reads no row for the caller, so it needs no narrowing."""
    run = getattr(conn, "execute_outside_transactions", None)
    await (run(query) if run is not None else conn.execute(query))


class NarrowToRequestGroups:
    """An on_acquire hook for servers: apply_request_groups where the database has the row-level
    security that reads it (checked once, on the first connection), nothing elsewhere; on a Citus
    coordinator the request's transactions narrowed too (NarrowingConnection), for the workers."""

    def __init__(self) -> None:
        self.enabled: bool | None = None
        self.citus = False  # a Citus coordinator: transactions narrowed too

    async def __call__(self, conn: asyncpg.Connection) -> None:
        if self.citus:
            conn.narrow_transactions(None)  # what the connection's previous user set
        if self.enabled is None:
            enabled = await database_narrows(conn)
            self.citus = enabled and await conn.fetchval(
                "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')")
            self.enabled = enabled
        if self.enabled:
            await apply_request_groups(conn)
            requested = _requested()
            if self.citus and requested:
                conn.narrow_transactions(propagated_narrowing(requested))
