"""Prompt texts and structured-reply schemas for the LLM extractor (one call per step).

The model never copies uuids: existing entities and facts are shown as short ids
("E0", "F3") and new items as "N0", "N1"; the extractor maps them back.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgmemory.extract.roles import is_assistant
from pgmemory.extract.types import EntityCandidate, EpisodeInput, ExtractedEntity, ExtractedFact, FactCandidate

# --- reply schemas ---------------------------------------------------------------------


class _Reply(BaseModel):
    """A reply object whose optional fields read an explicit null as their default: models answer
    `"kind": null` or `"facts": null` for what they have nothing to say about, and refusing the
    whole reply for it costs every retry and then the episode. A list of ids or names (list[str])
    reads a lone string as a list of it and leaves out items that are not strings (`"contradicts":
    [null]`, `"contradicts": "F0"`): such an item names nothing, so nothing is decided on it."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        optional = {key for name, info in cls.model_fields.items() if not info.is_required()
                    and info.default is not None for key in (name, info.alias) if key}
        strings = {key for name, info in cls.model_fields.items() if info.annotation == list[str]
                   for key in (name, info.alias) if key}
        return {k: ([v] if isinstance(v, str) else [x for x in v if isinstance(x, str)])
                if k in strings and isinstance(v, (str, list)) else v
                for k, v in data.items() if v is not None or k not in optional}


class EntityOut(_Reply):
    """One entity node found in the current episode."""

    name: str = Field(description="Full name of the entity as used in the current episode")
    type: str | None = Field(None, description="One of the ENTITY TYPES names, or null")
    summary: str = Field("", description="One sentence: what the current episode says about it")
    attributes: dict[str, Any] = Field(
        default_factory=dict, description="Fields of its entity type that the text states; else {}"
    )


class FactOut(_Reply):
    """One relation between two extracted entities, with its world-time bounds."""

    model_config = ConfigDict(coerce_numbers_to_str=True)

    source: str = Field(description="Name of the source entity, exactly as in the entity lists")
    target: str = Field(description="Name of the target entity, exactly as in the entity lists")
    relation_type: str = Field(description="SCREAMING_SNAKE_CASE, e.g. WORKS_FOR, or a FACT TYPES name")
    fact: str = Field(description="Detailed sentence stating the fact, with full names")
    valid_at: str | None = Field(None, description="ISO 8601 when it became true, or null")
    invalid_at: str | None = Field(None, description="ISO 8601 when it stopped being true, or null")
    kind: str = Field(
        "state",
        description="'event' for a one-off happening (visited, attended, met, bought, won, had surgery): "
        "valid_at..invalid_at is when it happened; 'state' for an ongoing relation (works for, lives in, "
        "likes, is married to) that stays true until it ends",
    )
    negated: bool = Field(False, description="True if the episode says it does not or no longer holds")
    functional: bool = Field(
        False, description="True if the source can have only one current value for this relation"
    )
    attributes: dict[str, Any] = Field(
        default_factory=dict, description="Fields of its fact type that the text states; else {}"
    )


class ExtractionReply(_Reply):
    """Entities, a reflexion pass over them, then facts: all from one episode."""

    entities: list[EntityOut] = Field(description="Speaker first, then other entities in the current episode")
    missed_entities: list[EntityOut] = Field(
        default_factory=list, description="Review: significant entities missing from `entities`"
    )
    invalid_entities: list[str] = Field(
        default_factory=list,
        description="Review: names in `entities` that break the rules (dates, actions, only in previous messages)",
    )
    facts: list[FactOut] = Field(default_factory=list, description="Facts between the extracted entities")


class EntityResolution(_Reply):
    """Whether new entity N<i> is one of its candidate existing entities."""

    new_id: str = Field(description="The new entity's id, e.g. N0")
    duplicate_of: str | None = Field(None, description="Id of the existing entity it is (e.g. E2), or null")
    name: str = Field("", description="Most complete full name of the entity")


class EntityResolutionReply(_Reply):
    """One resolution per new entity."""

    resolutions: list[EntityResolution]


class FactJudgement(_Reply):
    """Whether new fact N<i> repeats one existing fact and which existing facts it ends."""

    new_id: str = Field(description="The new fact's id, e.g. N0")
    duplicate_of: str | None = Field(None, description="Id of a same-pair fact with the same information, or null")
    contradicts: list[str] = Field(default_factory=list, description="Ids of existing facts it makes no longer true")


class FactJudgementReply(_Reply):
    """One judgement per new fact."""

    judgements: list[FactJudgement]


# --- system prompts --------------------------------------------------------------------

EXTRACT_SYSTEM = """\
You build a knowledge graph from a conversation or document, one episode at a time.
Read the CURRENT EPISODE; PREVIOUS MESSAGES are context only (to resolve pronouns and names).

ENTITIES
1. If the episode has a speaker, the speaker is ALWAYS the first entity (unless it is the AI assistant).
2. Extract significant entities, concepts and actors explicitly or implicitly mentioned in the
   CURRENT EPISODE: people, organisations, places, products, events, topics, preferences.
3. Do NOT create entities for relationships or actions, nor for dates or times (those belong on facts).
4. Use full names (resolve "my sister", "he", "the company" to a name when the context gives one).
5. Do NOT extract entities mentioned only in PREVIOUS MESSAGES.
6. If ENTITY TYPES are given, set `type` to the matching type name (or null) and fill `attributes`
   with that type's fields the text states; otherwise leave `type` null and `attributes` {}.
REFLEXION: after writing `entities`, re-read the CURRENT EPISODE. Put significant entities you
missed into `missed_entities`, and names from `entities` that break rules 3-5 into `invalid_entities`.

FACTS
1. Only between two DISTINCT entities from your lists; refer to them by the exact names you listed.
2. `relation_type`: concise SCREAMING_SNAKE_CASE (LOVES, IS_FRIENDS_WITH, WORKS_FOR). If FACT TYPES
   are given and one fits, use its name and fill `attributes` with its fields; otherwise `attributes` {}.
3. `fact`: a detailed, self-contained sentence with full names.
4. `negated`: true when the episode says the relation does not or no longer holds
   ("I left Tencent" -> WORKS_FOR Tencent, negated, invalid_at = when they left).
5. `functional`: true when the source can have only one current value for the relation
   (employer, home city, spouse, a favourite X); a new value replaces the old one.
6. Only what the episode asserts: nothing from questions, plans, wishes, hypotheticals or jokes.
7. If the speaker is the AI assistant, its own chatter (offers, abilities, feelings: "Sure, I can
   help") is not a fact and the assistant is not an entity; extract only what it states about the
   world or the user.

DATES (valid_at = when the relation became true; invalid_at = when it stopped)
- ISO 8601 with timezone, e.g. 2024-01-08T00:00:00Z (use Z when no zone is known; when the
  REFERENCE TIME has a UTC offset, write dates with that offset).
- Resolve relative times ("last week", "two years ago", "next Thursday") against the REFERENCE TIME
  (its LOCAL DATE when one is given: the speaker's calendar day).
- Present tense (an ongoing relation with no stated start): valid_at = the REFERENCE TIME.
- A date without a time of day: 00:00:00. A year alone: January 1st 00:00:00 of that year.
- EVENTS vs STATES: `kind` = "event" for a one-off happening (visited, went to, attended, met,
  bought, won, had surgery, ran a marathon): valid_at = the start of when it happened and
  invalid_at = its end: the day ("yesterday" -> that day 00:00 to the next day 00:00) or the
  stated span ("in 2019" -> 2019-01-01 to 2020-01-01); no stated time: the day of the REFERENCE
  TIME. `kind` = "state" for an ongoing relation (works for, lives in, likes, is married to): it
  stays open (invalid_at null) until the text says it ended.
- Only dates that belong to the fact itself; never infer them from related events. No date: null.
"""

RESOLVE_SYSTEM = """\
You deduplicate entities in a knowledge graph.
For each NEW ENTITY decide whether it is the same real-world entity as one of ITS candidate
EXISTING ENTITIES. Use both names and summaries: duplicates may have different names
("Bob" and "Robert Smith"), and entities with similar names may be different.
Answer one resolution per new entity: `duplicate_of` = the existing id (only one of that new
entity's candidates) or null; `name` = the most complete full name of the entity.
"""

JUDGE_SYSTEM = """\
You maintain facts in a knowledge graph. For each NEW FACT:
- `duplicate_of`: the id of one of its SAME-PAIR FACTS that carries the same information
  (the wording need not be identical), or null. A negated new fact is never a duplicate of a
  positive one.
- `contradicts`: the ids of its RELATED FACTS that the new fact makes no longer true, e.g. a new
  employer or home city for a functional relation, or a negated fact ending the fact it negates.
  Facts that can hold together (two friends, two hobbies) are not contradictions. Empty if none.
Only use ids listed for that new fact. Answer one judgement per new fact.
"""

# --- rendering -------------------------------------------------------------------------


def iso(moment: datetime | None) -> str:
    """A datetime as ISO 8601 in UTC with a Z, or "unknown"; prompts show one time format."""
    if moment is None:
        return "unknown"
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def local_iso(moment: datetime) -> str:
    """A reference time as ISO 8601 in the speaker's own UTC offset (as iso() for UTC)."""
    offset = moment.utcoffset()
    return moment.astimezone(timezone(offset)).isoformat() if offset else iso(moment)


def said_at(moment: datetime) -> str:
    """A reference time as ISO 8601 in the speaker's own UTC offset (Z for UTC), and when that
    offset is not UTC a LOCAL DATE line: the speaker's weekday and calendar day, which relative
    dates ("yesterday", "last Friday") count from."""
    offset = moment.utcoffset()
    if not offset:
        return iso(moment)
    local = moment.astimezone(timezone(offset))
    return (f"{local_iso(moment)}\nLOCAL DATE: {local:%A}, {local.date().isoformat()}"
            f" (the speaker's day, {timezone(offset).tzname(None)})")


def render_episode(episode: EpisodeInput) -> str:
    """One episode as prompt text: speaker-prefixed message, plain text, or a JSON document."""
    source = f" (source: {episode.source_description})" if episode.source_description else ""
    if episode.kind == "json":
        return f"JSON document{source}:\n{episode.content}"
    if episode.kind == "message" and episode.actor:
        return f"{episode.actor}: {episode.content}"
    return episode.content if not source else f"Text{source}:\n{episode.content}"


def _speaker_line(episode: EpisodeInput) -> str:
    if episode.kind == "message" and is_assistant(episode.actor):
        return (f"SPEAKER: {episode.actor} (the AI assistant: not an entity; its offers, abilities and "
                "feelings are not facts)")
    if episode.kind == "message":
        who = episode.actor or "the text before the colon"
        return f"SPEAKER: {who} (first-person words refer to the speaker)"
    if episode.kind == "json":
        return "SPEAKER: none (a JSON document: extract what it describes and the entities its fields name)"
    return "SPEAKER: none (plain text: do not invent a speaker)"


def _context(episode: EpisodeInput, previous: list[EpisodeInput]) -> list[str]:
    past = "\n".join(f"[{local_iso(p.reference_time)}] {render_episode(p)}" for p in previous) or "(none)"
    return [
        f"<PREVIOUS MESSAGES>\n{past}\n</PREVIOUS MESSAGES>",
        f"<CURRENT EPISODE>\n{render_episode(episode)}\n</CURRENT EPISODE>",
    ]


def _untitled(schema: Any) -> Any:
    """A JSON schema without its "title" keys (noise for the model)."""
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_untitled(v) for v in schema]
    return schema


def type_catalog(types: dict[str, type[BaseModel]]) -> str:
    """Each custom type as "Name: description" plus its fields' JSON schema (and $defs they use)."""
    lines = []
    for name, model in types.items():
        schema = _untitled(model.model_json_schema())
        lines.append(f"{name}: {schema.get('description', '').strip()}")
        if schema.get("properties"):
            lines.append(f"  fields: {json.dumps(schema['properties'], default=str)}")
        if schema.get("$defs"):
            lines.append(f"  $defs: {json.dumps(schema['$defs'], default=str)}")
    return "\n".join(lines)


def extraction_messages(
    episode: EpisodeInput,
    previous: list[EpisodeInput],
    entity_types: dict[str, type[BaseModel]],
    edge_types: dict[str, type[BaseModel]],
) -> list[dict[str, str]]:
    """The one request that extracts entities (with reflexion), facts and their dates."""
    parts = []
    if entity_types:
        parts.append(f"<ENTITY TYPES>\n{type_catalog(entity_types)}\n</ENTITY TYPES>")
    if edge_types:
        parts.append(f"<FACT TYPES>\n{type_catalog(edge_types)}\n</FACT TYPES>")
    parts += _context(episode, previous)
    parts.append(_speaker_line(episode))
    parts.append(f"REFERENCE TIME: {said_at(episode.reference_time)}")
    return [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _labels(labels: list[str] | tuple[str, ...]) -> str:
    typed = [label for label in labels if label != "Entity"]
    return f" [{', '.join(typed)}]" if typed else ""


def resolution_messages(
    episode: EpisodeInput,
    previous: list[EpisodeInput],
    existing: list[tuple[str, EntityCandidate]],
    new: list[tuple[str, ExtractedEntity, list[str]]],
) -> list[dict[str, str]]:
    """The one request that resolves all new entities: existing as (id, candidate), new as
    (id, entity, its candidates' ids)."""
    known = "\n".join(
        f"{short_id}: {c.name}{_labels(c.labels)}: {c.summary or '(no summary)'}" for short_id, c in existing
    )
    asked = "\n".join(
        f"{short_id}: {e.name}{_labels(e.labels)}: {e.summary or '(no summary)'}\n  candidates: {', '.join(ids)}"
        for short_id, e, ids in new
    )
    parts = _context(episode, previous) + [
        f"<EXISTING ENTITIES>\n{known}\n</EXISTING ENTITIES>",
        f"<NEW ENTITIES>\n{asked}\n</NEW ENTITIES>",
    ]
    return [
        {"role": "system", "content": RESOLVE_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def fact_line(relation: str, sentence: str, start: datetime | None, end: datetime | None) -> str:
    """A fact as "[RELATION] sentence (valid: from - to)" for the judge prompt."""
    until = iso(end) if end is not None else "present"
    return f"[{relation}] {sentence} (valid: {iso(start)} - {until})"


def new_fact_line(fact: ExtractedFact) -> str:
    """A new fact, marked when it is negated or functional."""
    flags = [flag for flag, on in (("NEGATED", fact.negated), ("FUNCTIONAL", fact.functional)) if on]
    marks = f" {{{', '.join(flags)}}}" if flags else ""
    return fact_line(fact.relation, fact.fact, fact.valid_at, fact.invalid_at) + marks


def judge_messages(
    episode: EpisodeInput,
    existing: list[tuple[str, FactCandidate]],
    new: list[tuple[str, ExtractedFact, list[str], list[str]]],
) -> list[dict[str, str]]:
    """The one request that judges all new facts: existing as (id, candidate), new as
    (id, fact, same-pair ids, related ids)."""
    known = "\n".join(
        f"{short_id}: {fact_line(c.relation, c.fact, c.valid_from, c.valid_to)}" for short_id, c in existing
    )
    asked = "\n".join(
        f"{short_id}: {new_fact_line(fact)}\n"
        f"  same-pair facts: {', '.join(dups) or '(none)'}\n"
        f"  related facts: {', '.join(related) or '(none)'}"
        for short_id, fact, dups, related in new
    )
    parts = [
        f"<CURRENT EPISODE>\n{render_episode(episode)}\n</CURRENT EPISODE>",
        f"REFERENCE TIME: {said_at(episode.reference_time)}",
        f"<EXISTING FACTS>\n{known}\n</EXISTING FACTS>",
        f"<NEW FACTS>\n{asked}\n</NEW FACTS>",
    ]
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
