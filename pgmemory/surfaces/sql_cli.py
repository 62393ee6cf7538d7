"""`pgmemory sql "QUERY"`: analyst SQL with period clauses, printed as a table, CSV or JSON."""
from __future__ import annotations

import csv
import io
import json
import sys

from pgmemory.analyst.runner import SqlResult, plain, prepare, run
from pgmemory.storage.connect import connect, resolve_dsn


def render(result: SqlResult, fmt: str) -> str:
    """The result as an aligned text table, CSV (with a header) or a JSON array of objects."""
    rows = [[plain(v) for v in row] for row in result.rows]
    if fmt == "json":
        return json.dumps([dict(zip(result.columns, row)) for row in rows], ensure_ascii=False, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([[_csv_cell(v) for v in row] for row in rows])
        return out.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(result.columns, widths)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'}"
                 f"{'; more were cut off at the row cap' if result.truncated else ''})")
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value).replace("\n", " ")


def _csv_cell(value: object) -> object:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else value


def sql_command(query: str, *, groups: list[str] | None, fmt: str, max_rows: int, timeout_s: float,
                explain: bool) -> int:
    """Run (or with explain, only show) one analyst query; 0 on success."""
    if query == "-":
        # as bytes: a pipe that is not UTF-8 is refused by prepare() in one line, not a decode traceback
        raw = getattr(sys.stdin, "buffer", None)
        query = sys.stdin.read() if raw is None else raw.read().decode("utf-8", "surrogateescape")
    if explain:
        print(prepare(query))
        return 0
    with connect(resolve_dsn()) as conn:
        result = run(conn, query, groups=groups, max_rows=max_rows, timeout_s=timeout_s)
    print(render(result, fmt))
    if result.truncated and fmt != "table":
        print(f"pgmemory: note: only the first {max_rows} rows are shown (--max-rows)", file=sys.stderr)
    return 0
