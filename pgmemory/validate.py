"""Checks of public arguments shared by every surface: each raises a one-line InvalidInput.

Strict on types on purpose: a str where a list is expected would be iterated character by
character, a "no" where a bool is expected is truthy, so both are refused rather than guessed.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from pgmemory.errors import InvalidInput

# Times we store and compare: far enough inside Python's datetime (years 1..9999) that any UTC
# offset and any date the extractor derives relative to a reference time (centuries either way)
# stays representable, and never reaches the +-infinity that drivers map to the year-1/9999 edges.
EARLIEST = datetime(1000, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)

# Entity names and relation types are keys of btree indexes (entities (group_id, lower(name)),
# entity_versions (group_id, entity_id, name), facts (source_id, relation)), whose rows hold at
# most 2704 bytes: 400 characters (4 bytes each at worst) beside a 200-character group id fit.
MAX_ENTITY_NAME_CHARS = 400
MAX_RELATION_CHARS = 100


def check_text(value: Any, name: str, *, max_chars: int | None = None, allow_empty: bool = False) -> str:
    """A str that Postgres can store: no NUL character, no lone surrogate, within max_chars."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise InvalidInput(f"{name} is empty")
    if "\x00" in value:
        raise InvalidInput(f"{name} contains a NUL character (\\u0000), which text cannot hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} contains a lone surrogate (not valid Unicode text)") from None
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{name} has {len(value)} characters; the limit is {max_chars}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """Exactly True or False (no 0/1, no "no")."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be True or False, got {value!r}")
    return value


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """An int (not a bool) in [low, high]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be an integer between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {value}")
    return value


def check_number(value: Any, name: str, low: float, high: float) -> float:
    """An int or float (not a bool) in [low, high]."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise InvalidInput(f"{name} must be a number between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {value}")
    return float(value)


def check_list(value: Any, name: str) -> tuple[Any, ...]:
    """A list, tuple or other non-string collection of items (a lone str is refused)."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise InvalidInput(f"{name} must be a list, got {type(value).__name__}")
    return tuple(value)


def check_uuid(value: Any, name: str) -> uuid.UUID:
    """A uuid.UUID, or a str in UUID form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip())
        except ValueError:
            pass
    raise InvalidInput(f"{name} must be a UUID, got {value!r:.60}")


def check_uuids(value: Any, name: str) -> tuple[uuid.UUID, ...]:
    """A list of UUIDs (uuid.UUID or str)."""
    return tuple(check_uuid(v, f"each of {name}") for v in check_list(value, name))


def check_time(value: Any, name: str) -> datetime:
    """An aware datetime between EARLIEST and LATEST."""
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(f"{name} {value.isoformat()} has no time zone: pass an aware datetime "
                           "(e.g. 2024-01-15T10:00:00+00:00)")
    try:
        in_range = EARLIEST <= value <= LATEST
    except OverflowError:
        in_range = False
    if not in_range:
        raise InvalidInput(f"{name} {value.isoformat()} is out of range: it must be between "
                           f"{EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)")
    return value


MAX_METADATA_CHARS = 10_000


def check_metadata(value: Any, name: str = "metadata") -> dict[str, Any]:
    """A JSON object (str keys; JSON values; no NaN, NUL or lone surrogate) of at most
    MAX_METADATA_CHARS characters as JSON: what an episode's metadata or a metadata filter may be.
    None is the empty object."""
    import json

    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidInput(f"{name} must be an object with string keys, got {type(value).__name__}")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{name} is not JSON: {str(exc)[:120]}") from None
    if len(text) > MAX_METADATA_CHARS:
        raise InvalidInput(f"{name} has {len(text)} characters as JSON; the limit is {MAX_METADATA_CHARS}")
    check_text(text, name)
    if "\\u0000" in json.dumps(value):
        raise InvalidInput(f"{name} contains a NUL character (\\u0000), which Postgres cannot store")
    return value


def read_input_file(path: str) -> bytes:
    """The bytes of a file the user named: a regular file or a pipe (bash's `<(zcat x.gz)`); a
    missing path, a directory or an unreadable file is one InvalidInput naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot be read ({exc.strerror or exc})") from None


def check_input_file(path: str) -> None:
    """Refuse, in one line, a path that names no file or a directory (before a long run starts)."""
    import os

    if os.path.isdir(path):
        raise InvalidInput(f"{path}: is a directory, not a file")
    if not os.path.exists(path):
        raise InvalidInput(f"{path}: no such file")
