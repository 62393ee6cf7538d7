"""Category members: a list question ("Which cities has Jon visited?") finds the turns naming
members of its category (Rome, Paris) that share no word with it."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import episode_uuid
from pgmemory.search.categories import MAX_MEMBERS, category, member_lexemes, members
from pgmemory.search.config import resolve_config

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)

# The question shares "Jon" and "visited" with the distractors and no word with t0 and t3.
TURNS = [("Jon", "Took a short trip last week to Rome, the pasta was amazing."),
         ("Gina", "Jon, you visited the dance studio again?"),
         ("Jon", "I visited my old school yesterday."),
         ("Jon", "Paris in the spring was a dream."),
         ("Gina", "Jon visited the bank about the loan."),
         ("Jon", "The studio floor needs new wood."),
         ("Gina", "My cat loves the sofa.")]
QUESTION = "Which cities has Jon visited?"


async def _add(memory, group: str, turns=TURNS, step=timedelta(days=1)) -> None:
    await memory.add_episodes([
        {"group_id": group, "content": text, "actor": who, "reference_time": T0 + i * step,
         "episode_id": f"t{i}"} for i, (who, text) in enumerate(turns)])


@pytest.mark.parametrize("question, noun", [
    ("Which cities has Jon visited?", "cities"),
    ("What instruments does Melanie play?", "instruments"),
    ("What kind of books does Caroline have in her library?", "books"),
    ("Which city have both Jean and John visited?", "city"),  # singular, with "both"
    ("Which  classical musicians does Melanie enjoy listening to?", "musicians"),  # the phrase's head
    ("What kind of dance pieces did Gina's team perform?", "pieces"),
    ("What LGBTQ+ events has Caroline participated in?", "events"),  # modifiers with + - / '
    ("What transgender-specific events has Caroline attended?", "events"),
    ("What musical artists/bands has Melanie seen?", "bands"),        # of "a/b" the last
    ("What kind of art does Caroline make?", None),                   # singular: measured worse
    ("What precautionary sign did Melanie see at the cafe?", None),
    ("What is Jon's favourite city?", None),                  # one thing, not several
    ("What does Melanie do to destress?", None),
    ("What do Jon and Gina both have in common?", None),      # "do" is no category
    ("When did Jon visit Rome?", None),
])
def test_a_list_question_names_its_category(question, noun):
    assert category(question) == noun


def test_members_are_the_nouns_below_the_category_as_full_text_lexemes():
    assert {"rome", "pari", "lisbon"} <= set(members("cities"))
    assert {"clarinet", "guitar", "violin", "piano"} <= set(members("instruments"))
    assert "toddler" in members("children")  # an irregular plural
    assert "citi" not in members("cities")    # the category's own word is the query's
    assert members("xyzzies") == () and member_lexemes("What is Jon's job?") == ()


async def test_a_list_question_finds_turns_naming_members_of_its_category(memory, group):
    await _add(memory, group)
    rome, paris = episode_uuid(group, "t0"), episode_uuid(group, "t3")
    plain = resolve_config("episode_hybrid_rrf", methods=("fulltext",))
    found = await memory.search(QUESTION, group_ids=[group], config=plain)
    # Without members the two turns match by their speaker's name only, below the "visited" turns.
    assert {rome, paris}.isdisjoint(h.id for h in found.episodes[:3])
    assert all("members" not in h.ranks for h in found.episodes)

    config = resolve_config(plain, members_weight=1.5)
    found = await memory.search(QUESTION, group_ids=[group], config=config)
    assert {h.id for h in found.episodes[:2]} == {rome, paris}
    # Only the turns naming a city are in the members list.
    assert {h.id: h.ranks["members"] for h in found.episodes if "members" in h.ranks} in (
        {rome: 1, paris: 2}, {rome: 2, paris: 1})


async def test_a_members_hit_brings_no_neighbouring_turns(memory, group):
    """A turn naming Rome is evidence for "Which cities ..."; the turn after it is not (it would
    be, next to a hit of any other list)."""
    await _add(memory, group, [("Ann", "I visited the museum."), ("Bob", "The museum was closed."),
                               ("Bob", "Lunch later?"), ("Bob", "Rome was warm."), ("Bob", "The pasta was great.")],
               step=timedelta(minutes=1))
    config = resolve_config("episode_hybrid_rrf", methods=("fulltext",), members_weight=1.5, neighbours=20)
    found = await memory.search("Which cities has Ann visited?", group_ids=[group], config=config)
    by_id = {h.id: h for h in found.episodes}
    assert by_id[episode_uuid(group, "t3")].ranks == {"members": 1}
    assert by_id[episode_uuid(group, "t1")].neighbour_of == {episode_uuid(group, "t0"): 1}  # next to a full-text hit
    assert set(by_id) == {episode_uuid(group, f"t{i}") for i in (0, 1, 3)}  # none next to the members hit


async def test_the_default_recipe_ranks_members_and_other_questions_have_none(memory, group):
    await _add(memory, group)
    found = await memory.search(QUESTION, group_ids=[group], limit=3)
    assert {episode_uuid(group, "t0"), episode_uuid(group, "t3")} <= {h.id for h in found.episodes}
    found = await memory.search("Which city has Jon visited?", group_ids=[group])  # one city: no list
    assert all("members" not in h.ranks for h in found.episodes)
    found = await memory.search(QUESTION, group_ids=[group], config=resolve_config(None, members_weight=0))
    assert all("members" not in h.ranks for h in found.episodes)
    found = await memory.search(QUESTION, group_ids=[group], config=resolve_config(None, methods=("cosine",)))
    assert all("members" not in h.ranks for h in found.episodes)


async def test_a_list_question_of_a_category_covering_most_nouns_searches_without_members(memory, group):
    """"What objects has Ann bought?": objects has more members than the SQL accepts (25,634 > 20,000);
    the search failed with "members: 25634 lexemes". Such a category narrows nothing: no members."""
    assert len(members("objects")) > MAX_MEMBERS
    await _add(memory, group)
    found = await memory.search("What objects has Ann bought?", group_ids=[group])
    assert found.episodes and all("members" not in h.ranks for h in found.episodes)
    assert len(member_lexemes("What persons has Ann met?")) == len(members("persons")) > 10000  # under: sent


async def test_members_of_a_search_of_several_groups_come_from_each_group(memory, group):
    other = f"{group}-b"
    await _add(memory, group)
    await _add(memory, other, [("Jon", "Oslo was cold."), ("Jon", "I visited nobody.")])
    found = await memory.search(QUESTION, group_ids=[group, other])
    named = {h.id for h in found.episodes if "members" in h.ranks}
    assert named == {episode_uuid(group, "t0"), episode_uuid(group, "t3"), episode_uuid(other, "t0")}


@pytest.mark.parametrize("value, message", [(-0.1, "members_weight must be between 0 and 10"),
                                            ("1", "members_weight")])
def test_the_members_weight_is_validated(value, message):
    with pytest.raises(InvalidInput, match=message):
        resolve_config("combined_hybrid_rrf", members_weight=value)


def test_the_sql_refuses_an_oversized_members_option(db_dsn):
    with psycopg.connect(db_dsn) as conn, pytest.raises(psycopg.errors.InvalidParameterValue,
                                                        match="members: 20001 lexemes"):
        conn.execute("SELECT * FROM pgmemory.search_candidates(ARRAY['g-none'], 'q', NULL, %s::jsonb)",
                     (json.dumps({"members": ["x"] * 20001}),))
