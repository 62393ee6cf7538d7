"""The decisions invalidation needs, as claims: what each judged fact says (asserts or negates),
which believed fact it repeats and which it contradicts, with its dates.

Python decides; the temporal rules that turn claims into fact versions (re-assertion after an
end, earlier evidence moving a start back, late statements about the past, negations,
retractions) run in stored SQL (sql/35_fact_rules.sql, inside pgmemory_internal.apply_episode), so
every writer gets the same guarantees.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from pgmemory.ingest.resolve_facts import JudgedFact


@dataclass
class Claim:
    """One decided statement: `id` becomes the fact id if it opens a new validity interval."""

    id: uuid.UUID
    judged: JudgedFact
    kind: str  # "assert" | "negate"
    duplicate_of: str | None
    contradicts: tuple[str, ...]


@dataclass
class FactPlan:
    """Every claim of one episode, in the order the rules apply them."""

    claims: list[Claim] = field(default_factory=list)


def plan_facts(judged: list[JudgedFact]) -> FactPlan:
    """One claim per judged fact; a negation contradicts nothing (it ends what it repeats)."""
    plan = FactPlan()
    for j in judged:
        d = j.decision
        duplicate = d.duplicate_of if d.duplicate_of in j.candidates else None
        negated = j.fact.negated
        contradicts = () if negated else tuple(c for c in d.contradicts if c in j.candidates)
        plan.claims.append(Claim(uuid.uuid4(), j, "negate" if negated else "assert", duplicate, contradicts))
    return plan
