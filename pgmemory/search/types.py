"""Typed search results: facts, entities, communities and episodes with per-method scores."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any

# A valid-time start of '-infinity' ("true since forever", as opposed to a NULL start: unknown),
# read back as the earliest datetime, the same value asyncpg decodes '-infinity' to.
SINCE_FOREVER = datetime.min.replace(tzinfo=timezone.utc)


@dataclass
class Hit:
    """What every result has: its id, group, rank per search method and final score."""

    id: uuid.UUID
    group_id: str
    ranks: dict[str, int]
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    embedding: list[float] | None = field(default=None, repr=False)

    def text(self) -> str:
        """The text a reranker reads."""
        raise NotImplementedError


@dataclass
class FactHit(Hit):
    """A fact version with its two time ranges, endpoints and provenance. valid_from is None
    when the start is unknown (valid_from_unknown) and SINCE_FOREVER when it is '-infinity';
    valid_to is None while the fact is open (a NULL or 'infinity' end)."""

    version_id: int = 0
    relation: str = ""
    fact: str = ""
    source_id: uuid.UUID | None = None
    source: str = ""
    target_id: uuid.UUID | None = None
    target: str = ""
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    valid_from_unknown: bool = False
    recorded_from: datetime | None = None
    recorded_to: datetime | None = None
    episodes: list[uuid.UUID] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    distance: int | None = None
    # The UTC offset its first episode's speaker said it at (None: UTC or unknown): a date-only
    # time is their local midnight, so the context names a day by it. Not in to_dict.
    said_offset: timedelta | None = field(default=None, repr=False)

    def __str__(self) -> str:
        from pgmemory.records import clip, short_day

        start = "?" if self.valid_from_unknown else short_day(self.valid_from)
        return f"{self.score:.4f} {clip(self.fact, 90)} [{start} .. {short_day(self.valid_to, 'present')}]"

    def text(self) -> str:
        return self.fact


@dataclass
class EntityHit(Hit):
    """An entity with its summary, labels and how often episodes mention it."""

    name: str = ""
    summary: str = ""
    labels: list[str] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    mentions: int = 0
    distance: int | None = None

    def __str__(self) -> str:
        from pgmemory.records import clip

        return f"{self.score:.4f} {clip(self.text(), 100)}"

    def text(self) -> str:
        return f"{self.name}: {self.summary}" if self.summary else self.name


@dataclass
class CommunityHit(Hit):
    """A community of entities with its summary."""

    name: str = ""
    summary: str = ""

    def __str__(self) -> str:
        from pgmemory.records import clip

        return f"{self.score:.4f} {clip(self.text(), 100)}"

    def text(self) -> str:
        return f"{self.name}: {self.summary}" if self.summary else self.name


@dataclass
class EpisodeHit(Hit):
    """A raw episode: the lossless record, searchable for details extraction dropped."""

    content: str = ""
    kind: str = ""
    actor: str | None = None
    valid_at: datetime | None = None
    recorded_at: datetime | None = None
    source_description: str = ""
    # hits this turn is next to -> how many turns away (1: just before or after)
    neighbour_of: dict[uuid.UUID, int] = field(default_factory=dict)
    # The speaker's UTC offset at valid_at (episodes.reference_offset; None: UTC). Not in to_dict.
    said_offset: timedelta | None = field(default=None, repr=False)

    def __str__(self) -> str:
        from pgmemory.records import clip, short_day

        return f"{self.score:.4f} [{short_day(self.valid_at)}] {clip(self.text(), 90)}"

    def text(self) -> str:
        return f"{self.actor}: {self.content}" if self.actor else self.content


@dataclass
class SearchResults:
    """The four result lists, each best first."""

    facts: list[FactHit] = field(default_factory=list)
    entities: list[EntityHit] = field(default_factory=list)
    communities: list[CommunityHit] = field(default_factory=list)
    episodes: list[EpisodeHit] = field(default_factory=list)

    def __str__(self) -> str:
        """A count line, then one line per hit (best first): readable in a notebook or log."""
        kinds = {"facts": "fact", "entities": "entity", "communities": "community", "episodes": "episode"}
        lines = ["SearchResults: " + ", ".join(f"{len(getattr(self, k))} {k}" for k in kinds)]
        for kind, one in kinds.items():
            lines.extend(f"  {one} {hit}" for hit in getattr(self, kind))
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython/Jupyter show the compact form too."""
        printer.text(str(self))

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """JSON-ready form: one list per kind, embeddings left out. dataclasses.asdict's form, in new
        containers, but its leaves (UUIDs, times, numbers, text: immutable) are not deep-copied."""
        return {kind: [{name: _copied(getattr(h, name)) for name in _FIELDS[type(h)]} for h in getattr(self, kind)]
                for kind in ("facts", "entities", "communities", "episodes")}


def _copied(value: Any) -> Any:
    """New dicts, lists and tuples all the way down, the same leaves (as asdict, without deepcopy)."""
    if isinstance(value, dict):
        return {_copied(k): _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value


# (the answers' shape, as REST declares it: no vectors; times in UTC, without the speaker's offset)
_FIELDS = {cls: tuple(f.name for f in fields(cls) if f.name not in ("embedding", "said_offset"))
           for cls in (FactHit, EntityHit, CommunityHit, EpisodeHit)}
