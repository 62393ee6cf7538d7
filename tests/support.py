"""Small helpers shared by tests."""
from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import psycopg


def utc(text: str) -> datetime:
    """An ISO date or datetime read as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


async def until(condition: Callable[[], object], *, seconds: float = 30.0, every: float = 0.05) -> bool:
    """Wait until `condition()` (a plain or an async callable) is true, at most `seconds`: a hang
    guard for tests of background work (a worker), not a timing assert. Returns whether it became true."""
    for _ in range(max(1, int(seconds / every))):
        found = condition()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return True
        await asyncio.sleep(every)
    return False


def server_login(dsn: str) -> Iterator[str]:
    """For a fixture: the DSN of a new login subject to row-level security, granted every group
    (how a server should connect), on `dsn`'s database; the login is dropped afterwards."""
    from pgmemory.storage import grants

    tag = uuid.uuid4().hex[:8]
    role, password = f"server_{tag}", f"pw-{tag}"
    with psycopg.connect(dsn) as conn:
        grants.grant(conn, role, ["*"], kind="app", create_password=password)
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    yield f"postgresql://{role}:{password}@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        grants.revoke(conn, role, None)
        conn.execute(psycopg.sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
            psycopg.sql.Identifier(role), psycopg.sql.Identifier(role)))
