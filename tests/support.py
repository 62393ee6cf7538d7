"""Small helpers shared by tests."""
from __future__ import annotations

from datetime import datetime, timezone


def utc(text: str) -> datetime:
    """An ISO date or datetime read as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
