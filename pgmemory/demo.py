"""The README demo: init, doctor, then a bi-temporal round trip printed as an as-of table."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

from pgmemory.storage.connect import connect, describe_target, resolve_dsn

GROUP = "pgmemory-demo"


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def run_demo() -> int:
    """Run the whole demo on the configured database; returns the exit code."""
    from pgmemory.surfaces.cli import main as cli

    if cli(["init"]) != 0 or cli(["doctor"]) != 0:
        return 1
    dsn = resolve_dsn()
    print(f"\nBi-temporal round trip on {describe_target(dsn)} (group {GROUP!r})")
    with connect(dsn) as conn:
        with conn.transaction():
            conn.execute("DELETE FROM pgmemory.facts WHERE group_id = %s", (GROUP,))
            conn.execute("DELETE FROM pgmemory.entities WHERE group_id = %s", (GROUP,))
            alice, acme = uuid.uuid4(), uuid.uuid4()
            conn.execute(
                "INSERT INTO pgmemory.entities (id, group_id, name, labels) VALUES"
                " (%s, %s, 'Alice', '{Person}'), (%s, %s, 'Acme Corp', '{Organization}')",
                (alice, GROUP, acme, GROUP))
            fact = uuid.uuid4()
            conn.execute(
                "SELECT pgmemory.record_fact(%s, %s, %s, %s, 'WORKS_FOR', 'Alice works for Acme Corp',"
                " %s, NULL)", (fact, GROUP, alice, acme, _utc("2020-03-01")))
        known_first = conn.execute("SELECT lower(recorded) FROM pgmemory.facts WHERE id = %s",
                                   (fact,)).fetchone()[0]
        print("  T'1: we learn 'Alice works for Acme Corp since 2020-03-01' (open-ended)")
        time.sleep(0.01)
        with conn.transaction():
            conn.execute("SELECT pgmemory.invalidate_fact(%s, %s)", (fact, _utc("2023-06-30")))
        known_now = conn.execute("SELECT now()").fetchone()[0]
        print("  T'2: we learn she left on 2023-06-30: the belief is corrected, not overwritten\n")
        valid_times = [_utc("2019-06-01"), _utc("2022-01-01"), _utc("2024-01-01")]
        print(f"  {'valid time T':<14}| {'as known at T1':<16}| {'as known now':<14}")
        print(f"  {'-' * 14}+{'-' * 17}+{'-' * 14}")
        for t in valid_times:
            then = conn.execute("SELECT count(*) FROM pgmemory.facts_as_of(%s, %s, %s)",
                                (GROUP, t, known_first)).fetchone()[0]
            now = conn.execute("SELECT count(*) FROM pgmemory.facts_valid_at(%s, %s)",
                               (GROUP, t)).fetchone()[0]
            label = lambda n: "works at Acme" if n else "-"  # noqa: E731
            print(f"  {t.date()!s:<14}| {label(then):<16}| {label(now):<14}")
        print("\n  Version history (pgmemory.fact_history):")
        for valid, recorded in conn.execute(
                "SELECT valid::text, recorded::text FROM pgmemory.fact_history(%s)", (fact,)):
            print(f"    valid {valid:<58} recorded {recorded}")
        del known_now
    return 0
