"""`pgmemory sql` / Memory.sql: period clauses rewritten onto the analyst views, refusals of
anything but one read over the allowed views, read-only execution with a timeout and a row cap."""
from __future__ import annotations

import json

import pytest

from pgmemory.analyst.runner import prepare, run
from pgmemory.errors import InvalidInput
from pgmemory.surfaces.cli import main
from tests.analyst_support import career  # noqa: F401 (fixture)
from tests.support import utc


@pytest.mark.parametrize("query, expected", [
    ("SELECT fact FROM fact_versions FOR SYSTEM_TIME AS OF '2024-01-01Z' f",
     "SELECT fact FROM pgmemory.fact_versions AS f WHERE (f.recorded @> CAST('2024-01-01Z' AS TIMESTAMPTZ))"),
    ("SELECT fact FROM fact_versions AS f FOR VALID_TIME AS OF '2021-01-01Z'",
     "SELECT fact FROM pgmemory.fact_versions AS f WHERE (f.valid @> CAST('2021-01-01Z' AS TIMESTAMPTZ))"),
    ("SELECT fact FROM fact_versions FOR SYSTEM_TIME BETWEEN '2024-01-01Z' AND '2024-02-01Z'",
     "SELECT fact FROM pgmemory.fact_versions WHERE (fact_versions.recorded && CASE WHEN"
     " CAST('2024-01-01Z' AS TIMESTAMPTZ) <= CAST('2024-02-01Z' AS TIMESTAMPTZ) THEN TSTZRANGE(CAST('2024-01-01Z' AS TIMESTAMPTZ),"
     " CAST('2024-02-01Z' AS TIMESTAMPTZ), '[]') ELSE CAST('empty' AS TSTZRANGE) END)"),
    ("SELECT fact FROM fact_versions FOR VALID_TIME FROM '2020-01-01Z' TO '2021-01-01Z'",
     "SELECT fact FROM pgmemory.fact_versions WHERE (fact_versions.valid && CASE WHEN"
     " CAST('2020-01-01Z' AS TIMESTAMPTZ) <= CAST('2021-01-01Z' AS TIMESTAMPTZ) THEN TSTZRANGE(CAST('2020-01-01Z' AS TIMESTAMPTZ),"
     " CAST('2021-01-01Z' AS TIMESTAMPTZ), '[)') ELSE CAST('empty' AS TSTZRANGE) END)"),
    ("SELECT fact FROM fact_versions FOR SYSTEM_TIME AS OF now() FOR VALID_TIME AS OF '2021-01-01Z' v",
     "SELECT fact FROM pgmemory.fact_versions AS v WHERE (v.recorded @> CAST(CURRENT_TIMESTAMP AS TIMESTAMPTZ)"
     " AND v.valid @> CAST('2021-01-01Z' AS TIMESTAMPTZ))"),
    ("SELECT f.fact, e.summary FROM fact_versions FOR SYSTEM_TIME ALL f"
     " LEFT JOIN entity_history FOR SYSTEM_TIME AS OF '2024-01-01Z' e ON e.id = f.source_id",
     "SELECT f.fact, e.summary FROM pgmemory.fact_versions AS f LEFT JOIN pgmemory.entity_history AS e"
     " ON (e.id = f.source_id) AND (e.recorded @> CAST('2024-01-01Z' AS TIMESTAMPTZ))"),
    ("SELECT id FROM current_facts WHERE id IN (SELECT id FROM fact_versions FOR VALID_TIME AS OF '2021-01-01Z')",
     "SELECT id FROM pgmemory.current_facts WHERE id IN (SELECT id FROM pgmemory.fact_versions"
     " WHERE (fact_versions.valid @> CAST('2021-01-01Z' AS TIMESTAMPTZ)))"),
])
def test_period_clauses_become_range_predicates(query, expected):
    assert prepare(query) == expected


@pytest.mark.parametrize("query, message", [
    ("SELECT 1; SELECT 2", "one statement only"),
    ("SELECT 1 -- a comment\n; DROP TABLE pgmemory.facts", "one statement only"),
    ("DROP TABLE pgmemory.facts", "only SELECT queries are allowed, not DROP"),
    ("DELETE FROM pgmemory.facts", "only SELECT queries are allowed, not DELETE"),
    ("INSERT INTO pgmemory.settings VALUES ('a', '1')", "only SELECT queries are allowed, not INSERT"),
    ("CREATE TABLE x (a int)", "only SELECT queries are allowed, not CREATE"),
    ("WITH gone AS (DELETE FROM pgmemory.facts RETURNING *) SELECT count(*) FROM gone", "DELETE is refused"),
    ("SELECT * INTO copied FROM fact_versions", "INTO is refused"),
    ("SELECT * FROM fact_versions FOR UPDATE", "LOCK is refused"),
    ("COPY (SELECT * FROM fact_versions) TO '/tmp/out'", "only SELECT queries are allowed, not COPY"),
    ("SELECT pg_read_file('/etc/passwd')", "function pg_read_file is not allowed"),
    ("SELECT pg_catalog.pg_read_file('/etc/passwd')", "function pg_catalog.pg_read_file is not allowed"),
    ("SELECT pg_temp.anything()", "function pg_temp.anything is not allowed"),
    ("SELECT * FROM dblink('host=x', 'SELECT 1') AS t(a int)", "function dblink is not allowed in FROM"),
    ("SELECT set_config('pgmemory.groups', '[\"other\"]', false)", "function set_config is not allowed"),
    ("SELECT current_setting('pgmemory.groups')", "function current_setting is not allowed"),
    ("SELECT query_to_xml('DELETE FROM pgmemory.facts', true, true, '')", "function query_to_xml is not allowed"),
    ("SELECT * FROM pgmemory.facts", "facts is not an analyst view"),
    ("SELECT * FROM pg_catalog.pg_authid", "pg_catalog.pg_authid is not an analyst view"),
    ("SELECT * FROM current_facts FOR SYSTEM_TIME AS OF now()", "current_facts has no system_time period"),
    ("SET ROLE postgres", "only SELECT queries are allowed"),
    ("SELECT FROM WHERE", "could not parse the query"),
    ("SELECT FROM", "could not parse the query: Expected table name but got the end of the query. Line 1, Col: 11"),
    ("SELECT * FROM fact_versions WHERE", "could not parse the query: an incomplete WHERE"),
    ("SELECT * FROM fact_versions FOR SYSTEM_TIME", "FOR SYSTEM_TIME needs its period: AS OF t"),
    ("SELECT * FROM fact_versions FOR SYSTEM_TIME AS OF", "FOR SYSTEM_TIME needs its period"),
    ("SELECT * FROM fact_versions FOR VALID_TIME BETWEEN '2024-01-01'", "FOR VALID_TIME needs its period"),
    ("SELECT * FROM fact_versions FOR VALID_TIME FROM '2024-01-01' TO", "FOR VALID_TIME needs its period"),
    ("   ", "the query must be a non-empty string"),
])
def test_anything_but_one_read_of_the_views_is_refused(query, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace("[", r"\[")):
        prepare(query)


VIEWS_HINT = "is not an analyst view"


@pytest.mark.parametrize("query, refused", [
    # A CTE of the same name elsewhere in the query does not make a base table or catalog name a CTE.
    ("SELECT group_id, fact FROM facts, (WITH facts AS (SELECT 1) SELECT 1) y", "facts"),
    ("SELECT rolname, rolsuper FROM pg_roles, (WITH pg_roles AS (SELECT 1) SELECT 1) y", "pg_roles"),
    ("SELECT * FROM pg_stat_activity, (WITH pg_stat_activity AS (SELECT 1) SELECT 1) y", "pg_stat_activity"),
    ("SELECT count(*) FROM graph_vertices, (WITH graph_vertices AS (SELECT 1) SELECT 1) y", "graph_vertices"),
    ("SELECT (WITH api_keys AS (SELECT 1) SELECT 1) FROM api_keys", "api_keys"),
    # Nested WITH: the inner CTE is visible inside its own query only.
    ("SELECT * FROM (WITH settings AS (SELECT 1) SELECT * FROM settings) s, settings", "settings"),
    ("SELECT * FROM current_facts WHERE EXISTS (WITH pg_proc AS (SELECT 1) SELECT 1) AND id IN"
     " (SELECT oid FROM pg_proc)", "pg_proc"),
    # A CTE defined in a sibling subquery or set-operation member.
    ("SELECT * FROM (WITH facts AS (SELECT 1) SELECT 1) a, (SELECT * FROM facts) b", "facts"),
    ("(WITH facts AS (SELECT 1 AS x) SELECT x FROM facts) UNION SELECT 1 FROM facts", "facts"),
    # Inside a CTE's own definition: not itself, nor one listed after it (without RECURSIVE).
    ("WITH facts AS (SELECT * FROM facts) SELECT * FROM facts", "facts"),
    ("WITH a AS (SELECT * FROM pg_roles), pg_roles AS (SELECT 1) SELECT * FROM a", "pg_roles"),
    # A recursive CTE sees itself, but only inside its own query.
    ("SELECT rolname FROM (WITH RECURSIVE pg_roles(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM pg_roles"
     " WHERE n < 2) SELECT n FROM pg_roles) r, pg_roles", "pg_roles"),
    # A quoted CTE name is case sensitive, as in Postgres.
    ('WITH "FACTS" AS (SELECT 1) SELECT * FROM facts', "facts"),
    ('WITH RECURSIVE "N"(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) SELECT * FROM "N"', "n"),
])
def test_a_cte_name_hides_a_table_only_where_the_cte_is_in_scope(query, refused):
    with pytest.raises(InvalidInput, match=f"^{refused} {VIEWS_HINT}"):
        prepare(query)


@pytest.mark.parametrize("query, expected", [
    # A CTE named like a view: the view inside the CTE's definition, the CTE after it.
    ("WITH current_facts AS (SELECT fact FROM current_facts) SELECT count(*) FROM current_facts",
     "WITH current_facts AS (SELECT fact FROM pgmemory.current_facts) SELECT COUNT(*) FROM current_facts"),
    # Enclosing CTEs are visible in nested queries and in later CTEs of the list.
    ("WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM (WITH c AS (SELECT * FROM b) SELECT * FROM c) s"
     " WHERE EXISTS (SELECT 1 FROM a)",
     "WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM (WITH c AS (SELECT * FROM b) SELECT * FROM c)"
     " AS s WHERE EXISTS(SELECT 1 FROM a)"),
    ("WITH c AS (SELECT 1 AS x) SELECT x FROM c UNION SELECT x FROM c",
     "WITH c AS (SELECT 1 AS x) SELECT x FROM c UNION SELECT x FROM c"),
    # WITH RECURSIVE: every CTE of the list is visible in each, itself included.
    ("WITH RECURSIVE a AS (SELECT * FROM b), b AS (SELECT 1 AS x) SELECT * FROM a",
     "WITH RECURSIVE a AS (SELECT * FROM b), b AS (SELECT 1 AS x) SELECT * FROM a"),
    ('WITH "facts" AS (SELECT 1 AS x) SELECT x FROM FACTS', 'WITH "facts" AS (SELECT 1 AS x) SELECT x FROM FACTS'),
])
def test_a_cte_in_scope_is_read_as_the_cte(query, expected):
    assert prepare(query) == expected


def test_postgres_resolves_the_names_as_the_policy_does(conn, career):
    """The CTEs the policy leaves unqualified are the ones Postgres reads (not the views of that name)."""
    assert run(conn, "WITH current_facts AS (SELECT 'the cte' AS fact) SELECT fact FROM current_facts").rows == [
        ("the cte",)]
    rows = run(conn, f"WITH fact_versions AS (SELECT target FROM fact_versions WHERE group_id = '{career['group']}')"
                     " SELECT DISTINCT target FROM fact_versions ORDER BY 1").rows
    assert rows == [("Acme",), ("Globex",)]
    assert run(conn, "WITH RECURSIVE a AS (SELECT x FROM b), b AS (SELECT 1 AS x) SELECT x FROM a").rows == [(1,)]
    assert run(conn, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3)"
                     " SELECT count(*) FROM n").rows == [(3,)]


async def test_memory_sql_refuses_a_base_table_behind_a_cte_of_its_name(memory):
    """The app login reads through the API's pool: a shadowing CTE elsewhere reaches no table."""
    for table in ("facts", "pg_roles", "api_keys", "settings"):
        with pytest.raises(InvalidInput, match=f"^{table} {VIEWS_HINT}"):
            await memory.sql(f"SELECT * FROM {table}, (WITH {table} AS (SELECT 1) SELECT 1) y", group_ids=["g"])


def test_a_comment_cannot_carry_a_statement_into_the_query():
    assert prepare("SELECT 1 /* ; DROP TABLE pgmemory.facts; */ AS one") == "SELECT 1 AS one"


def test_system_and_valid_time_answer_what_was_believed(conn, career):
    g = career["group"]

    def targets(query, **params):
        return run(conn, query.format(g=g, **params)).rows
    # Believed right after the first write: Acme, open.
    assert targets("SELECT target, valid_to FROM fact_versions FOR SYSTEM_TIME AS OF '{t1}' v"
                   " WHERE group_id = '{g}'", t1=career["t1"].isoformat()) == [("Acme", None)]
    # Believed now about mid-2021: Acme (ended in 2022 since).
    assert targets("SELECT target, valid_to FROM fact_versions FOR SYSTEM_TIME AS OF now()"
                   " FOR VALID_TIME AS OF '2021-06-01Z' WHERE group_id = '{g}'") == [("Acme", utc("2022-01-01"))]
    # A join and a subquery, each view with its own clause.
    rows = targets("SELECT f.target, (SELECT count(*) FROM fact_versions FOR VALID_TIME AS OF '2023-01-01Z' x"
                   "   WHERE x.group_id = f.group_id AND x.believed) AS believed_2023"
                   " FROM fact_versions FOR SYSTEM_TIME AS OF now() f"
                   " JOIN entity_history FOR SYSTEM_TIME AS OF now() e ON e.id = f.target_id"
                   " WHERE f.group_id = '{g}' ORDER BY 1")
    assert rows == [("Acme", 1), ("Globex", 1)]


def test_rows_are_capped_and_marked(conn, career):
    result = run(conn, f"SELECT * FROM fact_versions WHERE group_id = '{career['group']}'", max_rows=2)
    assert len(result.rows) == 2 and result.truncated
    assert not run(conn, f"SELECT * FROM fact_versions WHERE group_id = '{career['group']}'", max_rows=3).truncated


def test_a_long_query_is_cancelled_at_the_timeout(conn):
    with pytest.raises(InvalidInput, match="ran longer than 0.05 s and was cancelled"):
        run(conn, "SELECT count(*) FROM generate_series(1, 100000000) a", timeout_s=0.05)
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is usable afterwards


def test_bad_arguments_are_one_line_errors(conn):
    with pytest.raises(InvalidInput, match="max_rows must be between 1 and 100000, got 0"):
        run(conn, "SELECT 1", max_rows=0)
    with pytest.raises(InvalidInput, match="group_ids must name at least one group"):
        run(conn, "SELECT 1", groups=[])


def test_the_database_refuses_writes_even_past_the_checks(conn, monkeypatch):
    """Second guard: were a write to slip past the checks, the READ ONLY transaction refuses it."""
    from pgmemory.analyst import runner

    monkeypatch.setattr(runner, "prepare", lambda query: "INSERT INTO pgmemory.settings VALUES ('sneaky', '1')")
    with pytest.raises(InvalidInput, match="cannot execute INSERT in a read-only transaction"):
        run(conn, "SELECT 1")
    assert conn.execute("SELECT count(*) FROM pgmemory.settings WHERE key = 'sneaky'").fetchone() == (0,)


async def test_memory_sql_runs_the_same_rewrite(memory, conn, career):
    result = await memory.sql("SELECT target FROM fact_versions FOR SYSTEM_TIME AS OF now()"
                              " FOR VALID_TIME AS OF '2023-01-01Z' ORDER BY 1", group_ids=[career["group"]])
    assert result.columns == ["target"] and result.rows == [("Globex",)]
    with pytest.raises(InvalidInput, match="one statement only"):
        await memory.sql("SELECT 1; SELECT 2")


def test_cli_prints_table_csv_json_and_the_rewritten_sql(career, capsys, monkeypatch, db_dsn):
    monkeypatch.setenv("PGMEMORY_DSN", db_dsn)
    query = ("SELECT target, valid_from FROM fact_versions FOR SYSTEM_TIME AS OF now() "
             f"WHERE group_id = '{career['group']}' ORDER BY 1")
    assert main(["sql", query, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"target": "Acme", "valid_from": "2020-01-01T00:00:00+00:00"},
        {"target": "Globex", "valid_from": "2022-01-01T00:00:00+00:00"}]
    assert main(["sql", query, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "target,valid_from", "Acme,2020-01-01T00:00:00+00:00", "Globex,2022-01-01T00:00:00+00:00"]
    assert main(["sql", query]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["target", "|", "valid_from"] and table[-1] == "(2 rows)"
    assert main(["sql", query, "--explain"]) == 0
    assert "f.recorded @>" not in capsys.readouterr().out  # no alias: qualified by the view name
    assert main(["sql", "DELETE FROM pgmemory.facts"]) == 2
    assert capsys.readouterr().err.strip() == "pgmemory: error: only SELECT queries are allowed, not DELETE"


def test_a_time_at_infinity_is_read_not_an_error(conn):
    """A fact may start at -infinity (docs/sql.md): `pgmemory sql` reads it as the word, in a
    column and in a range, instead of failing the query on Python's datetime limits."""
    result = run(conn, "SELECT '-infinity'::timestamptz AS a, 'infinity'::timestamp AS b, '-infinity'::date AS c,"
                       " tstzrange('-infinity', '2021-01-01Z') AS r, '2020-01-01Z'::timestamptz AS d")
    (a, b, c, r, d), = result.rows
    assert (a, b, c, r.lower) == ("-infinity", "infinity", "-infinity", "-infinity")
    assert r.upper == utc("2021-01-01") and d == utc("2020-01-01")


async def test_memory_sql_reads_infinity_as_the_cli_does(memory, conn):
    """Memory.sql (asyncpg) gave a -infinity start as a naive datetime(1, 1, 1) (and infinity as
    naive 9999-12-31) next to aware times: another answer than `pgmemory sql` for the same query."""
    query = ("SELECT '-infinity'::timestamptz AS a, 'infinity'::timestamp AS b, '-infinity'::date AS c,"
             " tstzrange('-infinity', '2021-01-01Z') AS r, '2020-01-01Z'::timestamptz AS d,"
             " ARRAY['infinity'::timestamptz] AS e")
    (a, b, c, r, d, e), = (await memory.sql(query)).rows
    assert (a, b, c, r.lower, e) == ("-infinity", "infinity", "-infinity", "-infinity", ["infinity"])
    assert r.upper == utc("2021-01-01") and d == utc("2020-01-01")
    (pa, pb, pc, pr, pd, pe), = run(conn, query).rows
    assert (pa, pb, pc, pr.lower, pd) == (a, b, c, r.lower, d)



@pytest.mark.parametrize("reversed_, ordered", [
    ("FOR VALID_TIME BETWEEN '2023-01-01Z' AND '2021-01-01Z'",
     "FOR VALID_TIME BETWEEN '2021-01-01Z' AND '2023-01-01Z'"),
    ("FOR SYSTEM_TIME BETWEEN now() AND '2000-01-01Z'", "FOR SYSTEM_TIME BETWEEN '2000-01-01Z' AND now()"),
    ("FOR VALID_TIME FROM '2023-01-01Z' TO '2021-01-01Z'", "FOR VALID_TIME FROM '2021-01-01Z' TO '2023-01-01Z'"),
    ("FOR SYSTEM_TIME FROM now() TO '2000-01-01Z'", "FOR SYSTEM_TIME FROM '2000-01-01Z' TO now()"),
])
def test_a_period_with_reversed_bounds_is_empty_not_an_error(conn, career, reversed_, ordered):
    """SQL:2011's BETWEEN is ASYMMETRIC and FROM a TO b needs a < b (as in DB2 and MariaDB): reversed
    bounds select no rows, where Postgres' tstzrange(a, b) with a > b failed the whole query."""
    query = "SELECT target FROM fact_versions {} WHERE group_id = '%s'" % career["group"]
    assert run(conn, query.format(reversed_)).rows == []
    assert run(conn, query.format(ordered)).rows  # the same bounds in order do select


@pytest.mark.parametrize("clause", [
    "FOR VALID_TIME AS OF NULL",
    "FOR VALID_TIME BETWEEN NULL AND NULL",
    "FOR VALID_TIME BETWEEN '2000-01-01Z' AND NULL",
    "FOR SYSTEM_TIME FROM NULL TO now()",
    "FOR SYSTEM_TIME FROM (SELECT max(recorded_from) FROM fact_versions WHERE false) TO now()",
])
def test_a_period_with_a_null_bound_selects_nothing(conn, career, clause):
    """A NULL bound (a scalar subquery that found nothing) is an unknown period: no rows, as AS OF
    NULL and SQL:2011's comparisons give, not tstzrange's unbounded end, which widened it to all time."""
    query = f"SELECT target FROM fact_versions {clause} WHERE group_id = '{career['group']}'"
    assert run(conn, query).rows == []


def test_a_period_between_equal_bounds_is_that_instant(conn, career):
    """BETWEEN t AND t is the instant t (closed at both ends): not emptied by the reversed-bounds rule."""
    query = ("SELECT target FROM fact_versions FOR VALID_TIME BETWEEN '2021-06-01Z' AND '2021-06-01Z'"
             f" FOR SYSTEM_TIME AS OF now() WHERE group_id = '{career['group']}'")
    assert run(conn, query).rows == [("Acme",)]


@pytest.mark.parametrize("with_interval, literal", [
    ("FOR VALID_TIME FROM timestamptz '2021-06-02Z' - interval '1 day' TO '2021-06-03Z'",
     "FOR VALID_TIME FROM '2021-06-01Z' TO '2021-06-03Z'"),
    ("FOR VALID_TIME FROM timestamptz '2021-06-02Z' - interval '1' day TO timestamptz '2021-06-02Z' + interval '1 day'",
     "FOR VALID_TIME FROM '2021-06-01Z' TO '2021-06-03Z'"),
    ("FOR SYSTEM_TIME FROM now() - interval '100 years' TO now()", "FOR SYSTEM_TIME FROM '1926-01-01Z' TO now()"),
])
def test_a_period_start_ending_in_an_interval_is_read(conn, career, with_interval, literal):
    """"FROM now() - interval '1 day' TO now()": the TO ends the period's start (sqlglot read it as an
    interval span "day to <unit>", and the query failed with an internal error)."""
    query = "SELECT target FROM fact_versions {} WHERE group_id = '%s' ORDER BY 1" % career["group"]
    rows = run(conn, query.format(with_interval)).rows
    assert rows and rows == run(conn, query.format(literal)).rows


def test_an_interval_span_of_two_units_is_still_read():
    assert prepare("SELECT interval '1' day to second AS span") == "SELECT INTERVAL '1' DAY TO SECOND AS span"


def test_a_query_nested_too_deeply_is_one_line_not_a_recursion_error():
    """sqlglot parses recursively: some 50 nested parentheses raised RecursionError (a traceback
    out of `pgmemory sql`) instead of a refusal."""
    for query in ("SELECT " + "(" * 60 + "1" + ")" * 60, "SELECT * FROM (" * 200 + "SELECT 1" + ") s" * 200,
                  "SELECT " + "coalesce(" * 100 + "1" + ")" * 100):
        with pytest.raises(InvalidInput, match="nested too deeply"):
            prepare(query)


@pytest.mark.parametrize("query, message", [
    ("WITH fact_versions AS (SELECT 1) SELECT * FROM fact_versions FOR SYSTEM_TIME AS OF now()",
     "fact_versions here is a WITH query, which has no period"),
    ("SELECT * FROM entities_at('g', now(), NULL) FOR VALID_TIME ALL", "entities_at has no valid_time period"),
])
def test_a_period_clause_on_what_has_no_period_names_it(query, message):
    """A CTE named like a view is not the view (its clause became a predicate on a column the CTE
    lacks, a database error); a function in FROM was named '' in the message."""
    with pytest.raises(InvalidInput, match=message):
        prepare(query)


# fact_versions' columns with `recorded` and `valid` swapped by a column alias list.
SWAPPED = ("id, version_id, group_id, source, relation, target, fact, valid_from, valid_to, valid_from_unknown,"
           " recorded_from, recorded_to, believed, is_event, recorded, valid")


@pytest.mark.parametrize("with_clause, by_hand", [
    # The view with the clause on the nullable side of a RIGHT JOIN (the predicate went into the
    # WHERE and dropped the right side's unmatched rows).
    ("SELECT a.target, f.target FROM fact_versions FOR VALID_TIME AS OF '2021-06-01Z' f"
     " RIGHT JOIN fact_versions a ON a.version_id = f.version_id WHERE a.group_id = '{g}'",
     "SELECT a.target, f.target FROM (SELECT * FROM fact_versions WHERE valid @> timestamptz '2021-06-01Z') f"
     " RIGHT JOIN fact_versions a ON a.version_id = f.version_id WHERE a.group_id = '{g}'"),
    # The preserved side of a RIGHT JOIN ... ON (the predicate in the ON filtered nothing).
    ("SELECT a.target, f.target FROM fact_versions a RIGHT JOIN fact_versions FOR VALID_TIME AS OF '2021-06-01Z' f"
     " ON a.version_id = f.version_id WHERE f.group_id = '{g}'",
     "SELECT a.target, f.target FROM fact_versions a RIGHT JOIN fact_versions f ON a.version_id = f.version_id"
     " WHERE f.group_id = '{g}' AND f.valid @> timestamptz '2021-06-01Z'"),
    # A FULL JOIN (neither the ON nor the WHERE restricts one side only).
    ("SELECT a.target, f.target FROM (SELECT * FROM fact_versions WHERE group_id = '{g}') a"
     " FULL JOIN fact_versions FOR VALID_TIME AS OF '2021-06-01Z' f ON a.version_id = f.version_id AND f.group_id = '{g}'"
     " WHERE coalesce(a.group_id, f.group_id) = '{g}'",
     "SELECT a.target, f.target FROM (SELECT * FROM fact_versions WHERE group_id = '{g}') a"
     " FULL JOIN (SELECT * FROM fact_versions WHERE valid @> timestamptz '2021-06-01Z') f"
     " ON a.version_id = f.version_id AND f.group_id = '{g}' WHERE coalesce(a.group_id, f.group_id) = '{g}'"),
    # A LEFT JOIN by USING or NATURAL has no ON: the predicate went into the WHERE.
    ("SELECT a.target, f.target FROM fact_versions a"
     " LEFT JOIN fact_versions FOR VALID_TIME AS OF '2021-06-01Z' f USING (version_id) WHERE a.group_id = '{g}'",
     "SELECT a.target, f.target FROM fact_versions a LEFT JOIN fact_versions f"
     " ON f.version_id = a.version_id AND f.valid @> timestamptz '2021-06-01Z' WHERE a.group_id = '{g}'"),
    ("SELECT count(*), count(f.target) FROM (SELECT version_id, group_id FROM fact_versions) a"
     " NATURAL LEFT JOIN fact_versions FOR VALID_TIME AS OF '2021-06-01Z' f WHERE a.group_id = '{g}'",
     "SELECT count(*), count(f.target) FROM fact_versions a LEFT JOIN fact_versions f"
     " ON f.version_id = a.version_id AND f.valid @> timestamptz '2021-06-01Z' WHERE a.group_id = '{g}'"),
    # A parenthesized join under a RIGHT JOIN.
    ("SELECT a.target, f.target FROM (fact_versions FOR VALID_TIME AS OF '2021-06-01Z' f"
     " JOIN entity_history e ON e.id = f.source_id) RIGHT JOIN fact_versions a ON a.version_id = f.version_id"
     " WHERE a.group_id = '{g}'",
     "SELECT a.target, f.target FROM ((SELECT * FROM fact_versions WHERE valid @> timestamptz '2021-06-01Z') f"
     " JOIN entity_history e ON e.id = f.source_id) RIGHT JOIN fact_versions a ON a.version_id = f.version_id"
     " WHERE a.group_id = '{g}'"),
    # A column alias list renaming the period's column: the clause is on the view's `recorded`,
    # not on whatever the alias list names `recorded`.
    ("SELECT f.target FROM fact_versions FOR SYSTEM_TIME AS OF '{t1}' f(%s) WHERE f.group_id = '{g}'" % SWAPPED,
     "SELECT f.target FROM fact_versions f WHERE f.group_id = '{g}' AND f.recorded @> timestamptz '{t1}'"),
])
def test_a_period_clause_restricts_its_view_whatever_the_join(conn, career, with_clause, by_hand):
    """FOR ... on a view means that view's rows in the period, as a derived table of them would:
    under outer joins the ON or the WHERE it was ANDed into did not (rows of the other side lost,
    or rows outside the period kept)."""
    params = dict(g=career["group"], t1=career["t1"].isoformat())
    expected = sorted(run(conn, by_hand.format(**params)).rows, key=repr)
    assert expected  # the story answers something
    assert sorted(run(conn, with_clause.format(**params)).rows, key=repr) == expected


@pytest.mark.parametrize("query", ["SELECT $1", "SELECT * FROM fact_versions WHERE id = $1::uuid", "SELECT ?",
                                   "SELECT %s", "SELECT :name", "SELECT $name"])
def test_query_parameters_are_refused(query):
    with pytest.raises(InvalidInput, match="query parameters are not supported"):
        prepare(query)


async def test_memory_sql_refuses_parameters_and_unreadable_times_in_one_line(memory, conn):
    """Memory.sql raised asyncpg's InterfaceError (two lines) for "$1", and asyncpg's bare
    OverflowError / ValueError for a time outside Python's years 1 to 9999, where `pgmemory sql`
    answers one InvalidInput line."""
    with pytest.raises(InvalidInput, match="query parameters"):
        await memory.sql("SELECT $1")
    for query in ("SELECT '10000-01-01Z'::timestamptz", "SELECT '0044-03-15 BC'::date",
                  "SELECT '294276-12-31'::timestamp"):
        with pytest.raises(InvalidInput, match="the query failed") as raised:
            await memory.sql(query)
        assert "\n" not in str(raised.value)
        with pytest.raises(InvalidInput, match="the query failed"):
            run(conn, query)


def test_json_output_is_valid_json_for_any_column_type(conn):
    """`pgmemory sql --format json` raised a TypeError traceback for bytea, a time of day, a
    multirange or an inet column, and printed NaN / Infinity, which JSON does not have."""
    from pgmemory.surfaces.sql_cli import render

    result = run(conn, "SELECT '\\x00ff'::bytea AS b, '12:00+05'::timetz AS tz, '{[1,2)}'::int4multirange AS m,"
                       " '192.168.0.1/24'::inet AS i, 'NaN'::numeric AS n, '-Infinity'::float8 AS f,"
                       " ARRAY['\\x01'::bytea] AS ab")
    rendered = render(result, "json")
    row, = json.loads(rendered, parse_constant=lambda word: pytest.fail(f"{word} is not JSON"))
    assert row == {"b": "\\x00ff", "tz": "12:00:00+05:00", "m": ["[1,2)"], "i": "192.168.0.1/24",
                   "n": "NaN", "f": "-Infinity", "ab": ["\\x01"]}
    assert "\\x00ff" in render(result, "table") and "\\x00ff" in render(result, "csv")


async def test_text_that_is_not_utf8_is_refused_in_one_line(memory, conn, capsys, monkeypatch, db_dsn):
    """A lone surrogate (argv or a pipe holding bytes that are not UTF-8, read with surrogateescape)
    reached the drivers: psycopg raised UnicodeEncodeError (a traceback out of `pgmemory sql`), and
    asyncpg broke the pooled connection (Memory.sql: InterfaceError, the connection is closed)."""
    import io
    import sys

    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        prepare("SELECT '\udcff'")
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        run(conn, "SELECT '\udcff'")
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        await memory.sql("SELECT 1 AS \"\ud800\"")
    assert (await memory.sql("SELECT 1 AS one")).rows == [(1,)]
    monkeypatch.setenv("PGMEMORY_DSN", db_dsn)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"SELECT 1 AS \xff"), encoding="utf-8"))
    assert main(["sql", "-"]) == 2
    assert capsys.readouterr().err.strip() == "pgmemory: error: the query is not valid UTF-8 text (character 13)"
