"""Clause grammar: the subject of a verb, its tense and negation, and the times a fact gets."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pgmemory.extract.dates import TimeMention, day_of, zone_of
from pgmemory.extract.offline.lexicon import AUX, KIN, KIN_ALT, NOT_VERBS, PETS, VERB_FORMS_PAST
from pgmemory.extract.offline.phrases import clean_name
from pgmemory.extract.offline.state import Ctx, Sentence
from pgmemory.extract.offline.text import NAME, possessive

_LEADING_FILLER = re.compile(
    r"^(?:[\s,!\-]|(?:oh|well|so|yeah|yes|yep|actually|anyway|btw|by\s+the\s+way|also|and|but"
    r"|hey|wow|um|uh|haha|hahaha|lol|lmao|omg|ugh|phew|welp|yay|then|plus|now|honestly|guess\s+what"
    r"|fun\s+fact|recently|lately|finally|fyi|ok|okay|alright|seriously|anyways|ps|news|update"
    r"|I\s+(?:think|guess|believe|suppose)(?:\s+that)?(?=\s+(?:I|we)\b))\b)*",
    re.IGNORECASE)
# Where a lead-in ends: "Big news: I ...", "Quick update - I ...", "Guess what, I ...".
_LEAD_IN_END = re.compile(r"[,:;]|\s[-\u2013\u2014]+\s|^[-\u2013\u2014]+\s")
_HEDGES = frozenset(["kinda", "sorta", "pretty", "probably"])
_PAST = re.compile(r"ed$|^(?:left|quit|got|had|went|won|met|bought|flew|drove|ran|came|grew|began|took"
                   r"|made)$", re.IGNORECASE)
_NOW = re.compile(r"\b(?:now|currently|nowadays|these\s+days)\b", re.IGNORECASE)
_ROLE_SUBJECT = re.compile(rf"^(?:(?P<my>[Mm]y|[Oo]ur)|(?P<your>[Yy]our)|(?P<owner>{NAME})'s?)\s+(?P<role>(?i:{KIN_ALT}))"
                           rf"(?:\s*,?\s+(?P<name>{NAME}))?,?$")
_NAME_SUBJECT = re.compile(rf"^{NAME}$")
_LEAD = re.compile(rf"I\b|[Ww]e\b|[Hh]e\b|[Ss]he\b|(?:[Mm]y|[Oo]ur|[Yy]our)\s+(?i:{KIN_ALT})(?:\s*,?\s+{NAME})?|{NAME}")
_FIRST_PERSON = frozenset(["I", "we", "We"])
_THIRD_PERSON = frozenset(["He", "She", "he", "she"])


def _is_subject(head: str, ctx: Ctx) -> bool:
    if head in _FIRST_PERSON:
        return ctx.speaker is not None
    if head in _THIRD_PERSON:
        return ctx.antecedent is not None
    m = _ROLE_SUBJECT.match(head)
    if m:
        if m["your"]:
            return bool(m["name"])
        return bool(ctx.speaker if m["my"] else clean_name(m["owner"]) == m["owner"])
    return bool(_NAME_SUBJECT.match(head)) and clean_name(head) == head and \
        not (" " not in head and head.endswith("ing"))


def _resolve_subject(head: str, pos: int, ctx: Ctx) -> str:
    """The entity a subject phrase (already checked by _is_subject) names, registering it."""
    if head in _FIRST_PERSON:
        assert ctx.speaker is not None
        return ctx.registry.add(ctx.speaker, "Person", -1)
    if head in _THIRD_PERSON:
        assert ctx.antecedent is not None
        return ctx.antecedent
    m = _ROLE_SUBJECT.match(head)
    if m and m["your"]:  # the listener is unknown: only the named relative is
        return ctx.registry.add(m["name"], KIN[m["role"].lower()][2], pos)
    if m:
        owner = ctx.speaker if m["my"] else m["owner"]
        assert owner is not None
        return role_entity(owner, m["role"].lower(), m["name"], pos, ctx)
    return ctx.registry.add(head, "Person", pos)


def role_entity(owner: str, role: str, name: str | None, pos: int, ctx: Ctx) -> str:
    """The entity a relative or pet phrase names; also records owner -> it (e.g. HAS_SISTER)."""
    relation, functional, label = KIN[role]
    owner = ctx.registry.add(owner, "Person", pos)
    extra = {"species": PETS[role]} if role in PETS else {}
    if name and role in PETS:
        target = ctx.registry.add(name, label, pos, **extra)
        text = f"{owner} has a {role} named {target}."
        ctx.antecedent = target
    elif name:
        target = ctx.registry.add(name, label, pos)
        text = f"{target} is {possessive(owner)} {role}."
        ctx.antecedent = target
    else:
        target = ctx.registry.add(f"{possessive(owner)} {role}", label, pos, **extra)
        text = f"{owner} has {role}." if role.endswith(("s", "ren")) else f"{owner} has a {role}."
    ctx.fact(owner, target, relation, text, valid=ctx.reference, functional=functional, role=role)
    return target


def lead_subject(s: Sentence, start: int, end: int, ctx: Ctx) -> tuple[str, int] | None:
    """The clause's own subject if it opens with one followed by a verb-like word."""
    clause = s.masked[start:end]
    head = _LEADING_FILLER.sub("", _after_lead_in(clause))
    m = _LEAD.match(head)
    if m is None:
        return None
    after = head[m.end():].split()
    subject = m[0].rstrip(",")
    if not after or not after[0].islower() or after[0] in NOT_VERBS:
        return None
    if not _is_subject(subject, ctx):
        return None
    return subject, s.offset + start + len(clause) - len(head)


@dataclass
class Grammar:
    """Who does a verb, how it is said, and the time that goes with it."""

    subject: str
    neg: bool
    used_to: bool
    past: bool
    perfect: bool
    when: TimeMention | None
    clause: tuple[int, int]
    said_past: bool = False  # the verb itself is in the past tense ("moved", "left", "did move")


def grammar(s: Sentence, verb_start: int, verb: str, ctx: Ctx) -> Grammar | None:
    """Parse the words between the clause start and the verb, or None if the subject is unclear.

    They must be, after dropping times, fillers and auxiliaries: nothing
    (subject of an earlier clause), "I", a name, or "my <relative> [Name]".
    """
    ci = s.clause_of(verb_start)
    c_start, c_end = s.clauses[ci]
    words = s.masked[c_start:verb_start].split()
    neg = used_to = past = perfect = copula = False
    while words:
        w = words[-1].lower().strip(",")
        if w == "of" and len(words) > 1 and words[-2].lower() in ("kind", "sort"):
            del words[-2:]
            continue
        if w in _HEDGES:
            words.pop()
            continue
        if w not in AUX:
            break
        words.pop()
        copula = copula or w in ("am", "is", "are", "was", "were", "be", "been")
        if w == "to":
            if not (words and words[-1].lower() == "used"):
                return None
            words.pop()
            used_to = True
        elif w == "used":
            return None
        elif w in ("not", "never", "longer"):
            neg = True
        elif w in ("was", "were", "had", "did"):
            past = True
        elif w in ("have", "has"):
            perfect = True
    head = _LEADING_FILLER.sub("", _after_lead_in(" ".join(words).strip(" ,"))).strip()
    when = s.time_in(c_start, c_end)
    if copula and verb.lower() == "like":
        return None
    if head:
        if not _is_subject(head, ctx):
            return None
        subject = _resolve_subject(head, s.offset + c_start, ctx)
    else:
        j = next((j for j in range(ci - 1, -1, -1) if s.leads[j] is not None), None)
        if j is None:
            return _without_subject(s, ci, verb, neg, used_to, past, perfect, when, ctx)
        lead = s.leads[j]
        assert lead is not None
        subject = _resolve_subject(lead[0], lead[1], ctx)
        if when is None and not _NOW.search(s.text[c_start:c_end]):
            earlier = (s.time_in(*s.clauses[k]) for k in range(ci - 1, j - 1, -1))
            when = next((t for t in earlier if t is not None), None)
    said_past = past or bool(_PAST.search(verb))
    past = past or (verb.lower() in VERB_FORMS_PAST and not perfect)
    return Grammar(subject, neg, used_to, past, perfect, when, (c_start, c_end), said_past)


def _after_lead_in(text: str) -> str:
    """The words after a lead-in ("Big news: I" -> " I"); the text itself when there is none."""
    last = None
    for last in _LEAD_IN_END.finditer(text):
        pass
    return text[last.end():] if last else text


def _without_subject(s: Sentence, ci: int, verb: str, neg: bool, used_to: bool, past: bool,
                     perfect: bool, when: TimeMention | None, ctx: Ctx) -> Grammar | None:
    """Chat drops the subject: "Started a new gig at X", "Moved to Austin!" are the speaker's.

    Only a past-tense verb opening the sentence's first clause counts: not imperatives, and
    not -ing forms, which are mostly reactions ("Loving the colours!").
    """
    if ctx.speaker is None or ci != 0 or not _PAST.search(verb):
        return None
    subject = ctx.registry.add(ctx.speaker, "Person", -1)
    said_past = past or bool(_PAST.search(verb))
    past = past or (verb.lower() in VERB_FORMS_PAST and not perfect)
    return Grammar(subject, neg, used_to, past, perfect, when, s.clauses[ci], said_past)


_Timing = tuple[datetime | None, datetime | None, bool]


def times(mode: str, g: Grammar, reference: datetime,
          duration: TimeMention | None = None) -> _Timing | None:
    """(valid_at, invalid_at, negated) for a rule mode and the clause's grammar; None to skip.

    The clause's time is read with its bound (``dates``): "since X" / "from X" starts a span,
    "until X" ends one, "from X to Y" is both, and a time without such a word is when it held.
    A state said in the past tense holds during the stated span and no longer holds: "I lived in
    Berlin in 2019" is [2019-01-01, 2020-01-01), "I worked at X until last year" is [unknown,
    the start of last year), "from 2018 to 2020" is [2018-01-01, 2021-01-01); a span still
    running when it was said ends at the reference time ("this year I lived in X").  An end said
    with a present-tense state ("I work at X until May") is a plan: the state holds from the
    reference time (or its stated start), its end is not recorded.
    """
    when = g.when
    zone = zone_of(reference)  # a day is the speaker's local day
    stated = when.starts() if when else None
    said_end = when.stops() if when else None
    if mode in ("start", "end", "event", "experience") and g.neg:
        return None
    if mode in ("start", "end", "event", "experience") and when is not None and when.value > reference:
        return None  # a plan ("starting at X next week"), not something that happened
    if mode in ("start", "end", "event") and when is not None and when.assumed_past \
            and not (g.past or g.said_past or g.perfect):
        return None  # "I'm starting at X on Monday", "I move to Y in March": which one is not said
    if mode == "end":
        return None, when.value if when else reference, True
    if mode == "start":
        return stated or reference, None, False
    if mode in ("event", "experience"):  # a one-off event: the stated period (a range's whole span),
        if when is not None:                # else the day it was told
            end = when.to.until if when.to is not None else when.until
            return when.value, end or day_of(when.value, zone)[1], False
        if mode == "experience" or g.perfect:  # "have been to": some time before now
            return None, reference, False
        return (*day_of(reference, zone), False)
    if g.neg:
        return None, when.value if when else reference, True
    if (g.past or g.used_to) and mode in ("state", "social") and when is not None:
        if said_end is not None:
            return (stated, said_end, False) if said_end <= reference and (stated is None or stated < said_end) \
                else None
        if when.bound == "since":
            return (stated, reference, False) if stated is not None and stated < reference else None
        end = min(when.until or day_of(when.value, zone)[1], reference)
        return (when.value, end, False) if when.value < end else None
    if g.used_to:
        return None, reference, False
    if g.past:
        if mode in ("state", "social") and stated is None:
            return None, reference, False
        return stated, None, False
    if mode == "origin":
        return stated or reference, None, False
    return stated or (duration.value if duration else None) or reference, None, False
