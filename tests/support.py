"""Small helpers shared by tests."""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import datetime, timezone


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
