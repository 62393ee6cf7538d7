"""Statement patterns: verb-phrase rules and the kinship, role, possession and favourite regexes."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pgmemory.extract.offline.lexicon import CAR_BRANDS, CARS, GROUP_WORDS, JOB_WORDS, KIN, KIN_ALT, PETS, PLACES
from pgmemory.extract.offline.state import Phrase
from pgmemory.extract.offline.text import NAME


@dataclass(frozen=True)
class Rule:
    """A verb phrase whose object starts right after the match.

    mode: state | pref | origin | start | end | event | experience (see the
    package docstring for the times each gets); phrases: third-person present,
    base form, simple past and negative forms for the fact sentence (None:
    the matched past-tense words are used).
    """

    pattern: re.Pattern[str]
    relation: str
    mode: str
    obj: str
    label: str | None = None
    functional: bool = False
    phrases: tuple[str, str, str, str] | None = None
    accept: Callable[[Phrase], bool] | None = None


def _is_group(p: Phrase) -> bool:
    return not p.proper or bool(GROUP_WORDS & set(p.name.lower().split()))


def _is_place(p: Phrase) -> bool:
    return p.name.lower() in PLACES


def _not_owned_thing(p: Phrase) -> bool:
    last = p.name.lower().split()[-1]
    return last not in CARS and last not in PETS and last not in KIN and \
        not re.match(rf"(?:{CAR_BRANDS})\b", p.name)


def _r(pattern: str, relation: str, mode: str, obj: str, label: str | None = None,
       functional: bool = False, phrases: tuple[str, str, str, str] | None = None,
       accept: Callable[[Phrase], bool] | None = None) -> Rule:
    return Rule(re.compile(pattern, re.IGNORECASE), relation, mode, obj, label, functional,
                phrases, accept)


def _pref(verb: str) -> tuple[str, str, str, str]:
    return verb + "s", verb, verb + "d", f"does not {verb}"


_WORKS = ("works for", "work for", "worked for", "no longer works for")
_LIVES = ("lives in", "live in", "lived in", "no longer lives in")
_STUDIES = ("studies at", "study at", "studied at", "no longer studies at")
_MARRIED = ("is married to", "be married to", "was married to", "is no longer married to")
_DATING = ("is dating", "date", "dated", "is no longer dating")
_FROM = ("is from", "be from", "was from", "is not from")
_NEG = r"(?:(?P<neg>not|no\s+longer)\s+)?"  # a negation inside a copula rule's own words
RULES: list[Rule] = [
    _r(r"\b(?:work|works|worked|working|teach|teaches|taught|teaching)\s+(?:at|for)\s+",
       "WORKS_FOR", "state", "np", "Organization", True, _WORKS),
    _r(r"\bemployed\s+(?:at|by)\s+", "WORKS_FOR", "state", "np", "Organization", True, _WORKS),
    _r(r"\bjoined\s+", "WORKS_FOR", "start", "np", "Organization", True,
       accept=lambda p: not _is_group(p) and not _is_place(p)),
    _r(r"\bjoined\s+", "MEMBER_OF", "start", "np", "Organization", accept=_is_group),
    _r(r"\b(?:started\s+(?:working|a\s+(?:new\s+)?job|a\s+(?:new\s+)?position|an?\s+internship)"
       r"|got\s+(?:a\s+|an\s+)?(?:new\s+)?(?:job|position|internship)|(?:was|got|been)\s+hired)"
       r"\s+(?:at|for|with|by)\s+", "WORKS_FOR", "start", "np", "Organization", True),
    _r(r"\b(?:left|quit)\s+(?:(?:my|his|her)\s+(?:job|position|role)\s+(?:at|with)\s+)?",
       "WORKS_FOR", "end", "proper", "Organization", True, accept=lambda p: not _is_place(p)),
    _r(r"\b(?:resigned\s+from|(?:was|got)\s+(?:laid\s+off|fired|let\s+go)\s+(?:from|by)"
       r"|retired\s+from)\s+", "WORKS_FOR", "end", "np", "Organization", True),
    _r(r"\b(?:live|lives|lived|living|reside|resides|resided|residing)\s+in\s+",
       "LIVES_IN", "state", "proper", "Place", True, _LIVES),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}based\s+in\s+", "LIVES_IN", "state", "proper", "Place",
       True, _LIVES),
    _r(r"\b(?:moved|relocated)\s+(?:back\s+|away\s+)?to\s+", "LIVES_IN", "start", "proper",
       "Place", True),
    _r(r"\bmoved\s+from\s+[^,.;!?]{1,60}?\s+to\s+", "LIVES_IN", "start", "proper", "Place", True),
    _r(r"\b(?:moved\s+(?:away\s+)?from|moved\s+out\s+of)\s+", "LIVES_IN", "end", "proper",
       "Place", True),
    _r(r"\bleft\s+", "LIVES_IN", "end", "proper", "Place", True, accept=_is_place),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}(?:originally\s+)?from\s+", "IS_FROM", "origin",
       "proper", "Place", phrases=_FROM),
    _r(r"\b(?:come|comes|came)\s+(?:originally\s+)?from\s+", "IS_FROM", "origin", "proper",
       "Place", phrases=_FROM),
    _r(r"\b(?:grew\s+up|born)\s+in\s+", "IS_FROM", "origin", "proper", "Place", phrases=_FROM),
    _r(rf"\b(?:am|is|are|was|were|been)\s+{_NEG}married\s+to\s+", "MARRIED_TO", "state",
       "proper", "Person", True, _MARRIED),
    _r(r"\b(?:married|got\s+married\s+to)\s+", "MARRIED_TO", "start", "proper", "Person", True),
    _r(r"\b(?:(?:got|am|is|are|was|were)\s+)?(?:divorced|separated)\s+(?:from\s+)?", "MARRIED_TO",
       "end", "proper", "Person", True),
    _r(r"\b(?:dating|date|dates|dated|in\s+a\s+relationship\s+with|going\s+out\s+with)\s+",
       "DATING", "state", "proper", "Person", phrases=_DATING),
    _r(r"\b(?:started\s+dating|got\s+together\s+with|started\s+seeing)\s+", "DATING", "start",
       "proper", "Person"),
    _r(r"\b(?:broke\s+up|split\s+up)\s+with\s+", "DATING", "end", "proper", "Person"),
    _r(r"\b(?:like|likes|liked|liking)\s+", "LIKES", "pref", "bare", phrases=_pref("like")),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}(?:a\s+)?(?:big\s+|huge\s+)?fans?\s+of\s+", "LIKES",
       "pref",
       "bare", phrases=("is a fan of", "be a fan of", "was a fan of", "is not a fan of")),
    _r(r"\b(?:love|loves|loved|loving)\s+", "LOVES", "pref", "bare", phrases=_pref("love")),
    _r(r"\b(?:hate|hates|hated|hating|can\s+not\s+stand)\s+", "HATES", "pref", "bare",
       phrases=_pref("hate")),
    _r(r"\b(?:enjoy|enjoys|enjoyed|enjoying)\s+", "ENJOYS", "pref", "bare",
       phrases=("enjoys", "enjoy", "enjoyed", "does not enjoy")),
    _r(r"\b(?:study|studies|studied|studying)\s+(?:(?P<field>[a-z]+(?:\s+[a-z]+){0,2})\s+)?at\s+",
       "STUDIES_AT", "state", "proper", "Organization", phrases=_STUDIES),
    _r(r"\b(?:enrolled\s+(?:at|in)|started\s+(?:school|college|university|grad\s+school|studying)"
       r"\s+at)\s+", "STUDIES_AT", "start", "proper", "Organization"),
    _r(r"\bgraduated\s+from\s+", "STUDIES_AT", "end", "proper", "Organization"),
    _r(r"\b(?:bought|purchased)\s+(?:(?:myself|me|us)\s+)?", "BOUGHT", "event", "np",
       accept=_not_owned_thing),
    _r(r"\b(?:visited|visiting|went\s+(?:back\s+)?to|traveled\s+to|travelled\s+to|flew\s+to"
       r"|drove\s+to|(?:took|went\s+on)\s+an?\s+(?:\w+\s+)?trip\s+to)\s+", "VISITED", "event",
       "np"),
    _r(r"\bbeen\s+to\s+", "VISITED", "experience", "np",
       phrases=("has been to", "be to", "had been to", "has not been to")),
]
ROLE_AT = re.compile(rf"\b(?:am|is|are|was|were)\s+(?:an?|the)\s+(?P<role>(?:[\w-]+\s+){{0,3}}?"
                     rf"(?:{JOB_WORDS}))\s+(?:at|for|with)\s+", re.IGNORECASE)
POSSESSION = re.compile(
    r"\b(?i:(?P<verb>have|has|had|got|adopted|own|owns|rescued|bought|welcomed|drive|drives))\s+"
    r"(?i:(?P<det>a|an|one|two|three|four|five|another|my\s+first)\s+)"
    r"(?i:(?:new|little|sweet|cute|young|rescue|beautiful|lovely|adorable|used)\s+)*"
    rf"(?:(?P<brand>(?:{CAR_BRANDS})(?:\s+[A-Z0-9][\w-]*)*)|(?i:(?P<noun>guinea\s+pig|[a-z-]+)))"
    rf"(?:\s*,?\s+(?i:named|called)\s+(?P<name>{NAME})(?:\s+and\s+(?P<name2>{NAME}))?)?")
KIN_APPOSITIVE = re.compile(
    rf"(?:\b(?P<my>[Mm]y)|(?P<owner>{NAME})'s?)\s+(?P<role>(?i:{KIN_ALT}))"
    rf"(?:'s\s+name\s+is\s+|\s+is\s+|\s*,\s*(?i:named\s+|called\s+)?|\s+(?i:named\s+|called\s+)?)"
    rf"(?P<name>{NAME})")
KIN_COPULA = re.compile(rf"(?P<name>{NAME})\s+(?:is|was)\s+[Mm]y\s+(?P<role>(?i:{KIN_ALT}))\b")
FAVOURITE = re.compile(
    rf"(?:\b(?P<my>[Mm]y)|(?P<owner>{NAME})'s)\s+(?:(?:all[- ]time|absolute|very)\s+)?"
    r"(?P<fav>[Ff]avou?rite)\s+(?P<kind>[a-zA-Z]+(?:\s+[a-zA-Z]+){0,2}?)\s+"
    r"(?:is|has\s+to\s+be|would\s+be)\s+")
FAVOURITE_REVERSED = re.compile(
    rf"(?P<obj>{NAME}|\"[^\"]+\")\s+is\s+[Mm]y\s+(?:all[- ]time\s+)?(?P<fav>favou?rite)"
    r"\s+(?P<kind>[a-z]+(?:\s+[a-z]+)?)(?=\s*[.,!?;]|\s*$)")
