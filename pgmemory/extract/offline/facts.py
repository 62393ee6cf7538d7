"""Turn pattern matches in a sentence into ExtractedFacts (and the entities they name)."""
from __future__ import annotations

import re
from dataclasses import replace

from pgmemory.extract.dates import find_duration
from pgmemory.extract.offline.lexicon import CARS, KIN, PETS, PLURAL_ROLES, STUDENT_WORDS, label_for_place
from pgmemory.extract.offline.patterns import (
    FAVOURITE,
    RATHER,
    WORKPLACE,
    FAVOURITE_REVERSED,
    KIN_APPOSITIVE,
    KIN_COPULA,
    POSSESSION,
    ROLE_AT,
    Rule,
)
from pgmemory.extract.offline.phrases import clean_name, parse_object
from pgmemory.extract.offline.state import Ctx, Phrase, Sentence
from pgmemory.extract.offline.subjects import Grammar, grammar, role_entity, times
from pgmemory.extract.offline.text import possessive

_NOT_SAID = re.compile(r"\b(?:if|would|will|might|could|should|wish|want|hope|maybe)\b")
_COORDINATION = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+|\s*&\s*")


def _snake(words: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", words).strip("_").upper()


def _objects(s: Sentence, pos: int, rule: Rule, ctx: Ctx) -> list[Phrase]:
    """The object at pos, plus coordinated ones ("hiking, biking and swimming") for list-y rules."""
    found: list[Phrase] = []
    obj = parse_object(s, pos, rule.obj, ctx)
    while obj is not None:
        found.append(obj)
        if rule.mode not in ("pref", "event", "experience", "social"):
            break
        joint = _COORDINATION.match(s.text, obj.end)
        obj = parse_object(s, joint.end(), rule.obj, ctx) if joint else None
        if obj is not None and obj.det in ("my", "our"):
            break
    return found


_MORE = re.compile(r"\s+(?:(?:a\s+lot|much|way|so\s+much|even|a\s+bit)\s+)?(?:more|better)\b")
_COMPARED = re.compile(r"\s*(?:,\s*)?(?:over|to|than|rather\s+than|instead\s+of)\s+")
_PREFERS = ("prefers", "prefer", "preferred", "does not prefer")


def apply_rule(rule: Rule, m: re.Match[str], s: Sentence, ctx: Ctx) -> None:
    objects = [o for o in _objects(s, m.end(), rule, ctx) if (rule.accept is None or rule.accept(o))
               and not (s.casual and rule.label == "Person")]  # "i met up with friends"
    if not objects:
        return
    g = grammar(s, m.start(), s.text[m.start():].split()[0], ctx)
    if g is None:
        return
    g.neg = g.neg or bool("neg" in rule.pattern.groupindex and m["neg"])
    duration = find_duration(s.text[g.clause[0]:g.clause[1]], ctx.reference) \
        if rule.mode in ("state", "social") else None
    timing = times(rule.mode, g, ctx.reference, duration)
    if timing is None:
        return
    valid, invalid, negated = timing
    attributes = {"field": m["field"]} if "field" in rule.pattern.groupindex and m["field"] else {}
    if rule.mode in ("event", "experience"):
        attributes["kind"] = "event"
    relation, phrases = rule.relation, rule.phrases
    compared = None
    if rule.mode == "pref" and len(objects) == 1:
        more = _MORE.match(s.text, objects[0].end)
        if more and relation in ("LIKES", "LOVES", "ENJOYS"):
            relation, phrases = "PREFERS", _PREFERS
        if relation == "PREFERS":
            joint = _COMPARED.match(s.text, more.end() if more else objects[0].end)
            compared = parse_object(s, joint.end(), "bare", ctx) if joint else None
    for obj in objects:
        target = ctx.registry.add(obj.name, rule.label or label_for_place(obj.name),
                                  s.offset + obj.start)
        ctx.covered.append((s.offset + obj.start, s.offset + obj.end))
        surface = ctx.third_person(s.text[obj.start:obj.end].strip(" ,"))
        if compared is not None:
            surface += f" over {ctx.third_person(s.text[compared.start:compared.end].strip(' ,'))}"
            attributes["over"] = compared.name
        text = _fact_sentence(replace(rule, phrases=phrases), m, g, surface, negated, ctx)
        ctx.fact(g.subject, target, relation, text, valid=valid, invalid=invalid,
                 functional=rule.functional, negated=negated, stated=g.when is not None,
                 **attributes)


def rather(s: Sentence, ctx: Ctx) -> None:
    """"I'd rather have tea than coffee" -> PREFERS tea (over coffee)."""
    for m in RATHER.finditer(s.text):
        obj = parse_object(s, m.end(), "bare", ctx)
        joint = _COMPARED.match(s.text, obj.end) if obj else None
        g = grammar(s, m.start(), "would", ctx) if joint and joint[0].strip() == "than" else None
        if obj is None or joint is None or g is None:
            continue
        compared = parse_object(s, joint.end(), "bare", ctx)
        target = ctx.registry.add(obj.name, None, s.offset + obj.start)
        ctx.covered.append((s.offset + obj.start, s.offset + obj.end))
        over = f" over {compared.name}" if compared else ""
        ctx.fact(g.subject, target, "PREFERS", f"{g.subject} prefers {obj.name}{over}.",
                 valid=g.when.value if g.when else ctx.reference, stated=g.when is not None,
                 **({"over": compared.name} if compared else {}))


def workplace(s: Sentence, ctx: Ctx) -> None:
    """"my first day at X (was today)", "I love my new job at X" -> WORKS_FOR X."""
    for m in WORKPLACE.finditer(s.text):
        before = s.text[:m.start()].lower()
        if ctx.speaker is None or _NOT_SAID.search(before) or re.search(r"\b(?:quit|left|lost|leav\w*"
                                                                         r"|quitting|lose|losing|miss)\s+$",
                                                                         before):
            continue
        obj = parse_object(s, m.end(), "np", ctx)
        when = s.time_in(*s.clauses[s.clause_of(m.start())])
        if obj is None or (when is not None and when.value > ctx.reference):
            continue
        owner = ctx.registry.add(ctx.speaker, "Person", -1)
        target = ctx.registry.add(obj.name, "Organization", s.offset + obj.start)
        ctx.covered.append((s.offset + obj.start, s.offset + obj.end))
        start = when.value if when else ctx.reference
        said = "started at" if m["first"] else "works for"
        ctx.fact(owner, target, "WORKS_FOR", f"{owner} {said} {target}.", valid=start,
                 functional=True, stated=when is not None)


def _fact_sentence(rule: Rule, m: re.Match[str], g: Grammar, obj: str, negated: bool,
                   ctx: Ctx) -> str:
    if rule.phrases is None:
        return f"{g.subject} {ctx.third_person(' '.join(m[0].split()))} {obj}."
    present, base, past, negative = rule.phrases
    if negated:
        phrase = negative
    elif g.used_to:
        phrase = f"used to {base}"
    else:
        phrase = past if g.past else present
    if g.subject.split()[-1].lower() in PLURAL_ROLES:
        phrase = _plural(phrase, present, base)
    return f"{g.subject} {phrase} {obj}."


def _plural(phrase: str, present: str, base: str) -> str:
    """Agreement for "Alice's kids": "loves" -> "love", "is from" -> "are from"."""
    phrase = re.sub(r"\bis\b", "are", phrase.replace("does not", "do not"))
    return phrase.replace(present, base) if not present.startswith("is ") else phrase


def kinship(s: Sentence, ctx: Ctx) -> None:
    """"my sister Jane", "Bob's wife, Sarah", "my dog's name is Rex", "Jane is my sister"."""
    for m in KIN_APPOSITIVE.finditer(s.text):
        owner = ctx.speaker if m["my"] else (m["owner"] and clean_name(m["owner"]))
        name = clean_name(m["name"])
        if owner and name:
            role_entity(owner, m["role"].lower(), name, s.offset + m.start(), ctx)
    for m in KIN_COPULA.finditer(s.text):
        name = clean_name(m["name"])
        if ctx.speaker and name:
            role_entity(ctx.speaker, m["role"].lower(), name, s.offset + m.start(), ctx)


def role_at(s: Sentence, ctx: Ctx) -> None:
    """"I'm a software engineer at Google" -> WORKS_FOR, role kept; "a student at" -> STUDIES_AT."""
    for m in ROLE_AT.finditer(s.text):
        obj = parse_object(s, m.end(), "np", ctx)
        if obj is None:
            continue
        g = grammar(s, m.start(), m[0].split()[0], ctx)
        timing = times("state", g, ctx.reference) if g else None
        if g is None or timing is None:
            continue
        valid, invalid, negated = timing
        role = " ".join(m["role"].split())
        student = role.lower().split()[-1] in STUDENT_WORDS
        target = ctx.registry.add(obj.name, "Organization", s.offset + obj.start)
        verb = ("studies at", "studied at") if student else ("works for", "worked for")
        said = f"no longer {verb[0]}" if negated else verb[1] if g.past or g.used_to else verb[0]
        article = "an" if role[0].lower() in "aeiou" else "a"
        ctx.fact(g.subject, target, "STUDIES_AT" if student else "WORKS_FOR",
                 f"{g.subject} {said} {target} as {article} {role}.", valid=valid, invalid=invalid,
                 functional=True, negated=negated, stated=g.when is not None, role=role)


def possessions(s: Sentence, ctx: Ctx) -> None:
    """have/got/adopted/bought a dog|daughter|car|sister [named X] -> HAS_PET, HAS_CHILD, ..."""
    for m in POSSESSION.finditer(s.text):
        noun = " ".join((m["noun"] or "car").lower().split())
        if m["brand"] or noun in CARS:
            relation, functional, label = "HAS_CAR", False, "Vehicle"
        elif noun in KIN:
            relation, functional, label = KIN[noun]
        else:
            continue
        verb = m["verb"].lower()
        g = grammar(s, m.start(), verb, ctx)
        if g is None:
            continue
        starts = verb not in ("have", "has", "had", "own", "owns", "drive", "drives") or \
            (verb == "had" and noun == "baby")
        g.past = g.past or (verb == "had" and not starts)
        timing = times("start" if starts else "state", g, ctx.reference)
        if timing is None:
            continue
        valid, invalid, negated = timing
        names = [n for n in (m["name"], m["name2"]) if n and clean_name(n)]
        if not names:
            names = [" ".join(m["brand"].split())] if m["brand"] else \
                [f"{possessive(g.subject)} {noun}"]
        said = " ".join(m[0].split())
        if negated:
            said = "does not " + said
        else:
            third = {"have": "has", "own": "owns", "drive": "drives"}.get(verb, verb)
            said = third + said[len(verb):]
        extra = {"species": PETS[noun]} if noun in PETS else {}
        for name in names:
            target = ctx.registry.add(name, label, s.offset + m.start(), **extra)
            ctx.fact(g.subject, target, relation, f"{g.subject} {ctx.third_person(said)}.",
                     valid=valid, invalid=invalid, functional=functional, negated=negated,
                     stated=g.when is not None)


def favourites(s: Sentence, ctx: Ctx) -> None:
    """"my favourite book is X" and "X is my favorite band" -> FAVOURITE_<KIND>, functional."""
    for m in FAVOURITE.finditer(s.text):
        if s.text[:m.start()].rstrip().lower().endswith(" of"):
            continue
        owner = ctx.speaker if m["my"] else clean_name(m["owner"])
        obj = parse_object(s, m.end(), "bare", ctx)
        if owner and obj is not None:
            _favourite(owner, m["fav"], m["kind"], obj.name, s, m.start(), ctx)
    for m in FAVOURITE_REVERSED.finditer(s.text):
        name = m["obj"].strip('"') if m["obj"].startswith('"') else clean_name(m["obj"])
        if ctx.speaker and name:
            _favourite(ctx.speaker, m["fav"], m["kind"], name, s, m.start(), ctx)


def _favourite(owner: str, fav: str, kind: str, value: str, s: Sentence, at: int,
               ctx: Ctx) -> None:
    pos = s.offset + at
    when = s.time_in(*s.clauses[s.clause_of(at)])
    owner = ctx.registry.add(owner, "Person", pos)
    target = ctx.registry.add(value, None, pos)
    kind = " ".join(kind.split())
    ctx.fact(owner, target, f"FAVOURITE_{_snake(kind)}",
             f"{possessive(owner)} {fav.lower()} {kind} is {target}.",
             valid=when.value if when else ctx.reference, functional=True, stated=when is not None)


def carry_transition_times(first: int, ctx: Ctx) -> None:
    """In one sentence, a functional value asserted without a time starts when the old one ended."""
    pairs = list(zip(ctx.facts[first:], ctx.stated[first:]))
    for ended, ended_stated in pairs:
        if not (ended.negated and ended.functional and ended_stated):
            continue
        for new, new_stated in pairs:
            if (not new.negated and not new_stated and new.invalid_at is None
                    and new.relation == ended.relation and new.source == ended.source
                    and new.target != ended.target):
                new.valid_at = ended.invalid_at
