"""Noun phrases: names, the object after a verb, and proper nouns and quoted titles."""
from __future__ import annotations

import re

from pgmemory.extract.offline.lexicon import (
    ADJECTIVES,
    CAP_STOP,
    CONNECTORS,
    DETERMINERS,
    MEANINGLESS,
    NOT_ACTIVITIES,
    NP_STOP,
    PRONOUNS,
    SPECIFIC_DETS,
    label_for_place,
)
from pgmemory.extract.offline.state import Ctx, Phrase, Sentence
from pgmemory.extract.offline.text import NAME, possessive

_WORD = re.compile(r"\s*([A-Za-z0-9][\w&'+-]*)")
_QUOTED = re.compile(r"""\s*(?:"([^"]{1,80})"|(?<!\w)'([^']{1,80})'(?!\w))""")
_TITLE = re.compile(r"""(?:"([A-Z][^"]{1,60})"|(?<!\w)'([A-Z][^']{1,60})'(?!\w))""")
_PROPER_RUN = re.compile(rf"(?<![\w'])(?:(?:Mr|Mrs|Ms|Dr|Prof)\.\s+)?{NAME}")


def _gerund(verb: str) -> str:
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")):
        return verb[:-1] + "ing"
    if re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", verb):
        return verb + verb[-1] + "ing"
    return verb + "ing"


def clean_name(name: str) -> str | None:
    """Drop leading stop words ("Hey Caroline" -> "Caroline"); None if nothing name-like is left."""
    words = name.split()
    while words and words[0].lower().rstrip(".") in CAP_STOP:
        words = words[1:]
    if not words or any(w.lower() in CAP_STOP for w in words):
        return None
    return " ".join(words)


def parse_object(s: Sentence, pos: int, kind: str, ctx: Ctx) -> Phrase | None:
    """The noun phrase starting at pos, or None if there is none of the wanted kind.

    kind "proper": a capitalised name (after an optional "the"); "np": that or
    a determiner + noun phrase; "bare": any noun phrase, infinitives as gerunds.
    The phrase must end at punctuation, a time, a stop word or the sentence end.
    """
    text = s.text
    quoted = _QUOTED.match(text, pos)
    if quoted:
        name = (quoted[1] or quoted[2]).strip(" ,.!?")
        if 0 < len(name.split()) <= 8:
            return Phrase(name, quoted.start(), quoted.end(), proper=True)
        return None
    det, start = "", None
    m = _WORD.match(text, pos)
    if m and m[1].lower() in DETERMINERS:
        det, start = m[1].lower(), m.start(1)
        m = _WORD.match(text, m.end())
    if m is None or s.is_time(m.start(1)):
        return None
    start = m.start(1) if start is None else start
    first = m[1].lower()
    if first in PRONOUNS and not det:
        if first == "me" and ctx.speaker and kind != "bare":
            return Phrase(ctx.speaker, m.start(1), m.end(), proper=True)
        return None
    if kind == "bare" and first == "to" and not det:
        return _infinitive(s, m.end(), start, ctx)
    casual = s.casual and kind != "bare" and det in ("", "the") and _casual_name(m[1])
    capital = m[1][0].isupper() or casual
    if kind == "proper" and (not capital or det not in ("", "the")):
        return None
    if (not capital and not det and kind != "bare") or (det in SPECIFIC_DETS and kind == "bare"):
        return None
    lowercase_ok = kind != "proper" and (bool(det) or kind == "bare")
    words: list[str] = []
    end = pos
    while m is not None and len(words) < 6 and not s.is_time(m.start(1)):
        w, lw = m[1], m[1].lower()
        if casual and _casual_name(w):
            w = w[0].upper() + w[1:]
        if w[0].isupper():
            if lw in CAP_STOP:
                break
        elif w[0].isdigit() and words and words[-1][0].isupper():
            pass
        elif lw in CONNECTORS and words and words[-1][0].isupper():
            nxt = _WORD.match(text, m.end())
            if not (nxt and nxt[1][0].isupper()):
                break
        elif not lowercase_ok or lw in NP_STOP or len(words) >= 4:
            break
        words.append(w)
        end = m.end()
        m = _WORD.match(text, end)
    if m is not None and m.start() == end and not s.is_time(m.start(1)) \
            and m[1].lower() not in NP_STOP and m[1].lower() not in CAP_STOP:
        return None
    if kind == "bare" and len(words) == 1 and words[0].endswith("ing") and \
            re.match(r"\s+(?:[Mm]y|the|a|an|our|your|his|her|their|this|that|\")\b", text[end:]):
        return None
    return _finish_phrase(words, det, start, end, ctx)


def _casual_name(word: str) -> bool:
    """In an all-lowercase sentence, a word that may be a name ("berlin", not "now" or "the")."""
    lw = word.lower()
    return word.isalpha() and lw not in NP_STOP and lw not in CAP_STOP and lw not in MEANINGLESS


def _infinitive(s: Sentence, pos: int, start: int, ctx: Ctx) -> Phrase | None:
    """"to paint" -> "painting", "to go hiking" -> "hiking", "to read books" -> "reading books"."""
    m = _WORD.match(s.text, pos)
    if m is not None and m[1] == "go":
        m = re.compile(r"\s*([a-z]+ing)\b").match(s.text, m.end())
        if m is None:
            return None
        words = [m[1]]
    elif m is None or not m[1].islower() or m[1] in NOT_ACTIVITIES:
        return None
    else:
        words = [_gerund(m[1])]
    end = m.end()
    nxt = _WORD.match(s.text, end)
    while nxt and nxt[1].islower() and nxt[1] not in NP_STOP and len(words) < 3 \
            and not s.is_time(nxt.start(1)):
        words.append(nxt[1])
        end = nxt.end()
        nxt = _WORD.match(s.text, end)
    return _finish_phrase(words, "", start, end, ctx)


def _finish_phrase(words: list[str], det: str, start: int, end: int, ctx: Ctx) -> Phrase | None:
    if words and words[-1].endswith("'s"):
        words[-1] = words[-1][:-2]
    proper = bool(words) and words[0][0].isupper() and all(
        w[0].isupper() or w[0].isdigit() or w.lower() in CONNECTORS for w in words)
    if not proper:
        while len(words) > 1 and words[0].lower() in ADJECTIVES:
            words = words[1:]
    name = " ".join(words).strip("-'")
    if not name or name.lower() in MEANINGLESS or name.lower() in PRONOUNS:
        return None
    if det in ("my", "our") and not proper:
        if ctx.speaker is None:
            return None
        name = f"{possessive(ctx.speaker)} {name}"
    return Phrase(name, start, end, det=det, proper=proper)


def add_proper_nouns(sentences: list[Sentence], ctx: Ctx) -> None:
    """Register quoted titles and capitalised names not inside a rule's object; a lone
    sentence-initial word needs support elsewhere."""
    candidates: list[tuple[str, int, bool]] = []
    for s in sentences:
        offset, sentence = s.offset, s.text
        lead = len(sentence) - len(sentence.lstrip(" \"'([*-"))
        titles = [t for t in _TITLE.finditer(sentence) if len((t[1] or t[2]).split()) <= 8]
        candidates += [((t[1] or t[2]).strip(" ,.!?"), offset + t.start(), False) for t in titles]
        for run in _PROPER_RUN.finditer(sentence):
            if any(t.start() <= run.start() < t.end() for t in titles) or s.is_time(run.start()):
                continue
            segment: list[re.Match[str]] = []
            for w in [*re.finditer(r"\S+", run[0]), None]:
                if w is not None and w[0].lower().rstrip(".") not in CAP_STOP:
                    segment.append(w)
                    continue
                while segment and segment[-1][0].lower() in CONNECTORS:
                    segment.pop()
                while segment and segment[0][0].lower() in CONNECTORS:
                    segment.pop(0)
                if segment:
                    name = " ".join(x[0] for x in segment)
                    pos = run.start() + segment[0].start()
                    if len(name) > 1 and not name.isdigit():
                        candidates.append((name, offset + pos, pos == lead and len(segment) == 1))
                segment = []
    supported = {name.lower() for name, _, initial in candidates if not initial}
    for name, pos, initial in candidates:
        if any(start <= pos < end for start, end in ctx.covered):
            continue
        if not initial or name.lower() in supported or ctx.registry.has(name):
            ctx.registry.add(name, label_for_place(name), pos)
