"""Full text in one statement for one group holding few facts (text_one_pass, which search_candidates
calls for them): the same rows, in the same order, with the same scores to the last bit as
text_top_k's two paths, and taken only where it applies."""
from __future__ import annotations

import uuid

import psycopg
from psycopg.types.json import Jsonb

from tests.support import utc
from tests.test_fulltext import ANIMAL_QUERIES, ANIMALS

# text_top_k's arguments (text_one_pass takes one group): kind, group(s), query, k, then the view.
CALL = ("SELECT key, score FROM pgmemory_internal.{fn}(%s, {groups}, %s, %s, %s::timestamptz, %s::timestamptz,"
        " %s::timestamptz, %s, %s::text[], %s::timestamptz[], %s::text[])")
NO_BOUNDS = [None] * 8
# (kind, known_at, point, as_of, superseded, relations, bounds, labels): the usual view of each kind
# and the other views search_candidates asks for.
VIEWS = [
    ("facts", None, "now", None, False, [], NO_BOUNDS, None),
    ("facts", None, "now", None, False, [], [], None),  # the same view as search_candidates writes it out
    ("facts", "2021-06-01", "2021-06-01", None, False, [], NO_BOUNDS, None),   # as recorded then
    ("facts", None, None, None, True, ["KNOWS"], NO_BOUNDS, None),             # superseded too, any time
    ("facts", None, "now", None, False, ["LIKES"], NO_BOUNDS, None),            # a relation no fact has
    ("facts", None, "now", None, False, [], ["2019-06-01", None, None, None, None, None, None, None], None),
    ("entities", None, None, None, None, None, None, []),
    ("entities", None, None, None, None, None, None, ["Animal"]),
    ("entities", "2023-06-01", None, None, None, None, None, []),              # the retired ones were not yet
    ("episodes", None, None, None, None, None, None, []),
    ("episodes", None, None, "2024-06-01", None, None, None, []),              # as of: hides the later ones
]
QUERIES = ANIMAL_QUERIES + ("zebra", "a dog", "who knows an old zebra? lions, cats: number 1, 2 or 3, called")


def load(conn: psycopg.Connection, group: str) -> None:
    """The ANIMALS texts as facts, entities and episodes of the group, with documents out of some
    views (a superseded and an ended fact, retired entities, later episodes) and another group's."""
    for g in (group, f"{group}-other"):
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, 'A'), (%s, %s, 'B')",
                     (uuid.uuid4(), g, uuid.uuid4(), g))
    fact = ("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid, recorded)"
            " SELECT f, f, %(g)s, (SELECT id FROM pgmemory.entities WHERE group_id = %(g)s AND name = 'A'),"
            "        (SELECT id FROM pgmemory.entities WHERE group_id = %(g)s AND name = 'B'), 'KNOWS', t,"
            "        tstzrange(%(v)s, %(e)s), tstzrange(%(r)s, %(x)s)"
            "   FROM (SELECT gen_random_uuid() AS f, t FROM unnest(%(t)s::text[]) AS t) y")
    conn.execute(fact, {"g": group, "t": ANIMALS, "v": utc("2020-01-01"), "e": None, "r": utc("2021-01-01"), "x": None})
    conn.execute(fact, {"g": group, "t": ["zebra zebra zebra"], "v": utc("2020-01-01"), "e": None,
                        "r": utc("2021-01-01"), "x": utc("2022-01-01")})
    conn.execute(fact, {"g": group, "t": ["zebra zebra zebra zebra"], "v": utc("2019-01-01"), "e": utc("2020-01-01"),
                        "r": utc("2021-01-01"), "x": None})
    conn.execute(fact, {"g": f"{group}-other", "t": ["zebra zebra zebra zebra zebra"], "v": utc("2020-01-01"),
                        "e": None, "r": utc("2021-01-01"), "x": None})
    entity = "INSERT INTO pgmemory.entities (id, group_id, name, labels, created_at, retired_at) VALUES (%s, %s, %s, %s, %s, %s)"
    for n, name in enumerate(ANIMALS):
        conn.execute(entity, (uuid.uuid4(), group, name, ["Animal"] if n % 3 else ["Entity"], utc("2023-01-01"), None))
    for name in ("zebra zebra zebra", "zebra zebra zebra zebra lion"):
        conn.execute(entity, (uuid.uuid4(), group, name, ["Animal"], utc("2023-01-01"), utc("2024-01-01")))
    episode = "INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at) VALUES (%s, %s, 'text', %s, %s)"
    for text in ANIMALS:
        conn.execute(episode, (uuid.uuid4(), group, text, utc("2024-01-01")))
    for text in ("zebra zebra zebra", "zebra zebra zebra zebra lion"):
        conn.execute(episode, (uuid.uuid4(), group, text, utc("2024-07-01")))
    conn.execute(episode, (uuid.uuid4(), f"{group}-other", "zebra zebra zebra zebra zebra", utc("2024-01-01")))
    conn.commit()


def top_k(conn: psycopg.Connection, fn: str, probe_rows: str, group: str, view: tuple, query: str, k: int) -> list:
    """The rows of text_one_pass or text_top_k with pgmemory.text_probe_rows set (0: steps)."""
    conn.execute("SELECT set_config('pgmemory.text_probe_rows', %s, false)", (probe_rows,))
    kind, known_at, point, as_of, superseded, relations, bounds, labels = view
    point = conn.execute("SELECT now()").fetchone()[0] if point == "now" else point
    groups = "%s::text" if fn == "text_one_pass" else "ARRAY[%s]"
    return conn.execute(CALL.format(fn=fn, groups=groups), (kind, group, query, k, known_at, point, as_of, superseded,
                                                            relations, bounds, labels)).fetchall()


def text_top_k_calls(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                        " WHERE schemaname = 'pgmemory_internal' AND funcname = 'text_top_k'").fetchone()[0]


def test_one_statement_returns_what_text_top_k_returns_to_the_last_bit(db_dsn, group):
    with psycopg.connect(db_dsn, options="-c track_functions=pl") as conn:
        load(conn, group)
        for view in VIEWS:
            for query in QUERIES:
                for k in (1, 2, 3, 5, 10, 20, 30, 40):
                    one = top_k(conn, "text_one_pass", "100", group, view, query, k)
                    steps = top_k(conn, "text_top_k", "0", group, view, query, k)
                    one_pass = top_k(conn, "text_top_k", "1e9", group, view, query, k)
                    # equal floats, not close ones: the same shares summed in the same order
                    assert one == one_pass == steps, (view, query, k)
                    assert len(one) == k or view[0] == "facts" and view[5] == ["LIKES"] or query == "zebra", \
                        (view, query, k)


SEARCH = "SELECT kind, id, version_id, ranks, detail FROM pgmemory.search_candidates(%s, %s, NULL, %s)"


def test_search_takes_the_one_statement_for_one_group_of_few_facts(db_dsn, group):
    """search_candidates' facts full text: one statement for one group of at most 2 x text_probe_rows
    facts in the usual view (text_top_k not called), text_top_k otherwise (more facts, text_probe_rows
    0, several groups, another view); the same rows every time."""
    with psycopg.connect(db_dsn, options="-c track_functions=pl") as conn:
        load(conn, group)
        facts = conn.execute("SELECT docs FROM pgmemory.text_stats WHERE group_id = %s AND kind = 'facts'",
                             (group,)).fetchone()[0]
        usual = Jsonb({"kinds": ["facts"], "methods": ["fulltext"], "candidates": 30})
        as_recorded = Jsonb({"kinds": ["facts"], "methods": ["fulltext"], "candidates": 30, "known_at": "2021-06-01"})
        for query in QUERIES:
            found = {}
            for probe_rows, groups, opts, one_statement in (
                    (str(facts / 2), [group], usual, True), (str((facts - 1) / 2), [group], usual, False),
                    ("0", [group], usual, False), ("1e9", [group, f"{group}-none"], usual, False),
                    ("1e9", [group], as_recorded, False), ("0", [group], as_recorded, False)):
                conn.execute("SELECT set_config('pgmemory.text_probe_rows', %s, false)", (probe_rows,))
                before = text_top_k_calls(conn)
                rows = sorted(conn.execute(SEARCH, (groups, query, opts)).fetchall(), key=str)
                assert (text_top_k_calls(conn) == before) == one_statement, (query, probe_rows, groups)
                found.setdefault(opts.obj.get("known_at"), []).append(rows)
            for runs in found.values():
                assert runs[0] and all(r == runs[0] for r in runs), query
