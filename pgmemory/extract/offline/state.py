"""Per-episode state: noun phrases, sentences, the entity registry and the facts so far."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pgmemory.extract.dates import TimeMention, to_utc
from pgmemory.extract.offline.text import possessive
from pgmemory.extract.types import ExtractedEntity, ExtractedFact


@dataclass
class Phrase:
    """A noun phrase found in text: the entity name and where its words are."""

    name: str
    start: int
    end: int
    det: str = ""
    proper: bool = False


@dataclass
class Sentence:
    """One sentence with its times, clause spans and each clause's own leading subject."""

    text: str
    offset: int
    times: list[TimeMention]
    clauses: list[tuple[int, int]]
    masked: str = ""
    leads: list[tuple[str, int] | None] = field(default_factory=list)
    casual: bool = False  # typed all in lowercase: a lowercase word may be a name

    def clause_of(self, pos: int) -> int:
        return next(i for i, (_, end) in enumerate(self.clauses)
                    if pos < end or i == len(self.clauses) - 1)

    def time_in(self, start: int, end: int) -> TimeMention | None:
        return next((t for t in self.times if start <= t.start < end), None)

    def is_time(self, pos: int) -> bool:
        return any(t.start <= pos < t.end for t in self.times)


class Registry:
    """Entities by case-insensitive name, remembering first position and merging labels."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[int, ExtractedEntity]] = {}

    def add(self, name: str, label: str | None, pos: int, **attributes: Any) -> str:
        key = name.lower()
        if key not in self._items:
            labels = ["Entity"] + ([label] if label and label != "Entity" else [])
            entity = ExtractedEntity(name=name, labels=labels, attributes=attributes)
            self._items[key] = (pos, entity)
        else:
            first, entity = self._items[key]
            if label and label not in entity.labels:
                entity.labels.append(label)
            for k, v in attributes.items():
                entity.attributes.setdefault(k, v)
            self._items[key] = (min(first, pos), entity)
        return self._items[key][1].name

    def has(self, name: str) -> bool:
        return name.lower() in self._items

    def ordered(self) -> list[ExtractedEntity]:
        return [e for _, e in sorted(self._items.values(), key=lambda item: item[0])]


@dataclass
class Ctx:
    """Per-episode state: the speaker, the reference (in the speaker's fixed UTC offset, which
    gives the local dates), entities and facts so far (their times in UTC)."""

    speaker: str | None
    reference: datetime
    registry: Registry = field(default_factory=Registry)
    facts: list[ExtractedFact] = field(default_factory=list)
    stated: list[bool] = field(default_factory=list)
    keys: set[tuple[str, str, str, bool]] = field(default_factory=set)
    covered: list[tuple[int, int]] = field(default_factory=list)
    antecedent: str | None = None  # the relative or pet last introduced by name: "he"/"she"

    def fact(self, source: str, target: str, relation: str, text: str, *,
             valid: datetime | None = None, invalid: datetime | None = None,
             functional: bool = False, negated: bool = False, stated: bool = False,
             **attributes: Any) -> None:
        key = (source.lower(), relation, target.lower(), negated)
        if source.lower() == target.lower() or key in self.keys:
            return
        self.keys.add(key)
        self.facts.append(ExtractedFact(
            source=source, target=target, relation=relation, fact=text,
            valid_at=valid and to_utc(valid), invalid_at=invalid and to_utc(invalid), functional=functional, negated=negated, attributes=attributes))
        self.stated.append(stated)

    def third_person(self, text: str) -> str:
        if self.speaker is None:
            return re.sub(r"\b(?:me|I|myself)\b", "them", re.sub(r"\b[Mm]y\b", "their", text))
        # Names are inserted literally (a function replacement): a backslash in a speaker's name
        # is not a regex escape.
        owner, speaker = possessive(self.speaker), self.speaker
        text = re.sub(r"\b[Mm]y\b", lambda _: owner, text)
        return re.sub(r"\b(?:me|I|myself)\b", lambda _: speaker, text)
