"""The LLM extractor: one structured call per pipeline step, replies validated and mapped back.

extract        -> one call: entities (speaker first, reflexion inside the same reply), facts, dates
resolve_entities -> one call for all entity questions
judge_facts    -> one call for all fact questions
Everything the model returns is checked in Python: names must match extracted entities, ids must
be candidates of the question they answer, relation types are normalised, datetimes parsed to UTC.
What Postgres cannot hold is not passed on: NUL characters and lone surrogates are removed from
every string of a reply, an entity name longer than MAX_ENTITY_NAME_CHARS is no name (the entity
and its facts are left out, a rename to it is not made), sentences and summaries are cut at
MAX_CONTENT_CHARS and relation types at MAX_RELATION_CHARS, and a date outside the years
1000-2999 (EARLIEST..LATEST, the range every time pgmemory takes) is not stated.
"""
from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timezone
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from pgmemory.extract import prompts
from pgmemory.extract.dates import day_of, zone_of
from pgmemory.extract.prompts import EntityOut, ExtractionReply, FactOut
from pgmemory.extract.roles import is_assistant
from pgmemory.extract.types import (
    EntityDecision,
    EntityQuestion,
    EpisodeInput,
    ExtractedEntity,
    ExtractedFact,
    Extraction,
    FactDecision,
    FactQuestion,
)
from pgmemory.providers.llm import LLMClient, Usage
from pgmemory.ingest.episode import MAX_CONTENT_CHARS
from pgmemory.validate import EARLIEST, LATEST, MAX_ENTITY_NAME_CHARS, MAX_RELATION_CHARS

DEFAULT_RELATION = "RELATES_TO"
_NO_DATE = {"", "null", "none", "unknown", "n/a", "present", "now", "ongoing"}
_YEAR = re.compile(r"^(\d{4})$")
_YEAR_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SHORT_ID = re.compile(r"^\s*([A-Za-z])\s*-?\s*(\d+)")
K = TypeVar("K")


def parse_datetime(value: str | None, zone: timezone = timezone.utc) -> datetime | None:
    """An LLM's ISO 8601 string as a tz-aware UTC datetime; None for null or unparseable text.

    Accepts a trailing Z, offsets, date-only (midnight), year-month (the 1st) and year-only
    (January 1st); naive values are taken in ``zone`` (the speaker's UTC offset: a date-only
    "2023-05-07" is the speaker's local midnight, as the offline rules store it).
    """
    if value is None:
        return None
    text = value.strip()
    if text.lower() in _NO_DATE:
        return None
    try:
        if m := _YEAR.match(text):
            moment = datetime(int(m[1]), 1, 1)
        elif m := _YEAR_MONTH.match(text):
            moment = datetime(int(m[1]), int(m[2]), 1)
        else:
            moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    try:
        if moment.tzinfo is None or moment.utcoffset() is None:
            moment = moment.replace(tzinfo=zone).astimezone(timezone.utc)
        else:
            moment = moment.astimezone(timezone.utc)
    except OverflowError:  # an offset that moves year 1 or 9999 out of range
        return None
    return moment if EARLIEST <= moment <= LATEST else None


def normalize_relation(text: str) -> str:
    """A relation type in SCREAMING_SNAKE_CASE ("works for", "worksFor" -> WORKS_FOR).

    Falls back to RELATES_TO when nothing usable is left, since the facts table only
    accepts ^[A-Z][A-Z0-9_]*$.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.split(r"[^A-Za-z0-9]+", _CAMEL.sub(" ", ascii_text))
    relation = "_".join(w.upper() for w in words if w)[:MAX_RELATION_CHARS].rstrip("_")
    return relation if re.match(r"^[A-Z][A-Z0-9_]*$", relation) else DEFAULT_RELATION


def typed_fields(model: type[BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``model`` present in ``raw`` that validate, JSON-ready; others are dropped."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = name if name in raw else info.alias
        if key is None or raw.get(key) is None:
            continue
        adapter: TypeAdapter[Any] = TypeAdapter(info.rebuild_annotation())
        try:
            out[name] = adapter.dump_python(adapter.validate_python(raw[key]), mode="json")
        except ValidationError:
            continue
    return out


def _scrub(value: Any) -> Any:
    """A reply's JSON with NUL characters and lone surrogates removed from every string (keys too):
    text Postgres cannot store, which a model may still emit."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = "".join(ch for ch in value if not 0xD800 <= ord(ch) <= 0xDFFF)
        return value
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _scrubbed(reply: K) -> K:
    """The reply (a pydantic model) with every string scrubbed (_scrub)."""
    return type(reply).model_validate(_scrub(reply.model_dump(by_alias=True)))  # type: ignore[attr-defined]


def _usable_name(name: str) -> bool:
    """Whether a model's entity name can be one: non-empty and within MAX_ENTITY_NAME_CHARS."""
    return bool(name.strip()) and len(" ".join(name.split())) <= MAX_ENTITY_NAME_CHARS


def _key(name: str) -> str:
    """How names are compared: case-insensitive, whitespace collapsed."""
    return " ".join(name.split()).casefold()


def _short_id(text: str | None) -> str | None:
    """A model's id answer ("e1", " E1: Alice") as its canonical form "E1"."""
    m = _SHORT_ID.match(text or "")
    return f"{m[1].upper()}{int(m[2])}" if m else None


def _short_ids(prefix: str, items: list[tuple[str, K]]) -> tuple[dict[str, str], list[tuple[str, K]]]:
    """Give each distinct real id a short one: (real -> short, [(short, item)]) in first-seen order."""
    to_short: dict[str, str] = {}
    listed: list[tuple[str, K]] = []
    for real, item in items:
        if real not in to_short:
            to_short[real] = f"{prefix}{len(to_short)}"
            listed.append((to_short[real], item))
    return to_short, listed


def _by_new_id(answers: list[Any]) -> dict[str, Any]:
    """Replies keyed by their canonical new id ("N0"); the first answer for an id wins."""
    keyed: dict[str, Any] = {}
    for answer in answers:
        new_id = _short_id(answer.new_id)
        if new_id is not None:
            keyed.setdefault(new_id, answer)
    return keyed


class LLMExtractor:
    """Extracts, resolves and judges with an LLM: exactly one request per method call."""


    def __init__(self, client: LLMClient) -> None:
        self.client = client

    async def extract(
        self,
        episode: EpisodeInput,
        previous: list[EpisodeInput],
        usage: Usage,
        *,
        entity_types: dict[str, type[BaseModel]] | None = None,
        edge_types: dict[str, type[BaseModel]] | None = None,
    ) -> Extraction:
        """Entities (speaker first, reflexion merged) and dated facts of one episode, in one call."""
        entity_types = entity_types or {}
        fact_types = {normalize_relation(name): model for name, model in (edge_types or {}).items()}
        messages = prompts.extraction_messages(episode, previous, entity_types, fact_types)
        reply = _scrubbed(await self.client.complete(messages, ExtractionReply, usage=usage))
        entities = _entities(reply, episode, entity_types)
        assistant = _key(episode.actor) if is_assistant(episode.actor) else None
        names = {_key(e.name): e.name for e in entities if _key(e.name) != assistant}
        entities = [e for e in entities if _key(e.name) != assistant]
        facts: list[ExtractedFact] = []
        seen: set[tuple[Any, ...]] = set()
        for out in reply.facts:
            fact = _fact(out, names, fact_types, episode.reference_time)
            if fact is None:
                continue
            identity = (fact.source, fact.target, fact.relation, fact.negated, fact.valid_at, fact.invalid_at)
            if identity not in seen:
                seen.add(identity)
                facts.append(fact)
        return Extraction(entities=entities, facts=facts)

    async def resolve_entities(
        self,
        episode: EpisodeInput,
        previous: list[EpisodeInput],
        questions: list[EntityQuestion],
        usage: Usage,
    ) -> list[EntityDecision]:
        """One decision per question: the duplicate's id (a candidate of that question) or None."""
        to_short, existing = _short_ids("E", [(c.id, c) for q in questions for c in q.candidates])
        if not existing:
            return [EntityDecision(q.index, None, q.entity.name) for q in questions]
        new = [
            (f"N{pos}", q.entity, [to_short[c.id] for c in q.candidates]) for pos, q in enumerate(questions)
        ]
        messages = prompts.resolution_messages(episode, previous, existing, new)
        reply = _scrubbed(await self.client.complete(messages, prompts.EntityResolutionReply, usage=usage))
        answers = _by_new_id(reply.resolutions)
        decisions = []
        for pos, q in enumerate(questions):
            answer = answers.get(f"N{pos}")
            allowed = {to_short[c.id]: c for c in q.candidates}
            match = allowed.get(_short_id(answer.duplicate_of) or "") if answer else None
            if answer is None or match is None:
                decisions.append(EntityDecision(q.index, None, q.entity.name))
            else:
                renamed = " ".join(answer.name.split())
                decisions.append(EntityDecision(q.index, match.id,
                                                renamed if _usable_name(renamed) else match.name))
        return decisions

    async def judge_facts(
        self, episode: EpisodeInput, questions: list[FactQuestion], usage: Usage
    ) -> list[FactDecision]:
        """One decision per question: which same-pair fact it repeats, which related facts it ends."""
        to_short, existing = _short_ids(
            "F", [(c.id, c) for q in questions for c in q.duplicates + q.contradictions]
        )
        if not existing:
            return [FactDecision(q.index) for q in questions]
        new = [
            (
                f"N{pos}",
                q.fact,
                [to_short[c.id] for c in q.duplicates],
                [to_short[c.id] for c in q.contradictions],
            )
            for pos, q in enumerate(questions)
        ]
        messages = prompts.judge_messages(episode, existing, new)
        reply = _scrubbed(await self.client.complete(messages, prompts.FactJudgementReply, usage=usage))
        answers = _by_new_id(reply.judgements)
        decisions = []
        for pos, q in enumerate(questions):
            answer = answers.get(f"N{pos}")
            if answer is None:
                decisions.append(FactDecision(q.index))
                continue
            same_pair = {to_short[c.id]: c.id for c in q.duplicates}
            related = {to_short[c.id]: c.id for c in q.contradictions}
            duplicate = same_pair.get(_short_id(answer.duplicate_of) or "")
            ended: list[str] = []
            for short in answer.contradicts:
                real = related.get(_short_id(short) or "")
                if real is not None and real != duplicate and real not in ended:
                    ended.append(real)
            decisions.append(FactDecision(q.index, duplicate, tuple(ended)))
        return decisions


def _entity(out: EntityOut, entity_types: dict[str, type[BaseModel]]) -> ExtractedEntity:
    """An extracted entity; a known type adds its label and its validated fields."""
    type_name = next((t for t in entity_types if out.type and _key(t) == _key(out.type)), None)
    summary = out.summary.strip()[:MAX_CONTENT_CHARS]
    if type_name is None or type_name == "Entity":
        return ExtractedEntity(name=" ".join(out.name.split()), summary=summary)
    return ExtractedEntity(
        name=" ".join(out.name.split()),
        labels=["Entity", type_name],
        summary=summary,
        attributes=typed_fields(entity_types[type_name], out.attributes),
    )


def _entities(
    reply: ExtractionReply, episode: EpisodeInput, entity_types: dict[str, type[BaseModel]]
) -> list[ExtractedEntity]:
    """First list plus reflexion's missed ones, minus reflexion's rejects, merged by name, speaker first."""
    speaker = episode.actor if episode.kind == "message" and episode.actor else None
    if is_assistant(speaker):
        speaker = None  # the assistant is not an entity of its own chatter
    rejected = {_key(name) for name in reply.invalid_entities} - {_key(speaker or "")}
    merged: dict[str, ExtractedEntity] = {}
    for out in reply.entities + reply.missed_entities:
        key = _key(out.name)
        if not key or key in rejected or not _usable_name(out.name):
            continue
        entity = _entity(out, entity_types)
        if key not in merged:
            merged[key] = entity
            continue
        kept = merged[key]
        kept.summary = kept.summary or entity.summary
        if len(kept.labels) < len(entity.labels):
            kept.labels = entity.labels
        kept.attributes = {**entity.attributes, **kept.attributes}
    if speaker is None:
        return list(merged.values())
    first = merged.pop(_key(speaker), None) or ExtractedEntity(name=speaker)
    first.name = " ".join(speaker.split())
    return [first, *merged.values()]


def _fact(out: FactOut, names: dict[str, str], fact_types: dict[str, type[BaseModel]],
          reference: datetime) -> ExtractedFact | None:
    """A validated fact, or None when an endpoint is unknown or both endpoints are the same.

    An event (kind "event") is bounded: without a stated end it lasts the day it started, or
    the day of the reference time when no time is given.  An end before the start keeps the end
    and makes the start unknown; an end equal to the start is that day.
    """
    source, target = names.get(_key(out.source)), names.get(_key(out.target))
    if source is None or target is None or source == target:
        return None
    relation = normalize_relation(out.relation_type)
    model = fact_types.get(relation)
    zone = zone_of(reference)  # the speaker's offset: their dates and days
    valid_at, invalid_at = parse_datetime(out.valid_at, zone), parse_datetime(out.invalid_at, zone)
    if valid_at is not None and invalid_at is not None and invalid_at == valid_at:
        valid_at, invalid_at = day_of(valid_at, zone)  # "from May 3 to May 3": that day
    elif valid_at is not None and invalid_at is not None and invalid_at < valid_at:
        # The end said is kept (the relation is over), the start in doubt is unknown: a model
        # that puts the reference time as the start of "worked at X until 2018" is read right,
        # and no inverted reply becomes a fact believed to hold from then on.
        valid_at = None
    attributes = typed_fields(model, out.attributes) if model else {}
    if out.kind.strip().lower() == "event" and not out.negated:
        attributes["kind"] = "event"
        if invalid_at is None:
            valid_at, invalid_at = day_of(valid_at or reference, zone)
    sentence = (" ".join(out.fact.split()) or f"{source} {relation.lower().replace('_', ' ')} {target}")
    sentence = sentence[:MAX_CONTENT_CHARS]
    return ExtractedFact(
        source=source,
        target=target,
        relation=relation,
        fact=sentence,
        valid_at=valid_at,
        invalid_at=invalid_at,
        functional=out.functional,
        negated=out.negated,
        attributes=attributes,
    )
