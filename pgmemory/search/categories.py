"""A list question's category and its members, as full-text lexemes.

"Which cities has Jon visited?" is answered by a turn naming Rome, without the word "city";
"What instruments does Melanie play?" by one naming the clarinet. The members of a category are
the nouns below any of its senses in WordNet 3.0's noun hierarchy (hyponyms and instances, every
depth), shipped as pgmemory/data/wordnet_nouns.tsv.gz (built by tools/build_wordnet_nouns.py,
already stemmed as the episodes' tsvector is). Search ranks the episodes holding the rare ones
(the "members" list, SearchConfig.members_weight); pgmemory/eval/README.md has the measurements.
"""
from __future__ import annotations

import bisect
import gzip
import re
from functools import lru_cache
from importlib import resources

# A question asking for several things: "What/Which [kind(s)/type(s)/sort(s) of] <noun phrase>",
# its head noun plural, or with "both" / "in common" / "how many times" anywhere. The head is the
# last word of the (at most 4) words before an auxiliary ("Which classical musicians does ..." ->
# "musicians"; modifiers may hold digits and + - / ': "What LGBTQ+ events", "transgender-specific";
# of "artists/bands" the last), else the first word after "what" / "which".
OPENING = r"^\s*(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?"
PHRASE = re.compile(OPENING + r"(?:[a-z0-9][a-z0-9+'/-]*\s+){0,3}?(?:[a-z0-9+'-]+/)?([a-z]+)\s+"
                    r"(?:is|was|are|were|do|does|did|has|have|had|can|could|would|will|should)\b")
HEAD = re.compile(OPENING + r"([a-z]+)\b")
SEVERAL = re.compile(r"\b(?:both|in common|how many times)\b")
NOT_NOUNS = frozenset(("is", "was", "are", "were", "am", "do", "does", "did", "has", "have", "had", "can", "could",
                       "would", "will", "should", "this", "his", "kind", "kinds", "type", "types", "sort", "sorts"))


def category(question: str) -> str | None:
    """The noun a list question asks members of ("Which cities has Jon visited?" -> "cities"),
    or None when the question does not ask for several things of a named kind."""
    q = question.casefold()
    head = PHRASE.match(q) or HEAD.match(q)
    if not head or head.group(1) in NOT_NOUNS:
        return None
    noun = head.group(1)
    return noun if noun.endswith("s") or SEVERAL.search(q) else None


class _Nouns:
    """The shipped noun hierarchy, read as its lines: synset i is line i + 1 ("<lexemes>\t<its
    hyponyms' numbers>"), then the lemmas ("=<lemma>\t<its senses>") and the irregular plurals
    ("~<form>\t<lemma>"), each sorted, found by bisection; a line is parsed only when a closure
    reaches it (reading the file is ~1/10 of parsing it whole)."""

    def __init__(self) -> None:
        data = resources.files("pgmemory.data").joinpath("wordnet_nouns.tsv.gz").read_bytes()
        self.lines = gzip.decompress(data).decode("utf-8").split("\n")
        self.lemmas = 1 + int(self.lines[0].rsplit(" ", 1)[1])  # the header ends with the synsets' count
        self.plurals = bisect.bisect_left(self.lines, "~", self.lemmas)

    def _find(self, key: str, lo: int, hi: int) -> str | None:
        """The text after the tab of the line "<key>\t..." between lines lo and hi, if any."""
        i = bisect.bisect_left(self.lines, key + "\t", lo, hi)
        return self.lines[i][len(key) + 1:] if i < hi and self.lines[i].startswith(key + "\t") else None

    def lemma(self, word: str) -> tuple[int, ...]:
        """The senses of a noun (its irregular plural's lemma, itself, or a regular plural's singular)."""
        n = len(self.lines)
        for form in (self._find("~" + word, self.plurals, n), word,
                     word[:-3] + "y" if word.endswith("ies") else None,
                     word[:-2] if word.endswith(("ses", "xes", "ches", "shes")) else None,
                     word[:-1] if word.endswith("s") else None):
            senses = form and self._find("=" + form, self.lemmas, self.plurals)
            if senses:
                return tuple(int(x) for x in senses.split())
        return ()

    def members(self, word: str) -> tuple[str, ...]:
        """The lexemes of every synset below any sense of the noun (not the senses' own)."""
        seen: set[int] = set()
        out: set[str] = set()
        todo = [h for s in self.lemma(word) for h in self._below(s)]
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                lexemes, _, below = self.lines[s + 1].partition("\t")
                out.update(lexemes.split())
                todo.extend(int(x) for x in below.split())
        return tuple(sorted(out))

    def _below(self, synset: int) -> list[int]:
        return [int(x) for x in self.lines[synset + 1].partition("\t")[2].split()]


@lru_cache(maxsize=1)
def _nouns() -> _Nouns:
    return _Nouns()


@lru_cache(maxsize=256)
def members(noun: str) -> tuple[str, ...]:
    """The full-text lexemes of the members of a category noun ("cities" -> ..., "pari", "rome", ...)."""
    return _nouns().members(noun.casefold())


# A category with more members than this ("objects": 25,634; "entities": 51,606) holds much of the
# vocabulary and narrows nothing: it sends none (the SQL's bound on the option, sql/70_search.sql).
MAX_MEMBERS = 20000


def member_lexemes(question: str) -> tuple[str, ...]:
    """The lexemes of the members of a list question's category; () for other questions and for
    categories of more than MAX_MEMBERS members."""
    noun = category(question)
    found = members(noun) if noun else ()
    return found if len(found) <= MAX_MEMBERS else ()
