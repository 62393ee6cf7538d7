"""The shapes every extractor (offline rules or LLM) hands to the ingest pipeline."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class EpisodeInput:
    """One episode as the extractor sees it: already validated, times tz-aware."""

    content: str
    kind: str  # "message" | "text" | "json"
    reference_time: datetime
    actor: str | None = None
    source_description: str = ""


@dataclass
class ExtractedEntity:
    """An entity mentioned in the current episode. The speaker, if any, comes first."""

    name: str
    labels: list[str] = field(default_factory=lambda: ["Entity"])
    summary: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExtractedFact:
    """A relation between two distinct extracted entities (by name).

    valid_at / invalid_at are resolved against the episode's reference time;
    None means "not stated" (an unknown bound, never "since forever").
    ``functional`` marks relations that admit one current value per source
    (one employer, one home city, one spouse, one favourite per kind): a new
    value invalidates the previous one.  ``negated`` means the episode says
    the relation does NOT (or no longer) hold: it ends a matching fact rather
    than asserting a new one.
    """

    source: str
    target: str
    relation: str  # SCREAMING_SNAKE_CASE
    fact: str
    valid_at: datetime | None = None
    invalid_at: datetime | None = None
    functional: bool = False
    negated: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Extraction:
    """Everything an extractor found in one episode."""

    entities: list[ExtractedEntity] = field(default_factory=list)
    facts: list[ExtractedFact] = field(default_factory=list)


@dataclass(frozen=True)
class EntityCandidate:
    """An existing entity that a new one might be (found by name, embedding or full text)."""

    id: str
    name: str
    summary: str = ""
    labels: tuple[str, ...] = ()


@dataclass
class EntityQuestion:
    """Is extracted entity ``index`` one of ``candidates``? (Asked only when no exact match.)"""

    index: int
    entity: ExtractedEntity
    candidates: list[EntityCandidate]


@dataclass(frozen=True)
class EntityDecision:
    """Answer to an EntityQuestion: the duplicate's id (or None) and the fullest name to keep."""

    index: int
    duplicate_of: str | None
    name: str


@dataclass(frozen=True)
class FactCandidate:
    """A believed fact that a new one may duplicate or contradict."""

    id: str
    source: str
    target: str
    relation: str
    fact: str
    valid_from: datetime | None
    valid_to: datetime | None


@dataclass
class FactQuestion:
    """For new fact ``index``: is it one of ``duplicates`` (same entity pair), and which of
    ``contradictions`` (facts touching the same entities) does it contradict?"""

    index: int
    fact: ExtractedFact
    duplicates: list[FactCandidate]
    contradictions: list[FactCandidate]


@dataclass(frozen=True)
class FactDecision:
    """Answer to a FactQuestion."""

    index: int
    duplicate_of: str | None = None
    contradicts: tuple[str, ...] = ()


class Extractor(Protocol):
    """What the ingest pipeline needs from an extractor (offline rules or an LLM).

    ``extract`` reads one episode; ``resolve_entities`` and ``judge_facts`` are
    asked only when Postgres found candidates whose answer is not already known.
    An extractor whose decisions need no remote call may set ``decides_locally = True``:
    the pipeline then re-decides under the group lock after a concurrent change.
    """

    async def extract(self, episode: EpisodeInput, previous: list[EpisodeInput], usage: Any, *,
                      entity_types: dict[str, type] | None = None,
                      edge_types: dict[str, type] | None = None) -> Extraction: ...

    async def resolve_entities(self, episode: EpisodeInput, previous: list[EpisodeInput],
                               questions: list[EntityQuestion], usage: Any) -> list[EntityDecision]: ...

    async def judge_facts(self, episode: EpisodeInput, questions: list[FactQuestion],
                          usage: Any) -> list[FactDecision]: ...
