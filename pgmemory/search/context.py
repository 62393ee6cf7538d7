"""χ: the paper's context string — facts with date ranges, entities with summaries,
community summaries on request — bounded by max_chars (whole lines only)."""
from __future__ import annotations

from datetime import datetime

from pgmemory.search.types import SearchResults

HEADER = ("FACTS and ENTITIES represent relevant context to the current conversation.\n"
          "These are the most relevant facts and their valid date ranges. If the fact is about "
          "an event, the event takes place during this time.\n"
          "format: FACT (Date range: from - to)")
ENTITY_HEADER = "These are the most relevant entities\nENTITY_NAME: entity summary"
COMMUNITY_HEADER = "These are summaries of the most relevant communities"
EPISODE_HEADER = "These are the most relevant raw messages\n[date] SPEAKER: message"


def _date(value: datetime | None, unknown: str) -> str:
    return value.strftime("%Y-%m-%d %H:%M") + " UTC" if value is not None else unknown


def build_context(results: SearchResults, *, max_chars: int = 8000, communities: bool = False,
                  episodes: bool = False) -> str:
    """Render results in the paper's template; items that would pass max_chars are dropped."""
    fact_lines = [f"- {f.fact} (Date range: {_date(f.valid_from, 'unknown')} - {_date(f.valid_to, 'present')})"
                  for f in results.facts]
    entity_lines = [f"- {e.name}: {e.summary}" for e in results.entities]
    sections = [(HEADER, "FACTS", fact_lines), (ENTITY_HEADER, "ENTITIES", entity_lines)]
    if communities:
        sections.append((COMMUNITY_HEADER, "COMMUNITIES",
                         [f"- {c.name}: {c.summary}" for c in results.communities]))
    if episodes:
        sections.append((EPISODE_HEADER, "EPISODES",
                         [f"- [{_date(e.valid_at, 'unknown')}] {e.actor + ': ' if e.actor else ''}{e.content}"
                          for e in results.episodes]))
    skeleton = sum(len(h) + len(t) * 2 + 7 for h, t, _ in sections)
    budget = max_chars - skeleton
    chosen: dict[str, list[str]] = {t: [] for _, t, _ in sections}
    for rank in range(max((len(lines) for _, _, lines in sections), default=0)):
        for _, tag, lines in sections:
            if rank < len(lines) and len(lines[rank]) + 1 <= budget:
                chosen[tag].append(lines[rank])
                budget -= len(lines[rank]) + 1
    parts = []
    for header, tag, _ in sections:
        body = "\n".join(chosen[tag])
        parts.append(f"{header}\n<{tag}>\n{body}\n</{tag}>")
    return "\n".join(parts)
