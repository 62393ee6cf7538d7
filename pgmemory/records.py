"""What the read API returns (episodes, entities, fact versions): typed rows with a JSON form
(`to_dict`) and a one-line `__str__`, so printing them in a notebook or log stays readable."""
from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any


def short_day(value: datetime | None, missing: str = "?") -> str:
    """A UTC date (YYYY-MM-DD) for one-line renderings."""
    if value is None:
        return missing
    if value.year <= 1:
        return "forever"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d")


def clip(text: str, width: int) -> str:
    """One line of at most `width` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def jsonable(value: Any) -> Any:
    """UUIDs and datetimes as strings (ISO 8601), recursively, dict keys too (an episode's
    neighbour_of is keyed by the hit's id)."""
    if isinstance(value, dict):
        return {jsonable(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class Record:
    """Common JSON form of the records below."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: UUIDs and times as strings."""
        return jsonable(asdict(self))  # type: ignore[call-overload]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython/Jupyter show the one-line form."""
        printer.text(str(self))


@dataclass
class EpisodeRecord(Record):
    """A stored episode (the lossless record) with its processing state and metadata."""

    id: uuid.UUID
    group_id: str
    content: str
    kind: str
    actor: str | None
    source_description: str
    reference_time: datetime
    recorded_at: datetime
    status: str
    attempts: int = 0
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        who = f"{self.actor}: " if self.actor else ""
        return f"[{short_day(self.reference_time)} {self.status}] {clip(who + self.content, 100)}"


@dataclass
class EntityRecord(Record):
    """An entity as stored now: name, labels, summary, attributes."""

    id: uuid.UUID
    group_id: str
    name: str
    labels: list[str]
    summary: str
    attributes: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    def __str__(self) -> str:
        labels = ",".join(label for label in self.labels if label != "Entity")
        head = f"{self.name} ({labels})" if labels else self.name
        return f"{head}: {clip(self.summary, 100)}" if self.summary else head


@dataclass
class FactVersion(Record):
    """One version of a fact: valid time [valid_from, valid_to) and the transaction time it was
    believed [recorded_from, recorded_to); None for an open end (or an unknown start)."""

    id: uuid.UUID
    version_id: int
    group_id: str
    source_id: uuid.UUID
    source: str
    relation: str
    target_id: uuid.UUID
    target: str
    fact: str
    valid_from: datetime | None
    valid_to: datetime | None
    valid_from_unknown: bool
    recorded_from: datetime
    recorded_to: datetime | None
    attributes: dict[str, Any] = field(default_factory=dict)
    episodes: list[uuid.UUID] = field(default_factory=list)

    @property
    def believed(self) -> bool:
        """Is this the version believed now?"""
        return self.recorded_to is None

    def __str__(self) -> str:
        start = "?" if self.valid_from_unknown else short_day(self.valid_from)
        state = "" if self.believed else f", superseded {short_day(self.recorded_to)}"
        return f"{clip(self.fact, 90)} [{start} .. {short_day(self.valid_to, 'present')}{state}]"
