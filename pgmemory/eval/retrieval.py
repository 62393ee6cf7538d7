"""Turn search results into ranked turn ids, and turns into context text.

pgmemory returns episodes and facts; a fact points at the episodes it came
from (provenance), and episodes are already ranked with the facts they
support. Turn ids are the episode hits in rank order, then the fact hits'
provenance episodes; first occurrence wins, so recall@k of pgmemory and of
the turn baselines are measured on the same kind of ranked list.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from pgmemory.eval.readers import Turn
from pgmemory.search.types import SearchResults


def ranked_turn_ids(results: SearchResults, turn_of: Mapping[uuid.UUID, str]) -> list[str]:
    """Turn ids of the episode hits (ranked with the facts each supports), then of the fact
    hits' other provenance episodes in fact rank order, deduped."""
    ordered: dict[str, None] = {}
    ids = [e.id for e in results.episodes] + [eid for f in results.facts for eid in f.episodes]
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
