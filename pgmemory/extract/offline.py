"""The offline extractor: deterministic English rules, used when no LLM is configured.

It reads one episode (sync, no I/O, no models) and returns entities and facts
with valid/invalid times resolved against the episode's reference time (see
``dates``).  Recall is deliberately lower than an LLM's; what it extracts it
extracts the same way every time.

Entities
  * The speaker (``actor``, or a leading "Name: " for messages without one)
    always comes first, labelled Person; it is what "I", "me" and "my" mean.
    A text episode's actor plays the same part; without a speaker, sentences
    about "I" yield nothing and only named subjects ("Alice works at X") do.
  * Capitalised names and proper-noun phrases ("Blue Bottle Coffee", "Bank of
    America"), with pronouns, weekdays, months, holidays, greetings and
    sentence-initial common words left out; a lone capitalised word that
    starts a sentence counts only if it is capitalised elsewhere too, or a
    rule below uses it.  Quoted titles become entities.
  * Objects of the rules below even when lowercase ("hiking"), labelled where
    the rule says (Organization, Place, Person, Pet, Vehicle).  Unnamed
    relatives and belongings are named after their owner ("Alice's sister",
    "Alice's dog").  Then the rest in order of first appearance.
Facts (subject = I / my <relative> [Name] / Name's <relative> / a proper name)
  WORKS_FOR (functional): work/teach at|for, "I'm a nurse at X" (role kept as
  an attribute), employed by; started by joined X, started working at, got a
  job at, was hired by; ended by left/quit X, resigned from, was laid off or
  fired from, retired from.  "joined" a club/group/lowercase thing is
  MEMBER_OF instead, and "left <known city or country>" ends LIVES_IN.
  LIVES_IN (functional; capitalised places only): live/reside in, based in;
  started by moved or relocated to; ended by moved from / moved out of.  IS_FROM: am from, come
  from, grew up in, born in.  MARRIED_TO (functional): married to, married X,
  divorced.  DATING: dating X, started dating, broke up with.  LIKES / LOVES /
  HATES / ENJOYS (and "fan of", "can't stand"), with coordinated objects
  ("hiking and swimming") and infinitives turned into gerunds ("love to paint"
  -> painting).  FAVOURITE_<KIND> (functional): "my favourite book is X",
  "X is my favorite band".  HAS_PET / HAS_CHILD / HAS_CAR: have/got/adopted/
  bought a dog|daughter|car|Tesla [named X], "my dog Rex", "had a baby".  Relatives: "my sister
  Jane", "Jane is my sister" -> HAS_SISTER etc. (wife/husband -> MARRIED_TO,
  partner/girlfriend/boyfriend -> DATING, son/daughter -> HAS_CHILD).
  STUDIES_AT: study at, "a student at"; graduated from ends it.  BOUGHT:
  bought/purchased.  VISITED: visited, went/travelled/flew/drove to, took a
  trip to, have been to.
Times
  Present tense -> valid_at = reference time (the paper's rule), or the
  stated time ("since 2019"), or reference minus a stated duration ("for 3
  years").  Starts and events -> valid_at = stated time, else reference time;
  "have been to" without a time -> None.  Endings (left, graduated, broke up,
  divorced) and negations ("don't work at X anymore", "no longer", "don't
  like") -> negated=True, invalid_at = stated time, else reference time.
  "used to" and untimed simple past of a state -> invalid_at = reference
  time, valid_at None; a dated simple past sets only valid_at.  A time
  spoken in one clause carries to the next clause of the same sentence when
  that clause has no subject of its own ("Last week I left X and joined Y").
  When one sentence ends one value of a functional relation at a stated time
  and asserts another without a time ("I left Tencent last week and now work
  at OpenAI"), the new value starts when the old ended (~reference - 7 days),
  as in the paper's example.
JSON episodes
  Each top-level object (or each object of a top-level list) with a string
  "name" (else "id") is an entity, labelled by its "type"/"label"/"kind"
  string if any.  String values of company/employer/organization/workplace,
  city/residence, location, hometown/birthplace, school/university/college and
  spouse/wife/husband become entities with WORKS_FOR / LIVES_IN / LOCATED_IN /
  IS_FROM / STUDIES_AT / MARRIED_TO facts valid from the reference time.
  Nothing else in the JSON is read (no nesting, no other keys).
Not caught
  He/she/they/we and any coreference beyond I/me/my; "you" (the listener is
  unknown); previous messages (never read: no context, no coreference);
  chat sentences without a subject ("Started a new job at X!");
  questions, conditionals, wishes and plans (will, would, want to, going to:
  nothing is asserted); subjects that are not a name, "I" or "my
  <relative>" ("the guy who works at X"); lowercase organisations and places
  without a determiner ("I work at home"); objects followed by further nouns
  ("I work at Google headquarters"); relations not listed above; sarcasm,
  hypotheticals and reported speech ("Bob said he works at X" yields
  nothing); non-English text.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from pgmemory.extract.dates import TimeMention, find_duration, find_times, to_utc
from pgmemory.extract.types import EpisodeInput, ExtractedEntity, ExtractedFact, Extraction

# ---------------------------------------------------------------- vocabulary

_CAP_STOP = frozenset("""
i a an the this that these those there here it its he she we they you me him her us them
my your our his their what who whom when where why how which whose some any every each all
no not yes yeah yep nope oh ooh wow hey hi hello bye goodbye thanks thank please sorry so
and but or if then also just well ok okay sure great good nice cool awesome amazing
congrats congratulations love lol haha hahaha omg btw aw aww ah um uh hmm totally definitely
absolutely really actually honestly anyway anyways dear mom dad mum mommy daddy grandma
grandpa sir madam today yesterday tomorrow tonight last next happy merry best cheers welcome
let lets do does did have has had is are was were will would can could should may might
must shall be been being am monday tuesday wednesday thursday friday saturday sunday
january february march april june july august september october november december
christmas easter thanksgiving halloween morning evening afternoon night birthday luck
wishing glad exactly indeed true right wait look listen guess agreed same absolutely
speaking sounds seems hope tv remember check meet say woohoo woah whoa yay hooray yo
""".split())
_CONNECTORS = frozenset(["of", "de", "del", "da", "du", "van", "von", "la", "le", "for", "&"])
_TITLES = frozenset(["mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "mt", "vs", "etc", "inc",
                     "e.g", "i.e"])
_NP_STOP = frozenset("""
in at on for with to from by about of into onto over under near around through during since
after before until without like as than and or but so because while when where which who
whom whose that if though although now then today yesterday tomorrow tonight last next this
ago again too very really lately recently anymore already still yet soon every each almost
is are was were be been am have has had do does did will would can could should may might
must not i you he she it we they me him her us them my your his its our their there here
get got make made feel felt look looks looked seem seems seemed went go goes take took want
wants need needs think thought know knew see saw said says love loves like likes enjoy
enjoys hate hates just also even only both either much more most lot all twice once
together alone often sometimes everyday daily weekly home back ever well lol haha
""".split())
_PRONOUNS = frozenset("""
it this that these those them him her you us me everything something anything nothing
everyone someone anyone one what which myself yourself himself herself ourselves themselves
there here so too how why when where who
""".split())
_DETERMINERS = frozenset(["a", "an", "the", "my", "our", "this", "that", "these", "those",
                          "some", "your", "his", "her", "their", "its"])
_SPECIFIC_DETS = frozenset(["this", "that", "these", "those", "your", "his", "her", "their", "its"])
_ADJECTIVES = frozenset("""
new brand old little big small nice cute beautiful lovely great good amazing awesome local
huge cool wonderful fantastic gorgeous adorable sweet whole real own first second
""".split())
_MEANINGLESS = frozenset("""
lot bit way thing things stuff time times one ones kind sort few couple day days week month
year moment chance idea deal fact part point reason living break while opportunity
experience feeling end rest most much more some none both other others same fun being
having doing getting going making trying
""".split())
_LIGHT_VERBS = frozenset("""
see hear know be have get do make help say think try hang chat talk catch share meet find
tell ask keep give let put
""".split())
_VERB_FORMS_PAST = frozenset("""
worked taught lived resided liked loved hated enjoyed studied dated came grew was were
""".split())

_PETS = {"dog": "dog", "dogs": "dog", "puppy": "dog", "pup": "dog", "cat": "cat", "cats": "cat",
         "kitten": "cat", "kitty": "cat", "hamster": "hamster", "rabbit": "rabbit",
         "bunny": "rabbit", "parrot": "parrot", "bird": "bird", "fish": "fish",
         "goldfish": "fish", "turtle": "turtle", "snake": "snake", "horse": "horse",
         "guinea pig": "guinea pig", "lizard": "lizard", "pony": "horse"}
_CARS = frozenset(["car", "truck", "suv", "van", "motorcycle", "motorbike", "minivan", "jeep",
                   "convertible", "pickup"])
_CAR_BRANDS = ("Tesla|Toyota|Honda|Ford|BMW|Audi|Mercedes|Volkswagen|VW|Subaru|Kia|Hyundai"
               "|Chevy|Chevrolet|Nissan|Mazda|Jeep|Volvo|Porsche|Lexus|Prius|Mini|Fiat|Ferrari")
_KIN = {  # role word -> (relation, functional, label)
    "wife": ("MARRIED_TO", True, "Person"), "husband": ("MARRIED_TO", True, "Person"),
    "spouse": ("MARRIED_TO", True, "Person"), "partner": ("DATING", False, "Person"),
    "girlfriend": ("DATING", False, "Person"), "boyfriend": ("DATING", False, "Person"),
    "fiance": ("DATING", False, "Person"), "fiancee": ("DATING", False, "Person"),
    "son": ("HAS_CHILD", False, "Person"), "daughter": ("HAS_CHILD", False, "Person"),
    "kid": ("HAS_CHILD", False, "Person"), "child": ("HAS_CHILD", False, "Person"),
    "kids": ("HAS_CHILD", False, "Person"), "children": ("HAS_CHILD", False, "Person"),
    "sons": ("HAS_CHILD", False, "Person"), "daughters": ("HAS_CHILD", False, "Person"),
    "baby": ("HAS_CHILD", False, "Person"), "twins": ("HAS_CHILD", False, "Person"),
    "mother": ("HAS_MOTHER", False, "Person"), "mom": ("HAS_MOTHER", False, "Person"),
    "mum": ("HAS_MOTHER", False, "Person"), "father": ("HAS_FATHER", False, "Person"),
    "dad": ("HAS_FATHER", False, "Person"), "sister": ("HAS_SISTER", False, "Person"),
    "brother": ("HAS_BROTHER", False, "Person"), "sibling": ("HAS_SIBLING", False, "Person"),
    "cousin": ("HAS_COUSIN", False, "Person"), "aunt": ("HAS_AUNT", False, "Person"),
    "uncle": ("HAS_UNCLE", False, "Person"), "niece": ("HAS_NIECE", False, "Person"),
    "nephew": ("HAS_NEPHEW", False, "Person"), "grandmother": ("HAS_GRANDMOTHER", False, "Person"),
    "grandma": ("HAS_GRANDMOTHER", False, "Person"),
    "grandfather": ("HAS_GRANDFATHER", False, "Person"),
    "grandpa": ("HAS_GRANDFATHER", False, "Person"), "friend": ("HAS_FRIEND", False, "Person"),
    "best friend": ("HAS_FRIEND", False, "Person"), "boss": ("HAS_BOSS", False, "Person"),
    "manager": ("HAS_BOSS", False, "Person"), "coworker": ("HAS_COWORKER", False, "Person"),
    "co-worker": ("HAS_COWORKER", False, "Person"), "colleague": ("HAS_COWORKER", False, "Person"),
    "roommate": ("HAS_ROOMMATE", False, "Person"), "neighbor": ("HAS_NEIGHBOR", False, "Person"),
    "neighbour": ("HAS_NEIGHBOR", False, "Person"), "mentor": ("HAS_MENTOR", False, "Person"),
    **{pet: ("HAS_PET", False, "Pet") for pet in _PETS},
}
_KIN_ALT = "|".join(sorted((re.escape(k) for k in _KIN), key=len, reverse=True))
_JOB_WORDS = ("engineer|developer|programmer|manager|designer|teacher|nurse|doctor|lawyer|"
              "scientist|researcher|analyst|consultant|intern|director|ceo|cto|cfo|founder|"
              "co-founder|cofounder|professor|chef|cook|accountant|architect|writer|editor|"
              "barista|cashier|volunteer|officer|assistant|lead|vp|president|specialist|"
              "technician|counselor|counsellor|therapist|pharmacist|mechanic|electrician|driver|"
              "pilot|librarian|receptionist|clerk|coordinator|administrator|employee|worker|"
              "surgeon|dentist|paramedic|firefighter|instructor|coach|tutor|partner|associate|"
              "executive|owner|waiter|waitress|bartender|server|janitor|secretary|agent|"
              "student|freshman|sophomore|junior|senior|undergrad|undergraduate|postdoc|"
              "fellow|candidate")
_PLURAL_ROLES = frozenset(["kids", "children", "sons", "daughters", "twins"])
_STUDENT_WORDS = frozenset(["student", "freshman", "sophomore", "junior", "senior", "undergrad",
                            "undergraduate", "postdoc", "fellow", "candidate"])
_GROUP_WORDS = frozenset(["club", "group", "team", "community", "society", "league", "choir",
                          "band", "gym", "class", "association", "circle", "guild", "union"])
_PLACES = frozenset(x.lower() for x in """
Afghanistan|Argentina|Australia|Austria|Belgium|Brazil|Canada|Chile|China|Colombia|Croatia|
Cuba|Czechia|Denmark|Egypt|England|Ethiopia|Finland|France|Germany|Ghana|Greece|Hungary|
Iceland|India|Indonesia|Iran|Iraq|Ireland|Israel|Italy|Jamaica|Japan|Kenya|Korea|Lebanon|
Mexico|Morocco|Nepal|Netherlands|New Zealand|Nigeria|Norway|Pakistan|Peru|Philippines|
Poland|Portugal|Romania|Russia|Scotland|Singapore|South Africa|South Korea|Spain|Sweden|
Switzerland|Taiwan|Thailand|Turkey|Ukraine|United Kingdom|UK|United States|USA|US|America|
Vietnam|Wales|Amsterdam|Athens|Atlanta|Austin|Bangkok|Barcelona|Beijing|Berlin|Boston|
Brooklyn|Budapest|Buenos Aires|Cairo|Chicago|Copenhagen|Dallas|Delhi|Denver|Dubai|Dublin|
Edinburgh|Florence|Hong Kong|Houston|Istanbul|Jakarta|Lagos|Las Vegas|Lisbon|London|
Los Angeles|LA|Madrid|Manchester|Melbourne|Miami|Milan|Montreal|Moscow|Mumbai|Munich|
Nairobi|New York|New York City|NYC|Oslo|Paris|Philadelphia|Portland|Prague|Rio|Rome|
San Diego|San Francisco|Seattle|Seoul|Shanghai|Shenzhen|Stockholm|Sydney|Tokyo|Toronto|
Vancouver|Venice|Vienna|Warsaw|Washington|Zurich|California|Texas|Florida|Oregon|Hawaii|
Alaska|Colorado|Arizona|Nevada|Ohio|Michigan|Georgia|Virginia|Massachusetts|Europe|Asia|
Africa
""".replace("\n", "").split("|"))
_JSON_KEYS = {  # key -> (relation, label, functional, phrase)
    **dict.fromkeys(["company", "employer", "organization", "organisation", "workplace"],
                    ("WORKS_FOR", "Organization", True, "works for")),
    **dict.fromkeys(["city", "residence"], ("LIVES_IN", "Place", True, "lives in")),
    "location": ("LOCATED_IN", "Place", True, "is located in"),
    **dict.fromkeys(["hometown", "birthplace"], ("IS_FROM", "Place", False, "is from")),
    **dict.fromkeys(["school", "university", "college"],
                    ("STUDIES_AT", "Organization", False, "studies at")),
    **dict.fromkeys(["spouse", "wife", "husband"], ("MARRIED_TO", "Person", True, "is married to")),
}

# ------------------------------------------------------------- text handling

_CONTRACTIONS = [
    (re.compile(r"[’‘]"), "'"), (re.compile(r"[“”]"), '"'), (re.compile(r"\bi\b"), "I"),
    (re.compile(r"\b([Ii])'m\b"), r"\1 am"), (re.compile(r"\b([Cc])an't\b"), r"\1an not"),
    (re.compile(r"\b([Ww])on't\b"), r"\1ill not"), (re.compile(r"\b(\w+)n't\b"), r"\1 not"),
    (re.compile(r"\b(\w+)'re\b"), r"\1 are"), (re.compile(r"\b(\w+)'ve\b"), r"\1 have"),
    (re.compile(r"\b(\w+)'ll\b"), r"\1 will"), (re.compile(r"\b(\w+)'d\b"), r"\1 would"),
    (re.compile(r"\b([Ii]t|[Tt]hat|[Ww]hat|[Tt]here|[Hh]ere|[Hh]e|[Ss]he|[Ww]ho)'s\b"), r"\1 is"),
]
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?:\s+|$)|\n+")
_CLAUSE_SPLIT = re.compile(
    r"\s*;\s*|,?\s+(?:and|but|then|whereas|while|although|though|because|plus)\s+")
_SPEAKER_PREFIX = re.compile(r"^\s*([A-Z][\w.'-]*(?:\s+[A-Z][\w.'-]*){0,3})\s*:\s+")
_WORD = re.compile(r"\s*([A-Za-z0-9][\w&'+-]*)")
_QUOTED = re.compile(r"""\s*(?:"([^"]{1,80})"|(?<!\w)'([^']{1,80})'(?!\w))""")
_TITLE = re.compile(r"""(?:"([A-Z][^"]{1,60})"|(?<!\w)'([A-Z][^']{1,60})'(?!\w))""")
_CAPW = r"[A-Z][a-zA-Z0-9&-]*"
_NAME = rf"{_CAPW}(?:\s+(?:(?:of\s+the|of|de|del|da|du|van|von|la|le|for|&)\s+)?{_CAPW})*"
_PROPER_RUN = re.compile(rf"(?<![\w'])(?:(?:Mr|Mrs|Ms|Dr|Prof)\.\s+)?{_NAME}")
_LEADING_FILLER = re.compile(
    r"^(?:[\s,!\-]|(?:oh|well|so|yeah|yes|yep|actually|anyway|btw|by\s+the\s+way|also|and|but"
    r"|hey|wow|um|uh|haha|lol|then|plus|now|honestly|guess\s+what|fun\s+fact|recently|lately"
    r"|finally)\b)*",
    re.IGNORECASE)
_NOW = re.compile(r"\b(?:now|currently|nowadays|these\s+days)\b", re.IGNORECASE)
_COORDINATION = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+|\s*&\s*")
_AUX = frozenset("""
am is are was were be been being have has had do does did not never no longer now currently
also still just recently finally really actually officially already both too always usually
often sometimes truly totally absolutely definitely honestly basically mostly even only all
ever again happily proudly newly originally used to
""".split())
_NOT_VERBS = _NP_STOP - _AUX
_NOT_ACTIVITIES = _LIGHT_VERBS | _NP_STOP


def _normalise(text: str) -> str:
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
        if m[0].startswith(".") and (last in _TITLES or (len(last) == 1 and last.isalpha())):
            continue
        if text[start:m.end()].strip():
            out.append((start, text[start:m.end()].rstrip()))
        start = m.end()
    if text[start:].strip():
        out.append((start, text[start:]))
    return out


def _clauses(sentence: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in _CLAUSE_SPLIT.finditer(sentence):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(sentence)))
    return spans


def _gerund(verb: str) -> str:
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")):
        return verb[:-1] + "ing"
    if re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", verb):
        return verb + verb[-1] + "ing"
    return verb + "ing"


def _snake(words: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", words).strip("_").upper()


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


# ------------------------------------------------------------ state per call

@dataclass
class _Phrase:
    """A noun phrase found in text: the entity name and where its words are."""

    name: str
    start: int
    end: int
    det: str = ""
    proper: bool = False


@dataclass
class _Sentence:
    """One sentence with its times, clause spans and each clause's own leading subject."""

    text: str
    offset: int
    times: list[TimeMention]
    clauses: list[tuple[int, int]]
    masked: str = ""
    leads: list[tuple[str, int] | None] = field(default_factory=list)

    def clause_of(self, pos: int) -> int:
        return next(i for i, (_, end) in enumerate(self.clauses)
                    if pos < end or i == len(self.clauses) - 1)

    def time_in(self, start: int, end: int) -> TimeMention | None:
        return next((t for t in self.times if start <= t.start < end), None)

    def is_time(self, pos: int) -> bool:
        return any(t.start <= pos < t.end for t in self.times)


class _Registry:
    """Entities by case-insensitive name, remembering first position and merging labels."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[int, ExtractedEntity]] = {}

    def add(self, name: str, label: str | None, pos: int, **attributes: Any) -> str:
        key = name.lower()
        if key not in self._items:
            labels = ["Entity"] + ([label] if label and label != "Entity" else [])
            entity = ExtractedEntity(name=name, labels=labels, attributes=attributes)
            self._items[key] = (pos, entity)
        else:
            first, entity = self._items[key]
            if label and label not in entity.labels:
                entity.labels.append(label)
            for k, v in attributes.items():
                entity.attributes.setdefault(k, v)
            self._items[key] = (min(first, pos), entity)
        return self._items[key][1].name

    def has(self, name: str) -> bool:
        return name.lower() in self._items

    def ordered(self) -> list[ExtractedEntity]:
        return [e for _, e in sorted(self._items.values(), key=lambda item: item[0])]


@dataclass
class _Ctx:
    """Per-episode state: the speaker, the UTC reference, entities and facts so far."""

    speaker: str | None
    reference: datetime
    registry: _Registry = field(default_factory=_Registry)
    facts: list[ExtractedFact] = field(default_factory=list)
    stated: list[bool] = field(default_factory=list)
    keys: set[tuple[str, str, str, bool]] = field(default_factory=set)
    covered: list[tuple[int, int]] = field(default_factory=list)

    def fact(self, source: str, target: str, relation: str, text: str, *,
             valid: datetime | None = None, invalid: datetime | None = None,
             functional: bool = False, negated: bool = False, stated: bool = False,
             **attributes: Any) -> None:
        key = (source.lower(), relation, target.lower(), negated)
        if source.lower() == target.lower() or key in self.keys:
            return
        self.keys.add(key)
        self.facts.append(ExtractedFact(
            source=source, target=target, relation=relation, fact=text, valid_at=valid,
            invalid_at=invalid, functional=functional, negated=negated, attributes=attributes))
        self.stated.append(stated)

    def third_person(self, text: str) -> str:
        if self.speaker is None:
            return re.sub(r"\b(?:me|I|myself)\b", "them", re.sub(r"\b[Mm]y\b", "their", text))
        text = re.sub(r"\b[Mm]y\b", _possessive(self.speaker), text)
        return re.sub(r"\b(?:me|I|myself)\b", self.speaker, text)


def _clean_name(name: str) -> str | None:
    """Drop leading stop words ("Hey Caroline" -> "Caroline"); None if nothing name-like is left."""
    words = name.split()
    while words and words[0].lower().rstrip(".") in _CAP_STOP:
        words = words[1:]
    if not words or any(w.lower() in _CAP_STOP for w in words):
        return None
    return " ".join(words)


# ------------------------------------------------------------ noun phrases

def _parse_object(s: _Sentence, pos: int, kind: str, ctx: _Ctx) -> _Phrase | None:
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
            return _Phrase(name, quoted.start(), quoted.end(), proper=True)
        return None
    det, start = "", None
    m = _WORD.match(text, pos)
    if m and m[1].lower() in _DETERMINERS:
        det, start = m[1].lower(), m.start(1)
        m = _WORD.match(text, m.end())
    if m is None or s.is_time(m.start(1)):
        return None
    start = m.start(1) if start is None else start
    first = m[1].lower()
    if first in _PRONOUNS and not det:
        if first == "me" and ctx.speaker and kind != "bare":
            return _Phrase(ctx.speaker, m.start(1), m.end(), proper=True)
        return None
    if kind == "bare" and first == "to" and not det:
        return _infinitive(s, m.end(), start, ctx)
    capital = m[1][0].isupper()
    if kind == "proper" and (not capital or det not in ("", "the")):
        return None
    if (not capital and not det and kind != "bare") or (det in _SPECIFIC_DETS and kind == "bare"):
        return None
    lowercase_ok = kind != "proper" and (bool(det) or kind == "bare")
    words: list[str] = []
    end = pos
    while m is not None and len(words) < 6 and not s.is_time(m.start(1)):
        w, lw = m[1], m[1].lower()
        if w[0].isupper():
            if lw in _CAP_STOP:
                break
        elif w[0].isdigit() and words and words[-1][0].isupper():
            pass
        elif lw in _CONNECTORS and words and words[-1][0].isupper():
            nxt = _WORD.match(text, m.end())
            if not (nxt and nxt[1][0].isupper()):
                break
        elif not lowercase_ok or lw in _NP_STOP or len(words) >= 4:
            break
        words.append(w)
        end = m.end()
        m = _WORD.match(text, end)
    if m is not None and m.start() == end and not s.is_time(m.start(1)) \
            and m[1].lower() not in _NP_STOP and m[1].lower() not in _CAP_STOP:
        return None
    if kind == "bare" and len(words) == 1 and words[0].endswith("ing") and \
            re.match(r"\s+(?:[Mm]y|the|a|an|our|your|his|her|their|this|that|\")\b", text[end:]):
        return None
    return _finish_phrase(words, det, start, end, ctx)


def _infinitive(s: _Sentence, pos: int, start: int, ctx: _Ctx) -> _Phrase | None:
    """"to paint" -> "painting", "to go hiking" -> "hiking", "to read books" -> "reading books"."""
    m = _WORD.match(s.text, pos)
    if m is not None and m[1] == "go":
        m = re.compile(r"\s*([a-z]+ing)\b").match(s.text, m.end())
        if m is None:
            return None
        words = [m[1]]
    elif m is None or not m[1].islower() or m[1] in _NOT_ACTIVITIES:
        return None
    else:
        words = [_gerund(m[1])]
    end = m.end()
    nxt = _WORD.match(s.text, end)
    while nxt and nxt[1].islower() and nxt[1] not in _NP_STOP and len(words) < 3 \
            and not s.is_time(nxt.start(1)):
        words.append(nxt[1])
        end = nxt.end()
        nxt = _WORD.match(s.text, end)
    return _finish_phrase(words, "", start, end, ctx)


def _finish_phrase(words: list[str], det: str, start: int, end: int, ctx: _Ctx) -> _Phrase | None:
    if words and words[-1].endswith("'s"):
        words[-1] = words[-1][:-2]
    proper = bool(words) and words[0][0].isupper() and all(
        w[0].isupper() or w[0].isdigit() or w.lower() in _CONNECTORS for w in words)
    if not proper:
        while len(words) > 1 and words[0].lower() in _ADJECTIVES:
            words = words[1:]
    name = " ".join(words).strip("-'")
    if not name or name.lower() in _MEANINGLESS or name.lower() in _PRONOUNS:
        return None
    if det in ("my", "our") and not proper:
        if ctx.speaker is None:
            return None
        name = f"{_possessive(ctx.speaker)} {name}"
    return _Phrase(name, start, end, det=det, proper=proper)


def _label_for_place(name: str) -> str | None:
    return "Place" if name.lower() in _PLACES else None


# ------------------------------------------------------------------ subjects

_ROLE_SUBJECT = re.compile(rf"^(?:(?P<my>[Mm]y)|(?P<owner>{_NAME})'s?)\s+(?P<role>(?i:{_KIN_ALT}))"
                           rf"(?:\s*,?\s+(?P<name>{_NAME}))?,?$")
_NAME_SUBJECT = re.compile(rf"^{_NAME}$")
_LEAD = re.compile(rf"I\b|[Mm]y\s+(?i:{_KIN_ALT})(?:\s*,?\s+{_NAME})?|{_NAME}")


def _is_subject(head: str, ctx: _Ctx) -> bool:
    if head == "I":
        return ctx.speaker is not None
    m = _ROLE_SUBJECT.match(head)
    if m:
        return bool(ctx.speaker if m["my"] else _clean_name(m["owner"]) == m["owner"])
    return bool(_NAME_SUBJECT.match(head)) and _clean_name(head) == head and \
        not (" " not in head and head.endswith("ing"))


def _resolve_subject(head: str, pos: int, ctx: _Ctx) -> str:
    """The entity a subject phrase (already checked by _is_subject) names, registering it."""
    if head == "I":
        assert ctx.speaker is not None
        return ctx.registry.add(ctx.speaker, "Person", -1)
    m = _ROLE_SUBJECT.match(head)
    if m:
        owner = ctx.speaker if m["my"] else m["owner"]
        assert owner is not None
        return _role_entity(owner, m["role"].lower(), m["name"], pos, ctx)
    return ctx.registry.add(head, "Person", pos)


def _role_entity(owner: str, role: str, name: str | None, pos: int, ctx: _Ctx) -> str:
    """The entity a relative or pet phrase names; also records owner -> it (e.g. HAS_SISTER)."""
    relation, functional, label = _KIN[role]
    owner = ctx.registry.add(owner, "Person", pos)
    extra = {"species": _PETS[role]} if role in _PETS else {}
    if name and role in _PETS:
        target = ctx.registry.add(name, label, pos, **extra)
        text = f"{owner} has a {role} named {target}."
    elif name:
        target = ctx.registry.add(name, label, pos)
        text = f"{target} is {_possessive(owner)} {role}."
    else:
        target = ctx.registry.add(f"{_possessive(owner)} {role}", label, pos, **extra)
        text = f"{owner} has {role}." if role.endswith(("s", "ren")) else f"{owner} has a {role}."
    ctx.fact(owner, target, relation, text, valid=ctx.reference, functional=functional, role=role)
    return target


def _lead_subject(s: _Sentence, start: int, end: int, ctx: _Ctx) -> tuple[str, int] | None:
    """The clause's own subject if it opens with one followed by a verb-like word."""
    clause = s.masked[start:end]
    head = _LEADING_FILLER.sub("", clause)
    m = _LEAD.match(head)
    if m is None:
        return None
    after = head[m.end():].split()
    subject = m[0].rstrip(",")
    if not after or not after[0].islower() or after[0] in _NOT_VERBS:
        return None
    if not _is_subject(subject, ctx):
        return None
    return subject, s.offset + start + len(clause) - len(head)


@dataclass
class _Grammar:
    """Who does a verb, how it is said, and the time that goes with it."""

    subject: str
    neg: bool
    used_to: bool
    past: bool
    perfect: bool
    when: TimeMention | None
    clause: tuple[int, int]


def _grammar(s: _Sentence, verb_start: int, verb: str, ctx: _Ctx) -> _Grammar | None:
    """Parse the words between the clause start and the verb, or None if the subject is unclear.

    They must be, after dropping times, fillers and auxiliaries: nothing
    (subject of an earlier clause), "I", a name, or "my <relative> [Name]".
    """
    ci = s.clause_of(verb_start)
    c_start, c_end = s.clauses[ci]
    words = s.masked[c_start:verb_start].split()
    neg = used_to = past = perfect = copula = False
    while words and words[-1].lower().strip(",") in _AUX:
        w = words.pop().lower().strip(",")
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
    head = _LEADING_FILLER.sub("", " ".join(words).strip(" ,").rsplit(",", 1)[-1]).strip()
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
            return None
        lead = s.leads[j]
        assert lead is not None
        subject = _resolve_subject(lead[0], lead[1], ctx)
        if when is None and not _NOW.search(s.text[c_start:c_end]):
            earlier = (s.time_in(*s.clauses[k]) for k in range(ci - 1, j - 1, -1))
            when = next((t for t in earlier if t is not None), None)
    past = past or (verb.lower() in _VERB_FORMS_PAST and not perfect)
    return _Grammar(subject, neg, used_to, past, perfect, when, (c_start, c_end))


_Timing = tuple[datetime | None, datetime | None, bool]


def _times(mode: str, g: _Grammar, reference: datetime,
           duration: TimeMention | None = None) -> _Timing | None:
    """(valid_at, invalid_at, negated) for a rule mode and the clause's grammar; None to skip."""
    stated = g.when.value if g.when else None
    if mode in ("start", "end", "event", "experience") and g.neg:
        return None
    if mode == "end":
        return None, stated or reference, True
    if mode == "start":
        return stated or reference, None, False
    if mode == "event":
        return (stated, None, False) if g.perfect else (stated or reference, None, False)
    if mode == "experience":
        return stated, None, False
    if g.neg:
        return None, stated or reference, True
    if g.used_to:
        return None, reference, False
    if g.past:
        if mode == "state" and stated is None:
            return None, reference, False
        return stated, None, False
    if mode == "origin":
        return stated or reference, None, False
    return stated or (duration.value if duration else None) or reference, None, False


# ---------------------------------------------------------------- rules

@dataclass(frozen=True)
class _Rule:
    """A verb phrase whose object starts right after the match.

    mode: state | pref | origin | start | end | event | experience (see the
    module docstring for the times each gets); phrases: third-person present,
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
    accept: Callable[[_Phrase], bool] | None = None


def _is_group(p: _Phrase) -> bool:
    return not p.proper or bool(_GROUP_WORDS & set(p.name.lower().split()))


def _is_place(p: _Phrase) -> bool:
    return p.name.lower() in _PLACES


def _not_owned_thing(p: _Phrase) -> bool:
    last = p.name.lower().split()[-1]
    return last not in _CARS and last not in _PETS and last not in _KIN and \
        not re.match(rf"(?:{_CAR_BRANDS})\b", p.name)


def _r(pattern: str, relation: str, mode: str, obj: str, label: str | None = None,
       functional: bool = False, phrases: tuple[str, str, str, str] | None = None,
       accept: Callable[[_Phrase], bool] | None = None) -> _Rule:
    return _Rule(re.compile(pattern, re.IGNORECASE), relation, mode, obj, label, functional,
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
_RULES: list[_Rule] = [
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
_ROLE_AT = re.compile(rf"\b(?:am|is|are|was|were)\s+(?:an?|the)\s+(?P<role>(?:[\w-]+\s+){{0,3}}?"
                      rf"(?:{_JOB_WORDS}))\s+(?:at|for|with)\s+", re.IGNORECASE)
_POSSESSION = re.compile(
    r"\b(?i:(?P<verb>have|has|had|got|adopted|own|owns|rescued|bought|welcomed|drive|drives))\s+"
    r"(?i:(?P<det>a|an|one|two|three|four|five|another|my\s+first)\s+)"
    r"(?i:(?:new|little|sweet|cute|young|rescue|beautiful|lovely|adorable|used)\s+)*"
    rf"(?:(?P<brand>(?:{_CAR_BRANDS})(?:\s+[A-Z0-9][\w-]*)*)|(?i:(?P<noun>guinea\s+pig|[a-z-]+)))"
    rf"(?:\s*,?\s+(?i:named|called)\s+(?P<name>{_NAME})(?:\s+and\s+(?P<name2>{_NAME}))?)?")
_KIN_APPOSITIVE = re.compile(
    rf"(?:\b(?P<my>[Mm]y)|(?P<owner>{_NAME})'s?)\s+(?P<role>(?i:{_KIN_ALT}))"
    rf"(?:'s\s+name\s+is\s+|\s+is\s+|\s*,\s*(?i:named\s+|called\s+)?|\s+(?i:named\s+|called\s+)?)"
    rf"(?P<name>{_NAME})")
_KIN_COPULA = re.compile(rf"(?P<name>{_NAME})\s+(?:is|was)\s+[Mm]y\s+(?P<role>(?i:{_KIN_ALT}))\b")
_FAVOURITE = re.compile(
    rf"(?:\b(?P<my>[Mm]y)|(?P<owner>{_NAME})'s)\s+(?:(?:all[- ]time|absolute|very)\s+)?"
    r"(?P<fav>[Ff]avou?rite)\s+(?P<kind>[a-zA-Z]+(?:\s+[a-zA-Z]+){0,2}?)\s+"
    r"(?:is|has\s+to\s+be|would\s+be)\s+")
_FAVOURITE_REVERSED = re.compile(
    rf"(?P<obj>{_NAME}|\"[^\"]+\")\s+is\s+[Mm]y\s+(?:all[- ]time\s+)?(?P<fav>favou?rite)"
    r"\s+(?P<kind>[a-z]+(?:\s+[a-z]+)?)(?=\s*[.,!?;]|\s*$)")

# --------------------------------------------------------------- extraction


class OfflineExtractor:
    """Rule-based, deterministic extraction of entities and facts (see the module docstring)."""

    def extract(self, episode: EpisodeInput, previous: list[EpisodeInput]) -> Extraction:
        """Extract from ``episode`` alone; ``previous`` is accepted for the interface but unused."""
        reference = to_utc(episode.reference_time)
        if episode.kind == "json":
            return _extract_json(episode.content, reference)
        content, speaker = episode.content, episode.actor
        if speaker is None and episode.kind == "message":
            prefix = _SPEAKER_PREFIX.match(content)
            if prefix:
                speaker, content = prefix[1].strip(), content[prefix.end():]
        ctx = _Ctx(speaker, reference)
        if speaker:
            ctx.registry.add(speaker, "Person", -1)
        sentences = [_extract_sentence(text, offset, ctx)
                     for offset, text in _sentences(_normalise(content))]
        _add_proper_nouns(sentences, ctx)
        return Extraction(entities=ctx.registry.ordered(), facts=ctx.facts)


def _extract_sentence(text: str, offset: int, ctx: _Ctx) -> _Sentence:
    times = find_times(text, ctx.reference)
    masked = list(text)
    for t in times:
        masked[t.start:t.end] = " " * (t.end - t.start)
    s = _Sentence(text, offset, times, _clauses(text), "".join(masked))
    s.leads = [_lead_subject(s, start, end, ctx) for start, end in s.clauses]
    if text.rstrip().endswith("?"):
        return s
    first_fact = len(ctx.facts)
    _kinship(s, ctx)
    for rule in _RULES:
        for m in rule.pattern.finditer(text):
            _apply_rule(rule, m, s, ctx)
    _role_at(s, ctx)
    _possessions(s, ctx)
    _favourites(s, ctx)
    _carry_transition_times(first_fact, ctx)
    return s


def _objects(s: _Sentence, pos: int, rule: _Rule, ctx: _Ctx) -> list[_Phrase]:
    """The object at pos, plus coordinated ones ("hiking, biking and swimming") for list-y rules."""
    found: list[_Phrase] = []
    obj = _parse_object(s, pos, rule.obj, ctx)
    while obj is not None:
        found.append(obj)
        if rule.mode not in ("pref", "event", "experience"):
            break
        joint = _COORDINATION.match(s.text, obj.end)
        obj = _parse_object(s, joint.end(), rule.obj, ctx) if joint else None
        if obj is not None and obj.det in ("my", "our"):
            break
    return found


def _apply_rule(rule: _Rule, m: re.Match[str], s: _Sentence, ctx: _Ctx) -> None:
    objects = [o for o in _objects(s, m.end(), rule, ctx) if rule.accept is None or rule.accept(o)]
    if not objects:
        return
    g = _grammar(s, m.start(), m[0].split()[0], ctx)
    if g is None:
        return
    g.neg = g.neg or bool("neg" in rule.pattern.groupindex and m["neg"])
    duration = find_duration(s.text[g.clause[0]:g.clause[1]], ctx.reference) \
        if rule.mode == "state" else None
    timing = _times(rule.mode, g, ctx.reference, duration)
    if timing is None:
        return
    valid, invalid, negated = timing
    attributes = {"field": m["field"]} if "field" in rule.pattern.groupindex and m["field"] else {}
    for obj in objects:
        target = ctx.registry.add(obj.name, rule.label or _label_for_place(obj.name),
                                  s.offset + obj.start)
        ctx.covered.append((s.offset + obj.start, s.offset + obj.end))
        surface = ctx.third_person(s.text[obj.start:obj.end].strip(" ,"))
        text = _fact_sentence(rule, m, g, surface, negated, ctx)
        ctx.fact(g.subject, target, rule.relation, text, valid=valid, invalid=invalid,
                 functional=rule.functional, negated=negated, stated=g.when is not None,
                 **attributes)


def _fact_sentence(rule: _Rule, m: re.Match[str], g: _Grammar, obj: str, negated: bool,
                   ctx: _Ctx) -> str:
    if rule.phrases is None:
        return f"{g.subject} {ctx.third_person(' '.join(m[0].split()))} {obj}."
    present, base, past, negative = rule.phrases
    if negated:
        phrase = negative
    elif g.used_to:
        phrase = f"used to {base}"
    else:
        phrase = past if g.past else present
    if g.subject.split()[-1].lower() in _PLURAL_ROLES:
        phrase = _plural(phrase, present, base)
    return f"{g.subject} {phrase} {obj}."


def _plural(phrase: str, present: str, base: str) -> str:
    """Agreement for "Alice's kids": "loves" -> "love", "is from" -> "are from"."""
    phrase = re.sub(r"\bis\b", "are", phrase.replace("does not", "do not"))
    return phrase.replace(present, base) if not present.startswith("is ") else phrase


def _kinship(s: _Sentence, ctx: _Ctx) -> None:
    """"my sister Jane", "Bob's wife, Sarah", "my dog's name is Rex", "Jane is my sister"."""
    for m in _KIN_APPOSITIVE.finditer(s.text):
        owner = ctx.speaker if m["my"] else (m["owner"] and _clean_name(m["owner"]))
        name = _clean_name(m["name"])
        if owner and name:
            _role_entity(owner, m["role"].lower(), name, s.offset + m.start(), ctx)
    for m in _KIN_COPULA.finditer(s.text):
        name = _clean_name(m["name"])
        if ctx.speaker and name:
            _role_entity(ctx.speaker, m["role"].lower(), name, s.offset + m.start(), ctx)


def _role_at(s: _Sentence, ctx: _Ctx) -> None:
    """"I'm a software engineer at Google" -> WORKS_FOR, role kept; "a student at" -> STUDIES_AT."""
    for m in _ROLE_AT.finditer(s.text):
        obj = _parse_object(s, m.end(), "np", ctx)
        if obj is None:
            continue
        g = _grammar(s, m.start(), m[0].split()[0], ctx)
        timing = _times("state", g, ctx.reference) if g else None
        if g is None or timing is None:
            continue
        valid, invalid, negated = timing
        role = " ".join(m["role"].split())
        student = role.lower().split()[-1] in _STUDENT_WORDS
        target = ctx.registry.add(obj.name, "Organization", s.offset + obj.start)
        verb = ("studies at", "studied at") if student else ("works for", "worked for")
        said = f"no longer {verb[0]}" if negated else verb[1] if g.past or g.used_to else verb[0]
        article = "an" if role[0].lower() in "aeiou" else "a"
        ctx.fact(g.subject, target, "STUDIES_AT" if student else "WORKS_FOR",
                 f"{g.subject} {said} {target} as {article} {role}.", valid=valid, invalid=invalid,
                 functional=not student, negated=negated, stated=g.when is not None, role=role)


def _possessions(s: _Sentence, ctx: _Ctx) -> None:
    """have/got/adopted/bought a dog|daughter|car|sister [named X] -> HAS_PET, HAS_CHILD, ..."""
    for m in _POSSESSION.finditer(s.text):
        noun = " ".join((m["noun"] or "car").lower().split())
        if m["brand"] or noun in _CARS:
            relation, functional, label = "HAS_CAR", False, "Vehicle"
        elif noun in _KIN:
            relation, functional, label = _KIN[noun]
        else:
            continue
        verb = m["verb"].lower()
        g = _grammar(s, m.start(), verb, ctx)
        if g is None:
            continue
        starts = verb not in ("have", "has", "had", "own", "owns", "drive", "drives") or \
            (verb == "had" and noun == "baby")
        g.past = g.past or (verb == "had" and not starts)
        timing = _times("start" if starts else "state", g, ctx.reference)
        if timing is None:
            continue
        valid, invalid, negated = timing
        names = [n for n in (m["name"], m["name2"]) if n and _clean_name(n)]
        if not names:
            names = [" ".join(m["brand"].split())] if m["brand"] else \
                [f"{_possessive(g.subject)} {noun}"]
        said = " ".join(m[0].split())
        if negated:
            said = "does not " + said
        else:
            third = {"have": "has", "own": "owns", "drive": "drives"}.get(verb, verb)
            said = third + said[len(verb):]
        extra = {"species": _PETS[noun]} if noun in _PETS else {}
        for name in names:
            target = ctx.registry.add(name, label, s.offset + m.start(), **extra)
            ctx.fact(g.subject, target, relation, f"{g.subject} {ctx.third_person(said)}.",
                     valid=valid, invalid=invalid, functional=functional, negated=negated,
                     stated=g.when is not None)


def _favourites(s: _Sentence, ctx: _Ctx) -> None:
    """"my favourite book is X" and "X is my favorite band" -> FAVOURITE_<KIND>, functional."""
    for m in _FAVOURITE.finditer(s.text):
        if s.text[:m.start()].rstrip().lower().endswith(" of"):
            continue
        owner = ctx.speaker if m["my"] else _clean_name(m["owner"])
        obj = _parse_object(s, m.end(), "bare", ctx)
        if owner and obj is not None:
            _favourite(owner, m["fav"], m["kind"], obj.name, s, m.start(), ctx)
    for m in _FAVOURITE_REVERSED.finditer(s.text):
        name = m["obj"].strip('"') if m["obj"].startswith('"') else _clean_name(m["obj"])
        if ctx.speaker and name:
            _favourite(ctx.speaker, m["fav"], m["kind"], name, s, m.start(), ctx)


def _favourite(owner: str, fav: str, kind: str, value: str, s: _Sentence, at: int,
               ctx: _Ctx) -> None:
    pos = s.offset + at
    when = s.time_in(*s.clauses[s.clause_of(at)])
    owner = ctx.registry.add(owner, "Person", pos)
    target = ctx.registry.add(value, None, pos)
    kind = " ".join(kind.split())
    ctx.fact(owner, target, f"FAVOURITE_{_snake(kind)}",
             f"{_possessive(owner)} {fav.lower()} {kind} is {target}.",
             valid=when.value if when else ctx.reference, functional=True, stated=when is not None)


def _carry_transition_times(first: int, ctx: _Ctx) -> None:
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


def _add_proper_nouns(sentences: list[_Sentence], ctx: _Ctx) -> None:
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
                if w is not None and w[0].lower().rstrip(".") not in _CAP_STOP:
                    segment.append(w)
                    continue
                while segment and segment[-1][0].lower() in _CONNECTORS:
                    segment.pop()
                while segment and segment[0][0].lower() in _CONNECTORS:
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
            ctx.registry.add(name, _label_for_place(name), pos)


def _extract_json(content: str, reference: datetime) -> Extraction:
    """Entities for named objects and facts for their company/city/school/... string fields."""
    data = json.loads(content)
    registry, facts = _Registry(), []
    for pos, obj in enumerate(data if isinstance(data, list) else [data]):
        if not isinstance(obj, dict):
            continue
        raw = obj.get("name") if isinstance(obj.get("name"), str) else obj.get("id")
        if not isinstance(raw, (str, int)) or isinstance(raw, bool) or not str(raw).strip():
            continue
        kind = next((obj[k] for k in ("type", "label", "kind")
                     if isinstance(obj.get(k), str) and obj[k]), None)
        label = kind[0].upper() + kind[1:] if kind else None
        name = registry.add(str(raw).strip(), label, 2 * pos)
        for key, value in obj.items():
            spec = _JSON_KEYS.get(key.lower())
            if spec is None or not isinstance(value, str) or not value.strip():
                continue
            relation, target_label, functional, phrase = spec
            if value.strip().lower() == name.lower():
                continue
            target = registry.add(value.strip(), target_label, 2 * pos + 1)
            facts.append(ExtractedFact(
                source=name, target=target, relation=relation, fact=f"{name} {phrase} {target}.",
                valid_at=reference, functional=functional, attributes={"json_key": key}))
    return Extraction(entities=registry.ordered(), facts=facts)
