"""The shapes every extractor (offline rules or LLM) hands to the ingest pipeline."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
