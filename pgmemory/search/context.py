"""χ: the paper's context string — facts with date ranges (one-off events "on <date>"), entities
with summaries, community summaries and raw episodes on request — never longer than max_chars.

Whole lines only, filled in priority order: facts, then entities, then communities, then
episodes (a line that does not fit is skipped, shorter later ones may still fit). Date ranges are
UTC; a one-day event is named by its speaker's date and a raw message's time is the speaker's
local time with its offset (a date-only time is the speaker's local midnight: at +14:00, May 8 is
05-07T10:00Z, which no UTC rendering names as May 8).
When the paper's long headers would cost lines, short headers are used instead. An entity
summary's sentences that restate a fact the context shows are left out (an entity left with
none is not listed), and a line is shown once in its section (hits of several groups holding the
same story render the same lines): the same words twice cost tokens and tell the model nothing.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from pgmemory.search.config import SearchConfig
from pgmemory.search.types import SINCE_FOREVER, FactHit, SearchResults

PREAMBLE = "FACTS and ENTITIES represent relevant context to the current conversation."
FACT_HEADER = ("These are the most relevant facts and their valid date ranges (UTC). If the fact is about "
               "an event, the event takes place during this time.\n"
               "format: FACT (Date range: from - to), or FACT (on date) for a one-day event")
ENTITY_HEADER = "These are the most relevant entities\nENTITY_NAME: entity summary"
COMMUNITY_HEADER = "These are summaries of the most relevant communities"
EPISODE_HEADER = "These are the most relevant raw messages\n[date] SPEAKER: message"
SHORT_PREAMBLE = "Relevant facts (valid dates, UTC) and entities:"

# The mark an entity summary puts on an ended fact (sql/45_apply_episode.sql).
ENDED_MARK = re.compile(r" \(until \d{4}-\d{2}-\d{2}\)$")

# A fact whose valid interval is bounded and at most this long is an event: "on <date>".
EVENT_SPAN = timedelta(days=1)


def _utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _offset_text(offset: timedelta) -> str:
    """'+14:00', '-05:30': an offset as ISO 8601 writes it."""
    minutes = int(offset.total_seconds()) // 60
    return f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _said(value: datetime | None, offset: timedelta | None, unknown: str) -> str:
    """A message's time in its speaker's offset ('2024-05-08 09:00 +14:00'); UTC without one."""
    if value is None or not offset or value == SINCE_FOREVER:
        return _date(value, unknown)
    return value.astimezone(timezone(offset)).strftime("%Y-%m-%d %H:%M ") + _offset_text(offset)


def _date(value: datetime | None, unknown: str) -> str:
    if value == SINCE_FOREVER:
        return "forever"
    return _utc(value).strftime("%Y-%m-%d %H:%M") + " UTC" if value is not None else unknown


def is_event(fact: FactHit) -> bool:
    """A one-off event: marked so by the extractor (attributes kind=event) or valid for at most
    a day (e.g. [day, day+1))."""
    if fact.valid_from is None:
        return False
    if (fact.attributes or {}).get("kind") == "event":
        return True
    return fact.valid_to is not None and fact.valid_to - fact.valid_from <= EVENT_SPAN


def fact_when(fact: FactHit) -> str:
    """'on 2019-03-04' for an event that fits in a day, else 'Date range: <from> - <to>'. The day
    is the date of the span's middle at the speaker's offset (said_offset): their local day
    (midnight to midnight there, e.g. [05-07 10:00Z, 05-08 10:00Z) at +14:00) is named by its own
    date, not by the UTC date its start falls on. Without an offset, the UTC date of the middle
    (right for a local day at offsets from -11:00 to +12:00)."""
    if is_event(fact) and (fact.valid_to is None or fact.valid_to - fact.valid_from <= EVENT_SPAN):
        middle = fact.valid_from if fact.valid_to is None else fact.valid_from + (fact.valid_to - fact.valid_from) / 2
        zone = timezone(fact.said_offset) if fact.said_offset and middle != SINCE_FOREVER else timezone.utc
        return f"on {_utc(middle).astimezone(zone).strftime('%Y-%m-%d')}"
    return f"Date range: {_date(fact.valid_from, 'unknown')} - {_date(fact.valid_to, 'present')}"


@dataclass
class _Section:
    tag: str
    header: str
    lines: list[str]
    always: bool  # shown (empty) even without lines, when it fits


def sentence_key(sentence: str) -> str:
    """A fact or summary sentence compared by its words: no final period, no "(until <date>)"
    mark, any case."""
    return ENDED_MARK.sub("", sentence.strip().rstrip(".").rstrip()).casefold()


def untold(summary: str, told: set[str]) -> str:
    """The summary without its sentences ("A. B.") whose key is in `told`; unchanged when none is."""
    parts = summary.strip().rstrip(".").split(". ")
    kept = [p for p in parts if p.strip() and sentence_key(p) not in told]
    if len(kept) == len(parts):
        return summary
    return ". ".join(kept) + "." if kept else ""


def _entity_lines(results: SearchResults, told: set[str]) -> list[str]:
    lines = []
    for e in results.entities:
        summary = untold(e.summary, told) if e.summary else ""
        if e.summary and not summary:
            continue  # every sentence of it is a fact shown above
        lines.append(f"- {e.name}: {summary}" if summary else f"- {e.name}")
    return lines


def _fact_line(f: FactHit) -> str:
    return f"- {f.fact} ({fact_when(f)})"


def _distinct(lines: list[str]) -> list[str]:
    """Each line once, where it first comes (the best hit's place)."""
    return list(dict.fromkeys(lines))


def _sections(results: SearchResults, communities: bool, episodes: bool,
              told: set[str] = frozenset()) -> list[_Section]:
    """The context's sections in priority order, each line once; entity summaries without the
    sentences whose key is in `told` (the facts shown)."""
    out = [
        _Section("FACTS", FACT_HEADER, _distinct([_fact_line(f) for f in results.facts]), True),
        _Section("ENTITIES", ENTITY_HEADER, _distinct(_entity_lines(results, told)), True),
    ]
    if communities:
        out.append(_Section("COMMUNITIES", COMMUNITY_HEADER,
                            _distinct([f"- {c.name}: {c.summary}" if c.summary else f"- {c.name}"
                                       for c in results.communities]), False))
    if episodes:
        out.append(_Section("EPISODES", EPISODE_HEADER,
                            _distinct([f"- [{_said(e.valid_at, e.said_offset, 'unknown')}] "
                                       f"{e.actor + ': ' if e.actor else ''}{e.content}"
                                       for e in results.episodes]), False))
    return out


def _render(preamble: str, shown: list[tuple[str, list[str]]], headers: dict[str, str]) -> str:
    if not shown:
        return ""
    parts = [preamble]
    for tag, lines in shown:
        header = headers.get(tag, "")
        parts.append((header + "\n" if header else "") + f"<{tag}>\n" + "\n".join(lines) + f"\n</{tag}>")
    return "\n".join(parts)


def _fill(sections: list[_Section], max_chars: int, preamble: str,
          headers: dict[str, str], chosen: dict[str, list[str]] | None = None) -> tuple[str, tuple[int, ...]]:
    """The text of the lines that fit, greedily in order, and how many of each section; the lines
    chosen are left in `chosen` (by tag) when it is given (a skipped line may precede chosen ones)."""
    chosen = {} if chosen is None else chosen
    chosen.update({s.tag: [] for s in sections})
    line_chars = {s.tag: 0 for s in sections}
    empty_shown: set[str] = set()

    def section_len(tag: str) -> int:
        # len of _render's section: header line, <TAG>, its lines joined by newlines, </TAG>
        header = headers.get(tag, "")
        n = len(chosen[tag])
        return ((len(header) + 1 if header else 0) + len(tag) + 3 + line_chars[tag] + max(0, n - 1)
                + len(tag) + 4)

    def length() -> int:
        """len(text()) without rendering it (one render per line made filling quadratic)."""
        visible = [s.tag for s in sections if chosen[s.tag] or s.tag in empty_shown]
        return len(preamble) + sum(1 + section_len(t) for t in visible) if visible else 0

    def text() -> str:
        return _render(preamble, [(s.tag, chosen[s.tag]) for s in sections
                                  if chosen[s.tag] or s.tag in empty_shown], headers)

    for section in sections:  # in priority order: a section's frame, then its lines
        if section.always:
            empty_shown.add(section.tag)
            if length() > max_chars:
                empty_shown.discard(section.tag)
        for line in section.lines:
            chosen[section.tag].append(line)
            line_chars[section.tag] += len(line)
            if length() > max_chars:
                chosen[section.tag].pop()
                line_chars[section.tag] -= len(line)
    out = text()
    return out, tuple(len(chosen[s.tag]) for s in sections)


def shown_config(config: SearchConfig, *, communities: bool, episodes: bool) -> SearchConfig:
    """The config searching only the kinds a context shows (facts, entities; communities and
    episodes on request): each kind is ranked on its own, so the others' candidates (the default
    recipe's episodes with their neighbouring turns cost more than the facts and entities) would be
    read and thrown away. A config of none of those kinds is left as it is."""
    shown = ("facts", "entities") + (("communities",) if communities else ()) + (("episodes",) if episodes else ())
    kinds = tuple(k for k in config.kinds if k in shown)
    return replace(config, kinds=kinds) if kinds and kinds != config.kinds else config


def build_context(results: SearchResults, *, max_chars: int = 8000, communities: bool = False,
                  episodes: bool = False) -> str:
    """Render results in the paper's template in at most max_chars characters (facts first;
    entity summaries without what the facts shown already say)."""
    variants = []
    for preamble, long_headers in ((PREAMBLE, True), (SHORT_PREAMBLE, False)):
        sections = _sections(results, communities, episodes)
        headers = {s.tag: s.header for s in sections} if long_headers else {}
        # The facts are filled first, so the facts shown do not depend on the other sections.
        chosen: dict[str, list[str]] = {}
        _fill(sections[:1], max_chars, preamble, headers, chosen)
        shown = set(chosen["FACTS"])  # not the first n: a fact too long is skipped, later ones fit
        told = {sentence_key(f.fact) for f in results.facts if _fact_line(f) in shown}
        variants.append(_fill(_sections(results, communities, episodes, told), max_chars, preamble, headers))
    (full, kept), (short, kept_short) = variants
    return full if kept >= kept_short else short
