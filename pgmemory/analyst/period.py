"""SQL:2011-style period clauses, parsed by a small extension of sqlglot's Postgres dialect and
rewritten into range predicates on the analyst views' `valid` / `recorded` columns.

    FOR SYSTEM_TIME AS OF t          ->  recorded @> t        (transaction time T')
    FOR SYSTEM_TIME BETWEEN a AND b  ->  recorded && [a, b]   (empty if a > b)
    FOR SYSTEM_TIME FROM a TO b      ->  recorded && [a, b)   (empty if a >= b)
    FOR SYSTEM_TIME ALL              ->  every version (no predicate)
    FOR VALID_TIME ...               ->  the same on valid  (world time T)

A clause follows the view name (before or after its alias); both axes may be given on one view.
The predicate lands in the ON of the inner or left join that brings the view in, else in the
WHERE of the SELECT whose FROM names it when no outer join there null-extends the view; elsewhere
(right / full joins, USING or NATURAL left joins, parenthesized joins, column alias lists) the
view becomes a subquery of its rows in the period (_attach). Nothing is spliced as text: the
query is parsed, the tree rewritten, and the SQL generated from the tree.
"""
from __future__ import annotations

import re

import logging

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError

from pgmemory.analyst.policy import is_cte
from pgmemory.errors import InvalidInput

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # no "falling back to Command" warnings on stderr

SYSTEM_TIME, VALID_TIME = "SYSTEM_TIME", "VALID_TIME"
INTERVAL_UNITS = frozenset(("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"))  # of "DAY TO SECOND"
# Views that carry a period, and the range column of each axis.
PERIODS: dict[str, dict[str, str]] = {
    "fact_versions": {SYSTEM_TIME: "recorded", VALID_TIME: "valid"},
    "believed_facts": {VALID_TIME: "valid"},
    "entity_history": {SYSTEM_TIME: "recorded"},
}


class Temporal(Postgres):
    """Postgres, plus FOR SYSTEM_TIME / FOR VALID_TIME clauses after a table or its alias."""

    class Parser(Postgres.Parser):
        VERSION_PHRASES = {("FOR", "SYSTEM_TIME"): SYSTEM_TIME, ("FOR", "VALID_TIME"): VALID_TIME}

        def _parse_version(self):
            clauses = []
            while (clause := super()._parse_version()) is not None:
                clauses.append(clause)
            if not clauses:
                return None
            return clauses[0] if len(clauses) == 1 else exp.Tuple(expressions=clauses)

        def _parse_historical_data(self):
            return self._parse_version() or super()._parse_historical_data()

        def _parse_interval(self, *args, **kwargs):
            """An interval's TO spans two units only ("interval '1' day to second"): before anything
            else it ends a FROM ... TO period's start ("FROM now() - interval '1 day' TO now()")."""
            start = self._index
            interval = super()._parse_interval(*args, **kwargs)
            span = interval.find(exp.IntervalSpan) if interval is not None else None
            if span is not None and not (
                    isinstance(span.expression, exp.Var) and span.expression.name.upper() in INTERVAL_UNITS):
                to = next(i for i in range(start, self._index) if self._tokens[i].text.upper() == "TO")
                self._retreat(to)  # (what followed TO, maybe read as a sum of intervals, is read again)
                interval = span.parent
                interval.set("unit", span.this)
            return interval


def parse(query: str) -> list[exp.Expr | None]:
    """Parse analyst SQL (with period clauses); a syntax error is one InvalidInput line."""
    try:
        return sqlglot.parse(query, dialect=Temporal)
    except (ParseError, TokenError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        raise InvalidInput(f"could not parse the query: {_readable(first)}") from None


def _readable(message: str) -> str:
    """sqlglot's message in the query's words: a token as its text ("the end of the query" for
    the sentinel), a clause missing its part as "an incomplete WHERE"."""
    message = re.sub(r"<Token token_type: TokenType\.SENTINEL\b[^>]*>", "the end of the query", message)
    message = re.sub(r"<Token token_type: TokenType\.\w+, text: (.*?), line: \d+[^>]*>", r"'\1'", message)
    return re.sub(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>",
                  lambda m: f"an incomplete {m.group(1).upper()}", message)


def _clauses(table: exp.Table) -> list[exp.Version]:
    found: list[exp.Version] = []
    for key in ("version", "when"):
        node = table.args.get(key)
        if isinstance(node, exp.Version):
            found.append(node)
        elif isinstance(node, exp.Tuple) and all(isinstance(v, exp.Version) for v in node.expressions):
            found.extend(node.expressions)
    return found


def _timestamptz(value: exp.Expr) -> exp.Expr:
    return exp.Cast(this=value.copy(), to=exp.DataType.build("timestamptz"))


def _predicate(column: exp.Column, clause: exp.Version) -> exp.Expr | None:
    kind = clause.args.get("kind")
    if kind == "ALL":
        return None
    value = clause.expression
    bounds = getattr(value, "expressions", ())
    if value is None or (kind in ("BETWEEN", "FROM") and (len(bounds) != 2 or None in bounds)):
        raise InvalidInput(f"FOR {clause.this} needs its period: AS OF t, BETWEEN a AND b, FROM a TO b or ALL")
    if kind == "AS OF":
        return exp.ArrayContainsAll(this=column, expression=_timestamptz(clause.expression))
    if kind in ("BETWEEN", "FROM"):
        # Reversed bounds (start > end) are an empty period, as in SQL:2011 (BETWEEN is ASYMMETRIC),
        # not tstzrange's error; so is a NULL bound (unknown, as AS OF NULL: no rows), not
        # tstzrange's unbounded end. FROM t TO t is already tstzrange's empty range.
        start, end = (_timestamptz(v) for v in clause.expression.expressions)
        bounds = exp.Literal.string("[]" if kind == "BETWEEN" else "[)")
        span = exp.Anonymous(this="tstzrange", expressions=[start, end, bounds])
        empty = exp.Cast(this=exp.Literal.string("empty"), to=exp.DataType.build("tstzrange"))
        period = exp.Case(ifs=[exp.If(this=exp.LTE(this=start.copy(), expression=end.copy()), true=span)],
                          default=empty)
        return exp.ArrayOverlaps(this=column, expression=period)
    raise InvalidInput(f"FOR {clause.this} {kind} is not supported: use AS OF, BETWEEN ... AND ..., "
                       "FROM ... TO ... or ALL")


def rewrite_periods(tree: exp.Expr) -> exp.Expr:
    """Replace every period clause of `tree` (in place) by range predicates; returns the tree."""
    for table in list(tree.find_all(exp.Table)):
        clauses = _clauses(table)
        if not clauses:
            continue
        # A CTE has no period whatever its name (one named fact_versions is not the view); a
        # function in FROM is named by its function (table.name is empty).
        if isinstance(table.this, exp.Func):
            name, axes = (table.this.name or table.this.key).lower(), None
        else:
            name = table.name.lower()
            axes = None if is_cte(table) else PERIODS.get(name)
        seen: set[str] = set()
        predicates = []
        for clause in clauses:
            axis = clause.this
            if axes is None and is_cte(table):
                raise InvalidInput(f"{name} here is a WITH query, which has no period; "
                                   f"FOR {axis} applies to the views themselves")
            if axes is None or axis not in axes:
                carriers = ", ".join(v for v, a in sorted(PERIODS.items()) if axis in a)
                raise InvalidInput(f"{name} has no {axis.lower()} period; FOR {axis} applies to {carriers}")
            if axis in seen:
                raise InvalidInput(f"two FOR {axis} clauses on {name}")
            seen.add(axis)
            alias = table.args.get("alias")
            qualifier = alias.this if alias is not None and alias.this is not None else table.this
            column = exp.column(axes[axis], table=qualifier.copy())
            predicate = _predicate(column, clause)
            if predicate is not None:
                predicates.append(predicate)
        table.set("version", None)
        table.set("when", None)
        if predicates:
            _attach(table, exp.and_(*predicates))
    return tree


def _attach(table: exp.Table, predicate: exp.Expr) -> None:
    """Restrict `table` to the rows the predicate keeps: ANDed into the ON of the inner or left
    join bringing it in, else into the WHERE of its SELECT when no outer join there makes it the
    nullable side (where a WHERE would drop the rows the outer join added, and the ON of a right
    or full join would filter nothing). Anywhere else (a right or full join, a left join by USING
    or NATURAL, a parenthesized join, a column alias list that may rename the period's column)
    the view becomes a subquery of its rows in the period, under the same alias."""
    parent = table.parent
    alias = table.args.get("alias")
    renamed = alias is not None and bool(alias.args.get("columns"))
    if not renamed and isinstance(parent, exp.Join) and parent.this is table \
            and parent.args.get("on") is not None and parent.side.upper() in ("", "LEFT"):
        parent.set("on", exp.and_(exp.paren(parent.args["on"]), exp.paren(predicate)))
        return
    select = table.find_ancestor(exp.Select)
    if select is None:
        raise InvalidInput(f"a period clause on {table.name} needs a SELECT around it")
    if not renamed and not _nullable(table, select):
        select.where(exp.paren(predicate), copy=False)
        return
    _as_subquery(table, predicate)


def _nullable(table: exp.Table, select: exp.Select) -> bool:
    """Could an outer join of `select` null-extend `table` (or is it anywhere but the SELECT's own
    FROM and joins, as in a parenthesized join, where that is not worked out)?"""
    joins = list(select.args.get("joins") or [])
    from_ = select.args.get("from_") or select.args.get("from")
    if isinstance(table.parent, exp.From) and table.parent is from_ and table.parent.this is table:
        position = 0
    elif isinstance(table.parent, exp.Join) and table.parent.this is table and any(j is table.parent for j in joins):
        position = next(i for i, j in enumerate(joins) if j is table.parent) + 1
        if joins[position - 1].side.upper() in ("LEFT", "FULL"):
            return True
    else:
        return True
    return any(j.side.upper() in ("RIGHT", "FULL") for j in joins[position:])


def _as_subquery(table: exp.Table, predicate: exp.Expr) -> None:
    """Replace `table` by (SELECT * FROM table AS name WHERE predicate) AS its alias (column list
    included), any joins it heads (a parenthesized join) moved after the subquery."""
    alias = table.args.get("alias")
    name = alias.this if alias is not None and alias.this is not None else table.this
    joins = table.args.get("joins")
    inner = table.copy()
    inner.set("joins", None)
    inner.set("alias", exp.TableAlias(this=name.copy()) if alias is not None else None)
    query = exp.Select(expressions=[exp.Star()]).from_(inner, copy=False).where(exp.paren(predicate), copy=False)
    outer = exp.TableAlias(this=name.copy())
    if alias is not None and alias.args.get("columns"):
        outer.set("columns", [c.copy() for c in alias.args["columns"]])
    subquery = exp.Subquery(this=query, alias=outer)
    if joins:  # moved, not copied: a clause on a table they join may still be rewritten there
        subquery.set("joins", list(joins))
    table.replace(subquery)
