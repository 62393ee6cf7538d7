"""Text handling: contractions, sentence and clause splitting, the name regex, possessives."""
from __future__ import annotations

import re

from pgmemory.extract.offline.lexicon import TITLES

_CONTRACTIONS = [
    (re.compile(r"[’‘]"), "'"), (re.compile(r"[“”]"), '"'), (re.compile(r"\bi\b"), "I"),
    (re.compile(r"\b([Ii])'m\b"), r"\1 am"), (re.compile(r"\b([Cc])an't\b"), r"\1an not"),
    (re.compile(r"\b([Ww])on't\b"), r"\1ill not"), (re.compile(r"\b(\w+)n't\b"), r"\1 not"),
    (re.compile(r"\b(\w+)'re\b"), r"\1 are"), (re.compile(r"\b(\w+)'ve\b"), r"\1 have"),
    (re.compile(r"\b(\w+)'ll\b"), r"\1 will"), (re.compile(r"\b(\w+)'d\b"), r"\1 would"),
    (re.compile(r"\b([Ii]t|[Tt]hat|[Ww]hat|[Tt]here|[Hh]ere|[Hh]e|[Ss]he|[Ww]ho)'s\b"), r"\1 is"),
    # chat spellings and common typos
    (re.compile(r"\b(?:Im|IM)\b"), "I am"), (re.compile(r"\b[Ii]ve\b"), "I have"),
    (re.compile(r"\b([Dd]o|[Dd]oes|[Dd]id|[Ii]s|[Aa]re|[Ww]as|[Ww]ere|[Hh]ave|[Hh]as)nt\b"), r"\1 not"),
    (re.compile(r"\b([Cc])ant\b"), r"\1an not"), (re.compile(r"\b([Ww])ont\b"), r"\1ill not"),
    (re.compile(r"\b([Ww])(?:rok|okr|ork)(s|ed|ing)?\b"), r"\1ork\2"), (re.compile(r"\bteh\b"), "the"),
    (re.compile(r"\byrs\b"), "years"), (re.compile(r"\byr\b"), "year"),
]
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?:\s+|$)|\n+")
_CLAUSE_SPLIT = re.compile(
    r"\s*;\s*|,?\s+(?:and|but|then|whereas|while|although|though|because|plus)\s+")
_CAPW = r"[A-Z][a-zA-Z0-9&-]*"
NAME = rf"{_CAPW}(?:\s+(?:(?:of\s+the|of|de|del|da|du|van|von|la|le|for|&)\s+)?{_CAPW})*"


def is_casual(raw: str) -> bool:
    """True for text typed without any capital, not even "I" ("i live in berlin now"): there a
    lowercase word may be a name."""
    return not re.search(r"[A-Z]", raw)


def normalise(text: str) -> str:
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    return text


def _sentences(text: str) -> list[tuple[int, str]]:
    """Split into (offset, sentence), not breaking after titles or initials (Dr., J.)."""
    out: list[tuple[int, str]] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        before = text[start:m.start()].rsplit(None, 1)
        last = before[-1].lower() if before else ""
        if m[0].startswith(".") and (last in TITLES or (len(last) == 1 and last.isalpha())):
            continue
        if text[start:m.end()].strip():
            out.append((start, text[start:m.end()].rstrip()))
        start = m.end()
    if text[start:].strip():
        out.append((start, text[start:]))
    return out


def clauses(sentence: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in _CLAUSE_SPLIT.finditer(sentence):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(sentence)))
    return spans


def possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"
