"""Settings read from the environment, in one place."""
from __future__ import annotations

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
