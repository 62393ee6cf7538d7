"""Two people as one subject: "Tom and I broke up", "Jess and I got married", "Carl and Ruth know
each other". The clause splitter cuts at "and", so these are read from the whole sentence."""
from __future__ import annotations

import re

from pgmemory.extract.offline.lexicon import KIN_ALT
from pgmemory.extract.offline.phrases import clean_name
from pgmemory.extract.offline.state import Ctx, Sentence
from pgmemory.extract.offline.subjects import Grammar, role_entity, times
from pgmemory.extract.offline.text import NAME

_PERSON = rf"(?:I|[Mm]e|(?P<{{k}}my>[Mm]y)\s+(?P<{{k}}role>(?i:{KIN_ALT}))(?:\s+(?P<{{k}}name>{NAME}))?|{NAME})"
PAIR = re.compile(
    rf"(?<![\w'])(?P<a>{_PERSON.format(k='a')})\s+and\s+(?P<b>{_PERSON.format(k='b')})\s+"
    r"(?P<aux>(?:(?:have|has|had|are|were|got|just|finally|officially|recently|both|also|still|been)\s+)*)"
    r"(?P<neg>(?:not|no\s+longer|never)\s+)?"
    r"(?P<vp>married|engaged|(?:broke|split)\s+up|separated|divorced|together|dating|started\s+dating"
    r"|(?:(?:good|best|close|old|great)\s+)?friends|(?:know|knew|known)\s+each\s+other|met)\b")
# verb phrase -> relation, mode, sentence verb ("{a} <verb> {b}"), ending verb
_VERBS = {
    "married": ("MARRIED_TO", "is married to"), "engaged": ("ENGAGED_TO", "is engaged to"),
    "together": ("DATING", "is dating"), "dating": ("DATING", "is dating"),
    "friends": ("HAS_FRIEND", "is friends with"), "know": ("KNOWS", "knows"), "met": ("MET", "met"),
}
_ENDINGS = {"broke": ("DATING", "broke up with"), "split": ("DATING", "split up with"),
            "separated": ("MARRIED_TO", "separated from"), "divorced": ("MARRIED_TO", "divorced")}


def _person(m: re.Match[str], k: str, ctx: Ctx) -> str | None:
    text = m[k]
    if text in ("I", "me", "Me"):
        return ctx.registry.add(ctx.speaker, "Person", -1) if ctx.speaker else None
    if m[f"{k}my"]:
        if ctx.speaker is None:
            return None
        return role_entity(ctx.speaker, m[f"{k}role"].lower(), m[f"{k}name"], m.start(k), ctx)
    name = clean_name(text)
    return ctx.registry.add(name, "Person", m.start(k)) if name == text else None


def pair_statements(s: Sentence, ctx: Ctx) -> None:
    """Facts between the two people of "X and I <verb phrase>" (the speaker is the source)."""
    for m in PAIR.finditer(s.text):
        vp = m["vp"].split()
        word = "know" if vp[-1] == "other" else vp[-1] if vp[0] not in _ENDINGS else vp[0]
        aux = m["aux"].split()
        if word in _ENDINGS:
            relation, verb = _ENDINGS[word]
            mode = "end"
        elif word == "dating" and vp[0] == "started":
            (relation, verb), mode = _VERBS["dating"], "start"
        elif word in _VERBS:
            relation, verb = _VERBS[word]
            mode = "event" if word == "met" else "start" if "got" in aux else "state"
        else:
            continue
        a, b = (m.start("a"), "a"), (m.start("b"), "b")
        first, second = (b, a) if m["b"] in ("I", "me") else (a, b)
        source, target = _person(m, first[1], ctx), _person(m, second[1], ctx)
        if source is None or target is None:
            continue
        clause = s.clauses[s.clause_of(m.start("vp"))]
        past = bool({"were", "had", "got"} & set(aux)) or word in ("broke", "split", "met", "knew")
        g = Grammar(source, bool(m["neg"]), False, past, "have" in aux or "has" in aux,
                    s.time_in(*clause), clause, past or word.endswith("ed"))
        timing = times(mode, g, ctx.reference)
        if timing is None:
            continue
        valid, invalid, negated = timing
        said = f"no longer {verb}" if negated and mode != "end" else verb
        if said.startswith("no longer is "):
            said = "is no longer " + said[len("no longer is "):]
        extra = {"kind": "event"} if mode == "event" else {}
        ctx.fact(source, target, relation, f"{source} {said} {target}.", valid=valid, invalid=invalid,
                 functional=relation in ("MARRIED_TO", "ENGAGED_TO"), negated=negated,
                 stated=g.when is not None, **extra)
