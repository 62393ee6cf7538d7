"""What both servers do around their lifetime: open the Memory (unless one is given), run an
in-process queue worker, and on shutdown stop the worker and close what they opened."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from pgmemory.memory import Memory
from pgmemory.storage.request_groups import NarrowToRequestGroups
from pgmemory.surfaces.api_keys import active_key_count

log = logging.getLogger("pgmemory.serve")


@contextlib.asynccontextmanager
async def served_memory(memory: Memory | None, *, worker_concurrency: int, auth: bool,
                        open_options: dict[str, Any] | None = None) -> AsyncIterator[Memory]:
    """The memory to serve, with `worker_concurrency` episodes processed at once in this process
    (0: none). A memory opened here narrows each connection to the groups of the request using it
    where the database has row-level security (storage.request_groups); a memory passed in is used
    as it is and not closed here. With `auth` and no API key yet, a warning."""
    own = memory is None
    mem = memory or await Memory.open(**{"on_acquire": NarrowToRequestGroups(), **(open_options or {})})
    if auth and not await active_key_count(mem.pool):
        log.warning("no API key exists yet, so every request will be refused (401): "
                    "create one with `pgmemory keys create NAME --write GROUP`")
    worker = mem.worker(concurrency=worker_concurrency) if worker_concurrency else None
    task = asyncio.create_task(worker.run()) if worker else None
    if task is not None:
        task.add_done_callback(_report_worker_end)
    try:
        yield mem
    finally:
        if worker is not None:
            worker.stop()
            with contextlib.suppress(Exception):
                await task
        if own:
            await mem.close()


def _report_worker_end(task: asyncio.Task) -> None:
    """The in-process worker stops only at shutdown; if it died, say why in the log."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the in-process queue worker stopped: %s; queued episodes wait for `pgmemory worker` "
                  "or a restart", task.exception())
