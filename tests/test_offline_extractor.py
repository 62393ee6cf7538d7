"""The offline rule-based extractor and its date resolver: exact entities, facts and times."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.extract.dates import find_duration, find_time, find_times
from pgmemory.extract.offline import OfflineExtractor
from pgmemory.extract.rules import decide
from pgmemory.extract.types import EpisodeInput, Extraction, FactCandidate, FactQuestion

REF = datetime(2024, 1, 15, 10, 0, tzinfo=timezone.utc)  # a Monday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=timezone.utc)


def run(text: str, actor: str | None = "Alice", kind: str = "message",
        ref: datetime = REF) -> Extraction:
    return OfflineExtractor().extract(EpisodeInput(text, kind, ref, actor), [])


def facts(x: Extraction) -> set[tuple]:
    """(source, relation, target, valid_at, invalid_at, negated, functional) per fact."""
    return {(f.source, f.relation, f.target, f.valid_at, f.invalid_at, f.negated, f.functional)
            for f in x.facts}


def names(x: Extraction) -> list[str]:
    return [e.name for e in x.entities]


def labels(x: Extraction) -> dict[str, list[str]]:
    return {e.name: e.labels for e in x.entities}


# ------------------------------------------------------------------- dates

@pytest.mark.parametrize("text, expected, phrase", [
    ("yesterday", day(2024, 1, 14), "yesterday"),
    ("today", day(2024, 1, 15), "today"),
    ("tomorrow", day(2024, 1, 16), "tomorrow"),
    ("last night", day(2024, 1, 14), "last night"),
    ("the day before yesterday", day(2024, 1, 13), "the day before yesterday"),
    ("last week", day(2024, 1, 8), "last week"),
    ("two weeks ago", day(2024, 1, 1), "two weeks ago"),
    ("2 weeks ago", day(2024, 1, 1), "2 weeks ago"),
    ("3 days ago", day(2024, 1, 12), "3 days ago"),
    ("a couple of days ago", day(2024, 1, 13), "a couple of days ago"),
    ("a month ago", day(2023, 12, 15), "a month ago"),
    ("a year ago", day(2023, 1, 15), "a year ago"),
    ("last month", day(2023, 12, 1), "last month"),
    ("last year", day(2023, 1, 1), "last year"),
    ("next week", day(2024, 1, 22), "next week"),
    ("last summer", day(2023, 6, 1), "last summer"),
    ("last spring", day(2023, 3, 1), "last spring"),
    ("last fall", day(2023, 9, 1), "last fall"),
    ("last autumn", day(2023, 9, 1), "last autumn"),
    ("last winter", day(2022, 12, 1), "last winter"),  # the reference is in winter 2023-24
    ("in the summer of 2019", day(2019, 6, 1), "in the summer of 2019"),
    ("next Thursday", day(2024, 1, 18), "next Thursday"),
    ("on Thursday", day(2024, 1, 11), "on Thursday"),
    ("last Friday", day(2024, 1, 12), "last Friday"),
    ("last Fri", day(2024, 1, 12), "last Fri"),
    ("on Monday", day(2024, 1, 8), "on Monday"),  # a bare weekday is strictly in the past
    ("in 2019", day(2019, 1, 1), "in 2019"),
    ("since 2019", day(2019, 1, 1), "since 2019"),
    ("in March", day(2023, 3, 1), "in March"),
    ("since January", day(2024, 1, 1), "since January"),
    ("March 2020", day(2020, 3, 1), "March 2020"),
    ("in March 2020", day(2020, 3, 1), "in March 2020"),
    ("May 8, 2023", day(2023, 5, 8), "May 8, 2023"),
    ("8 May 2023", day(2023, 5, 8), "8 May 2023"),
    ("8 May, 2023", day(2023, 5, 8), "8 May, 2023"),
    ("the 8th of May, 2023", day(2023, 5, 8), "the 8th of May, 2023"),
    ("2023-05-08", day(2023, 5, 8), "2023-05-08"),
    ("on May 8", day(2023, 5, 8), "on May 8"),
    ("on January 3", day(2024, 1, 3), "on January 3"),
    ("last March", day(2023, 3, 1), "last March"),
    ("last January", day(2023, 1, 1), "last January"),  # said in January: last year's
    ("last December", day(2023, 12, 1), "last December"),
    ("this March", day(2024, 3, 1), "this March"),
    ("next March", day(2024, 3, 1), "next March"),
    ("last weekend", day(2024, 1, 13), "last weekend"),  # (REF is a Monday)
    ("over the weekend", day(2024, 1, 13), "over the weekend"),
    ("next January", day(2025, 1, 1), "next January"),
])
def test_time_expressions(text: str, expected: datetime, phrase: str) -> None:
    assert find_time(f"We met {text} at noon", REF) == (expected, phrase)


@pytest.mark.parametrize("said, last, latest", [
    (datetime(2024, 1, 20, 12, tzinfo=timezone.utc), day(2024, 1, 13), day(2024, 1, 20)),  # a Saturday
    (datetime(2024, 1, 21, 12, tzinfo=timezone.utc), day(2024, 1, 13), day(2024, 1, 20)),  # a Sunday
    (datetime(2024, 1, 17, 12, tzinfo=timezone.utc), day(2024, 1, 13), day(2024, 1, 13)),  # a Wednesday
])
def test_last_weekend_is_the_one_before_the_weekend_it_is_said_in(said, last, latest) -> None:
    [t] = find_times("We went hiking last weekend", said)
    assert (t.value, t.until) == (last, last + timedelta(days=2))
    assert find_time("We went hiking over the weekend", said)[0] == latest


@pytest.mark.parametrize("said, monday, saturday", [
    (datetime(2024, 5, 8, 12, tzinfo=timezone.utc), day(2024, 5, 6), day(2024, 5, 11)),  # a Wednesday
    (datetime(2024, 5, 6, 12, tzinfo=timezone.utc), day(2024, 5, 6), day(2024, 5, 11)),  # a Monday
    (datetime(2024, 5, 11, 12, tzinfo=timezone.utc), day(2024, 5, 6), day(2024, 5, 11)),  # a Saturday
    (datetime(2024, 5, 12, 12, tzinfo=timezone.utc), day(2024, 5, 6), day(2024, 5, 11)),  # a Sunday
])
def test_this_week_and_this_weekend_are_the_calendar_week_said_in(said, monday, saturday) -> None:
    """"this week" is the week the reference is in, Monday to Sunday; "this weekend" its Saturday
    and Sunday (said on a Wednesday, the coming one; on a Sunday, the one it is said in)."""
    [week] = find_times("I am busy this week", said)
    assert (week.text, week.value, week.until) == ("this week", monday, monday + timedelta(weeks=1))
    [weekend] = find_times("We go hiking this weekend", said)
    assert (weekend.text, weekend.value, weekend.until) == ("this weekend", saturday, saturday + timedelta(days=2))
    assert not week.assumed_past and not weekend.assumed_past  # the week is said, not guessed


def test_this_weekend_is_the_speakers_local_week() -> None:
    """Late on Sunday at UTC-5 it is already Monday in UTC: the weekend is still the speaker's own."""
    sunday_evening = datetime(2024, 5, 12, 21, 0, tzinfo=timezone(timedelta(hours=-5)))
    [weekend] = find_times("We went hiking this weekend", sunday_evening)
    assert weekend.value == datetime(2024, 5, 11, 5, 0, tzinfo=timezone.utc)  # Saturday 00:00-05:00
    [week] = find_times("I was busy this week", sunday_evening)
    assert week.value == datetime(2024, 5, 6, 5, 0, tzinfo=timezone.utc)


def test_a_visit_this_weekend_spans_the_weekend_once_it_is_past() -> None:
    """Said on Sunday, the visit is Saturday and Sunday (not only the day it was told); said on a
    Wednesday, the weekend is ahead: a plan, recorded as nothing."""
    sunday, wednesday = (datetime(2024, 5, d, 12, tzinfo=timezone.utc) for d in (12, 8))
    assert facts(run("I visited Paris this weekend", ref=sunday)) == {
        ("Alice", "VISITED", "Paris", day(2024, 5, 11), day(2024, 5, 13), False, False)}
    assert run("I visited Paris this weekend", ref=wednesday).facts == []


def test_time_results_are_the_local_midnight_of_the_speakers_day_in_utc() -> None:
    """The speaker's date counts (not the UTC one: the reference is 2024-01-15 03:00 UTC), and the
    result is that local day's midnight as a UTC datetime."""
    late_evening_in_new_york = datetime(2024, 1, 14, 22, 0, tzinfo=timezone(timedelta(hours=-5)))
    value, _ = find_time("yesterday", late_evening_in_new_york)
    assert value == datetime(2024, 1, 13, 5, 0, tzinfo=timezone.utc)  # Jan 13, 00:00-05:00
    assert value is not None and value.tzinfo == timezone.utc


def test_no_time_and_lowercase_may_are_not_times() -> None:
    assert find_time("I may go hiking with Bob", REF) == (None, None)
    assert find_times("May I ask what you did?", REF) == []
    assert find_times("The last may be the best", REF) == []


def test_several_times_in_order_without_overlap() -> None:
    found = find_times("I moved on May 8, 2023 and left last week", REF)
    assert [(t.text, t.value) for t in found] == [
        ("on May 8, 2023", day(2023, 5, 8)), ("last week", day(2024, 1, 8))]


@pytest.mark.parametrize("text, phrase, starts, stops", [
    ("since 2019", "since 2019", day(2019, 1, 1), None),
    ("starting in May", "in May", day(2023, 5, 1), None),
    ("until last year", "last year", None, day(2023, 1, 1)),
    ("till 2020", "till 2020", None, day(2020, 1, 1)),
    ("through 2020", "through 2020", None, day(2021, 1, 1)),
    # a range is one mention; "to", "through", "and" include the end's period, "until" does not
    ("from 2018 to 2020", "from 2018 to 2020", day(2018, 1, 1), day(2021, 1, 1)),
    ("from 2018-2020", "from 2018-2020", day(2018, 1, 1), day(2021, 1, 1)),
    ("from 2018 until 2020", "from 2018 until 2020", day(2018, 1, 1), day(2020, 1, 1)),
    ("between 2018 and 2020", "between 2018 and 2020", day(2018, 1, 1), day(2021, 1, 1)),
    ("from March to May 2020", "from March to May 2020", day(2020, 3, 1), day(2020, 6, 1)),
    ("from Monday to Wednesday", "Monday to Wednesday", day(2024, 1, 8), day(2024, 1, 11)),
    # no bound: a time said without such a word is when it held
    ("in 2019", "in 2019", day(2019, 1, 1), None),
    ("last year", "last year", day(2023, 1, 1), None),
    # an end before its start is no range: the start stays a start
    ("from May 2020 to 2019", "from May 2020", day(2020, 5, 1), None),
    # a day after the word keeps its day ("since March" took the place of "since March 3")
    ("since March 3", "since March 3", day(2023, 3, 3), None),
    ("since May 8, 2023", "since May 8, 2023", day(2023, 5, 8), None),
    ("since the 3rd of May", "since the 3rd of May", day(2023, 5, 3), None),
    ("until 2021-03-04", "until 2021-03-04", None, day(2021, 3, 4)),
    ("from March 3 to March 9", "from March 3 to March 9", day(2023, 3, 3), day(2023, 3, 10)),
    ("between May 1 and May 9", "between May 1 and May 9", day(2023, 5, 1), day(2023, 5, 10)),
])
def test_time_bounds_and_ranges(text: str, phrase: str, starts, stops) -> None:
    first = find_times(f"We were there {text} at noon", REF)[0]
    assert (first.text, first.starts(), first.stops()) == (phrase, starts, stops)


def test_a_year_or_month_needs_a_word_before_it_outside_a_range() -> None:
    assert find_times("I ran 2019 meters and 2020 meters", REF) == []
    assert [t.text for t in find_times("I scored 2018 to 2020 points", REF)] == []


def test_duration_counts_back_from_the_reference() -> None:
    found = find_duration("I have lived here for 3 years", REF)
    assert found is not None and (found.text, found.value) == ("for 3 years", day(2021, 1, 15))
    assert find_duration("I live here", REF) is None


def test_naive_reference_is_rejected() -> None:
    with pytest.raises(ValueError):
        find_time("yesterday", datetime(2024, 1, 15, 10, 0))
    with pytest.raises(ValueError):
        run("I work at Acme.", ref=datetime(2024, 1, 15, 10, 0))


# ---------------------------------------------------------- paper's example

def test_paper_example_left_tencent_now_openai() -> None:
    x = run("I left Tencent last week and now work at OpenAI")
    assert names(x) == ["Alice", "Tencent", "OpenAI"]
    assert labels(x)["Tencent"] == ["Entity", "Organization"]
    assert facts(x) == {
        ("Alice", "WORKS_FOR", "Tencent", None, day(2024, 1, 8), True, True),
        # the new employer starts when the old one ended (~2024-01-08, as in the paper)
        ("Alice", "WORKS_FOR", "OpenAI", day(2024, 1, 8), None, False, True),
    }
    texts = {f.target: f.fact for f in x.facts}
    assert texts == {"Tencent": "Alice left Tencent.", "OpenAI": "Alice works for OpenAI."}


def test_time_carries_to_a_clause_without_its_own_subject() -> None:
    x = run("Last week I left Tencent and joined OpenAI.")
    assert facts(x) == {
        ("Alice", "WORKS_FOR", "Tencent", None, day(2024, 1, 8), True, True),
        ("Alice", "WORKS_FOR", "OpenAI", day(2024, 1, 8), None, False, True),
    }


def test_time_does_not_carry_to_a_clause_with_its_own_subject() -> None:
    x = run("I visited Paris in 2019 and I live in London.")
    assert facts(x) == {
        ("Alice", "VISITED", "Paris", day(2019, 1, 1), day(2020, 1, 1), False, False),  # an event: 2019
        ("Alice", "LIVES_IN", "London", REF, None, False, True),
    }


# ------------------------------------------------------------------ speaker

def test_speaker_comes_first_even_when_not_mentioned() -> None:
    x = run("Bob works at Initech and Carol lives in Paris.", actor="Zed")
    assert names(x) == ["Zed", "Bob", "Initech", "Carol", "Paris"]
    assert x.entities[0].labels == ["Entity", "Person"]
    assert facts(x) == {
        ("Bob", "WORKS_FOR", "Initech", REF, None, False, True),
        ("Carol", "LIVES_IN", "Paris", REF, None, False, True),
    }


def test_speaker_from_name_colon_prefix() -> None:
    x = run("Alice: I work at Acme Corp.", actor=None)
    assert names(x) == ["Alice", "Acme Corp"]
    assert facts(x) == {("Alice", "WORKS_FOR", "Acme Corp", REF, None, False, True)}
    assert x.facts[0].fact == "Alice works for Acme Corp."


def test_text_with_actor_resolves_i_to_the_actor() -> None:
    x = run("I live in Paris.", actor="Alice", kind="text")
    assert names(x) == ["Alice", "Paris"]
    assert facts(x) == {("Alice", "LIVES_IN", "Paris", REF, None, False, True)}


def test_text_without_actor_uses_a_named_subject_and_ignores_i() -> None:
    x = run("Alice works at Acme Corp. I live in Paris.", actor=None, kind="text")
    assert names(x) == ["Alice", "Acme Corp", "Paris"]
    assert facts(x) == {("Alice", "WORKS_FOR", "Acme Corp", REF, None, False, True)}


# --------------------------------------------------------------- employment

@pytest.mark.parametrize("text, valid, invalid, negated, fact_text", [
    ("I work at Acme Corp.", REF, None, False, "Alice works for Acme Corp."),
    ("I'm currently working for Acme Corp.", REF, None, False, "Alice works for Acme Corp."),
    ("I have worked at Acme Corp since 2019.", day(2019, 1, 1), None, False,
     "Alice works for Acme Corp."),
    ("I've been working at Acme Corp for 2 years.", day(2022, 1, 15), None, False,
     "Alice works for Acme Corp."),
    ("I joined Acme Corp in March.", day(2023, 3, 1), None, False, "Alice joined Acme Corp."),
    ("I joined Acme Corp.", REF, None, False, "Alice joined Acme Corp."),
    ("I got a job at Acme Corp two weeks ago.", day(2024, 1, 1), None, False,
     "Alice got a job at Acme Corp."),
    ("I quit Acme Corp yesterday.", None, day(2024, 1, 14), True, "Alice quit Acme Corp."),
    ("I left Acme Corp.", None, REF, True, "Alice left Acme Corp."),
    ("I don't work at Acme Corp anymore.", None, REF, True, "Alice no longer works for Acme Corp."),
    ("I used to work at Acme Corp.", None, REF, False, "Alice used to work for Acme Corp."),
    ("I worked at Acme Corp.", None, REF, False, "Alice worked for Acme Corp."),
    # a state said in the past tense at a time held then and holds no longer
    ("I worked at Acme Corp in 2015.", day(2015, 1, 1), day(2016, 1, 1), False, "Alice worked for Acme Corp."),
])
def test_works_for(text: str, valid, invalid, negated: bool, fact_text: str) -> None:
    x = run(text)
    assert names(x) == ["Alice", "Acme Corp"]
    assert labels(x)["Acme Corp"] == ["Entity", "Organization"]
    assert facts(x) == {("Alice", "WORKS_FOR", "Acme Corp", valid, invalid, negated, True)}
    assert x.facts[0].fact == fact_text


def test_job_title_at_company_keeps_the_role() -> None:
    x = run("I'm a software engineer at Stripe.")
    assert facts(x) == {("Alice", "WORKS_FOR", "Stripe", REF, None, False, True)}
    assert x.facts[0].attributes == {"role": "software engineer"}
    assert x.facts[0].fact == "Alice works for Stripe as a software engineer."


def test_joining_a_club_is_membership_not_employment() -> None:
    x = run("I joined a book club last month.")
    assert facts(x) == {("Alice", "MEMBER_OF", "book club", day(2023, 12, 1), None, False, False)}


def test_leaving_a_city_ends_living_there() -> None:
    x = run("I left Paris in 2020.")
    assert facts(x) == {("Alice", "LIVES_IN", "Paris", None, day(2020, 1, 1), True, True)}


# ---------------------------------------------------------------- places

def test_lives_in_multiword_place() -> None:
    x = run("I live in New York.")
    assert names(x) == ["Alice", "New York"]
    assert labels(x)["New York"] == ["Entity", "Place"]
    assert facts(x) == {("Alice", "LIVES_IN", "New York", REF, None, False, True)}


def test_moved_to_uses_the_move_time() -> None:
    x = run("I moved to Berlin two weeks ago.")
    assert facts(x) == {("Alice", "LIVES_IN", "Berlin", day(2024, 1, 1), None, False, True)}
    assert x.facts[0].fact == "Alice moved to Berlin."


def test_moved_from_to_ends_one_home_and_starts_another() -> None:
    x = run("I moved from Chicago to Denver in March.")
    assert facts(x) == {
        ("Alice", "LIVES_IN", "Chicago", None, day(2023, 3, 1), True, True),
        ("Alice", "LIVES_IN", "Denver", day(2023, 3, 1), None, False, True),
    }


@pytest.mark.parametrize("text, valid, invalid, negated", [
    ("I no longer live in Boston.", None, REF, True),
    ("I used to live in Boston.", None, REF, False),
    ("I've lived in Boston for 3 years.", day(2021, 1, 15), None, False),
])
def test_lives_in_variants(text: str, valid, invalid, negated: bool) -> None:
    assert facts(run(text)) == {("Alice", "LIVES_IN", "Boston", valid, invalid, negated, True)}


def test_is_from() -> None:
    x = run("I'm originally from Sweden.")
    assert facts(x) == {("Alice", "IS_FROM", "Sweden", REF, None, False, False)}
    assert x.facts[0].fact == "Alice is from Sweden."


# ---------------------------------------------------------- relationships

def test_married_to() -> None:
    x = run("I am married to Bob.")
    assert labels(x)["Bob"] == ["Entity", "Person"]
    assert facts(x) == {("Alice", "MARRIED_TO", "Bob", REF, None, False, True)}


@pytest.mark.parametrize("text", ["My wife is Sarah.", "My wife, Sarah, is lovely.",
                                  "Sarah is my wife."])
def test_my_wife_is(text: str) -> None:
    x = run(text)
    assert names(x) == ["Alice", "Sarah"]
    assert facts(x) == {("Alice", "MARRIED_TO", "Sarah", REF, None, False, True)}


def test_relative_as_subject_of_another_fact() -> None:
    x = run("My wife Sarah works at Google.")
    assert names(x) == ["Alice", "Sarah", "Google"]
    assert facts(x) == {
        ("Alice", "MARRIED_TO", "Sarah", REF, None, False, True),
        ("Sarah", "WORKS_FOR", "Google", REF, None, False, True),
    }


def test_unnamed_relative_is_named_after_the_speaker() -> None:
    x = run("My sister works at a hospital.")
    assert names(x) == ["Alice", "Alice's sister", "hospital"]
    assert facts(x) == {
        ("Alice", "HAS_SISTER", "Alice's sister", REF, None, False, False),
        ("Alice's sister", "WORKS_FOR", "hospital", REF, None, False, True),
    }
    assert {f.fact for f in x.facts} == {
        "Alice has a sister.", "Alice's sister works for a hospital."}


def test_copula_negation_and_divorce() -> None:
    assert facts(run("I'm not married to Bob anymore.")) == {
        ("Alice", "MARRIED_TO", "Bob", None, REF, True, True)}
    assert facts(run("I got divorced from Bob last year.")) == {
        ("Alice", "MARRIED_TO", "Bob", None, day(2023, 1, 1), True, True)}
    assert facts(run("I'm not from Texas.")) == {
        ("Alice", "IS_FROM", "Texas", None, REF, True, False)}


def test_plural_relative_subject_agrees() -> None:
    x = run("My kids don't like broccoli.")
    assert facts(x) == {
        ("Alice", "HAS_CHILD", "Alice's kids", REF, None, False, False),
        ("Alice's kids", "LIKES", "broccoli", None, REF, True, False),
    }
    assert [f.fact for f in x.facts] == ["Alice has kids.", "Alice's kids do not like broccoli."]


def test_dating_and_breaking_up() -> None:
    assert facts(run("I'm dating Chris.")) == {
        ("Alice", "DATING", "Chris", REF, None, False, False)}
    assert facts(run("My girlfriend is Emma.")) == {
        ("Alice", "DATING", "Emma", REF, None, False, False)}
    assert facts(run("I broke up with Chris last month.")) == {
        ("Alice", "DATING", "Chris", None, day(2023, 12, 1), True, False)}


# ------------------------------------------------------------- preferences

@pytest.mark.parametrize("text, relation, target", [
    ("I like hiking.", "LIKES", "hiking"),
    ("I love jazz.", "LOVES", "jazz"),
    ("I hate Mondays.", "HATES", "Mondays"),
    ("I really enjoy gardening.", "ENJOYS", "gardening"),
    ("I can't stand cilantro.", "HATES", "cilantro"),
    ("I'm a big fan of pottery.", "LIKES", "pottery"),
    ("I love to paint.", "LOVES", "painting"),
    ("I love to go hiking.", "LOVES", "hiking"),
    ('I love "Becoming Nicole".', "LOVES", "Becoming Nicole"),
])
def test_preferences(text: str, relation: str, target: str) -> None:
    x = run(text)
    assert names(x) == ["Alice", target]
    assert facts(x) == {("Alice", relation, target, REF, None, False, False)}


def test_lowercase_object_is_an_entity_and_coordination_gives_several_facts() -> None:
    x = run("I like hiking and swimming.")
    assert names(x) == ["Alice", "hiking", "swimming"]
    assert facts(x) == {
        ("Alice", "LIKES", "hiking", REF, None, False, False),
        ("Alice", "LIKES", "swimming", REF, None, False, False),
    }
    assert [f.fact for f in x.facts] == ["Alice likes hiking.", "Alice likes swimming."]


def test_negated_preference() -> None:
    x = run("I don't like coffee.")
    assert facts(x) == {("Alice", "LIKES", "coffee", None, REF, True, False)}
    assert x.facts[0].fact == "Alice does not like coffee."


@pytest.mark.parametrize("text", [
    "I love it.", "I love how you paint.", "I'd love to see it.", "It is like a dream.",
    "Do you like hiking?", "I love your painting.", "I love running my own studio.",
    "Dancing is like second nature to me.",
])
def test_no_preference_fact(text: str) -> None:
    assert run(text).facts == []


@pytest.mark.parametrize("text, relation, target", [
    ("My favorite color is blue.", "FAVOURITE_COLOR", "blue"),
    ("My favourite TV show is Friends.", "FAVOURITE_TV_SHOW", "Friends"),
    ("Radiohead is my favorite band.", "FAVOURITE_BAND", "Radiohead"),
])
def test_favourites_are_functional(text: str, relation: str, target: str) -> None:
    x = run(text)
    assert names(x) == ["Alice", target]
    assert facts(x) == {("Alice", relation, target, REF, None, False, True)}


def test_one_of_my_favourites_is_not_the_favourite() -> None:
    assert run("One of my favorite books is Dune.").facts == []


# ---------------------------------------------------------------- possession

def test_pet_named() -> None:
    x = run("I have a dog named Rex.")
    assert names(x) == ["Alice", "Rex"]
    assert labels(x)["Rex"] == ["Entity", "Pet"]
    assert x.entities[1].attributes == {"species": "dog"}
    assert facts(x) == {("Alice", "HAS_PET", "Rex", REF, None, False, False)}
    assert x.facts[0].fact == "Alice has a dog named Rex."


def test_my_dog_appositive() -> None:
    x = run("My dog Max loves the beach.")
    assert facts(x) == {
        ("Alice", "HAS_PET", "Max", REF, None, False, False),
        ("Max", "LOVES", "beach", REF, None, False, False),
    }


def test_adopted_pet_starts_at_the_adoption() -> None:
    x = run("I adopted a cat in 2022.")
    assert names(x) == ["Alice", "Alice's cat"]
    assert facts(x) == {("Alice", "HAS_PET", "Alice's cat", day(2022, 1, 1), None, False, False)}


def test_child() -> None:
    x = run("I have a daughter.")
    assert names(x) == ["Alice", "Alice's daughter"]
    assert labels(x)["Alice's daughter"] == ["Entity", "Person"]
    assert facts(x) == {("Alice", "HAS_CHILD", "Alice's daughter", REF, None, False, False)}
    named = run("I have a son named Leo.")
    assert facts(named) == {("Alice", "HAS_CHILD", "Leo", REF, None, False, False)}


def test_had_a_baby_is_a_birth() -> None:
    x = run("I had a baby last week.")
    assert facts(x) == {("Alice", "HAS_CHILD", "Alice's baby", day(2024, 1, 8), None, False, False)}


def test_car() -> None:
    x = run("I got a new car last month.")
    assert names(x) == ["Alice", "Alice's car"]
    assert labels(x)["Alice's car"] == ["Entity", "Vehicle"]
    assert facts(x) == {("Alice", "HAS_CAR", "Alice's car", day(2023, 12, 1), None, False, False)}
    assert x.facts[0].fact == "Alice got a new car."
    brand = run("I bought a Tesla Model 3.")
    assert facts(brand) == {("Alice", "HAS_CAR", "Tesla Model 3", REF, None, False, False)}


# ------------------------------------------------------- studies, purchases, visits

def test_studies_and_graduation() -> None:
    assert facts(run("I study at MIT.")) == {
        ("Alice", "STUDIES_AT", "MIT", REF, None, False, True)}
    x = run("I'm a student at Oxford.")
    assert facts(x) == {("Alice", "STUDIES_AT", "Oxford", REF, None, False, True)}
    assert facts(run("I graduated from Stanford in 2020.")) == {
        ("Alice", "STUDIES_AT", "Stanford", None, day(2020, 1, 1), True, True)}


def test_studying_a_field_keeps_it() -> None:
    x = run("I'm studying computer science at MIT.")
    assert facts(x) == {("Alice", "STUDIES_AT", "MIT", REF, None, False, True)}
    assert x.facts[0].attributes == {"field": "computer science"}


def test_bought() -> None:
    x = run("I bought a new guitar on Thursday.")
    assert names(x) == ["Alice", "guitar"]
    assert facts(x) == {("Alice", "BOUGHT", "guitar", day(2024, 1, 11), day(2024, 1, 12), False, False)}
    assert x.facts[0].fact == "Alice bought a new guitar."


def test_visited() -> None:
    x = run("I visited Paris last summer.")
    assert labels(x)["Paris"] == ["Entity", "Place"]
    assert facts(x) == {("Alice", "VISITED", "Paris", day(2023, 6, 1), day(2023, 9, 1), False, False)}


def test_fact_sentence_keeps_the_determiner_and_resolves_my() -> None:
    x = run("Yesterday, I visited the Louvre with my mom.")
    assert facts(x) == {("Alice", "VISITED", "Louvre", day(2024, 1, 14), day(2024, 1, 15), False, False)}
    assert x.facts[0].fact == "Alice visited the Louvre."
    quit_job = run("I quit my job at Initech.")
    assert quit_job.facts[0].fact == "Alice quit Alice's job at Initech."


def test_locomo_support_group_turn() -> None:
    x = run("I went to a LGBTQ support group yesterday and it was so powerful.", actor="Caroline",
            ref=datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc))
    assert names(x) == ["Caroline", "LGBTQ support group"]
    assert facts(x) == {
        ("Caroline", "VISITED", "LGBTQ support group", day(2023, 5, 7), day(2023, 5, 8), False, False)}
    assert x.facts[0].fact == "Caroline went to a LGBTQ support group."


def test_been_to_without_a_time_ended_before_the_reference() -> None:
    x = run("I've been to Japan twice.")
    assert facts(x) == {("Alice", "VISITED", "Japan", None, REF, False, False)}
    assert x.facts[0].attributes == {"kind": "event"}
    assert x.facts[0].fact == "Alice has been to Japan."


# -------------------------------------------------------- what is not asserted

@pytest.mark.parametrize("text", [
    "Do you work at Google?", "I will move to Paris next year.", "I want to work at Google.",
    "I never went to Paris.", "The guy who works at Google is nice.", "He works at Google.",
    "I am thinking of moving to Berlin.",
])
def test_no_fact_asserted(text: str) -> None:
    assert run(text).facts == []


# ------------------------------------------------------------------ entities

def test_proper_nouns_without_facts() -> None:
    x = run("Hey Caroline! We should grab coffee at Blue Bottle Coffee in New York on Monday.")
    assert names(x) == ["Alice", "Caroline", "Blue Bottle Coffee", "New York"]
    assert labels(x)["New York"] == ["Entity", "Place"]
    assert x.facts == []


def test_sentence_initial_common_words_are_not_entities() -> None:
    x = run("Thanks, Melanie! Painting is fun. Wow, that is great. I love it.")
    assert names(x) == ["Alice", "Melanie"]


def test_sentence_initial_word_counts_when_capitalised_elsewhere() -> None:
    x = run("Rome was great. I want to see Rome again.")
    assert names(x) == ["Alice", "Rome"]


def test_quoted_title_is_one_entity() -> None:
    x = run('I read "Charlotte\'s Web" as a kid.')
    assert names(x) == ["Alice", "Charlotte's Web"]


def test_entities_from_previous_messages_are_not_extracted() -> None:
    previous = [EpisodeInput("I work at Initech.", "message", REF, "Bob")]
    x = OfflineExtractor().extract(EpisodeInput("Sounds good to me.", "message", REF, "Alice"),
                                   previous)
    assert names(x) == ["Alice"] and x.facts == []


def test_every_fact_has_distinct_endpoints_among_the_entities() -> None:
    x = run("I left Tencent last week and now work at OpenAI. My wife Sarah loves hiking and "
            "jazz. I have a dog named Rex. I moved from Chicago to Denver in March.")
    entity_names = set(names(x))
    assert len(x.facts) == 8
    for f in x.facts:
        assert f.source in entity_names and f.target in entity_names and f.source != f.target
        assert f.relation == f.relation.upper() and " " not in f.relation


def test_deterministic() -> None:
    text = ("I left Tencent last week and now work at OpenAI. My sister Jane loves hiking, "
            "biking and swimming. Hey Bob! I visited Blue Bottle Coffee in New York yesterday.")
    first, second = run(text), run(text)
    assert first == second
    assert [f.fact for f in first.facts] == [f.fact for f in second.facts]


# ----------------------------------------------------------------------- json

def test_json_objects_and_relation_fields() -> None:
    content = json.dumps([
        {"name": "Alice", "type": "person", "company": "Acme Corp", "city": "Paris", "age": 30},
        {"id": "Bob", "school": "MIT", "spouse": "Alice"},
        {"title": "no name here", "company": "Ignored Inc"},
    ])
    x = run(content, actor=None, kind="json")
    assert names(x) == ["Alice", "Acme Corp", "Paris", "Bob", "MIT"]
    assert labels(x)["Alice"] == ["Entity", "Person"]
    assert labels(x)["Paris"] == ["Entity", "Place"]
    assert facts(x) == {
        ("Alice", "WORKS_FOR", "Acme Corp", REF, None, False, True),
        ("Alice", "LIVES_IN", "Paris", REF, None, False, True),
        ("Bob", "STUDIES_AT", "MIT", REF, None, False, True),
        ("Bob", "MARRIED_TO", "Alice", REF, None, False, True),
    }
    assert {f.fact for f in x.facts} >= {"Alice works for Acme Corp.", "Bob studies at MIT."}


def test_json_value_equal_to_the_name_is_not_a_fact() -> None:
    x = run(json.dumps({"name": "Acme", "company": "acme", "id": 3}), actor=None, kind="json")
    assert names(x) == ["Acme"] and labels(x)["Acme"] == ["Entity"] and x.facts == []


def test_json_single_object() -> None:
    x = run(json.dumps({"name": "Initech", "location": "Austin"}), actor=None, kind="json")
    assert names(x) == ["Initech", "Austin"]
    assert facts(x) == {("Initech", "LOCATED_IN", "Austin", REF, None, False, True)}


# ------------------------------------------------- everyday chat (issue 16)

@pytest.mark.parametrize("text", [
    "Big news: I moved to Austin last month.", "Guess what, I moved to Austin last month.",
    "So, I moved to Austin last month.", "Update: I moved to Austin last month.",
    "Quick update - I moved to Austin last month.", "We moved to Austin last month.",
    "Just moved to Austin last month!",
])
def test_lead_ins_we_and_dropped_subjects_are_the_speaker(text: str) -> None:
    assert facts(run(text)) == {("Alice", "LIVES_IN", "Austin", day(2023, 12, 1), None, False, True)}


@pytest.mark.parametrize("text, relation", [
    ("Tom and I broke up in October.", "DATING"), ("Tom and I split up in October.", "DATING"),
    ("Tom and I got divorced in October.", "MARRIED_TO"),
])
def test_a_pair_ending_its_relationship(text: str, relation: str) -> None:
    x = run(text)
    assert facts(x) == {("Alice", relation, "Tom", None, day(2023, 10, 1), True, relation == "MARRIED_TO")}


def test_each_name_colon_line_is_that_speakers_and_a_leading_actor_name_is_dropped() -> None:
    x = run("Maya: How is the new job?\nNina: I work at Shopify now.", actor=None)
    assert names(x)[:2] == ["Maya", "Nina"]
    assert facts(x) == {("Nina", "WORKS_FOR", "Shopify", REF, None, False, True)}
    own = run("Dana Whitfield: I moved to Phoenix.", actor="Dana Whitfield")
    assert facts(own) == {("Dana Whitfield", "LIVES_IN", "Phoenix", REF, None, False, True)}
    assert run("Big news: I work at Acme.", actor=None).facts == []  # a lead-in, not a speaker


@pytest.mark.parametrize("actor", ["Assistant", "assistant", "AI"])
def test_the_assistants_chatter_is_no_fact_and_no_entity(actor: str) -> None:
    x = run("Sure, I can help! I love planning trips. I work best with details.", actor=actor)
    assert x.facts == [] and names(x) == []
    world = run("Got it, so Marta works at Siemens.", actor=actor)
    assert names(world) == ["Marta", "Siemens"]
    assert facts(world) == {("Marta", "WORKS_FOR", "Siemens", REF, None, False, True)}
    quoted = run("Sue: I quit Lidl.\nAssistant: Sorry to hear that, I can help.", actor=None)
    assert names(quoted) == ["Sue", "Lidl"]


@pytest.mark.parametrize("text, target, negated", [
    ("I'm vegetarian now.", "vegetarian", False), ("I'm a vegan.", "vegan", False),
    ("I went vegan in 2023.", "vegan", False), ("I'm pregnant!", "pregnant", False),
    ("I'm retired", "retired", False), ("I'm not vegetarian anymore.", "vegetarian", True),
])
def test_states_of_the_person(text: str, target: str, negated: bool) -> None:
    (fact,) = run(text).facts
    assert (fact.relation, fact.target, fact.negated) == ("IS", target, negated)


def test_tacos_these_days_is_tacos() -> None:
    x = run("I like tacos these days.")
    assert names(x) == ["Alice", "tacos"]


@pytest.mark.parametrize("text, expected", [
    ("I started at Notion yesterday.", ("WORKS_FOR", "Notion", day(2024, 1, 14))),
    ("Today was my first day at Stripe.", ("WORKS_FOR", "Stripe", day(2024, 1, 15))),
    ("I prefer tea over coffee.", ("PREFERS", "tea", REF)),
    ("I like dogs more than cats.", ("PREFERS", "dogs", REF)),
    ("Rachel knows Tom.", ("KNOWS", "Tom", REF)),
    ("I'm friends with Kevin Park.", ("HAS_FRIEND", "Kevin Park", REF)),
    ("i work at amazon now", ("WORKS_FOR", "Amazon", REF)),
    ("Im working at Pfizer", ("WORKS_FOR", "Pfizer", REF)),
])
def test_everyday_phrasings(text: str, expected: tuple) -> None:
    assert [(f.relation, f.target, f.valid_at) for f in run(text).facts] == [expected]


def test_he_and_she_refer_to_a_relative_or_pet_named_just_before() -> None:
    x = run("My dog Rex is getting old. He loves the beach though.")
    assert ("Rex", "LOVES", "beach") in {(f.source, f.relation, f.target) for f in x.facts}
    assert run("He loves the beach.").facts == []


@pytest.mark.parametrize("text", [
    "If I got the job at Apple I'd move to Cupertino.", "I might switch to Lyft, not sure yet.",
    "Jake is planning to leave Oracle next year.", "Maybe I'll move to Berlin someday.",
    "I will start at Apple next month.", "Tomorrow is my first day at Apple.",
    "I'm visiting Paris next week.", "I'm starting at Google next week.", "I'm going vegan next month.",
])
def test_plans_and_hypotheticals_assert_nothing(text: str) -> None:
    assert run(text).facts == []


@pytest.mark.parametrize("text", [
    "I knew Anna would love it.", "I'm single-handedly running this.", "I am vegan-curious.",
    "I started with Python.", "Loving the colours!", "i met up with friends", "I met up with friends.",
    "I'm a single mom.", "I know what you mean.",
])
def test_look_alikes_assert_nothing(text: str) -> None:
    assert run(text).facts == []


def test_an_opinion_of_the_job_is_about_the_employer() -> None:
    assert facts(run("I hate my job at Google.")) == {("Alice", "WORKS_FOR", "Google", REF, None, False, True)}


# ---------------------------------------------------- events vs states (issue 18.5)

@pytest.mark.parametrize("text, relation, valid, invalid", [
    ("I visited Lisbon yesterday.", "VISITED", day(2024, 1, 14), day(2024, 1, 15)),
    ("I visited Lisbon.", "VISITED", day(2024, 1, 15), day(2024, 1, 16)),  # the day it was told
    ("I visited Lisbon in 2019.", "VISITED", day(2019, 1, 1), day(2020, 1, 1)),
    ("I visited Lisbon in March 2020.", "VISITED", day(2020, 3, 1), day(2020, 4, 1)),
    ("I attended the Web Summit last summer.", "ATTENDED", day(2023, 6, 1), day(2023, 9, 1)),
    ("I met Sofia on May 8, 2023.", "MET", day(2023, 5, 8), day(2023, 5, 9)),
    ("I won the chess tournament on Saturday.", "WON", day(2024, 1, 13), day(2024, 1, 14)),
    ("I had knee surgery last week.", "UNDERWENT", day(2024, 1, 8), day(2024, 1, 15)),
])
def test_events_get_a_bounded_interval_and_kind_event(text: str, relation: str, valid, invalid) -> None:
    (fact,) = run(text).facts
    assert (fact.relation, fact.valid_at, fact.invalid_at, fact.negated) == (relation, valid, invalid, False)
    assert fact.attributes["kind"] == "event"


def test_states_stay_open_until_ended() -> None:
    for text in ("I work at Acme Corp.", "I live in Boston.", "I like hiking.", "I am married to Bob."):
        (fact,) = run(text).facts
        assert fact.invalid_at is None and "kind" not in fact.attributes


# ------------------------------------------------------- what a new fact ends

def _ended(text: str, believed: list[tuple[str, str, str, str]]) -> set[str]:
    """The believed (source, relation, target, sentence) facts the offline judge ends for text."""
    candidates = [FactCandidate(f"F{i}", s, t, r, sentence, None, None)
                  for i, (s, r, t, sentence) in enumerate(believed)]
    ended: set[str] = set()
    for i, fact in enumerate(run(text).facts):
        d = decide(FactQuestion(i, fact, candidates, candidates))
        if fact.negated and d.duplicate_of:
            ended.add(f"{believed[int(d.duplicate_of[1:])][2]}")
        if not fact.negated:
            ended |= {believed[int(c[1:])][2] for c in d.contradicts}
    return ended


@pytest.mark.parametrize("text, believed, ends", [
    ("I love olives now.", [("Alice", "HATES", "olives", ""), ("Alice", "LIKES", "jazz", "")], {"olives"}),
    ("I don't like olives anymore.", [("Alice", "LOVES", "olives", "")], {"olives"}),
    ("I prefer coffee these days.", [("Alice", "PREFERS", "tea", "Alice prefers tea over coffee."),
                                     ("Alice", "PREFERS", "window seats", "")], {"tea"}),
    ("I'm vegan now.", [("Alice", "IS", "vegetarian", ""), ("Alice", "IS", "pregnant", "")], {"vegetarian"}),
    ("I'm retired", [("Alice", "WORKS_FOR", "Acme", ""), ("Alice", "LIVES_IN", "Paris", "")], {"Acme"}),
    ("I study at Concordia now.", [("Alice", "STUDIES_AT", "McGill", "")], {"McGill"}),
    ("Bob and I got married.", [("Alice", "ENGAGED_TO", "Bob", "")], {"Bob"}),
    ("I like swimming.", [("Alice", "LIKES", "hiking", "")], set()),
    ("I'm pregnant!", [("Alice", "IS", "vegan", "")], set()),
])
def test_what_a_new_fact_ends(text: str, believed: list, ends: set[str]) -> None:
    assert _ended(text, believed) == ends


def test_a_backslash_in_the_speakers_name_is_text_not_a_regex_escape() -> None:
    """A speaker named with a backslash (found by tests/test_fuzz.py) is written into the fact
    sentence as it is, instead of failing the episode with "bad escape"."""
    for actor in ("\\", "Kim\\1", "A\\g<0>"):
        x = run("I live in Oslo. My sister lives in Rome.", actor=actor)
        assert any(f.fact.startswith(f"{actor} lives in Oslo") for f in x.facts), [f.fact for f in x.facts]
