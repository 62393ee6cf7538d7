"""The offline extractor on the everyday-chat corpus (tests/data/extraction): the dev split stays
above issue 16's targets. The held-aside test split is only reported, by `python -m bench.extraction`."""
from __future__ import annotations

from bench.extraction import TARGETS, evaluate, load, score


def test_dev_split_meets_the_targets() -> None:
    total, _ = evaluate("dev")
    assert total.items >= 150
    assert total.precision >= TARGETS["fact_precision"], total.misses
    assert total.recall >= TARGETS["fact_recall"], total.misses
    assert total.invalidation_recall >= TARGETS["invalidation_recall"], total.misses
    assert total.false_ends == 0, total.misses
    assert total.bad_entities == 0, total.misses


def test_corpus_has_the_promised_shape() -> None:
    dev, test = load("dev"), load("test")
    assert len(dev) + len(test) >= 200
    assert 0.30 <= len(test) / (len(dev) + len(test)) <= 0.36  # a third held aside
    ids = [item["id"] for item in dev + test]
    assert len(ids) == len(set(ids))
    nothing = [item for item in dev + test if not item["facts"]]
    assert len(nothing) >= 40  # questions, plans, hypotheticals, jokes, chatter, endings only


def test_the_scorer_counts_hits_wrong_facts_and_false_invalidations() -> None:
    hit = score({"id": "x1", "cat": "x", "actor": "Maya", "text": "I work at Acme.",
                 "facts": [["maya", "WORKS_FOR", "the Acme"]]})
    assert (hit.tp, hit.predicted, hit.expected, hit.misses) == (1, 1, 1, [])
    wrong = score({"id": "x2", "cat": "x", "actor": "Maya", "text": "I work at Acme.", "facts": []})
    assert (wrong.tp, wrong.predicted, wrong.precision) == (0, 1, 0.0)
    false_end = score({"id": "x3", "cat": "x", "actor": "Maya", "text": "I left Acme.",
                       "prior": [["Maya", "WORKS_FOR", "Acme"]], "facts": []})
    assert false_end.false_ends == 1 and not false_end.meets_targets()
