"""Settings read from the environment, in one place."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

GRAPH_NAME = "pgmemory_graph"


def default_data_dir() -> Path:
    """Per-user directory of the embedded Postgres (XDG data home)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgmemory" / "pgdata"


@dataclass(frozen=True)
class Settings:
    """Where the database is: an explicit DSN, or the embedded server's data directory."""

    dsn: str | None
    data_dir: Path

    @classmethod
    def from_env(cls) -> "Settings":
        """Read PGMEMORY_DSN and PGMEMORY_DATA_DIR."""
        dsn = os.environ.get("PGMEMORY_DSN") or None
        data_dir = os.environ.get("PGMEMORY_DATA_DIR")
        return cls(dsn=dsn, data_dir=Path(data_dir).expanduser() if data_dir else default_data_dir())


@dataclass(frozen=True)
class Timeouts:
    """Guards on every connection, so a stuck lock surfaces as an error instead of a hang.

    statement: longest statement on pooled and admin connections (ingestion's apply step
    needs the most); lock: longest wait for a lock (a writer waiting for its group);
    search: longest search round trip (cancelled client-side). Environment variables
    PGMEMORY_STATEMENT_TIMEOUT, PGMEMORY_LOCK_TIMEOUT, PGMEMORY_SEARCH_TIMEOUT, in seconds.
    """

    statement_s: float = 300.0
    lock_s: float = 60.0
    search_s: float = 30.0

    @classmethod
    def from_env(cls) -> "Timeouts":
        """Read the three timeouts (positive numbers of seconds) from the environment."""
        values = {}
        for field, var in (("statement_s", "PGMEMORY_STATEMENT_TIMEOUT"), ("lock_s", "PGMEMORY_LOCK_TIMEOUT"),
                           ("search_s", "PGMEMORY_SEARCH_TIMEOUT")):
            raw = os.environ.get(var)
            if not raw:
                continue
            try:
                values[field] = float(raw)
            except ValueError:
                values[field] = -1.0
            if not 0 < values[field] <= 86400:
                from pgmemory.errors import InvalidInput

                raise InvalidInput(f"{var} must be a number of seconds between 0 and 86400, got {raw!r}")
        return cls(**values)

    def server_settings(self) -> dict[str, str]:
        """The session settings every connection starts with (whole milliseconds, at least 1: 0 would
        turn the guard off)."""
        return {"statement_timeout": f"{max(1, math.ceil(self.statement_s * 1000))}ms",
                "lock_timeout": f"{max(1, math.ceil(self.lock_s * 1000))}ms"}
