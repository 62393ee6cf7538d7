"""The temporal rules: what a judged fact does to what we believe.

Newer information (by transaction time) wins a contradiction, but an episode
about the past never ends a fact that is newer in valid time: the older fact
is then recorded as having ended when the newer one began.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from pgmemory.ingest.resolve_facts import JudgedFact


@dataclass
class NewFact:
    """A fact version to record."""

    id: uuid.UUID
    judged: JudgedFact
    valid_from: datetime | None
    valid_to: datetime | None


@dataclass
class FactPlan:
    """Every fact write of one episode."""

    new_facts: list[NewFact] = field(default_factory=list)
    provenance: set[str] = field(default_factory=set)
    invalidations: dict[str, datetime] = field(default_factory=dict)
    retractions: set[str] = field(default_factory=set)
    duplicates: int = 0


def plan_facts(judged: list[JudgedFact], reference_time: datetime) -> FactPlan:
    """Turn verdicts into writes: new versions, provenance, invalidations, retractions."""
    plan = FactPlan()
    for j in judged:
        fact, d = j.fact, j.decision
        old = j.candidates.get(d.duplicate_of) if d.duplicate_of else None
        if old is not None:
            plan.duplicates += 1
            plan.provenance.add(old.id)
            end = fact.invalid_at or (reference_time if fact.negated else None)
            if end is not None and old.valid_to is None:
                _end(plan, old.id, old.valid_from, end)
            continue
        valid_from, valid_to = fact.valid_at, fact.invalid_at
        if fact.negated:
            valid_to = valid_to or reference_time
            if valid_from is not None and valid_from >= valid_to:
                valid_from = None
        else:
            started = valid_from or reference_time
            for old_id in d.contradicts:
                old = j.candidates.get(old_id)
                if old is None or (old.valid_to is not None and old.valid_to <= started):
                    continue
                if old.valid_from is not None and started < old.valid_from:
                    valid_to = min(valid_to or old.valid_from, old.valid_from)
                    continue
                _end(plan, old.id, old.valid_from, started)
            if valid_from is not None and valid_to is not None and valid_from >= valid_to:
                valid_from = None
        plan.new_facts.append(NewFact(uuid.uuid4(), j, valid_from, valid_to))
    return plan


def _end(plan: FactPlan, fact_id: str, valid_from: datetime | None, at: datetime) -> None:
    """End a believed fact at `at`; if that is not after its start, the belief is withdrawn."""
    if valid_from is not None and at <= valid_from:
        plan.invalidations.pop(fact_id, None)
        plan.retractions.add(fact_id)
        return
    if fact_id not in plan.retractions:
        previous = plan.invalidations.get(fact_id)
        plan.invalidations[fact_id] = at if previous is None else min(previous, at)
