"""The temporal rules (sql/35_fact_rules.sql), table-driven through the SQL API pgmemory.add_fact
and pgmemory.retract_fact: every branch of apply_claim, as any writer on a DB connection sees it."""
from __future__ import annotations

import json

import psycopg
import pytest

from tests.belief import EXCLUSION_QUERIES, check_exclusions
from tests.support import utc

# Each step: (target, kwargs). kwargs: frm / to (valid bounds), ref (reference time), neg (negated),
# fn (functional), retract (retract the believed fact to that target). Expected: target -> intervals
# believed now, as (from, to) date strings (None: unknown start / open end), sorted.
CASES = {
    "new fact keeps its stated start": (
        [("Acme", {"frm": "2020-01-01"})],
        {"Acme": [("2020-01-01", None)]}),
    "unstated start stays unknown": (
        [("Acme", {"ref": "2020-01-01"})],
        {"Acme": [(None, None)]}),
    "repeat inside the interval changes nothing": (
        [("Acme", {"frm": "2020-01-01"}), ("Acme", {"frm": "2021-01-01"})],
        {"Acme": [("2020-01-01", None)]}),
    "earlier repeat moves the start back": (
        [("Acme", {"frm": "2022-01-01"}), ("Acme", {"frm": "2020-01-01"})],
        {"Acme": [("2020-01-01", None)]}),
    "earlier reference time moves a known start back": (
        [("Acme", {"frm": "2022-01-01"}), ("Acme", {"ref": "2021-01-01"})],
        {"Acme": [("2021-01-01", None)]}),
    "a stated start fills an unknown one": (
        [("Acme", {"ref": "2022-01-01"}), ("Acme", {"frm": "2019-01-01"})],
        {"Acme": [("2019-01-01", None)]}),
    "a stated end ends an open interval": (
        [("Acme", {"frm": "2020-01-01"}), ("Acme", {"frm": "2020-06-01", "to": "2021-01-01"})],
        {"Acme": [("2020-01-01", "2021-01-01")]}),
    "re-assertion after the end opens a new interval": (
        [("Acme", {"frm": "2020-01-01", "to": "2021-01-01"}), ("Acme", {"frm": "2022-01-01"})],
        {"Acme": [("2020-01-01", "2021-01-01"), ("2022-01-01", None)]}),
    "re-assertion touching the end merges": (
        [("Acme", {"frm": "2020-01-01", "to": "2021-01-01"}), ("Acme", {"frm": "2021-01-01", "to": "2022-01-01"})],
        {"Acme": [("2020-01-01", "2022-01-01")]}),
    "a claim bridging two intervals joins them": (
        [("Acme", {"frm": "2020-01-01", "to": "2021-01-01"}), ("Acme", {"frm": "2022-01-01", "to": "2023-01-01"}),
         ("Acme", {"frm": "2020-06-01", "to": "2022-06-01"})],
        {"Acme": [("2020-01-01", "2023-01-01")]}),
    "functional: the new value ends the old at its start": (
        [("Acme", {"frm": "2020-01-01"}), ("Globex", {"frm": "2021-01-01", "fn": True})],
        {"Acme": [("2020-01-01", "2021-01-01")], "Globex": [("2021-01-01", None)]}),
    "functional: same start withdraws the old belief": (
        [("Acme", {"frm": "2021-01-01"}), ("Globex", {"frm": "2021-01-01", "fn": True})],
        {"Globex": [("2021-01-01", None)]}),
    "functional: an already ended value is left alone": (
        [("Acme", {"frm": "2019-01-01", "to": "2020-01-01"}), ("Globex", {"frm": "2021-01-01", "fn": True})],
        {"Acme": [("2019-01-01", "2020-01-01")], "Globex": [("2021-01-01", None)]}),
    "functional late arrival about the past ends where the newer begins": (
        [("Globex", {"frm": "2021-01-01"}), ("Initech", {"frm": "2019-01-01", "fn": True})],
        {"Globex": [("2021-01-01", None)], "Initech": [("2019-01-01", "2021-01-01")]}),
    "negation ends the open interval": (
        [("Acme", {"frm": "2020-01-01"}), ("Acme", {"neg": True, "ref": "2021-01-01"})],
        {"Acme": [("2020-01-01", "2021-01-01")]}),
    "negation with a stated end": (
        [("Acme", {"frm": "2020-01-01"}), ("Acme", {"neg": True, "to": "2020-07-01", "ref": "2021-01-01"})],
        {"Acme": [("2020-01-01", "2020-07-01")]}),
    "negation of an unknown fact records it as ended": (
        [("Acme", {"neg": True, "ref": "2021-01-01"})],
        {"Acme": [(None, "2021-01-01")]}),
    "negation about a time before the interval records the earlier one": (
        [("Acme", {"frm": "2022-01-01"}), ("Acme", {"neg": True, "ref": "2021-01-01"})],
        {"Acme": [(None, "2021-01-01"), ("2022-01-01", None)]}),
    "a return said without a start begins when it was said": (
        [("Acme", {"frm": "2020-01-01", "to": "2021-01-01"}), ("Acme", {"ref": "2022-01-01"})],
        {"Acme": [("2020-01-01", "2021-01-01"), ("2022-01-01", None)]}),
    "a return after a negation, said without a start, begins when it was said": (
        [("Acme", {"frm": "2020-01-01"}), ("Acme", {"neg": True, "ref": "2021-01-01"}), ("Acme", {"ref": "2023-01-01"})],
        {"Acme": [("2020-01-01", "2021-01-01"), ("2023-01-01", None)]}),
    "an end said later with no start begins no earlier than the last end": (  # (it held sometime after 2020)
        [("Acme", {"frm": "2019-01-01", "to": "2020-01-01"}), ("Acme", {"ref": "2023-01-01", "to": "2021-01-01"})],
        {"Acme": [("2019-01-01", "2020-01-01"), ("2020-01-01", "2021-01-01")]}),
    "re-assertion from the instant it ended opens it again": (
        [("Acme", {"frm": "2021-01-01", "to": "2021-06-01"}), ("Acme", {"frm": "2021-06-01"})],
        {"Acme": [("2021-01-01", None)]}),
    "functional: a return to the old value ends the one between": (
        [("Acme", {"frm": "2018-01-01"}), ("Globex", {"frm": "2020-01-01", "fn": True}),
         ("Acme", {"frm": "2022-01-01", "fn": True})],
        {"Acme": [("2018-01-01", "2020-01-01"), ("2022-01-01", None)], "Globex": [("2020-01-01", "2022-01-01")]}),
    "retraction of the new value gives the old one back": (
        [("Acme", {"frm": "2020-01-01"}), ("Globex", {"frm": "2021-01-01", "fn": True}), ("Globex", {"retract": True})],
        {"Acme": [("2020-01-01", None)]}),
    "evidence of a withdrawn interval does not move a later one": (
        [("Initech", {"frm": "2018-07-01", "fn": True}), ("Initech", {"ref": "2021-01-01", "fn": True}),
         ("Globex", {"frm": "2018-07-01", "fn": True}), ("Acme", {"frm": "2018-07-01", "fn": True}),
         ("Initech", {"frm": "2019-07-01", "fn": True})],
        {"Acme": [("2018-07-01", "2019-07-01")], "Initech": [("2019-07-01", None)]}),
    "said again after a withdrawal, a statement keeps its lineage": (
        [("Initech", {"frm": "2022-07-01", "fn": True}), ("Acme", {"frm": "2022-07-01", "fn": True}),
         ("Initech", {"frm": "2023-01-01", "to": "2023-07-01", "fn": True}), ("Acme", {"retract": True})],
        {"Initech": [("2022-07-01", "2023-07-01")]}),  # one lineage: its stated end ends it (not two overlapping)
    "retraction gives back a value it withdrew, ended where a later one began": (
        [("Acme", {"frm": "2020-01-01", "fn": True}), ("Globex", {"frm": "2020-01-01", "fn": True}),
         ("Initech", {"frm": "2022-01-01", "fn": True}), ("Globex", {"retract": True})],
        {"Acme": [("2020-01-01", "2022-01-01")], "Initech": [("2022-01-01", None)]}),
    "retraction withdraws the belief": (
        [("Acme", {"frm": "2020-01-01"}), ("Globex", {"frm": "2020-01-01"}), ("Acme", {"retract": True})],
        {"Globex": [("2020-01-01", None)]}),
}


def add(conn, group: str, target: str, kw: dict) -> dict:
    if kw.get("retract"):
        fid = conn.execute("SELECT id FROM pgmemory.believed_facts WHERE group_id = %s AND target = %s"
                           " ORDER BY valid_from NULLS FIRST, valid_to NULLS LAST LIMIT 1", (group, target)).fetchone()[0]
        return conn.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, fid)).fetchone()[0]
    day = lambda k: utc(kw[k]) if kw.get(k) else None  # noqa: E731
    return conn.execute(
        "SELECT pgmemory.add_fact(%s, 'Alice', 'works for', %s, %s, p_valid_from => %s, p_valid_to => %s,"
        " p_negated => %s, p_functional => %s, p_reference_time => coalesce(%s, %s))",
        (group, target, kw.get("text") or f"Alice works for {target}.", day("frm"), day("to"), kw.get("neg", False),
         kw.get("fn", False), day("ref"), day("frm") or utc("2020-01-01"))).fetchone()[0]


def tell(conn, group: str, steps) -> None:
    """Each (target, kwargs) step through add, each in its own transaction."""
    for target, kw in steps:
        add(conn, group, target, kw)
        conn.commit()


def intervals(conn, group: str) -> dict[str, list]:
    rows = conn.execute(
        "SELECT target, valid_from, valid_to FROM pgmemory.believed_facts WHERE group_id = %s", (group,)).fetchall()
    out: dict[str, list] = {}
    for target, vf, vt in rows:
        out.setdefault(target, []).append((vf and vf.date().isoformat(), vt and vt.date().isoformat()))
    return {k: sorted(v, key=lambda p: (p[0] or "", p[1] or "~")) for k, v in out.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_rule(conn, group, name):
    steps, expected = CASES[name]
    tell(conn, group, steps)
    assert intervals(conn, group) == expected


@pytest.mark.parametrize("name", list(CASES))
def test_refold_from_claims_reproduces_the_belief(conn, group, name):
    """Re-folding a lineage from nothing gives the belief the rules built step by step, unchanged."""
    steps, _ = CASES[name]
    tell(conn, group, steps)
    before = conn.execute("SELECT version_id, recorded FROM pgmemory.facts WHERE group_id = %s ORDER BY 1",
                          (group,)).fetchall()
    lineages = [r[0] for r in conn.execute(
        "SELECT DISTINCT lineage FROM pgmemory.fact_claims WHERE group_id = %s", (group,)).fetchall()]
    changed = conn.execute("SELECT pgmemory_internal.refold_lineages(%s, %s)", (group, lineages)).fetchone()[0]
    conn.commit()
    assert changed == []
    assert conn.execute("SELECT version_id, recorded FROM pgmemory.facts WHERE group_id = %s ORDER BY 1",
                        (group,)).fetchall() == before


# Stories whose belief must not depend on the order in which their statements arrive (every
# permutation is applied through add_fact; the functional ones say so on every statement).
STORIES = {
    "a return to the old employer": (
        [("Acme", {"frm": "2018-01-01", "fn": True}), ("Globex", {"frm": "2020-01-01", "fn": True}),
         ("Acme", {"frm": "2022-01-01", "fn": True})],
        {"Acme": [("2018-01-01", "2020-01-01"), ("2022-01-01", None)], "Globex": [("2020-01-01", "2022-01-01")]}),
    "a late negation about a time between two statements": (
        [("Acme", {"frm": "2020-01-01"}), ("Acme", {"frm": "2023-01-01"}),
         ("Acme", {"neg": True, "to": "2021-01-01", "ref": "2024-01-01"})],
        {"Acme": [("2020-01-01", "2021-01-01"), ("2023-01-01", None)]}),
    "a statement with an unknown start and an older functional one": (
        [("Acme", {"ref": "2024-01-10", "fn": True}), ("Globex", {"frm": "2021-03-01", "fn": True})],
        {"Acme": [(None, None)], "Globex": [("2021-03-01", "2024-01-10")]}),
    "three moves told backwards or forwards": (
        [("Boston", {"frm": "2015-01-01", "fn": True}), ("Denver", {"frm": "2017-01-01", "fn": True}),
         ("Austin", {"frm": "2019-01-01", "fn": True}), ("Boston", {"frm": "2021-01-01", "fn": True})],
        {"Boston": [("2015-01-01", "2017-01-01"), ("2021-01-01", None)], "Denver": [("2017-01-01", "2019-01-01")],
         "Austin": [("2019-01-01", "2021-01-01")]}),
    "a bounded statement and one from its end": (
        [("Acme", {"frm": "2021-01-01", "to": "2021-06-01"}), ("Acme", {"frm": "2021-06-01"})],
        {"Acme": [("2021-01-01", None)]}),
    "a return said without a start": (
        [("Acme", {"frm": "2018-01-01", "to": "2020-01-01"}), ("Acme", {"ref": "2022-01-01"}),
         ("Acme", {"ref": "2023-01-01"})],
        {"Acme": [("2018-01-01", "2020-01-01"), ("2022-01-01", None)]}),
    "a return to the old employer said without a start": (
        [("Acme", {"frm": "2018-01-01", "fn": True}), ("Globex", {"frm": "2020-01-01", "fn": True}),
         ("Acme", {"ref": "2022-01-01", "fn": True})],
        {"Acme": [("2018-01-01", "2020-01-01"), ("2022-01-01", None)], "Globex": [("2020-01-01", "2022-01-01")]}),
    "earlier evidence extends a start whatever arrives first": (
        [("Acme", {"frm": "2022-01-01"}), ("Acme", {"ref": "2021-01-01"}), ("Acme", {"frm": "2020-06-01", "to": "2020-12-01"})],
        {"Acme": [("2020-06-01", "2020-12-01"), ("2021-01-01", None)]}),
    # Statements at the same point of the fold (dates of a year or a month often coincide): the one
    # with the earlier stated end first, an open one last, then the earlier said.
    "two values from the same day, one of them ended": (
        [("Acme", {"frm": "2020-01-01", "to": "2020-03-01", "fn": True}), ("Globex", {"frm": "2020-01-01", "fn": True})],
        {"Globex": [("2020-01-01", None)]}),
    "two values from the same day, the later said believed": (
        [("Acme", {"frm": "2020-01-01", "ref": "2021-01-01", "fn": True}),
         ("Globex", {"frm": "2020-01-01", "ref": "2023-01-01", "fn": True})],
        {"Globex": [("2020-01-01", None)]}),
    "an end and a start at the same point": (
        [("Acme", {"frm": "2018-01-01"}), ("Acme", {"neg": True, "to": "2020-01-01", "ref": "2020-02-01"}),
         ("Acme", {"frm": "2020-01-01", "ref": "2021-01-01"})],
        {"Acme": [("2018-01-01", None)]}),
    "a statement believed nowhere still gives its lineage to the next": (  # (Acme 2021 is withdrawn at once)
        [("Globex", {"frm": "2021-01-01", "ref": "2023-01-01", "fn": True}),
         ("Acme", {"frm": "2021-01-01", "to": "2021-07-01", "ref": "2022-01-01", "fn": True}),
         ("Acme", {"ref": "2022-01-01", "fn": True}), ("Acme", {"ref": "2022-07-01", "fn": True})],
        {"Acme": [("2022-01-01", None)], "Globex": [("2021-01-01", "2022-01-01")]}),
    "a negation said where a start is stated": (
        [("Acme", {"frm": "2018-01-01"}), ("Acme", {"neg": True, "ref": "2020-01-01"}),
         ("Acme", {"frm": "2020-01-01", "ref": "2021-01-01"})],
        {"Acme": [("2018-01-01", None)]}),
}


@pytest.mark.parametrize("name", list(STORIES))
def test_belief_does_not_depend_on_arrival_order(conn, group, name):
    """Every arrival order of a story's statements ends in the same belief, which a re-fold of its
    claims from nothing leaves unchanged."""
    import itertools

    steps, expected = STORIES[name]
    for n, order in enumerate(itertools.permutations(steps)):
        g = f"{group}-{n}"
        tell(conn, g, order)
        assert intervals(conn, g) == expected, order
        assert_refold_changes_nothing(conn, g)


@pytest.mark.parametrize("seed", [*range(12), 823])  # 823: a join whose first interval by start is a later claim's
def test_applying_a_claim_equals_folding_it_in_its_place(conn, group, seed):
    """Random statements (three employers, repeats, stated starts and ends, negations, unknown
    starts, retractions, mostly functional; each worded differently) arriving in a random order:
    what each add_fact leaves, wording included, is what a re-fold of all the claims in valid-time
    order gives (the re-fold changes nothing)."""
    random_story(conn, group, seed)


@pytest.mark.parametrize("seed", [*range(12), 59, 74, 167])  # 59, 74, 167: an end stated after the fact
def test_applying_a_claim_equals_folding_it_in_its_place_over_more_lineages(conn, group, seed):
    """The same over five employers and twelve statements, some of them an end stated before the
    statement's own time ("worked at Acme until 2019", said in 2021): contradictions between
    lineages that never met in time are common, and an interval's end can move back."""
    random_story(conn, group, seed, targets=("Acme", "Globex", "Initech", "Hooli", "Umbrella"), statements=12,
                 shapes=("frm", "frm", "ref", "frm_to", "neg", "retract", "ref_to"))


@pytest.mark.parametrize("seed", range(8))
def test_applying_a_claim_equals_folding_it_in_its_place_with_negations_that_say_since_when(conn, group, seed):
    """The same with negations that say since when the fact had held ("no longer works for Acme,
    where she had been since 2019"): each is folded as that it held from then until its end, and
    that it ended there."""
    random_story(conn, group, seed, shapes=("frm", "frm", "ref", "frm_to", "neg", "neg_frm", "retract"))


def random_story(conn, group: str, seed: int, targets=("Acme", "Globex", "Initech"), statements: int = 8,
                 shapes=("frm", "frm", "ref", "frm_to", "neg", "retract")) -> None:
    """Random add_fact / retract_fact steps; after each, the belief is the re-fold of all claims."""
    import random

    rng = random.Random(seed)
    days = [f"20{y:02d}-{m:02d}-01" for y in range(18, 24) for m in (1, 7)]
    for n in range(statements):
        kw: dict = {"fn": rng.random() < 0.8}  # now and then one that contradicts nothing
        start = rng.randrange(len(days) - 1)
        shape = rng.choice(list(shapes))
        target = rng.choice(list(targets))
        if shape == "retract":
            if target not in intervals(conn, group):
                continue
            kw = {"retract": True}
        elif shape == "frm":
            kw["frm"] = days[start]
        elif shape == "ref":
            kw["ref"] = days[start]
        elif shape == "frm_to":
            kw.update(frm=days[start], to=days[rng.randrange(start + 1, len(days))])
        elif shape == "ref_to":
            kw.update(ref=days[start + 1], to=days[rng.randrange(0, start + 1)])
        elif shape == "neg_frm":  # "left it, where she had been since ..." (said later)
            kw.update(neg=True, frm=days[start], ref=days[rng.randrange(start + 1, len(days))])
        else:
            kw.update(neg=True, fn=False, ref=days[start])
        if not kw.get("retract"):
            kw["text"] = f"Alice {'no longer works' if kw.get('neg') else 'works'} for {target} (statement {n})."
        add(conn, group, target, kw)
        conn.commit()
        assert_lineages_do_not_overlap(conn, group, step=n)
        assert_exclusions_match_claims(conn, group)
        assert_refold_changes_nothing(conn, group, step=n)


def assert_exclusions_match_claims(conn, group: str) -> None:
    """See tests.belief.check_exclusions."""
    check_exclusions(*(conn.execute(q, (group,)).fetchall() for q in EXCLUSION_QUERIES))


def believed_sentences(conn, group: str) -> list[tuple]:
    """(target, start, end, sentence) of every believed fact, bounds as text (-infinity included)."""
    return sorted(conn.execute("SELECT target, valid_from::text, valid_to::text, fact FROM pgmemory.believed_facts"
                               " WHERE group_id = %s", (group,)).fetchall(), key=str)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_the_wording_of_the_earliest_statement_is_believed_in_any_order(conn, group, order):
    """Two wordings of one fact, the later-starting one told first or second: the believed sentence
    is that of the statement earliest in valid time either way, and a re-fold keeps it."""
    said = [("Tomas adopted a dog named Luna.", "2015-01-03"), ("Tomas adopted a cat named Luna.", "2015-02-01")]
    for i in order:
        text, start = said[i]
        conn.execute("SELECT pgmemory.add_fact(%s, 'Tomas', 'has pet', 'Luna', %s, p_valid_from => %s)",
                     (group, text, utc(start)))
        conn.commit()
    rows = conn.execute("SELECT fact, valid_from FROM pgmemory.believed_facts WHERE group_id = %s", (group,)).fetchall()
    assert rows == [("Tomas adopted a dog named Luna.", utc("2015-01-03"))]
    assert_refold_changes_nothing(conn, group)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_of_two_statements_from_the_same_day_the_wording_of_the_ended_one_is_believed(conn, group, order):
    """Two wordings of one fact from the same day, one with a stated end: the fold takes the ended
    one first, so its sentence is believed whichever arrives first."""
    said = [{"frm": "2020-01-01", "to": "2021-01-01", "text": "Alice joined Acme for a year."},
            {"frm": "2020-01-01", "ref": "2022-01-01", "text": "Alice has worked for Acme since 2020."}]
    tell(conn, group, [("Acme", said[i]) for i in order])
    assert [(r[1][:10], r[2][:10], r[3]) for r in believed_sentences(conn, group)] == [
        ("2020-01-01", "2021-01-01", "Alice joined Acme for a year.")]
    assert_refold_changes_nothing(conn, group)


def test_a_late_earlier_start_keeps_the_fact_id(conn, group):
    """A statement that moves a fact's start back, arriving after the fact, extends that fact (same id)
    even when it is re-folded in its place (a late claim before another lineage's change)."""
    first = add(conn, group, "Acme", {"frm": "2020-01-01", "fn": True})
    conn.commit()
    add(conn, group, "Globex", {"frm": "2022-01-01", "fn": True})
    conn.commit()
    earlier = add(conn, group, "Acme", {"frm": "2019-01-01", "fn": True})
    conn.commit()
    assert (earlier["action"], earlier["fact_id"]) == ("extended", first["fact_id"])
    assert intervals(conn, group) == {"Acme": [("2019-01-01", "2022-01-01")], "Globex": [("2022-01-01", None)]}


def test_add_fact_reports_what_it_did(conn, group):
    first = add(conn, group, "Acme", {"frm": "2020-01-01"})
    conn.commit()
    assert first["action"] == "created" and first["entities_created"] == ["Alice", "Acme"]
    again = add(conn, group, "Acme", {"frm": "2019-01-01"})
    conn.commit()
    assert (again["action"], again["fact_id"], again["entities_created"]) == ("extended", first["fact_id"], [])
    moved = add(conn, group, "Globex", {"frm": "2021-01-01", "fn": True})
    conn.commit()
    assert moved["action"] == "created" and moved["ended"] == [first["fact_id"]]
    summary = conn.execute("SELECT summary FROM pgmemory.entities WHERE group_id = %s AND name = 'Acme'",
                           (group,)).fetchone()[0]
    assert summary == "Alice works for Acme (until 2021-01-01)."
    history = conn.execute("SELECT count(*) FROM pgmemory.fact_history(%s, %s)",
                           (group, first["fact_id"])).fetchone()[0]
    assert history == 3  # recorded, start moved back, ended


@pytest.mark.parametrize("args, message", [
    (("", "Alice", "WORKS_FOR", "Acme", "x"), "group must be"),
    (("g", " ", "WORKS_FOR", "Acme", "x"), "non-empty entity names"),
    (("g", "Alice", "WORKS_FOR", "alice", "x"), "the same entity"),
    (("g", "Alice", "42", "Acme", "x"), "must start with a letter"),
    (("g", "Alice", "WORKS_FOR", "Acme", ""), "non-empty sentence"),
])
def test_add_fact_refuses_bad_input(conn, args, message):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute("SELECT pgmemory.add_fact(%s, %s, %s, %s, %s)", args)
    conn.rollback()


def test_add_fact_says_when_its_statement_is_believed_nowhere(conn, group):
    """A value of a functional relation ended where another still true began, told after it: the
    statement is kept (a retraction of the other brings it back) but no fact holds it: action
    'withdrawn', no fact id (not 'created')."""
    add(conn, group, "Globex", {"frm": "2021-01-01", "fn": True})
    did = add(conn, group, "Acme", {"frm": "2021-01-01", "to": "2021-07-01", "fn": True})
    assert (did["action"], did["fact_id"]) == ("withdrawn", None)
    assert intervals(conn, group) == {"Globex": [("2021-01-01", None)]}


def test_retract_fact_reports_what_holds_again(conn, group):
    """Retracting Globex, which had ended Acme, names Acme among the facts it changed: Acme holds
    again, with the same id."""
    acme = add(conn, group, "Acme", {"frm": "2020-01-01"})["fact_id"]
    globex = add(conn, group, "Globex", {"frm": "2021-01-01", "fn": True})["fact_id"]
    conn.commit()
    out = add(conn, group, "Globex", {"retract": True})
    conn.commit()
    assert (out["action"], out["withdrawn"], out["changed"]) == ("withdrawn", [globex], [acme])
    assert intervals(conn, group) == {"Acme": [("2020-01-01", None)]}


def test_retracting_an_interval_keeps_the_end_of_the_one_it_touches(conn, group):
    """Acme from 2018, left 2019 (a negation); "until 2020", said in 2021, starts where that ended.
    Retracting the 2019-2020 interval leaves the first as it was (its negation is not retracted)."""
    tell(conn, group, [("Acme", {"frm": "2018-01-01"}), ("Acme", {"neg": True, "ref": "2019-01-01"}),
                       ("Acme", {"ref": "2021-01-01", "to": "2020-01-01"})])
    assert intervals(conn, group) == {"Acme": [("2018-01-01", "2019-01-01"), ("2019-01-01", "2020-01-01")]}
    later = conn.execute("SELECT id FROM pgmemory.believed_facts WHERE group_id = %s AND valid_from = %s",
                         (group, utc("2019-01-01"))).fetchone()[0]
    conn.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, later))
    conn.commit()
    assert intervals(conn, group) == {"Acme": [("2018-01-01", "2019-01-01")]}
    assert_refold_changes_nothing(conn, group)


def test_an_end_at_infinity_is_an_open_end(conn, group):
    """valid_to => 'infinity' means still true, as NULL does: the same belief (a bounded interval
    joined by it stays bounded as with NULL), a re-fold changes nothing, and a negation 'until
    infinity' ends at its reference time instead of holding forever."""
    sql = ("SELECT pgmemory.add_fact(%s, 'Alice', 'works for', %s, 'Alice works for it.', p_valid_from => %s,"
           " p_valid_to => %s, p_negated => %s, p_reference_time => %s)")
    for g, to in ((group, "infinity"), (f"{group}-null", None)):
        conn.execute(sql, (g, "Acme", utc("2018-01-01"), utc("2019-01-01"), False, utc("2018-01-01")))
        conn.execute(sql, (g, "Acme", utc("2018-06-01"), to, False, utc("2018-06-01")))
        conn.execute(sql, (g, "Globex", None, to, True, utc("2020-01-01")))
        conn.commit()
    assert intervals(conn, group) == intervals(conn, f"{group}-null") == {
        "Acme": [("2018-01-01", "2019-01-01")], "Globex": [(None, "2020-01-01")]}
    assert_refold_changes_nothing(conn, group)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_two_values_held_since_always_one_ended_leave_the_other_believed(conn, group, order):
    """A start of -infinity ("always") on two values of a functional relation, one of them ended:
    they tie in valid time, and the ended one comes first whichever arrived first, so the value
    still true is believed (arrival order made the later one win, at worst ending with none)."""
    said = [("Acme", "2020-01-01"), ("Globex", None)]
    for i in order:
        target, to = said[i]
        conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'works for', %s, %s, p_valid_from => '-infinity',"
                     " p_valid_to => %s, p_functional => true)", (group, target, f"Alice works for {target}.",
                                                                  to and utc(to)))
        conn.commit()
    rows = conn.execute("SELECT target, valid_from::text, valid_to FROM pgmemory.believed_facts WHERE group_id = %s",
                        (group,)).fetchall()
    assert rows == [("Globex", "-infinity", None)]
    assert_refold_changes_nothing(conn, group)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_a_left_job_recorded_with_its_start_ends_the_other_value_there(conn, group, order):
    """"Alice left Acme, where she had worked since 2021" (nothing known of Acme before) records
    Acme 2021 until it was said; Globex since 2020, both functional: one employer at a time, so
    Globex ends in 2021 whichever statement arrives first (a negation acted on no other value, so
    both were believed from 2021 when Globex came first)."""
    said = [("Acme", {"neg": True, "frm": "2021-01-01", "ref": "2022-07-01", "fn": True}),
            ("Globex", {"frm": "2020-01-01", "ref": "2022-01-01", "fn": True})]
    tell(conn, group, [said[i] for i in order])
    assert intervals(conn, group) == {"Acme": [("2021-01-01", "2022-07-01")], "Globex": [("2020-01-01", "2021-01-01")]}
    assert_refold_changes_nothing(conn, group)


def test_retract_fact_of_another_group_is_not_found(conn, group):
    fid = add(conn, group, "Acme", {"frm": "2020-01-01"})["fact_id"]
    conn.commit()
    with pytest.raises(psycopg.errors.NoDataFound, match="not believed in group"):
        conn.execute("SELECT pgmemory.retract_fact(%s, %s)", (group + "-other", fid))
    conn.rollback()
    assert intervals(conn, group) == {"Acme": [("2020-01-01", None)]}


async def test_memory_add_fact_and_retract_fact(memory, group):
    out = await memory.add_fact(group, "Alice", "WORKS_FOR", "Acme", "Alice works for Acme.",
                                valid_from="2020-01-01T00:00:00Z")
    assert out["action"] == "created"
    results = await memory.search("where does Alice work", group_ids=group)
    assert [f.fact for f in results.facts] == ["Alice works for Acme."]
    gone = await memory.retract_fact(group, out["fact_id"])
    assert gone["action"] == "withdrawn"
    assert (await memory.search("where does Alice work", group_ids=group)).facts == []
    from pgmemory import InvalidInput

    with pytest.raises(InvalidInput, match="not believed"):
        await memory.retract_fact(group, out["fact_id"])
    with pytest.raises(InvalidInput, match="no time zone"):
        await memory.add_fact(group, "Alice", "WORKS_FOR", "Acme", "x", valid_from="2020-01-01")
    with pytest.raises(InvalidInput, match="same entity"):
        await memory.add_fact(group, "Alice", "WORKS_FOR", "ALICE", "x")
    assert json.dumps(out)  # plain JSON for any caller


@pytest.fixture
def sql_graph_dsn(server_without_age):
    """A fresh database on a server without AGE (rows written before init need no graph mirror)."""
    from tests.servers import create_database, drop_database

    dsn = create_database(server_without_age.dsn)
    yield dsn
    drop_database(server_without_age.dsn, dsn)


def test_upgrade_turns_believed_facts_into_claims(sql_graph_dsn):
    """Migration 0040 on a database with facts: one claim per believed fact, so a later re-fold
    (a delete) keeps believing them, and an episode that supported one can still retract it."""
    from pgmemory.storage.migrate import apply_migrations, load_migrations
    from pgmemory.storage.setup import ensure_current

    with psycopg.connect(sql_graph_dsn) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        apply_migrations(conn, [m for m in load_migrations() if m.version < 40])
        a, b, c, ep = (conn.execute("SELECT gen_random_uuid()").fetchone()[0] for _ in range(4))
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, 'g', 'Alice'),"
                     " (%s, 'g', 'Acme'), (%s, 'g', 'Globex')", (a, b, c))
        conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at)"
                     " VALUES (%s, 'g', 'text', 'Alice works for Globex.', '2021-01-01Z')", (ep,))
        conn.execute("INSERT INTO pgmemory.facts (id, group_id, source_id, target_id, relation, fact, valid)"
                     " VALUES (gen_random_uuid(), 'g', %s, %s, 'WORKS_FOR', 'Alice worked for Acme.',"
                     " '[2020-01-01Z,2021-01-01Z)'), (gen_random_uuid(), 'g', %s, %s, 'WORKS_FOR',"
                     " 'Alice works for Globex.', '[2021-01-01Z,)')", (a, b, a, c))
        conn.execute("INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)"
                     " SELECT id, %s, 'g' FROM pgmemory.facts WHERE fact LIKE '%%Globex%%'", (ep,))
        conn.commit()
        ensure_current(conn, 384)
        conn.commit()
        claims = conn.execute("SELECT fact, episode_id IS NOT NULL, valid_from, valid_to FROM pgmemory.fact_claims"
                              " WHERE group_id = 'g' ORDER BY fact").fetchall()
        assert [(f, has_ep) for f, has_ep, _, _ in claims] == [("Alice worked for Acme.", False),
                                                               ("Alice works for Globex.", True)]
        assert conn.execute("SELECT pgmemory_internal.refold_lineages('g', ARRAY(SELECT lineage FROM pgmemory.facts"
                            " WHERE group_id = 'g'))").fetchone()[0] == []
        conn.execute("SELECT pgmemory.delete_episode('g', %s)", (ep,))
        conn.commit()
        assert intervals(conn, "g") == {"Acme": [("2020-01-01", "2021-01-01")]}


def test_an_infinite_end_is_an_open_end_that_can_be_ended(conn, group):
    """valid_to = 'infinity' (the documented "open" bound, as some writers send it) is stored as
    an open end, so a later contradiction still ends the fact."""
    conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'works for', 'Acme', 'Alice works for Acme.',"
                 " p_valid_from => %s, p_valid_to => 'infinity')", (group, utc("2020-01-01")))
    assert intervals(conn, group) == {"Acme": [("2020-01-01", None)]}
    add(conn, group, "Globex", {"frm": "2021-01-01", "fn": True})
    assert intervals(conn, group) == {"Acme": [("2020-01-01", "2021-01-01")], "Globex": [("2021-01-01", None)]}


def refolds_in(conn) -> int:
    """Re-folds counted by pg_stat_xact_user_functions (track_functions on)."""
    return conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                        " WHERE funcname = 'refold_lineages'").fetchone()[0]


def add_counting_refolds(conn, group: str, target: str, kw: dict) -> int:
    """add_fact in a transaction of its own; how many re-folds it ran."""
    conn.execute("SET track_functions = 'all'")
    before = refolds_in(conn)  # (the view keeps counts not yet reported by earlier transactions)
    add(conn, group, target, kw)
    ran = refolds_in(conn) - before
    conn.commit()
    return ran


def assert_lineages_do_not_overlap(conn, group: str, step: object = None) -> None:
    """No two believed intervals of one lineage hold at the same time (a return said without a
    start must not reach back over the interval that ended before it)."""
    pairs = conn.execute(
        "SELECT a.valid::text, b.valid::text FROM pgmemory.facts a JOIN pgmemory.facts b"
        " ON b.group_id = a.group_id AND b.lineage = a.lineage AND b.id > a.id AND b.valid && a.valid"
        " WHERE a.group_id = %s AND upper_inf(a.recorded) AND upper_inf(b.recorded)", (group,)).fetchall()
    assert pairs == [], step


def test_a_return_said_without_a_start_is_not_believed_before_it(conn, group):
    """Acme 2020-2021, again from 2021, left 2022 (a negation), and in 2024 "works for Acme" with no
    start: as of 2023 Alice did not work there; as of 2024-06 she did; the two intervals are apart."""
    tell(conn, group, [("Acme", {"frm": "2020-01-01", "to": "2021-01-01"}), ("Acme", {"frm": "2021-01-01"}),
                       ("Acme", {"neg": True, "to": "2022-01-01", "ref": "2022-02-01"}), ("Acme", {"ref": "2024-05-01"})])
    held = lambda day: conn.execute(  # noqa: E731
        "SELECT count(*) FROM pgmemory.facts_valid_at(%s, %s)", (group, utc(day))).fetchone()[0]
    assert [held(d) for d in ("2021-06-01", "2023-01-01", "2024-06-01")] == [1, 0, 1]
    assert_lineages_do_not_overlap(conn, group)
    assert_refold_changes_nothing(conn, group)


def assert_refold_changes_nothing(conn, group: str, step: object = None) -> None:
    """A re-fold of every lineage of the group from its claims changes nothing, wording included."""
    lineages = [r[0] for r in conn.execute(
        "SELECT DISTINCT lineage FROM pgmemory.fact_claims WHERE group_id = %s", (group,)).fetchall()]
    before = believed_sentences(conn, group)
    assert conn.execute("SELECT pgmemory_internal.refold_lineages(%s, %s)", (group, lineages)).fetchone()[0] == [], step
    assert believed_sentences(conn, group) == before, step
    conn.rollback()


def test_an_old_job_taken_again_after_a_job_it_never_met_is_applied_in_place(conn, group):
    """A contradiction between two lineages whose claims never met in time (Acme ended before
    Initech began) changes nothing before the new claim: applied in place, no re-fold of the
    speaker's whole history, and the same belief a re-fold gives."""
    tell(conn, group, [("Acme", {"frm": "2018-01-01", "fn": True}), ("Globex", {"frm": "2019-01-01", "fn": True}),
                       ("Initech", {"frm": "2020-01-01"})])  # (Initech contradicts nothing)
    assert add_counting_refolds(conn, group, "Acme", {"frm": "2021-01-01", "fn": True}) == 0
    assert intervals(conn, group) == {"Acme": [("2018-01-01", "2019-01-01"), ("2021-01-01", None)],
                                      "Globex": [("2019-01-01", "2021-01-01")],
                                      "Initech": [("2020-01-01", "2021-01-01")]}
    assert_refold_changes_nothing(conn, group)


def test_a_new_contradiction_between_lineages_that_met_refolds_their_past(conn, group):
    """Initech began while Acme held; once a claim says they exclude each other, Initech's start
    ends Acme there (the past is re-folded with the pair)."""
    tell(conn, group, [("Acme", {"frm": "2018-01-01", "fn": True}), ("Initech", {"frm": "2020-01-01"}),
                       ("Globex", {"frm": "2021-01-01", "fn": True})])
    assert add_counting_refolds(conn, group, "Acme", {"frm": "2022-01-01", "fn": True}) == 1
    assert intervals(conn, group) == {"Acme": [("2018-01-01", "2020-01-01"), ("2022-01-01", None)],
                                      "Globex": [("2021-01-01", "2022-01-01")],
                                      "Initech": [("2020-01-01", "2021-01-01")]}
    assert_refold_changes_nothing(conn, group)


def test_an_end_stated_after_the_fact_ends_nothing_else(conn, group):
    """"Worked at Acme until 2019", said in 2021 (no start), is evidence up to 2019: it bounds Acme
    and does not end the job held in 2021 (it was taken as Acme holding in 2021, which ended
    Globex then and opened a second Acme interval)."""
    tell(conn, group, [("Acme", {"frm": "2018-01-01", "fn": True}), ("Globex", {"frm": "2019-01-01", "fn": True}),
                       ("Acme", {"ref": "2021-01-01", "to": "2019-01-01", "fn": True})])
    assert intervals(conn, group) == {"Acme": [("2018-01-01", "2019-01-01")], "Globex": [("2019-01-01", None)]}
    assert_refold_changes_nothing(conn, group)


def test_an_end_stated_after_the_fact_ends_an_open_interval_where_it_says(conn, group):
    """Acme was said to hold (start unknown) in 2018, then "until 2019" in 2021: the interval ends in
    2019, in its place in the fold, so Initech (2020) never met it and a later claim making the two
    exclusive is applied in place."""
    tell(conn, group, [("Acme", {"ref": "2018-01-01"}), ("Initech", {"frm": "2020-01-01"}),
                       ("Initech", {"neg": True, "ref": "2020-07-01"}),
                       ("Acme", {"ref": "2021-01-01", "to": "2019-01-01"})])
    assert intervals(conn, group) == {"Acme": [(None, "2019-01-01")], "Initech": [("2020-01-01", "2020-07-01")]}
    assert add_counting_refolds(conn, group, "Acme", {"frm": "2022-01-01", "fn": True}) == 0
    assert intervals(conn, group) == {"Acme": [(None, "2019-01-01"), ("2022-01-01", None)],
                                      "Initech": [("2020-01-01", "2020-07-01")]}
    assert_refold_changes_nothing(conn, group)


def test_an_episode_applies_its_claims_in_fold_order(conn, group):
    """"I left Acme two weeks ago and now work at Globex", extracted Globex first: applied in the
    plan's order the negation of Acme (placed two weeks back) came after Globex had ended Acme
    today and re-folded; in fold order it ends Acme first and Globex then ends nothing. Same
    belief, no re-fold, and the claims are reported in the plan's order."""
    import uuid

    acme = add(conn, group, "Acme", {"frm": "2020-01-01", "fn": True})
    conn.commit()
    alice = acme["source_id"]
    episode, globex = uuid.uuid4(), uuid.uuid4()
    conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at, status)"
                 " VALUES (%s, %s, 'text', 'I left Acme two weeks ago and now work at Globex.', now(), 'processing')",
                 (episode, group))
    claim = {"duplicate_of": None, "source": alice, "relation": "WORKS_FOR", "embedding": None, "attributes": {}}
    plan = {"group": group, "reference_time": "2024-03-01T00:00:00+00:00",
            "new_entities": [{"id": str(globex), "name": "Globex", "labels": ["Entity"], "summary": "",
                              "attributes": {}, "embedding": None}],
            "entity_updates": [], "mentions": [alice, str(globex)], "mention_summaries": {},
            "claims": [{**claim, "id": str(uuid.uuid4()), "kind": "assert", "contradicts": [acme["fact_id"]],
                        "target": str(globex), "fact": "Alice works for Globex.", "valid_from": "2024-03-01T00:00:00+00:00",
                        "valid_to": None},
                       {**claim, "id": str(uuid.uuid4()), "kind": "negate", "contradicts": [],
                        "target": acme["target_id"], "fact": "Alice left Acme.", "valid_from": None,
                        "valid_to": "2024-02-16T00:00:00+00:00", "duplicate_of": acme["fact_id"]}],
            "usage": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}, "embedding": None}
    conn.execute("SET track_functions = 'all'")
    before = refolds_in(conn)
    done = conn.execute("SELECT pgmemory_internal.apply_episode(%s, %s, %s::jsonb)",
                        (group, episode, json.dumps(plan))).fetchone()[0]
    assert refolds_in(conn) - before == 0
    conn.commit()
    assert [c["fact"] for c in done["claims"]] == ["Alice works for Globex.", "Alice left Acme."]
    assert intervals(conn, group) == {"Acme": [("2020-01-01", "2024-02-16")], "Globex": [("2024-03-01", None)]}
    assert_refold_changes_nothing(conn, group)
