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

from pgmemory.extract.offline.extractor import OfflineExtractor

__all__ = ["OfflineExtractor"]
