"""Turn search results into ranked turn ids, and turns into context text.

pgmemory returns episodes and facts; a fact points at the episodes it came
from (its provenance, ``pgmemory.fact_episodes``, returned as
``FactHit.episodes``). Turn ids are the episode hits in rank order, then the
fact hits' provenance episodes in fact rank order; first occurrence wins, so
recall@k of pgmemory and of the turn baselines are measured on the same kind
of ranked list, at most one entry per turn (recall never exceeds 1).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pgmemory.eval.readers import Turn
from pgmemory.search.types import SearchResults

TURN_KINDS = ("episodes", "facts")


@dataclass(frozen=True)
class RankedTurns:
    """Distinct turn ids best first, and how many came from episode hits and from fact hits."""

    ids: list[str]
    from_episodes: int
    from_facts: int


def rank_turns(results: SearchResults, turn_of: Mapping[uuid.UUID, str], limit: int) -> RankedTurns:
    """The first `limit` distinct turns: episode hits (ranked with the facts each supports), then
    the source episodes of the fact hits in fact rank order (all sources of a fact at its rank)."""
    ordered: dict[str, str] = {}
    sources = [(e.id, "episodes") for e in results.episodes] + [
        (eid, "facts") for f in results.facts for eid in f.episodes]
    for eid, source in sources:
        turn = turn_of.get(eid)
        if turn is not None and len(ordered) < limit:
            ordered.setdefault(turn, source)
    kinds = list(ordered.values())
    return RankedTurns(list(ordered), kinds.count("episodes"), kinds.count("facts"))


def ranking_note(recipe: str, kinds: Sequence[str]) -> str:
    """One paragraph for the report: how pgmemory's ranked turns were formed for this recipe."""
    provenance = ("the source episodes of its fact hits (pgmemory.fact_episodes), in fact rank order, "
                  "all sources of a fact at its rank")
    if "episodes" in kinds and "facts" in kinds:
        how = f"its episode hits in rank order, then {provenance}"
    elif "facts" in kinds:
        how = (f"{provenance} (the recipe returns facts only, so recall is bounded by the facts "
               "extraction produced and the turns they cite)")
    elif "episodes" in kinds:
        how = "its episode hits in rank order"
    else:
        return (f"Recipe `{recipe}` returns only {' and '.join(kinds)}, which cite no turn: pgmemory "
                "ranks no turns and its recall is 0 by construction.")
    return f"Recipe `{recipe}`: pgmemory's ranked turns are {how}; each turn counted once, first occurrence kept."


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
