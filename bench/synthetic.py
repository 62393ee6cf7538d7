"""Deterministic synthetic multi-session chats for the ingestion benchmark.

A few speakers talk in ONE group over years (a few messages per day, in
sessions). Their messages use statement patterns the offline extractor reads
(work at / joined / left X, live in / moved to, likes / loves / hates, my
favourite X is Y, a dog named Z, married to, visited, studies at, bought),
with relative dates ("last week", "two weeks ago", "in 2019"), plus filler
chit-chat. Each speaker has a state (employer, city, spouse, favourites) that
changes over time, so new statements contradict and repeat old ones; vocab is
limited (companies, cities, hobbies, friends) so entities recur and get
resolved, while friends keep being introduced so the graph keeps growing.

Check it: python -m bench.synthetic --episodes 1000
"""
from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

GROUP_ID = "bench"
START = datetime(2015, 1, 5, 9, 0, tzinfo=timezone.utc)
SPEAKERS = ("Maya", "Omar", "Priya", "Tomas")
COMPANIES = tuple(f"{a} {b}" for a in ("Northwind", "Blue Harbor", "Redwood", "Silver Lake", "Ironbark",
                                        "Copper Hill", "Lakeside", "Brightpath", "Stonebridge", "Evergreen",
                                        "Summit", "Harborview")
                  for b in ("Labs", "Systems", "Analytics", "Foods", "Logistics", "Health", "Media",
                            "Robotics", "Capital", "Energy"))
CITIES = ("Boston", "Denver", "Seattle", "Austin", "Chicago", "Portland", "Berlin", "Lisbon", "Tokyo",
          "Toronto", "Madrid", "Dublin", "Oslo", "Prague", "Vienna", "Zurich", "Melbourne", "Sydney",
          "Montreal", "Vancouver", "Amsterdam", "Copenhagen", "Stockholm", "Seoul", "Miami", "Atlanta",
          "Houston", "Dallas", "Milan", "Munich")
TRIPS = CITIES + ("Paris", "Rome", "Venice", "Florence", "Athens", "Istanbul", "Bangkok", "Singapore",
                  "Iceland", "Peru", "Kenya", "Nepal", "Morocco", "Japan", "Mexico", "Portugal")
HOBBIES = ("hiking", "swimming", "painting", "chess", "cooking", "running", "yoga", "photography",
           "gardening", "knitting", "climbing", "cycling", "surfing", "baking", "fishing", "skiing",
           "dancing", "pottery", "camping", "sailing", "birdwatching", "woodworking", "tennis", "golf")
BOOKS = ("Dune", "Emma", "Beloved", "Ulysses", "Middlemarch", "Rebecca", "Lolita", "Hamlet", "Persuasion",
         "Neuromancer", "Solaris", "Frankenstein")
BANDS = ("Radiohead", "Coldplay", "Metallica", "Blondie", "Nirvana", "Queen", "Muse", "Oasis", "Pixies",
         "Portishead")
FOODS = ("sushi", "pizza", "ramen", "tacos", "curry", "pasta", "dumplings", "paella", "falafel", "pho")
PETS = ("Rex", "Luna", "Milo", "Bella", "Charlie", "Daisy", "Oscar", "Pepper", "Biscuit", "Ziggy")
CARS = ("Tesla", "Toyota", "Honda", "Subaru", "Volvo", "Mazda", "Kia", "Audi")
SCHOOLS = ("Stanford", "Harvard", "Oxford", "Cambridge", "Yale", "Princeton", "Columbia", "Cornell")
FIRST = ("Jane", "Liam", "Sofia", "Noah", "Ava", "Ethan", "Mia", "Lucas", "Zoe", "Felix", "Nora", "Hugo",
         "Iris", "Jonah", "Clara", "Ruben", "Alma", "Dmitri", "Lena", "Victor", "Hana", "Kofi", "Elena",
         "Marco", "Yara", "Sam", "Freya", "Idris", "Rosa", "Aiden")
LAST = ("Smith", "Garcia", "Kim", "Novak", "Okafor", "Rossi", "Dubois", "Jensen", "Silva", "Tanaka",
        "Kowalski", "Murphy", "Costa", "Fischer", "Haddad", "Larsen", "Moreau", "Petrov", "Reyes", "Weber",
        "Ito", "Nakamura", "Brennan", "Acosta", "Lindqvist")
KIN = ("sister", "brother", "cousin", "friend")
NUMBERS = ("two", "three", "four", "five", "six")
FILLER = (
    "Haha that sounds great, see you soon!", "How was your weekend?", "Did you watch the game last night?",
    "I can't believe it's already Friday.", "Ugh, this week has been so long.", "That's awesome, congrats!",
    "lol same here", "What are you up to tonight?", "Good morning everyone!", "Sounds like a plan.",
    "Oh no, hope you feel better soon.", "Totally agree with you on that.", "Anyone want to grab lunch?",
    "The weather is terrible today.", "I'm so tired, need more coffee.", "Thanks, that really helps!",
    "Wow, that's a lot.", "Let me think about it and get back to you.", "Happy birthday!!",
    "Can you send me that link again?", "Ha, classic.", "I'll be there in ten minutes.",
)


@dataclass
class Speaker:
    """What one speaker has said so far: the state new statements repeat or change."""

    name: str
    employer: str | None = None
    city: str | None = None
    spouse: str | None = None
    school: str | None = None
    favourites: dict[str, str] = field(default_factory=dict)
    likes: set[str] = field(default_factory=set)
    friends: list[str] = field(default_factory=list)


@dataclass
class Generator:
    """Produces message texts from a seeded RNG and evolving speaker states."""

    rng: random.Random
    speakers: dict[str, Speaker]
    people: list[str] = field(default_factory=list)

    def when(self, ref: datetime, *, allow_none: bool = True) -> str:
        """A relative time expression (or none) for a statement said at ``ref``."""
        options = ["last week", "yesterday", "a few days ago", "last month", "last summer",
                   f"{self.rng.choice(NUMBERS)} weeks ago", f"{self.rng.choice(NUMBERS)} months ago"]
        if ref.year > START.year:
            options.append(f"in {self.rng.randint(START.year, ref.year - 1)}")
        if allow_none and self.rng.random() < 0.4:
            return ""
        return " " + self.rng.choice(options)

    def person(self, s: Speaker) -> str:
        """A friend of the speaker: mostly one already mentioned, sometimes a new one."""
        if s.friends and self.rng.random() < 0.75:
            return self.rng.choice(s.friends[-40:])
        name = self.rng.choice(self.people) if self.people and self.rng.random() < 0.5 else self.new_person()
        s.friends.append(name)
        return name

    def new_person(self) -> str:
        """A first and last name, remembered so other speakers may mention them too."""
        name = f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"
        self.people.append(name)
        return name

    def job(self, s: Speaker, ref: datetime) -> str:
        new = self.rng.choice(COMPANIES[:60] if self.rng.random() < 0.7 else COMPANIES)
        old, s.employer = s.employer, new
        roll = self.rng.random()
        if old is None or old == new:
            return f"I work at {new}." if roll < 0.5 else f"I joined {new}{self.when(ref)}."
        if roll < 0.25:
            s.employer = old
            return f"I work at {old}."
        if roll < 0.55:
            return f"I left {old}{self.when(ref, allow_none=False)} and now work at {new}."
        if roll < 0.8:
            return f"I got a job at {new}{self.when(ref)}."
        s.employer = None
        return f"I quit {old}{self.when(ref, allow_none=False)}."

    def home(self, s: Speaker, ref: datetime) -> str:
        new = self.rng.choice(CITIES)
        old, s.city = s.city, new
        roll = self.rng.random()
        if old is None or old == new or roll < 0.25:
            s.city = old or new
            return f"I live in {s.city}."
        if roll < 0.6:
            return f"I moved to {new}{self.when(ref)}."
        return f"I moved from {old} to {new}{self.when(ref, allow_none=False)}."

    def taste(self, s: Speaker, ref: datetime) -> str:
        hobby = self.rng.choice(HOBBIES)
        roll = self.rng.random()
        if hobby in s.likes and roll < 0.3:
            s.likes.discard(hobby)
            return f"I don't like {hobby} anymore."
        s.likes.add(hobby)
        if roll < 0.45:
            other = self.rng.choice(HOBBIES)
            s.likes.add(other)
            return f"I love {hobby} and {other}." if other != hobby else f"I love {hobby}."
        if roll < 0.7:
            return f"I really like {hobby}."
        if roll < 0.85:
            return f"I enjoy {hobby}."
        s.likes.discard(hobby)
        return f"I hate {hobby}."

    def favourite(self, s: Speaker, ref: datetime) -> str:
        kind, pool = self.rng.choice((("book", BOOKS), ("band", BANDS), ("food", FOODS), ("city", TRIPS)))
        value = s.favourites.get(kind) if self.rng.random() < 0.3 else None
        value = value or self.rng.choice(pool)
        s.favourites[kind] = value
        shown = f'"{value}"' if kind == "book" else value
        spelling = "favourite" if self.rng.random() < 0.5 else "favorite"
        return f"My {spelling} {kind} is {shown}."

    def family(self, s: Speaker, ref: datetime) -> str:
        roll = self.rng.random()
        if roll < 0.4:
            animal = self.rng.choice(("dog", "cat"))
            verb = "have" if self.rng.random() < 0.5 else "adopted"
            when = self.when(ref) if verb == "adopted" else ""
            return f"I {verb} a {animal} named {self.rng.choice(PETS)}{when}."
        if s.spouse is None or roll < 0.55:
            s.spouse = s.spouse or self.new_person()
            return f"I am married to {s.spouse}."
        if roll < 0.8:
            first = self.rng.choice(FIRST)
            return f"My {self.rng.choice(KIN[:3])} {first} lives in {self.rng.choice(CITIES)}."
        return f"I bought a {self.rng.choice(CARS)}{self.when(ref)}."

    def outing(self, s: Speaker, ref: datetime) -> str:
        roll = self.rng.random()
        place = self.rng.choice(TRIPS)
        if roll < 0.5:
            return f"I visited {place}{self.when(ref, allow_none=False)}."
        if roll < 0.8:
            return f"I went to {place}{self.when(ref, allow_none=False)}."
        school = s.school or self.rng.choice(SCHOOLS)
        if s.school and self.rng.random() < 0.4:
            s.school = None
            return f"I graduated from {school}{self.when(ref, allow_none=False)}."
        s.school = school
        return f"I study at {school}."

    def friend(self, s: Speaker, ref: datetime) -> str:
        name = self.person(s)
        first = name.split()[0]
        roll = self.rng.random()
        if roll < 0.3:
            return f"My friend {name} works at {self.rng.choice(COMPANIES)}."
        if roll < 0.55:
            return f"{first} loves {self.rng.choice(HOBBIES)}."
        if roll < 0.8:
            return f"{name} moved to {self.rng.choice(CITIES)}{self.when(ref)}."
        return f"{name} visited {self.rng.choice(TRIPS)}{self.when(ref, allow_none=False)}."

    def message(self, s: Speaker, ref: datetime) -> str:
        """One message: filler, or one or two statements."""
        if self.rng.random() < 0.25:
            return self.rng.choice(FILLER)
        makers: tuple[Callable[[Speaker, datetime], str], ...] = (
            self.job, self.home, self.taste, self.taste, self.favourite, self.family, self.outing,
            self.friend, self.friend)
        parts = [self.rng.choice(makers)(s, ref)]
        if self.rng.random() < 0.2:
            parts.append(self.rng.choice(makers)(s, ref))
        if self.rng.random() < 0.15:
            parts.insert(0, self.rng.choice(("Oh, by the way.", "Guess what!", "Some news.", "Well.")))
        return " ".join(parts)


def generate(n: int, *, seed: int = 7, group_id: str = GROUP_ID) -> list[dict[str, Any]]:
    """``n`` episodes (Memory.add_episodes fields) of one group, reference times increasing."""
    rng = random.Random(seed)
    gen = Generator(rng, {name: Speaker(name) for name in SPEAKERS})
    out: list[dict[str, Any]] = []
    day = START
    session = 0
    while len(out) < n:
        pair = rng.sample(SPEAKERS, 2)
        moment = day + timedelta(hours=rng.randint(0, 11), minutes=rng.randint(0, 59))
        for turn in range(rng.randint(2, 6)):
            if len(out) == n:
                break
            speaker = gen.speakers[pair[turn % 2]]
            moment += timedelta(minutes=rng.randint(1, 9), seconds=rng.randint(0, 59))
            out.append({"group_id": group_id, "content": gen.message(speaker, moment), "kind": "message",
                        "actor": speaker.name, "reference_time": moment,
                        "source_description": f"session {session}", "episode_id": f"s{session}-m{turn}"})
        session += 1
        day += timedelta(days=rng.randint(1, 2))
    return out


def fact_yield(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """Run the offline extractor over the episodes: how many yield facts, and how many facts."""
    from pgmemory.extract.offline import OfflineExtractor
    from pgmemory.extract.types import EpisodeInput

    rules = OfflineExtractor()
    with_facts = facts = entities = 0
    for ep in episodes:
        ex = rules.extract(EpisodeInput(ep["content"], ep["kind"], ep["reference_time"], ep["actor"]), [])
        with_facts += bool(ex.facts)
        facts += len(ex.facts)
        entities += len(ex.entities)
    n = max(1, len(episodes))
    return {"episodes": len(episodes), "with_facts": with_facts / n, "facts_per_episode": facts / n,
            "entities_per_episode": entities / n}


def main() -> None:
    """Print a sample and the offline extractor's yield on the generated chats."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sample", type=int, default=12)
    args = parser.parse_args()
    episodes = generate(args.episodes, seed=args.seed)
    for ep in episodes[:args.sample]:
        print(f"{ep['reference_time']:%Y-%m-%d %H:%M}  {ep['actor']}: {ep['content']}")
    stats = fact_yield(episodes)
    print(f"\n{stats['episodes']} episodes, {episodes[0]['reference_time']:%Y-%m-%d} .. "
          f"{episodes[-1]['reference_time']:%Y-%m-%d}; offline extractor: {stats['with_facts']:.0%} yield facts, "
          f"{stats['facts_per_episode']:.2f} facts and {stats['entities_per_episode']:.2f} entities per episode")


if __name__ == "__main__":
    main()
