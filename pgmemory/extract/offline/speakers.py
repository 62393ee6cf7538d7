"""Who says each part of a message: "Name: text" lines, the actor, and the assistant."""
from __future__ import annotations

import re

from pgmemory.extract.offline.lexicon import CAP_STOP, LEAD_IN_LABELS
from pgmemory.extract.roles import is_assistant

_PREFIX = re.compile(r"^[ \t]*([A-Z][\w.'-]*(?:[ \t]+[A-Z][\w.'-]*){0,3})[ \t]*:[ \t]+")


def _speaker_prefix(line: str) -> re.Match[str] | None:
    """A leading "Name: " that names a speaker, not a lead-in label such as "Big news: "."""
    m = _PREFIX.match(line)
    if m is None:
        return None
    words = m[1].lower().split()
    if words[-1] in LEAD_IN_LABELS or any(w in CAP_STOP for w in words):
        return None if not is_assistant(m[1]) else m
    return m


def segments(content: str, actor: str | None) -> list[tuple[str | None, str]]:
    """(speaker, text) parts of a message: each "Name: text" line is that speaker's, and lines
    without a prefix continue the speaker before them (the actor at first)."""
    parts: list[tuple[str | None, str]] = []
    speaker = actor
    for line in content.splitlines(keepends=True):
        m = _speaker_prefix(line)
        if m is not None:
            speaker, line = m[1].strip(), line[m.end():]
        if parts and parts[-1][0] == speaker:
            parts[-1] = (speaker, parts[-1][1] + line)
        else:
            parts.append((speaker, line))
    return parts or [(actor, content)]
