"""The groups the request being served may see, carried to Postgres on every connection it uses.

A server sets them per request (`narrow_to`); with the database's row-level security installed
(`pgmemory_internal.requested_groups()`, sql/catalog/tenancy.sql) and a login that is subject to it, each
connection handed to that request is narrowed to them through the setting `pgmemory.groups`
(narrowing never widens what the login may see), so a query that forgot its group filter still
sees no other group. Connections used outside a request (the queue worker) are not narrowed.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from contextvars import ContextVar

import asyncpg

REQUEST_GROUPS: ContextVar[tuple[str, ...] | None] = ContextVar("pgmemory_request_groups", default=None)


def narrow_to(groups: Sequence[str]) -> None:
    """The current request (task) may see only these groups."""
    REQUEST_GROUPS.set(tuple(groups))


async def apply_request_groups(conn: asyncpg.Connection) -> None:
    """Pool on_acquire hook: set pgmemory.groups on the connection for the acquiring request
    ('' outside a request: no narrowing)."""
    groups = REQUEST_GROUPS.get()
    await conn.execute("SELECT set_config('pgmemory.groups', $1, false)",
                       "" if groups is None else json.dumps(list(groups)))


async def database_narrows(conn: asyncpg.Connection) -> bool:
    """Is the row-level security that reads pgmemory.groups installed in this database?"""
    return await conn.fetchval("SELECT to_regprocedure('pgmemory_internal.requested_groups()') IS NOT NULL")


class NarrowToRequestGroups:
    """An on_acquire hook for servers: apply_request_groups where the database has the row-level
    security that reads it (checked once, on the first connection), nothing elsewhere."""

    def __init__(self) -> None:
        self.enabled: bool | None = None

    async def __call__(self, conn: asyncpg.Connection) -> None:
        if self.enabled is None:
            self.enabled = await database_narrows(conn)
        if self.enabled:
            await apply_request_groups(conn)
