"""Every SQL statement under sql/, as text sqlglot can parse: what the routing lint reads.

Top-level statements come from migrate.split_statements. Bodies of functions and DO blocks
are opened: a LANGUAGE sql body is split into its statements; a PL/pgSQL body into the SQL
its statements run (the query of RETURN QUERY / FOR ... IN / PERFORM / assignments / IF
conditions, with INTO targets removed). Dynamic SQL (EXECUTE) is not seen.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pgmemory.storage.migrate import SQL_DIR, split_statements


@dataclass(frozen=True)
class Statement:
    """One SQL statement: where it is (file, function or view) and its text."""

    file: str
    owner: str  # "function pgmemory.x", "view pgmemory.v", "DO block" or "top level"
    sql: str


_FUNCTION = re.compile(r"^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([\w.]+)\s*\(", re.I | re.S)
_VIEW = re.compile(r"^CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+([\w.]+)\s+AS\s+(.*)$", re.I | re.S)
_DO = re.compile(r"^DO\s+(\$\w*\$)(.*)\1", re.I | re.S)
_BODY = re.compile(r"\bAS\s+(\$\w*\$)(.*?)\1", re.S)
_LANGUAGE = re.compile(r"\bLANGUAGE\s+(\w+)", re.I)
_INTO = re.compile(r"\bINTO\s+(?:STRICT\s+)?[a-z_][\w.]*(?:\s*,\s*[a-z_][\w.]*)*(?=\s+FROM\b|\s*$)", re.I)
_RETURNING_INTO = re.compile(r"(\bRETURNING\b.*?)\s+INTO\s+[a-z_][\w.]*(?:\s*,\s*[a-z_][\w.]*)*\s*$", re.I | re.S)


def statements(directory: Path = SQL_DIR) -> list[Statement]:
    """Every statement of every .sql file under `directory`, bodies opened."""
    out: list[Statement] = []
    for path in sorted(directory.rglob("*.sql")):
        name = str(path.relative_to(directory.parent))
        for text in split_statements(path.read_text()):
            text = _strip_comments(text).strip().rstrip(";").strip()
            if function := _FUNCTION.match(text):
                body = _BODY.search(text)
                language = _LANGUAGE.search(text)
                if body and language:
                    owner = f"function {function.group(1)}"
                    out += [Statement(name, owner, s) for s in _body_sql(body.group(2), language.group(1).lower())]
            elif view := _VIEW.match(text):
                out.append(Statement(name, f"view {view.group(1)}", view.group(2)))
            elif block := _DO.match(text):
                out += [Statement(name, "DO block", s) for s in _body_sql(block.group(2), "plpgsql")]
            else:
                out.append(Statement(name, "top level", text))
    return out


def _strip_comments(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def _body_sql(body: str, language: str) -> list[str]:
    body = _strip_comments(body)
    if language == "sql":
        return [s.rstrip(";").strip() for s in split_statements(body)]
    if language != "plpgsql":
        return []
    out: list[str] = []
    head, _, rest = body.partition("BEGIN")
    for declaration in split_statements(head.replace("DECLARE", "", 1)):
        declaration = re.sub(r"^#\w+\s+\w+\s*", "", declaration.strip())
        if ":=" in declaration:
            out.append("SELECT " + declaration.split(":=", 1)[1].rstrip(";"))
    for piece in split_statements(rest):
        out += _plpgsql_sql(piece.strip().rstrip(";").strip())
    return [s for s in (x.strip() for x in out) if s]


_KEYWORD_PREFIX = re.compile(r"^(?:BEGIN|ELSE|LOOP|END\s+IF|END\s+LOOP|END|EXCEPTION)\b\s*", re.I)


def _plpgsql_sql(text: str) -> list[str]:
    """The SQL one PL/pgSQL statement runs (nested control structures opened)."""
    out = []
    while text:
        text = text.strip()
        if m := _KEYWORD_PREFIX.match(text):
            text = text[m.end():]
            continue
        if m := re.match(r"^(?:IF|ELSIF|WHILE)\s+(.*?)\s+(?:THEN|LOOP)\b(.*)$", text, re.I | re.S):
            out.append("SELECT " + m.group(1))
            text = m.group(2)
            continue
        if m := re.match(r"^WHEN\s+.*?\s+THEN\b(.*)$", text, re.I | re.S):
            text = m.group(1)
            continue
        if m := re.match(r"^FOREACH\s+\w+\s+IN\s+ARRAY\s+(.*?)\s+LOOP\b(.*)$", text, re.I | re.S):
            out.append("SELECT " + m.group(1))
            text = m.group(2)
            continue
        if m := re.match(r"^FOR\s+[\w\s,]+?\s+IN\s+(\d+\s*\.\.\s*.*?|.*?)\s+LOOP\b(.*)$", text, re.I | re.S):
            if ".." not in m.group(1):
                out.append(m.group(1))
            text = m.group(2)
            continue
        if re.match(r"^(?:RAISE|GET\s+DIAGNOSTICS|EXECUTE|RETURN\s+NEXT|NULL)\b", text, re.I) or text.upper() == "RETURN":
            break
        if m := re.match(r"^(?:CONTINUE|EXIT)\s+WHEN\s+(.*)$", text, re.I | re.S):
            out.append("SELECT " + m.group(1))
            break
        if m := re.match(r"^RETURN\s+QUERY\s+(.*)$", text, re.I | re.S):
            out.append(m.group(1))
            break
        if m := re.match(r"^(?:RETURN|PERFORM)\s+(.*)$", text, re.I | re.S):
            out.append("SELECT " + m.group(1))
            break
        if m := re.match(r"^[a-z_][\w.]*(?:\[[^\]]*\])?\s*:=\s*(.*)$", text, re.I | re.S):
            out.append("SELECT " + m.group(1))
            break
        if re.match(r"^(?:SELECT|WITH)\b", text, re.I):
            text = _INTO.sub("", text, count=1)
        text = _RETURNING_INTO.sub(r"\1", text)
        out.append(text)
        break
    return out
