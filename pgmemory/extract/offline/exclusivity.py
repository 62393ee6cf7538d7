"""Which believed facts a new fact ends: the exclusivity of relations, as the offline judge knows it.

- Functional relations hold one value at a time per source: a new employer ends the old one.
- Opposite preferences on the same thing end each other ("love olives" ends "hate olives"),
  and a comparative preference ends when the compared thing becomes preferred ("prefer
  coffee" ends "prefers tea over coffee").
- States of a person (relation IS) come in families whose members exclude each other (vegan
  ends vegetarian); some states end relations too (retired ends WORKS_FOR, single ends DATING).
- Marrying someone ends being engaged to or dating them.
- A negated fact ("no longer likes X") ends the same relation, or one of the same polarity, on
  the same pair.
"""
from __future__ import annotations

import re

from pgmemory.extract.types import ExtractedFact, FactCandidate

FUNCTIONAL = frozenset(["WORKS_FOR", "LIVES_IN", "STUDIES_AT", "MARRIED_TO", "ENGAGED_TO"])
POSITIVE = frozenset(["LIKES", "LOVES", "ENJOYS", "PREFERS"])
NEGATIVE = frozenset(["HATES", "DISLIKES"])
SYMMETRIC = frozenset(["MARRIED_TO", "ENGAGED_TO", "DATING", "HAS_FRIEND", "KNOWS"])
STATE_FAMILY = {
    **dict.fromkeys(["vegetarian", "vegan", "pescatarian", "carnivore", "omnivore"], "diet"),
    **dict.fromkeys(["retired", "unemployed", "self-employed", "between jobs"], "work"),
    **dict.fromkeys(["single", "widowed"], "partner"),
    **dict.fromkeys(["sober"], "sober"),
    **dict.fromkeys(["pregnant"], "pregnant"),
}
FAMILY_ENDS = {
    "work": frozenset(["WORKS_FOR"]),
    "partner": frozenset(["DATING", "ENGAGED_TO", "MARRIED_TO"]),
}
REPLACES_SAME_TARGET = {"MARRIED_TO": frozenset(["ENGAGED_TO", "DATING"])}


def _same(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()


def _polarity(relation: str) -> int:
    return 1 if relation in POSITIVE else -1 if relation in NEGATIVE else 0


def same_statement(fact: ExtractedFact, old: FactCandidate) -> bool:
    """True when ``old`` is the fact ``fact`` repeats (or, if negated, denies)."""
    pair = _same(old.source, fact.source) and _same(old.target, fact.target)
    if not pair and fact.relation in SYMMETRIC:
        pair = _same(old.source, fact.target) and _same(old.target, fact.source)
    if not pair:
        return False
    if old.relation == fact.relation:
        return True
    return fact.negated and _polarity(fact.relation) != 0 and \
        _polarity(old.relation) == _polarity(fact.relation)


def ends(fact: ExtractedFact, old: FactCandidate) -> bool:
    """True when the positive ``fact`` makes the believed ``old`` fact no longer true."""
    if fact.negated or not _same(old.source, fact.source):
        return False
    same_target = _same(old.target, fact.target)
    if old.relation == fact.relation and not same_target:
        if fact.functional or fact.relation in FUNCTIONAL:
            return True
        if fact.relation == "PREFERS":
            return bool(re.search(rf"\b(?:over|than|to)\s+(?:the\s+)?{re.escape(fact.target)}\b",
                                  old.fact, re.IGNORECASE))
        if fact.relation == "IS":
            family = STATE_FAMILY.get(fact.target.casefold())
            return family is not None and STATE_FAMILY.get(old.target.casefold()) == family
        return False
    if same_target:
        if _polarity(fact.relation) * _polarity(old.relation) < 0:
            return True
        return old.relation in REPLACES_SAME_TARGET.get(fact.relation, ())
    if fact.relation == "IS":
        family = STATE_FAMILY.get(fact.target.casefold())
        return old.relation in FAMILY_ENDS.get(family or "", ())
    return False
