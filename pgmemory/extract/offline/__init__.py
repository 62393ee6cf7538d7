"""The offline extractor: deterministic English rules, used when no LLM is configured.

It reads one episode (sync, no I/O, no models) and returns entities and facts
with valid/invalid times resolved against the episode's reference time (see
``dates``).  Recall is deliberately lower than an LLM's; what it extracts it
extracts the same way every time.

Speakers
  Each "Name: text" line of a message is that speaker's (lines without a prefix
  continue the speaker before them, the ``actor`` at first); a leading "Name:"
  equal to the actor is dropped; a lead-in label ("Big news:", "Update:", "Fun
  fact:") is not a speaker.  The speaker is what "I", "me", "my", "we" and
  "our" mean.  The assistant ("Assistant", "AI", "bot": ``pgmemory.extract.roles``)
  is no speaker: its own chatter ("Sure, I can help", "I love recipes") gives
  no fact and no entity; what it says about named people still counts ("So
  Marta works at Siemens").  "He"/"she" is the relative or pet named just
  before ("My dog Rex ... He loves the beach"); no other coreference.
Entities
  * The speaker comes first, labelled Person.  A text episode's actor plays the
    same part; without a speaker, sentences about "I" yield nothing and only
    named subjects ("Alice works at X") do.
  * Capitalised names and proper-noun phrases ("Blue Bottle Coffee", "Bank of
    America"), with pronouns, weekdays, months, holidays, greetings and
    sentence-initial common words left out; a lone capitalised word that
    starts a sentence counts only if it is capitalised elsewhere too, or a
    rule below uses it.  Quoted titles become entities.  In a sentence typed
    all in lowercase ("i live in berlin now") objects count as names (Berlin).
  * Objects of the rules below even when lowercase ("hiking"), labelled where
    the rule says (Organization, Place, Person, Pet, Vehicle); fillers end an
    object ("tacos these days" -> tacos).  Unnamed relatives and belongings are
    named after their owner ("Alice's sister", "Alice's dog").
Subjects
  I / we / my <relative> [Name] / Name's <relative> / your <relative> Name / a
  proper name / "Tom and I" / "Carl and Ruth", after any lead-in ("Big news:",
  "Guess what,", "So,", "Quick update -", "FYI", "Honestly", "I think") and
  with hedges dropped ("kinda", "sort of").  A sentence opening with a
  past-tense verb is the speaker's ("Started a new gig at Airbnb", "Moved to
  Austin!"); one opening with an -ing form is not ("Loving the colours!" is
  mostly a reaction to what the other person said).
  Chat spellings are read: im, ive, dont, cant, wrok, yrs.
Facts (relations, and what ends them: ``offline.exclusivity``)
  WORKS_FOR (one at a time): work/teach at|for, "I'm a nurse at X" (role
  kept), employed by, "my (new) job at X"; starts: joined X, started at X,
  started a new job|position|gig at X, got a job at, got hired at, accepted an
  offer from, "my first day|week at X"; ends: left/quit X, resigned from, laid
  off/fired/let go from, retired from.  "joined" a club is MEMBER_OF.
  LIVES_IN (one at a time; capitalised places): live/reside in, based in;
  starts: moved/relocated to, moved into a place in; ends: moved from/out of,
  left <known place>.  IS_FROM: am from, come from, grew up in, born in.
  STUDIES_AT (one at a time): study at, "a student at", started (grad) school
  at, enrolled at, transferred to; ends: graduated from, dropped out of.
  MARRIED_TO, ENGAGED_TO (one at a time), DATING: married (to), got engaged
  to, dating, seeing someone named X, "Jess and I got married", "Tom and I
  broke up / split up / are not together anymore", divorced.  Marrying ends
  being engaged to or dating the same person.
  LIKES / LOVES / HATES / ENJOYS / PREFERS: like, love, hate, can't stand,
  enjoy, fan of, obsessed with, prefer X (over Y), "like X more than Y", "I'd
  rather have X than Y"; lists ("hiking and swimming"); infinitives as gerunds
  ("love to paint" -> painting).  A positive preference ends the negative one
  on the same thing and vice versa ("I love olives now" ends "hates olives");
  preferring Y ends "prefers X over Y".  FAVOURITE_<KIND> (one at a time).
  IS (states of a person): am vegetarian/vegan/pescatarian/pregnant/retired/
  unemployed/single/sober, went vegan, became a vegetarian, retired; diets
  exclude each other, retired/unemployed end WORKS_FOR, single ends DATING.
  People: "my sister Jane", "Jane is my sister" -> HAS_SISTER etc.; "my
  colleague X" -> HAS_COWORKER; X knows Y, "X and Y know each other" -> KNOWS;
  friends with X, "Ben and I are friends" -> HAS_FRIEND.  HAS_PET / HAS_CHILD /
  HAS_CAR: have/got/adopted/bought a dog|daughter|car [named X].
  Events (one-off, bounded in time, attributes {"kind": "event"}): VISITED
  (visited, went/flew/drove to, took a trip to, got back from, have been to),
  ATTENDED (attended, took part in, ran a marathon), MET, BOUGHT, WON,
  UNDERWENT (had knee surgery).
Times
  States: present tense -> valid_at = reference time, or the stated time
  ("since 2019"), or reference minus a stated duration ("for 3 years"); they
  stay open until ended.  Starts -> valid_at = stated time, else reference.
  Events -> [start, end) of the stated period (the day for "yesterday", the
  month for "in March 2020", the year for "in 2019") or the reference's day;
  "have been to" without a time ends at the reference; an event at a future
  time is a plan and yields nothing.  A state said in the past tense at a
  stated time held then and holds no longer: "I lived in Berlin in 2019" is
  [2019-01-01, 2020-01-01), "last year I worked at X" the last year (ending at
  the reference if the period is still running), "I worked at X until 2020"
  [unknown, 2020-01-01), "from 2018 to 2020" / "between 2018 and 2020"
  [2018-01-01, 2021-01-01) ("from 2018 until 2020": until 2020-01-01).  With a
  present-tense state an end ("I work at X until May") is a plan and is not
  recorded.  A bare weekday, "in March" or "on May 8" is taken as the most
  recent one only with a verb in the past ("I started at X on Monday"); with
  any other ("I'm starting at X on Monday", "I'm visiting Y on May 8") a start,
  end or event yields nothing: which one is meant is not said.  Endings and negations ("don't work at X
  anymore", "no longer", "don't like") -> negated=True, invalid_at = stated
  time, else reference time.  "used to" and untimed simple past of a state ->
  invalid_at = reference time, valid_at None.  A time spoken in one clause
  carries to the next clause without a subject of its own ("Last week I left
  X and joined Y"), and a functional value asserted without a time starts when
  the old one ended ("I left Tencent last week and now work at OpenAI").
JSON episodes
  Each top-level object (or each object of a top-level list) with a string
  "name" (else "id") is an entity, labelled by its "type"/"label"/"kind"
  string if any.  String values of company/employer/organization/workplace,
  city/residence, location, hometown/birthplace, school/university/college and
  spouse/wife/husband become entities with WORKS_FOR / LIVES_IN / LOCATED_IN /
  IS_FROM / STUDIES_AT / MARRIED_TO facts valid from the reference time.
  Nothing else in the JSON is read (no nesting, no other keys).
Measured
  On the everyday-chat corpus (tests/data/extraction, ``python -m
  bench.extraction``), held-aside split: fact precision 0.98, recall 0.90,
  invalidation recall 1.00, no false invalidation.
Not caught
  Coreference beyond I/we/my and he/she for a just-named relative or pet
  ("they", "it", "the company"); "you" (the listener is unknown); unnamed
  partners ("we split up": which relationship ends is unknown); previous
  messages (never read); questions (a tag such as ", remember?" included),
  conditionals, wishes and plans (will, would, might, want to, going to,
  thinking about): nothing is asserted, even when a careful reader would take
  one ("I'm in Dublin now" is not read as a move); jokes and sarcasm ("lol I
  work at the North Pole"); reported speech ("Bob said he works at X");
  subjects that are not a name, I/we or a relative ("the guy who works at
  X"); lowercase organisations and places in a capitalised sentence ("I work
  at home"); objects followed by further nouns ("I work at Google
  headquarters"); whether "started at Brown" is a school or a job (a job,
  unless the name says University/College/School); relations not listed
  above; non-English text.
"""
from __future__ import annotations

from pgmemory.extract.offline.extractor import OfflineExtractor

__all__ = ["OfflineExtractor"]
