"""A small bi-temporal story written through pgmemory.add_fact, for the analyst-surface tests."""
from __future__ import annotations

import pytest


def add(conn, group, source, relation, target, sentence, **options):
    """pgmemory.add_fact in its own transaction (each write is its own transaction time);
    returns that transaction time."""
    names = ", ".join(f"p_{k} => %({k})s" for k in options)
    at = conn.execute(f"SELECT now(), pgmemory.add_fact(%(g)s, %(s)s, %(r)s, %(t)s, %(f)s"
                      f"{', ' if names else ''}{names})",
                      dict(g=group, s=source, r=relation, t=target, f=sentence, **options)).fetchone()[0]
    conn.commit()
    return at


@pytest.fixture
def career(conn, group):
    """Alice: Acme from 2020, then Globex from 2022 (which ends Acme). t1, t2: when each was written."""
    t1 = add(conn, group, "Alice", "WORKS_FOR", "Acme", "Alice works for Acme.", valid_from="2020-01-01Z")
    t2 = add(conn, group, "Alice", "WORKS_FOR", "Globex", "Alice works for Globex.",
             valid_from="2022-01-01Z", functional=True)
    return dict(group=group, t1=t1, t2=t2)
