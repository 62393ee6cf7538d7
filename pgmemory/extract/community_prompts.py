"""Prompt texts and the reply schema for community summaries (the paper's map-reduce).

Map: a chunk of a community's members (name: summary) plus its most central facts -> a partial
summary. Reduce: the partial summaries -> one summary and a short name with the key terms. A
community that fits in one chunk takes one call (map and reduce at once).
"""
from __future__ import annotations

from pydantic import BaseModel, Field


class CommunitySummaryReply(BaseModel):
    """A summary of a group of related entities, and a short name for it."""

    summary: str = Field(description="At most four sentences: who or what the members are and how they relate")
    name: str = Field(description="Two to six words with the key terms of the community (names, topics)")


COMMUNITY_SYSTEM = """\
You summarise a community: a cluster of strongly connected entities of a knowledge graph built \
from conversations. Use only the information given. Write plain factual sentences with full \
names; no speculation, no lists, no preamble. The name is a short label of two to six words \
made of the community's key terms (main entity names or the shared topic)."""


def map_messages(members: list[dict], facts: list[str]) -> list[dict[str, str]]:
    """Summarise one chunk of members (most central first) with the community's central facts."""
    lines = [f"{m['name']}: {m.get('summary') or '(no description)'}" for m in members]
    user = ("Summarise what these entities are and how they relate (at most four sentences), and "
            "name the group.\n<ENTITIES>\n" + "\n".join(lines) + "\n</ENTITIES>\n"
            "<FACTS>\n" + ("\n".join(facts) or "(none)") + "\n</FACTS>")
    return [{"role": "system", "content": COMMUNITY_SYSTEM}, {"role": "user", "content": user}]


def reduce_messages(partials: list[str]) -> list[dict[str, str]]:
    """Merge partial summaries of one community into one summary and a name."""
    user = ("These are summaries of parts of one community. Merge them into one summary (at most "
            "four sentences) and name the community.\n<SUMMARIES>\n" + "\n".join(partials) + "\n</SUMMARIES>")
    return [{"role": "system", "content": COMMUNITY_SYSTEM}, {"role": "user", "content": user}]
