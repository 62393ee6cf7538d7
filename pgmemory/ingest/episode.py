"""Validate an episode before anything is written: every problem named, nothing stored."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.extract.types import EpisodeInput

KINDS = ("message", "text", "json")
MAX_CONTENT_CHARS = 50_000  # about 12k tokens: one message, document chunk or record
MAX_GROUP_ID_CHARS = 200
EPISODE_NAMESPACE = uuid.UUID("5d6f1f0e-8a43-4f3c-9a52-6d0c2b7e9a11")


@dataclass(frozen=True)
class Episode:
    """A validated episode, ready to store and extract."""

    id: uuid.UUID
    group_id: str
    content: str
    kind: str
    reference_time: datetime
    actor: str | None
    source_description: str

    def as_input(self) -> EpisodeInput:
        """The extractor's view of this episode."""
        return EpisodeInput(self.content, self.kind, self.reference_time, self.actor, self.source_description)


def parse_time(value: Any, field: str = "reference_time") -> datetime:
    """A tz-aware datetime from a datetime or ISO 8601 string; naive or unparsable is an error."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(f"{field} {value!r} is not an ISO 8601 datetime") from None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{field} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(f"{field} {value.isoformat()} has no time zone: pass an aware datetime "
                           "(e.g. 2024-01-15T10:00:00+00:00)")
    return value


def episode_uuid(group_id: str, episode_id: Any) -> uuid.UUID:
    """The episode's UUID: given as one, derived (uuid5) from any other id, or new."""
    if episode_id is None:
        return uuid.uuid4()
    if isinstance(episode_id, uuid.UUID):
        return episode_id
    if not isinstance(episode_id, str) or not episode_id.strip():
        raise InvalidInput("episode_id must be a UUID or a non-empty string")
    try:
        return uuid.UUID(episode_id)
    except ValueError:
        return uuid.uuid5(EPISODE_NAMESPACE, f"{group_id}\x1f{episode_id}")


def validate_group_id(group_id: Any) -> str:
    """Group ids are non-empty strings of at most MAX_GROUP_ID_CHARS printable characters."""
    if not isinstance(group_id, str) or not group_id.strip():
        raise InvalidInput("group_id must be a non-empty string")
    if len(group_id) > MAX_GROUP_ID_CHARS or not group_id.isprintable():
        raise InvalidInput(f"group_id must be at most {MAX_GROUP_ID_CHARS} printable characters")
    return group_id


def validate_episode(group_id: Any, content: Any, *, kind: Any = "message", actor: Any = None,
                     reference_time: Any = None, source_description: Any = "",
                     episode_id: Any = None) -> Episode:
    """Check every field of an episode and return it normalised, or raise InvalidInput."""
    group_id = validate_group_id(group_id)
    if kind not in KINDS:
        raise InvalidInput(f"unknown episode kind {kind!r}: use one of {', '.join(KINDS)}")
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("episode content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"episode content has {len(content)} characters; the limit is "
                           f"{MAX_CONTENT_CHARS}: split it into several episodes")
    if kind == "json":
        try:
            json.loads(content)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"json episode is not valid JSON: {exc}") from None
    if reference_time is None:
        raise InvalidInput("reference_time is required (when the episode was said or happened)")
    reference_time = parse_time(reference_time)
    if actor is not None and (not isinstance(actor, str) or not actor.strip()):
        raise InvalidInput("actor must be a non-empty string or None")
    if not isinstance(source_description, str):
        raise InvalidInput("source_description must be a string")
    return Episode(episode_uuid(group_id, episode_id), group_id, content, kind, reference_time,
                   actor.strip() if actor else None, source_description)
