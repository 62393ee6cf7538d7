"""What analyst SQL may contain: one SELECT (or a set operation of SELECTs) over the analyst
views, calling only allow-listed functions. Everything else is refused with one clear line.

This is the first guard; the database is the second: `pgmemory sql` runs the generated SQL in a
READ ONLY transaction as the restricted analyst role, under row-level security.
"""
from __future__ import annotations

import re

from sqlglot import exp

from pgmemory.errors import InvalidInput

# Relations an analyst query may read (schema pgmemory; unqualified names mean these).
ALLOWED_VIEWS = frozenset({
    "fact_versions", "believed_facts", "current_facts", "entity_history", "episode_log", "entity_mentions",
    "episode_queue",
})
# Set-returning functions allowed in FROM (pgmemory.* ones must be schema-qualified or bare).
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "entities_at", "entity_versions_of", "unnest", "generate_series", "jsonb_array_elements",
    "jsonb_array_elements_text", "jsonb_each", "jsonb_each_text", "jsonb_object_keys", "regexp_matches",
    "string_to_table",
})
# Functions sqlglot does not model (it parses them as anonymous calls) that analysts may call.
ALLOWED_FUNCTIONS = frozenset({
    "holds_at", "entities_at", "entity_versions_of",
    "upper_inf", "lower_inf", "upper_inc", "lower_inc", "isempty", "tstzrange", "daterange", "range_merge",
    "age", "now", "date_part", "date_bin", "make_interval", "make_timestamptz", "make_date", "to_timestamp",
    "to_date", "timezone", "justify_interval", "justify_days", "cardinality", "array_position",
    "array_to_string", "string_to_array", "array_remove", "array_cat", "array_append",
    "jsonb_array_elements", "jsonb_array_elements_text", "jsonb_each", "jsonb_each_text", "jsonb_object_keys",
    "jsonb_array_length", "jsonb_typeof", "jsonb_build_object", "jsonb_build_array", "jsonb_agg",
    "jsonb_object_agg", "to_jsonb", "json_agg", "jsonb_extract_path_text",
    "initcap", "btrim", "ltrim", "rtrim", "lpad", "rpad", "regexp_replace", "regexp_match", "regexp_matches",
    "strpos", "reverse", "format", "char_length", "octet_length", "string_to_table", "translate",
    "unnest", "generate_series", "mod", "power", "sqrt", "ln", "log", "exp", "sign", "trunc", "width_bucket",
    "percentile_cont", "percentile_disc", "mode", "stddev", "stddev_pop", "stddev_samp", "variance",
    "var_pop", "var_samp", "corr", "bool_and", "bool_or", "every", "string_agg",
    "lag", "lead", "first_value", "last_value", "nth_value", "rank", "dense_rank", "ntile", "percent_rank",
    "cume_dist", "row_number",
})
# Schemas a qualified function may name.
FUNCTION_SCHEMAS = frozenset({"pgmemory", "pg_catalog"})
# Nodes that would write, lock, change settings or leave the query.
FORBIDDEN = (exp.DML, exp.DDL, exp.Drop, exp.Command, exp.Into, exp.Lock, exp.Set, exp.Transaction,
             exp.Commit, exp.Rollback, exp.Use)


def _refuse(message: str) -> InvalidInput:
    return InvalidInput(message)


def single_query(statements: list) -> exp.Expr:
    """The one statement of the text; several (or none) are refused."""
    found = [s for s in statements if s is not None]
    if len(found) != 1:
        raise _refuse(f"one statement only: found {len(found)} (a single SELECT over the analyst views)")
    query = found[0]
    if not isinstance(query, (exp.Select, exp.SetOperation)):
        kind = query.key.upper() if isinstance(query, exp.Expr) else type(query).__name__
        raise _refuse(f"only SELECT queries are allowed, not {kind}")
    return query


def _identifier_name(ident: exp.Identifier) -> str:
    """A name as Postgres compares it: folded to lower case unless quoted."""
    return ident.this if ident.quoted else ident.this.lower()


def _names(ctes: list[exp.Expr]) -> set[str]:
    """The names these CTEs define."""
    aliases = (c.args.get("alias") for c in ctes if isinstance(c, exp.CTE))
    return {_identifier_name(a.this) for a in aliases if a is not None and isinstance(a.this, exp.Identifier)}


def _visible_ctes(node: exp.Expr) -> set[str]:
    """The CTE names visible at `node`, by Postgres's scoping: the WITH of each enclosing query
    (for its body), and inside a CTE's own definition only the CTEs listed before it (every one
    of its list, itself included, under WITH RECURSIVE)."""
    visible: set[str] = set()
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            ctes = list(parent.expressions)
            if not parent.args.get("recursive"):
                ctes = ctes[:next((i for i, c in enumerate(ctes) if c is child), 0)]
            visible |= _names(ctes)
        else:
            with_ = next((v for v in parent.args.values() if isinstance(v, exp.With)), None)
            if with_ is not None and with_ is not child:
                visible |= _names(list(with_.expressions))
        child, parent = parent, parent.parent
    return visible


def is_cte(table: exp.Table) -> bool:
    """Does this table reference name a CTE (unqualified, with a CTE of that name visible here)?"""
    return (isinstance(table.this, exp.Identifier) and not table.text("db") and not table.text("catalog")
            and _identifier_name(table.this) in _visible_ctes(table))


def _function_name(node: exp.Func) -> tuple[str | None, str]:
    """(schema or None, name) of an anonymous call, as Postgres will resolve it."""
    schema = None
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        schema = parent.this.name.lower() if isinstance(parent.this, (exp.Identifier, exp.Column)) else "?"
    return schema, node.name.lower()


def check(query: exp.Expr) -> None:
    """Refuse anything but reads of the analyst views through allowed functions (raises InvalidInput)."""
    for node in query.walk():
        if isinstance(node, FORBIDDEN):
            raise _refuse(f"only reads are allowed: {node.key.upper()} is refused")
        if isinstance(node, (exp.Parameter, exp.Placeholder)):
            # No values are ever bound: "$1" reached asyncpg (Memory.sql), which raised its own
            # two-line InterfaceError, not a refusal.
            raise _refuse(f"query parameters are not supported ({node.sql(dialect='postgres')}): "
                          "write the values into the query")
        if isinstance(node, exp.Table):
            _check_table(node)
        elif isinstance(node, exp.Anonymous):
            schema, name = _function_name(node)
            if name not in ALLOWED_FUNCTIONS or (schema is not None and schema not in FUNCTION_SCHEMAS):
                shown = f"{schema}.{name}" if schema else name
                raise _refuse(f"function {shown} is not allowed in analyst queries")


def _generated_name(node: exp.Func) -> str:
    """The function name Postgres will see for a function sqlglot models (e.g. generate_series)."""
    match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", node.sql(dialect="postgres"))
    return match.group(1).lower() if match else node.key


def _check_table(table: exp.Table) -> None:
    if isinstance(table.this, exp.Func):  # a set-returning function in FROM
        name = table.this.name.lower() if isinstance(table.this, exp.Anonymous) else _generated_name(table.this)
        schema = table.text("db").lower() or None
        if name not in ALLOWED_TABLE_FUNCTIONS or (schema is not None and schema not in FUNCTION_SCHEMAS):
            raise _refuse(f"function {name} is not allowed in FROM: use the analyst views "
                          f"({', '.join(sorted(ALLOWED_VIEWS))})")
        if table.text("catalog"):
            raise _refuse(f"function {name} may not name a database")
        return
    if not isinstance(table.this, exp.Identifier):
        raise _refuse(f"{table.sql()} is not an analyst view")
    name = table.name if table.this.quoted else table.name.lower()
    schema = table.text("db").lower()
    if table.text("catalog") or (schema and schema != "pgmemory"):
        raise _refuse(f"{table.sql()} is not an analyst view: use {', '.join(sorted(ALLOWED_VIEWS))}")
    if is_cte(table):
        return
    if name not in ALLOWED_VIEWS:
        raise _refuse(f"{name} is not an analyst view: use {', '.join(sorted(ALLOWED_VIEWS))}")


def qualify_views(query: exp.Expr) -> exp.Expr:
    """Name schema pgmemory on every analyst view (so no search_path can redirect a name)."""
    for table in list(query.find_all(exp.Table)):
        if isinstance(table.this, exp.Identifier) and not table.text("db") and not is_cte(table):
            table.set("db", exp.to_identifier("pgmemory"))
        elif isinstance(table.this, exp.Anonymous) and table.this.name.lower() in (
                "entities_at", "entity_versions_of") and not table.text("db"):
            table.set("db", exp.to_identifier("pgmemory"))
    return query
