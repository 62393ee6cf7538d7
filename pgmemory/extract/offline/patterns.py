"""Statement patterns: verb-phrase rules and the kinship, role, possession and favourite regexes."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pgmemory.extract.offline.exclusivity import STATE_FAMILY
from pgmemory.extract.offline.lexicon import (
    CAR_BRANDS,
    CARS,
    GROUP_WORDS,
    JOB_NOUNS,
    JOB_WORDS,
    KIN,
    KIN_ALT,
    PETS,
    PLACES,
    SCHOOL_WORDS,
)
from pgmemory.extract.offline.state import Phrase
from pgmemory.extract.offline.text import NAME


@dataclass(frozen=True)
class Rule:
    """A verb phrase whose object starts right after the match.

    mode: state | social | pref | origin | start | end | event | experience (see the
    package docstring for the times each gets; social is a state whose object may be a
    list, "friends with Ruth and Carl"); phrases: third-person present,
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


def _is_school(p: Phrase) -> bool:
    return bool(SCHOOL_WORDS & set(p.name.lower().split()))


def _not_a_job(p: Phrase) -> bool:
    """"I love my new job at X" is about the job (employment), not a preference for "job"."""
    return p.name.lower().split()[-1] not in JOB_NOUNS


def _is_state(p: Phrase) -> bool:
    return p.name.lower() in STATE_FAMILY


def _is_race(p: Phrase) -> bool:
    return p.name.lower().split()[-1] in ("marathon", "race", "5k", "10k", "triathlon", "half-marathon")


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
_IS = ("is", "be", "was", "is no longer")
_FRIENDS = ("is friends with", "be friends with", "was friends with", "is no longer friends with")
_ENGAGED = ("is engaged to", "be engaged to", "was engaged to", "is no longer engaged to")
_STATES = "|".join(sorted(STATE_FAMILY, key=len, reverse=True))
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
    _r(r"\b(?:started|starting)\s+at\s+", "WORKS_FOR", "start", "proper", "Organization", True,
       accept=lambda p: not _is_school(p) and not _is_place(p)),
    _r(r"\b(?:started|starting)\s+at\s+", "STUDIES_AT", "start", "proper", "Organization", True,
       accept=_is_school),
    _r(r"\b(?:started|starting)\s+(?:an?\s+)?(?:new\s+)?(?:job|position|role|gig|internship)\s+"
       r"(?:at|with)\s+", "WORKS_FOR", "start", "np", "Organization", True),
    _r(r"\baccepted\s+(?:an?\s+|the\s+)?(?:job\s+)?offer\s+(?:from|at|with)\s+", "WORKS_FOR", "start",
       "proper", "Organization", True),
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
    _r(r"\bmoved\s+into\s+(?:a|an|my|our|the)\s+(?:new\s+|little\s+|bigger\s+|smaller\s+)?"
       r"(?:place|apartment|flat|house|home|condo|studio)\s+in\s+", "LIVES_IN", "start", "proper", "Place",
       True),
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
    _r(r"\bgot\s+engaged\s+to\s+", "ENGAGED_TO", "start", "proper", "Person", True),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}engaged\s+to\s+", "ENGAGED_TO", "state", "proper", "Person",
       True, _ENGAGED),
    _r(r"\b(?:(?:got|am|is|are|was|were)\s+)?(?:divorced|separated)\s+(?:from\s+)?", "MARRIED_TO",
       "end", "proper", "Person", True),
    _r(r"\b(?:dating|date|dates|dated|in\s+a\s+relationship\s+with|going\s+out\s+with)\s+",
       "DATING", "state", "proper", "Person", phrases=_DATING),
    _r(r"\b(?:started\s+dating|got\s+together\s+with|started\s+seeing)\s+", "DATING", "start",
       "proper", "Person"),
    _r(r"\bseeing\s+(?:someone|somebody|a\s+(?:guy|girl|man|woman))\s*,?\s+(?:named|called)\s+", "DATING",
       "state", "proper", "Person", phrases=_DATING),
    _r(rf"\b(?:am|is|are|was|were|been)\s+{_NEG}(?:(?:good|best|close|old|great)\s+)?friends\s+with\s+",
       "HAS_FRIEND", "social", "proper", "Person", phrases=_FRIENDS),
    # "X knows Y [from college|well|.]": not "I knew Anna would love it"
    _r(r"\b(?:know|knows)\s+(?=[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)?(?:\s+(?:from|since|through|well|personally"
       r"|very|quite|pretty|really|and)\b|\s*[.,!;]|\s*$))", "KNOWS", "social", "proper", "Person",
       phrases=("knows", "know", "knew", "does not know"), accept=lambda p: not _is_place(p)),
    _r(r"\b(?:broke\s+up|split\s+up)\s+with\s+", "DATING", "end", "proper", "Person"),
    _r(r"\b(?:like|likes|liked|liking)\s+", "LIKES", "pref", "bare", phrases=_pref("like"),
       accept=_not_a_job),
    _r(r"\b(?:prefer|prefers|preferred|preferring)\s+", "PREFERS", "pref", "bare",
       phrases=("prefers", "prefer", "preferred", "does not prefer")),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}(?:(?:totally|really|so|completely)\s+)?(?:obsessed\s+with"
       r"|crazy\s+about|addicted\s+to)\s+", "LOVES", "pref", "bare",
       phrases=("loves", "love", "loved", "does not love")),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}(?:a\s+)?(?:big\s+|huge\s+)?fans?\s+of\s+", "LIKES",
       "pref",
       "bare", phrases=("is a fan of", "be a fan of", "was a fan of", "is not a fan of")),
    _r(r"\b(?:love|loves|loved|loving)\s+", "LOVES", "pref", "bare", phrases=_pref("love"),
       accept=_not_a_job),
    _r(r"\b(?:hate|hates|hated|hating|can\s+not\s+stand)\s+", "HATES", "pref", "bare",
       phrases=_pref("hate"), accept=_not_a_job),
    _r(r"\b(?:enjoy|enjoys|enjoyed|enjoying)\s+", "ENJOYS", "pref", "bare",
       phrases=("enjoys", "enjoy", "enjoyed", "does not enjoy"), accept=_not_a_job),
    _r(r"\b(?:study|studies|studied|studying)\s+(?:(?P<field>[a-z]+(?:\s+[a-z]+){0,2})\s+)?at\s+",
       "STUDIES_AT", "state", "proper", "Organization", True, phrases=_STUDIES),
    _r(r"\b(?:enrolled\s+(?:at|in)|started\s+(?:school|college|university|grad\s+school|studying)"
       r"\s+at|transferred\s+to)\s+", "STUDIES_AT", "start", "proper", "Organization", True),
    _r(r"\b(?:graduated\s+from|dropped\s+out\s+of)\s+", "STUDIES_AT", "end", "proper", "Organization",
       True),
    _r(rf"\b(?:am|is|are|was|were)\s+{_NEG}(?:(?:now|currently|officially|still|also|fully|strictly"
       rf"|happily|finally)\s+)*(?=(?:an?\s+)?(?:{_STATES})(?![\w-]))", "IS", "state", "bare", phrases=_IS,
       accept=_is_state),
    _r(rf"\b(?:went|turned|became|become|becoming|going)\s+(?=(?:an?\s+)?(?:{_STATES})(?![\w-]))", "IS", "start",
       "bare", accept=_is_state),
    _r(r"(?<!\bam\s)(?<!\bis\s)(?<!\bare\s)(?<!\bwas\s)(?<!\bwere\s)\b(?=retired(?![\w-]))", "IS", "start",
       "bare", accept=_is_state),
    _r(r"\b(?:bought|purchased)\s+(?:(?:myself|me|us)\s+)?", "BOUGHT", "event", "np",
       accept=_not_owned_thing),
    _r(r"\b(?:visited|visiting|went\s+(?:back\s+)?to|traveled\s+to|travelled\s+to|flew\s+to"
       r"|drove\s+to|(?:took|went\s+on)\s+an?\s+(?:\w+\s+)?trip\s+to)\s+", "VISITED", "event",
       "np"),
    _r(r"\b(?:(?:got|came|just\s+got)\s+back\s+from|returned\s+from)\s+", "VISITED", "event", "np"),
    _r(r"\b(?:attended|competed\s+in|participated\s+in|took\s+part\s+in)\s+", "ATTENDED", "event", "bare",
       accept=lambda p: bool(p.det) or p.proper or "'s " in p.name),
    _r(r"\b(?:ran|finished|completed)\s+", "ATTENDED", "event", "np", accept=_is_race),
    _r(r"\bmet\s+(?:up\s+with\s+)?", "MET", "event", "proper", "Person",
       accept=lambda p: not _is_place(p)),
    _r(r"\bwon\s+", "WON", "event", "np"),
    _r(r"\b(?:had|underwent|got)\s+(?=(?:an?\s+)?(?:[a-z]+\s+){0,2}(?:surgery|operation|transplant)\b)",
       "UNDERWENT", "event", "bare"),
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
RATHER = re.compile(r"\bwould\s+rather\s+(?:(?:have|drink|eat|take|watch|read|play|do|listen\s+to"
                    r"|go\s+with)\s+)?")
WORKPLACE = re.compile(r"\b(?:[Mm]y|[Oo]ur)\s+(?:(?P<first>first)\s+(?:day|week|month|shift)"
                       r"|(?:new\s+|current\s+)?(?:job|position|role|gig|internship))\s+(?:at|with)\s+")
