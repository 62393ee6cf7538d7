"""Issue 14: every query of a distributed table in sql/ pins its group by equality.

On Citus a query is routed to the one worker holding a group only when each distributed table
it reads is pinned by `group_id = <value>` (in its WHERE, its JOIN ... ON, or the WHERE of the
UPDATE / DELETE). The tables distributed by group are the pgmemory tables with a group_id
column (pgmemory.storage.citus). Each statement under sql/ is parsed with sqlglot
(tests/sql_statements.py opens function bodies); the few allowed exceptions are listed below,
each with its reason. INSERT targets need no pin: the row's own group_id routes it.
"""
from __future__ import annotations

import psycopg
import pytest
import sqlglot
from sqlglot import exp

from tests.sql_statements import Statement, statements

# Functions whose queries may filter with `group_id = ANY (array)`, and why.
ANY_GROUPS_ALLOWED = {
    "pgmemory.search_candidates": "a multi-group search; one group (search_group, what Citus delegates) "
                                  "is pinned by equality there (the 'one' variable)",
    "pgmemory.bfs_entities": "the search's graph walk over the searched groups (one on Citus)",
    "pgmemory_internal.require_group_entities": "checks caller ids against the searched groups (one on Citus)",
    "pgmemory_internal.fact_text_hits": "pg_textsearch full text over the searched groups (one on Citus)",
    "pgmemory_internal.entity_text_hits": "pg_textsearch full text over the searched groups (one on Citus)",
    "pgmemory_internal.episode_text_hits": "pg_textsearch full text over the searched groups (one on Citus)",
    "pgmemory_internal.entity_text_hits_as_of": "full text over the searched groups (one on Citus)",
}
# Statements that read distributed tables across groups on purpose, and why.
UNPINNED_ALLOWED = {
    "function pgmemory_internal.claim_episode": "the queue: finds which groups have work, then pins the one it takes",
    "function pgmemory_internal.reachable_queued_groups": "the queue's groups with work, read shard by shard on Citus",
    "function pgmemory.rebuild_text_stats": "init's one-off rebuild of every group's statistics",
    "function pgmemory_internal.stale_lineages": "init's one-off search of every group for beliefs to re-fold "
                                                 "(joined on group_id)",
    "function pgmemory_internal.track_text_stats": "the statistics trigger reads its statement's transition tables",
    "view pgmemory.episode_queue": "a view over every group: the reader filters by group",
    "view pgmemory.current_facts": "a view over every group: the reader filters by group",
    "view pgmemory.entity_history": "an analyst view over every group: row-level security limits a reader to its groups",
    "view pgmemory.episode_log": "an analyst view over every group: row-level security limits a reader to its groups",
    "view pgmemory.fact_versions": "an analyst view over every group (joined on group_id): the reader filters by group",
    "view pgmemory.believed_facts": "an analyst view over every group (joined on group_id): the reader filters by group",
    "view pgmemory.entity_mentions": "an analyst view over every group (joined on group_id): the reader filters by group",
    "function pgmemory_internal.rebuild_graph_mirror": "one-off rebuild of the AGE mirror for every group (no mirror on Citus)",
    "function pgmemory_internal.mirror_members_added": "the AGE mirror's statement trigger: the groups of its transition "
                                                       "table (no mirror on Citus)",
    "function pgmemory_internal.mirror_members_gone": "the AGE mirror's statement trigger: the groups of its transition "
                                                      "table (no mirror on Citus)",
    "function pgmemory_internal.visible_groups_of": "a role's grants across groups (the grants table, read per role)",
    "top level": "one-off DDL and backfills of init",
    "DO block": "one-off DDL of init",
}


@pytest.fixture(scope="module")
def distributed_tables(db_dsn) -> set[str]:
    """pgmemory tables with a group_id column: what Citus distributes by group."""
    with psycopg.connect(db_dsn) as conn:
        return {r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relnamespace = to_regnamespace('pgmemory') AND c.relkind IN ('r', 'p')"
            "   AND a.attname = 'group_id' AND NOT a.attisdropped").fetchall()}


def parse(statement: Statement) -> exp.Expression:
    # pg_textsearch's <@> is unknown to sqlglot; any binary operator reads the same here.
    return sqlglot.parse_one(statement.sql.replace("<@>", "+"), read="postgres")


def _scope(node: exp.Expression) -> exp.Expression | None:
    """The query whose predicates may pin `node` (its nearest SELECT / UPDATE / DELETE)."""
    parent = node.parent
    while parent is not None and not isinstance(parent, (exp.Select, exp.Update, exp.Delete, exp.Insert)):
        parent = parent.parent
    return parent


def _predicates(scope: exp.Expression) -> list[exp.Expression]:
    found = []
    if scope.args.get("where") is not None:
        found.append(scope.args["where"])
    for join in scope.args.get("joins") or []:
        if join.args.get("on") is not None:
            found.append(join.args["on"])
    return found


def pin(table: exp.Table) -> str | None:
    """'eq' when a predicate of its query says <alias>.group_id = <value> (a variable, a literal,
    a column of an outer query), or = <other table>.group_id of a table of the same query pinned
    so; 'any' for = ANY (...) only, None when nothing pins it. Two tables joined on group_id with
    neither pinned to a value are not pinned: Citus reads every shard of both."""
    scope = _scope(table)
    if scope is None:
        return None
    tables_in_scope = [t for t in scope.find_all(exp.Table) if _scope(t) is scope]
    aliases = {t.alias_or_name for t in tables_in_scope}
    values: dict[str, set[str]] = {}
    links: dict[str, set[str]] = {}
    for predicate in _predicates(scope):
        for eq in predicate.find_all(exp.EQ):
            for side, other in ((eq.this, eq.expression), (eq.expression, eq.this)):
                if not (isinstance(side, exp.Column) and side.name == "group_id"):
                    continue
                owner = side.table or (next(iter(aliases)) if len(aliases) == 1 else None)
                if owner is None:
                    continue
                if (isinstance(other, exp.Column) and other.name == "group_id" and other.table in aliases
                        and other.table != owner):
                    links.setdefault(owner, set()).add(other.table)
                else:
                    values.setdefault(owner, set()).add("any" if isinstance(other, exp.Any) else "eq")
    best = {alias: ("eq" if "eq" in kinds else "any") for alias, kinds in values.items()}
    changed = True
    while changed:  # a join on group_id passes a pin on
        changed = False
        for alias, others in links.items():
            for other in others:
                for a, b in ((alias, other), (other, alias)):
                    if best.get(a) and (best.get(b) is None or best[b] == "any" and best[a] == "eq"):
                        best[b] = best[a]
                        changed = True
    return best.get(table.alias_or_name)


def offences(distributed: set[str]) -> list[str]:
    out = []
    for statement in statements():
        tree = parse(statement)
        for table in tree.find_all(exp.Table):
            if table.db != "pgmemory" or table.name not in distributed:
                continue
            scope = _scope(table)
            if isinstance(scope, exp.Insert) and scope.this is not None and table in scope.this.find_all(exp.Table):
                continue  # an INSERT target: routed by the inserted row's group
            found = pin(table)
            function = statement.owner.removeprefix("function ")
            if found == "eq" or (found == "any" and function in ANY_GROUPS_ALLOWED):
                continue
            if statement.owner in UNPINNED_ALLOWED or statement.owner.split(" ")[0] in ("top", "DO"):
                continue
            what = "only by = ANY (...)" if found == "any" else "not by group_id"
            out.append(f"{statement.file} {statement.owner}: pgmemory.{table.name} "
                       f"{table.alias_or_name!r} pinned {what}: {' '.join(statement.sql.split())[:160]}")
    return out


def test_every_statement_under_sql_parses():
    unparsed = []
    for statement in statements():
        try:
            parse(statement)
        except sqlglot.errors.ParseError as exc:
            unparsed.append(f"{statement.file} {statement.owner}: {str(exc).splitlines()[0]}")
    assert unparsed == []


def test_every_query_of_a_distributed_table_pins_its_group(distributed_tables):
    assert {"episodes", "entities", "facts", "fact_claims", "text_stats"} <= distributed_tables
    assert offences(distributed_tables) == []


def test_the_lint_catches_an_unpinned_query(distributed_tables, monkeypatch):
    """The rule itself: an id-only lookup fails, a group-pinned one passes."""
    import tests.test_sql_routing as lint

    bad = Statement("sql/x.sql", "function pgmemory.f", "SELECT f.fact FROM pgmemory.facts f WHERE f.id = p_id")
    joined = Statement("sql/x.sql", "function pgmemory.f",
                       "SELECT s.name FROM pgmemory.facts f JOIN pgmemory.entities s ON s.id = f.source_id"
                       " WHERE f.group_id = p_group")
    good = Statement("sql/x.sql", "function pgmemory.f",
                     "SELECT s.name FROM pgmemory.facts f JOIN pgmemory.entities s"
                     " ON s.group_id = f.group_id AND s.id = f.source_id WHERE f.group_id = p_group")
    any_only = Statement("sql/x.sql", "function pgmemory.f",
                         "UPDATE pgmemory.entities SET summary = '' WHERE group_id = ANY (p_groups)")
    unpinned_join = Statement("sql/x.sql", "function pgmemory.f",
                              "SELECT s.docs FROM pgmemory.text_stats s JOIN pgmemory.term_stats t"
                              " ON t.group_id = s.group_id AND t.kind = s.kind WHERE s.kind = p_kind")
    pinned_join = Statement("sql/x.sql", "function pgmemory.f",
                            "SELECT s.docs FROM pgmemory.text_stats s JOIN pgmemory.term_stats t"
                            " ON t.group_id = s.group_id AND t.kind = s.kind WHERE s.group_id = p_group")
    monkeypatch.setattr(lint, "statements", lambda: [bad, joined, good, any_only, unpinned_join, pinned_join])
    found = lint.offences(distributed_tables)
    assert len(found) == 5
    assert "pgmemory.facts 'f' pinned not by group_id" in found[0]
    assert "pgmemory.entities 's' pinned not by group_id" in found[1]
    assert "pinned only by = ANY (...)" in found[2]
    assert "pgmemory.text_stats 's' pinned not by group_id" in found[3]
    assert "pgmemory.term_stats 't' pinned not by group_id" in found[4]
