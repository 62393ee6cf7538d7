"""Validate an episode before anything is written: every problem named, nothing stored."""
from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.extract.types import EpisodeInput
from pgmemory.validate import check_list, check_metadata, check_text, check_time

KINDS = ("message", "text", "json")
MAX_CONTENT_CHARS = 50_000  # about 12k tokens: one message, document chunk or record
MAX_GROUP_ID_CHARS = 200
ALL_GROUPS = "*"  # every group, in grants and API keys: never a group id
MAX_ACTOR_CHARS = 200
MAX_EPISODE_ID_CHARS = 200
MAX_JSON_DEPTH = 500  # levels of arrays and objects in a json episode (Python's parser stops near 1,000)
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
    metadata: dict[str, Any] = field(default_factory=dict)  # the caller's, stored with the episode

    def as_input(self) -> EpisodeInput:
        """The extractor's view of this episode."""
        return EpisodeInput(self.content, self.kind, self.reference_time, self.actor, self.source_description)


def offset_seconds(reference_time: datetime) -> float:
    """The reference time's UTC offset in seconds, as episodes.reference_offset stores it (written
    as make_interval(secs => ...): a timedelta goes over the wire as -1 day +19:00 for -05:00)."""
    offset = reference_time.utcoffset()
    assert offset is not None  # (validated: aware)
    return offset.total_seconds()


def said_time(valid_at: datetime, reference_offset: timedelta | None) -> datetime:
    """A stored episode's reference time in the speaker's UTC offset (episodes.reference_offset;
    NULL, as before it was stored, is UTC): the date rules read the speaker's local date from it."""
    return valid_at.astimezone(timezone.utc if reference_offset is None else timezone(reference_offset))


def parse_time(value: Any, field: str = "reference_time") -> datetime:
    """A tz-aware datetime in the supported range (validate.EARLIEST..LATEST) from a datetime or
    ISO 8601 string; naive, unparsable or out-of-range is an error."""
    if isinstance(value, str):
        text = check_text(value, field)
        try:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(f"{field} {text!r:.60} is not an ISO 8601 datetime") from None
    return check_time(value, field)


def episode_uuid(group_id: str, episode_id: Any, name: str = "episode_id") -> uuid.UUID:
    """The episode's UUID within its group: given as one, or derived (uuid5) from any other id.
    Ids are scoped to their group (the key is (group_id, id)), so a UUID used elsewhere is fine.
    A refusal names the id as `name` (the argument the caller gave it as, e.g. before_id)."""
    if isinstance(episode_id, uuid.UUID):
        return episode_id
    if not isinstance(episode_id, str) or not episode_id.strip():
        raise InvalidInput(f"{name} must be a UUID or a non-empty string")
    check_text(episode_id, name, max_chars=MAX_EPISODE_ID_CHARS)
    try:
        return uuid.UUID(episode_id)
    except ValueError:
        return uuid.uuid5(EPISODE_NAMESPACE, f"{group_id}\x1f{episode_id}")


def id_in_use(ep: Episode, given: Any = None, differs: str = "content") -> InvalidInput:
    """The refusal of an episode whose id its group already uses for a different episode (named
    as the writer gave it, and as the UUID it stands for), saying which field differs."""
    named = f"{given!r:.80} ({ep.id})" if isinstance(given, str) and given != str(ep.id) else str(ep.id)
    return InvalidInput(f"episode id {named} is already used by a different episode of group {ep.group_id!r:.80}:"
                        f" its {differs} differs")


def stored_differs(stored: Mapping[str, Any], ep: Episode) -> str | None:
    """Which field of the episode stored under ep's id is not ep's (content, kind, actor,
    reference_time as an instant: at another UTC offset it is the same episode, stored with the
    offset it came with first), or None: the same id is the same episode only when all agree."""
    for field, mine in (("content", ep.content), ("kind", ep.kind), ("actor", ep.actor),
                        ("valid_at", ep.reference_time)):
        if stored[field] != mine:
            return "reference_time" if field == "valid_at" else field
    return None


def default_episode_uuid(group_id: str, actor: str | None, reference_time: datetime, content: str) -> uuid.UUID:
    """The id of an episode given without one: derived from (group, actor, reference time as an
    instant, content), so re-running an interrupted ingest finds the episodes it already stored."""
    instant = reference_time.astimezone(timezone.utc).isoformat()
    return uuid.uuid5(EPISODE_NAMESPACE, "\x1f".join(("default", group_id, actor or "", instant, content)))


def validate_group_id(group_id: Any, name: str = "group_id") -> str:
    """Group ids are non-empty strings of at most MAX_GROUP_ID_CHARS printable characters, and
    not '*' (every group, in grants and API keys)."""
    if not isinstance(group_id, str) or not group_id.strip():
        raise InvalidInput(f"{name} must be a non-empty string")
    check_text(group_id, name)
    if len(group_id) > MAX_GROUP_ID_CHARS or not group_id.isprintable():
        raise InvalidInput(f"{name} must be at most {MAX_GROUP_ID_CHARS} printable characters")
    if group_id == ALL_GROUPS:
        raise InvalidInput(f"{name} '*' is reserved: it means every group in grants and API keys")
    return group_id


def validate_group_ids(group_ids: Any) -> list[str]:
    """One group id, or a non-empty list of them."""
    if isinstance(group_ids, str):
        group_ids = [group_ids]
    items = check_list(group_ids, "group_ids")
    if not items:
        raise InvalidInput("group_ids must name at least one group")
    return [validate_group_id(g, "group_ids") for g in items]


_JSON_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_NOT_BRACKET = re.compile(r"[^][{}]")


class NotJson(ValueError):
    """A constant json.loads reads but JSON does not have."""


def _not_json(constant: str) -> Any:
    """json.loads reads NaN, Infinity and -Infinity, which JSON (and Postgres' json, which
    enqueue_episode checks with) does not have: refused here too, so both paths take the same texts."""
    raise NotJson(f"{constant} is not a JSON value")


def json_depth(text: str) -> int:
    """How deep the arrays and objects of JSON `text` nest: the most brackets open at once
    outside strings. SQL's pgmemory_internal.json_depth (enqueue_episode) takes the same steps,
    so both surfaces refuse the same texts."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(1 if b in "[{" else -1 for b in brackets), default=0)


def validate_episode(group_id: Any, content: Any, *, kind: Any = "message", actor: Any = None,
                     reference_time: Any = None, source_description: Any = "",
                     episode_id: Any = None, metadata: Any = None) -> Episode:
    """Check every field of an episode and return it normalised, or raise InvalidInput."""
    group_id = validate_group_id(group_id)
    if kind not in KINDS:
        raise InvalidInput(f"unknown episode kind {kind!r:.40}: use one of {', '.join(KINDS)}")
    if not isinstance(content, str):
        raise InvalidInput(f"episode content must be a string, got {type(content).__name__}")
    if not content.strip():
        raise InvalidInput("episode content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"episode content has {len(content)} characters; the limit is "
                           f"{MAX_CONTENT_CHARS}: split it into several episodes")
    check_text(content, "content")
    if kind == "json":
        if (depth := json_depth(content)) > MAX_JSON_DEPTH:
            raise InvalidInput(f"json episode nests {depth} levels of arrays and objects; the limit is {MAX_JSON_DEPTH}")
        try:
            json.loads(content, parse_constant=_not_json)
        except (json.JSONDecodeError, NotJson) as exc:
            raise InvalidInput(f"json episode is not valid JSON: {exc}") from None
        except ValueError as exc:  # an integer over Python's 4300 digits (was an internal error: a 500)
            raise InvalidInput(f"json episode cannot be read: {str(exc).split(';')[0]}") from None
    if reference_time is None:
        raise InvalidInput("reference_time is required (when the episode was said or happened)")
    reference_time = parse_time(reference_time)
    if actor is not None:
        if not isinstance(actor, str) or not actor.strip():
            raise InvalidInput("actor must be a non-empty string or None")
        actor = check_text(actor, "actor", max_chars=MAX_ACTOR_CHARS).strip()
        if control := next((c for c in actor if ord(c) < 32 or 127 <= ord(c) < 160), None):
            # a name is one line: "Alice\nMallory" became an entity whose name printed as two
            # lines of a context (sql/50_queue.sql checks the same characters)
            raise InvalidInput(f"actor contains a control character (U+{ord(control):04X}): a speaker's name is one line")
    check_text(source_description, "source_description", max_chars=MAX_CONTENT_CHARS, allow_empty=True)
    eid = (default_episode_uuid(group_id, actor, reference_time, content) if episode_id is None
           else episode_uuid(group_id, episode_id))
    return Episode(eid, group_id, content, kind, reference_time, actor, source_description,
                   check_metadata(metadata))
