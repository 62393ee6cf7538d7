"""How well the offline extractor reads everyday chat: precision and recall on tests/data/extraction.

For each statement of a split the offline extractor runs on the text, and the offline judge
(``RuleExtractor``'s decisions) decides which of the statement's prior facts end, as the
pipeline would ask it. Facts compare as (source, RELATION, target); only positive facts count
as facts (a negated one is an invalidation). Printed per split and per category: fact
precision and recall, invalidation recall, false invalidations and unwanted entities.

    python -m bench.extraction            # both splits, per category
    python -m bench.extraction --split dev --misses   # also list every miss (dev only!)
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pgmemory.extract.offline import OfflineExtractor
from pgmemory.extract.offline.exclusivity import SYMMETRIC
from pgmemory.extract.rules import decide
from pgmemory.extract.types import EpisodeInput, Extraction, FactCandidate, FactQuestion

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "extraction"
DEFAULT_REF = "2024-06-14T15:00:00+00:00"
TARGETS = {"fact_precision": 0.90, "fact_recall": 0.80, "invalidation_recall": 0.90}
Triple = tuple[str, str, str]


def _norm(name: str) -> str:
    words = name.casefold().split()
    if words and words[0] == "the":
        words = words[1:]
    return " ".join(words)


def _key(source: str, relation: str, target: str) -> Triple:
    s, t = _norm(source), _norm(target)
    if relation in SYMMETRIC and t < s:
        s, t = t, s
    return s, relation, t


@dataclass
class Score:
    """Counts over some statements; the ratios are derived."""

    items: int = 0
    tp: int = 0
    predicted: int = 0
    expected: int = 0
    ends_expected: int = 0
    ends_found: int = 0
    false_ends: int = 0
    bad_entities: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, other: "Score") -> None:
        for name in ("items", "tp", "predicted", "expected", "ends_expected", "ends_found",
                     "false_ends", "bad_entities"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.misses += other.misses

    @property
    def precision(self) -> float:
        return self.tp / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.tp / self.expected if self.expected else 1.0

    @property
    def invalidation_recall(self) -> float:
        return self.ends_found / self.ends_expected if self.ends_expected else 1.0

    def meets_targets(self) -> bool:
        return (self.precision >= TARGETS["fact_precision"] and self.recall >= TARGETS["fact_recall"]
                and self.invalidation_recall >= TARGETS["invalidation_recall"]
                and self.false_ends == 0)


def load(split: str) -> list[dict]:
    """The statements of one split ("dev" or "test")."""
    with open(CORPUS / f"{split}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def extract(item: dict) -> Extraction:
    episode = EpisodeInput(item["text"], item.get("kind", "message"),
                           datetime.fromisoformat(item.get("ref", DEFAULT_REF)), item.get("actor"))
    return OfflineExtractor().extract(episode, [])


def ended_priors(item: dict, extraction: Extraction) -> set[int]:
    """Indexes of the item's prior facts that the offline judge ends, as the pipeline asks it."""
    priors = [FactCandidate(str(i), p[0], p[2], p[1], p[3] if len(p) > 3 else f"{p[0]} {p[1]} {p[2]}.",
                            None, None) for i, p in enumerate(item.get("prior", []))]
    ended: set[int] = set()
    for index, fact in enumerate(extraction.facts):
        ends_of = {_norm(fact.source), _norm(fact.target)}
        pair = [c for c in priors if {_norm(c.source), _norm(c.target)} == ends_of]
        near = [c for c in priors if ends_of & {_norm(c.source), _norm(c.target)}]
        decision = decide(FactQuestion(index, fact, pair, near))
        if fact.negated and decision.duplicate_of is not None:
            ended.add(int(decision.duplicate_of))
        if not fact.negated:
            ended.update(int(c) for c in decision.contradicts)
    return ended


def score(item: dict) -> Score:
    """One statement's counts (and its misses, described)."""
    x = extract(item)
    got = {_key(f.source, f.relation, f.target) for f in x.facts if not f.negated}
    want = {_key(f[0], f[1], f[2]) for f in item["facts"]}
    priors = item.get("prior", [])
    want_ends = {i for i, p in enumerate(priors)
                 if _key(p[0], p[1], p[2]) in {_key(*e[:3]) for e in item.get("ends", [])}}
    ended = ended_priors(item, x)
    unwanted = {_norm(n) for n in item.get("not_entities", [])}
    bad = [e.name for e in x.entities if _norm(e.name) in unwanted]
    s = Score(1, len(got & want), len(got), len(want), len(want_ends), len(ended & want_ends),
              len(ended - want_ends), len(bad))
    tag = f"{item['id']} [{item['cat']}] {item['text']!r}"
    s.misses += [f"{tag}: missed fact {t}" for t in sorted(want - got)]
    s.misses += [f"{tag}: wrong fact {t}" for t in sorted(got - want)]
    s.misses += [f"{tag}: did not end {priors[i][:3]}" for i in sorted(want_ends - ended)]
    s.misses += [f"{tag}: falsely ended {priors[i][:3]}" for i in sorted(ended - want_ends)]
    s.misses += [f"{tag}: unwanted entity {n!r}" for n in bad]
    return s


def evaluate(split: str) -> tuple[Score, dict[str, Score]]:
    """The split's total and per-category scores."""
    total, by_cat = Score(), defaultdict(Score)
    for item in load(split):
        s = score(item)
        total.add(s)
        by_cat[item["cat"]].add(s)
    return total, dict(sorted(by_cat.items()))


def _row(name: str, s: Score) -> str:
    return (f"{name:<16}{s.items:>4}  {s.precision:>6.2f} {s.recall:>6.2f}  "
            f"{s.ends_found:>3}/{s.ends_expected:<3} {s.invalidation_recall:>5.2f}  "
            f"{s.false_ends:>5}  {s.bad_entities:>5}")


def report(split: str, show_misses: bool) -> Score:
    total, by_cat = evaluate(split)
    print(f"\n== {split} split ({total.items} statements) ==")
    print(f"{'category':<16}{'n':>4}  {'fact P':>6} {'fact R':>6}  {'ends':>7} {'inv R':>5}  "
          f"{'false':>5}  {'bad e':>5}")
    for cat, s in by_cat.items():
        print(_row(cat, s))
    print(_row("ALL", total))
    verdict = "meets" if total.meets_targets() else "MISSES"
    print(f"targets: fact P >= {TARGETS['fact_precision']}, fact R >= {TARGETS['fact_recall']}, "
          f"inv R >= {TARGETS['invalidation_recall']}, no false invalidation -> {verdict}")
    if show_misses:
        for line in total.misses:
            print("  " + line)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["dev", "test", "both"], default="both")
    parser.add_argument("--misses", action="store_true",
                        help="list every miss of the dev split (never used on the held-aside split)")
    args = parser.parse_args(argv)
    for split in (["dev", "test"] if args.split == "both" else [args.split]):
        report(split, args.misses and split == "dev")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
