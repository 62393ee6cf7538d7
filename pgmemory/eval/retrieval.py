"""Turn search results into ranked turn ids, and turns into context text.

pgmemory returns episodes and facts; a fact points at the episodes it came
from (provenance).  Both become turn ids, walked rank by rank (episode hit
then fact hit at each rank), first occurrence wins, so recall@k of pgmemory
and of the turn baselines are measured on the same kind of ranked list.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from itertools import zip_longest

from pgmemory.eval.readers import Turn
from pgmemory.search.types import SearchResults


def ranked_turn_ids(results: SearchResults, turn_of: Mapping[uuid.UUID, str]) -> list[str]:
    """Turn ids of the episode hits and of the fact hits' provenance, interleaved by rank, deduped."""
    ordered: dict[str, None] = {}
    for episode, fact in zip_longest(results.episodes, results.facts):
        ids = ([episode.id] if episode is not None else []) + (fact.episodes if fact is not None else [])
        for eid in ids:
            turn = turn_of.get(eid)
            if turn is not None:
                ordered.setdefault(turn, None)
    return list(ordered)


def render_turn(turn: Turn) -> str:
    """One turn as a context line: ``[date] speaker: text``."""
    return f"[{turn.time.strftime('%Y-%m-%d %H:%M')} UTC] {turn.speaker}: {turn.text}"


def render_turns(turns: Iterable[Turn]) -> str:
    """Turns as context, one line each (the baselines' retrieved context)."""
    return "\n".join(render_turn(t) for t in turns)


def session_numbers(turns: Iterable[Turn]) -> dict[str, int]:
    """1-based position of each session in the conversation (session ids themselves can leak
    answers: LongMemEval names evidence sessions ``answer_...``)."""
    numbers: dict[str, int] = {}
    for turn in turns:
        numbers.setdefault(turn.session_id, len(numbers) + 1)
    return numbers


def full_transcript(turns: Sequence[Turn]) -> str:
    """Every turn, grouped by numbered session with its date: the full-context baseline."""
    numbers = session_numbers(turns)
    lines: list[str] = []
    session = None
    for turn in turns:
        if turn.session_id != session:
            session = turn.session_id
            lines.append(f"\n## Session {numbers[session]} ({turn.time.strftime('%Y-%m-%d %H:%M')} UTC)")
        lines.append(f"{turn.speaker}: {turn.text}")
    return "\n".join(lines).strip()
