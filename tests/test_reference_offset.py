"""The speaker's UTC offset: relative dates ("yesterday", "today", "last Friday", "this morning",
weekdays) count from the speaker's local date, on every path an episode takes (add_episode, the
queue and its worker, the SQL writer, a file, the LLM's prompt), and a date-only time is stored as
the speaker's local midnight. Without an offset (old rows, SQL callers that give none) it is UTC."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmemory import InvalidInput, Memory, SearchFilters
from pgmemory.extract.llm import LLMExtractor
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.providers.llm import LLMClient
from pgmemory.storage.setup import init_database
from tests.conftest import DIM
from tests.fake_openai import Reply
from tests.test_migrations import old_database


def zone(hours: float) -> timezone:
    return timezone(timedelta(hours=hours))


CHICAGO = zone(-5)
# 23:30 on Monday May 8 in Chicago is already Tuesday May 9 (04:30) in UTC.
EVENING = datetime(2023, 5, 8, 23, 30, tzinfo=CHICAGO)


def local_midnight(day: str, tz: timezone) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=tz).astimezone(timezone.utc)




async def believed(memory: Memory, group: str) -> dict[tuple[str, str], tuple]:
    async with memory.pool.acquire() as conn:
        return {(r["relation"], r["target"]): (r["valid_from"], r["valid_to"]) for r in await conn.fetch(
            "SELECT relation, target, valid_from, valid_to FROM pgmemory.believed_facts WHERE group_id = $1", group)}


# (sentence, reference, the fact, its start as the speaker's local day, its end's local day or None)
CASES = [
    ("I started at Acme yesterday.", EVENING, ("WORKS_FOR", "Acme"), "2023-05-07", None),
    ("I went to Paris today.", EVENING, ("VISITED", "Paris"), "2023-05-08", "2023-05-09"),
    # Friday 21:00 in Chicago is Saturday in UTC: "last Friday" is the week before
    ("I met Bob last Friday.", datetime(2023, 5, 5, 21, 0, tzinfo=CHICAGO), ("MET", "Bob"), "2023-04-28", "2023-04-29"),
    ("I moved to Rome this morning.", EVENING, ("LIVES_IN", "Rome"), "2023-05-08", None),
    # +14:00: 00:30 on May 9 in Kiribati is still May 8 (10:30) in UTC
    ("I started at Acme yesterday.", datetime(2023, 5, 9, 0, 30, tzinfo=zone(14)), ("WORKS_FOR", "Acme"),
     "2023-05-08", None),
    # -11:00: 22:00 on Monday May 8 is Tuesday in UTC; "on Monday" is the Monday before
    ("I started at Acme on Monday.", datetime(2023, 5, 8, 22, 0, tzinfo=zone(-11)), ("WORKS_FOR", "Acme"),
     "2023-05-01", None),
]


@pytest.mark.parametrize("text, reference, fact, start, end", CASES)
async def test_relative_dates_count_from_the_speakers_local_date(memory, group, text, reference, fact, start, end):
    await memory.add_episode(group, text, actor="Alice", reference_time=reference)
    tz = reference.tzinfo
    expected = (local_midnight(start, tz), end and local_midnight(end, tz))
    assert (await believed(memory, group))[fact] == expected


async def test_a_utc_reference_keeps_the_utc_date(memory, group):
    """The same instant said in UTC: the UTC date (May 9), as before offsets were kept."""
    await memory.add_episode(group, "I started at Acme yesterday.", actor="Alice",
                             reference_time=EVENING.astimezone(timezone.utc))
    assert (await believed(memory, group))[("WORKS_FOR", "Acme")] == (local_midnight("2023-05-08", timezone.utc), None)


async def test_queued_episodes_keep_the_offset_for_the_worker(own_dsn, group):
    """Enqueued from Python and from SQL (p_reference_offset), extracted later by the worker from
    the stored row: the speaker's day; a SQL writer that gives no offset is UTC."""
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        await memory.enqueue_episode(group, "I started at Acme yesterday.", actor="Alice", reference_time=EVENING)
        await memory.enqueue_episodes([{"group_id": group + "-file", "content": "I went to Paris today.",
                                        "actor": "Alice", "reference_time": "2023-05-08T23:30:00-05:00"}])
        async with memory.pool.acquire() as conn:
            await conn.execute("SELECT pgmemory.enqueue_episode($1, 'I moved to Rome yesterday.', 'message', 'Bo',"
                               " '2023-05-08T23:30-05:00', p_reference_offset => '-05:00')", group + "-sql")
            await conn.execute("SELECT pgmemory.enqueue_episode($1, 'I moved to Rome yesterday.', 'message', 'Bo',"
                               " '2023-05-08T23:30-05:00')", group + "-utc")
        stats = await memory.worker(drain=True).run()
        assert stats.done == 4
        assert (await believed(memory, group))[("WORKS_FOR", "Acme")] == (local_midnight("2023-05-07", CHICAGO), None)
        assert (await believed(memory, group + "-file"))[("VISITED", "Paris")] == (
            local_midnight("2023-05-08", CHICAGO), local_midnight("2023-05-09", CHICAGO))
        assert (await believed(memory, group + "-sql"))[("LIVES_IN", "Rome")] == (local_midnight("2023-05-07", CHICAGO), None)
        assert (await believed(memory, group + "-utc"))[("LIVES_IN", "Rome")] == (
            local_midnight("2023-05-08", timezone.utc), None)
    finally:
        await memory.close()


async def test_sql_writer_checks_the_offset_and_keeps_the_first_for_the_same_episode(memory, group):
    """An offset of a day or more is refused in one line; the same instant at another offset is
    the same episode (a no-op), which keeps the offset it was stored with."""
    async with memory.pool.acquire() as conn:
        with pytest.raises(Exception, match=r"reference_offset 25:00:00 is not a UTC offset"):
            await conn.execute("SELECT pgmemory.enqueue_episode($1, 'hi', p_reference_time => now(),"
                               " p_reference_offset => '25 hours')", group)
        await conn.execute("SELECT pgmemory.enqueue_episode($1, 'hi', p_reference_time => '2023-05-09T04:30Z',"
                           " p_episode_id => 'e1', p_reference_offset => '-05:00')", group)
        assert await conn.fetchval("SELECT reference_offset FROM pgmemory.episodes WHERE group_id = $1",
                                   group) == timedelta(hours=-5)
    first = await memory.enqueue_episode(group, "hi", reference_time=EVENING.astimezone(zone(2)), episode_id="e1")
    with pytest.raises(InvalidInput, match="its reference_time differs"):  # (another instant)
        await memory.enqueue_episode(group, "hi", reference_time=EVENING + timedelta(seconds=1), episode_id="e1")
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id, reference_offset FROM pgmemory.episodes WHERE group_id = $1", group)
    assert [tuple(r) for r in rows] == [(first, timedelta(hours=-5))]


def llm_reply(valid_at: str) -> Reply:
    return Reply({"entities": [{"name": "Alice"}, {"name": "Acme"}], "invalid_entities": [],
                  "facts": [{"source": "Alice", "target": "Acme", "relation_type": "WORKS_FOR",
                             "fact": "Alice works for Acme.", "valid_at": valid_at, "invalid_at": None,
                             "negated": False, "functional": True}]})


@pytest.mark.parametrize("path", ["add_episode", "worker"])
async def test_llm_is_told_the_speakers_local_time_and_its_dates_are_read_in_it(own_dsn, fake_openai, group, path):
    """The prompt's REFERENCE TIME is the speaker's (with the local weekday and date), also when the
    worker extracts a queued episode; the model's date-only answer is the speaker's local midnight."""
    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5, max_retries=0)
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client))
    try:
        fake_openai.script(llm_reply("2023-05-07"))
        if path == "add_episode":
            await memory.add_episode(group, "I started at Acme yesterday.", actor="Alice", reference_time=EVENING)
        else:
            await memory.enqueue_episode(group, "I started at Acme yesterday.", actor="Alice", reference_time=EVENING)
            assert (await memory.worker(drain=True).run()).done == 1
        prompt = json.dumps(fake_openai.requests[0].body["messages"])
        assert "REFERENCE TIME: 2023-05-08T23:30:00-05:00\\nLOCAL DATE: Monday, 2023-05-08" in prompt
        assert (await believed(memory, group))[("WORKS_FOR", "Acme")] == (local_midnight("2023-05-07", CHICAGO), None)
    finally:
        await memory.close()


async def test_upgraded_database_reads_old_rows_as_utc_and_stores_offsets(empty_dsn, group):
    """A database of the migrations before 0690 holding a queued episode (no offset: UTC, as it was
    read then), upgraded by init: the old row keeps its UTC dates, a new one gets the speaker's."""
    with psycopg.connect(empty_dsn) as conn:
        old_database(conn, 690, {})
        conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, valid_at)"
                     " VALUES (gen_random_uuid(), %s, 'message', 'I started at Acme yesterday.', 'Alice', %s)",
                     (group, EVENING))
        # (its group's claim row, as the older enqueue made with a group's first episode)
        conn.execute("INSERT INTO pgmemory.group_locks (group_id, purpose) VALUES (%s, 'claim')", (group,))
        conn.commit()
        report = init_database(conn, DIM)
        conn.commit()
        assert "0690_episode_reference_offset.sql" in report.migrations_applied
    memory = await Memory.open(empty_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        await memory.enqueue_episode(group + "-new", "I started at Acme yesterday.", actor="Alice",
                                     reference_time=EVENING)
        assert (await memory.worker(drain=True).run()).done == 2
        assert (await believed(memory, group))[("WORKS_FOR", "Acme")] == (local_midnight("2023-05-08", timezone.utc), None)
        assert (await believed(memory, group + "-new"))[("WORKS_FOR", "Acme")] == (
            local_midnight("2023-05-07", CHICAGO), None)
    finally:
        await memory.close()


async def test_context_names_an_event_by_the_speakers_day(memory, group):
    """Said at +02:00 on May 8, "yesterday" is [May 6 22:00Z, May 7 22:00Z): the context says
    "on 2023-05-07" (the UTC date of its start was May 6)."""
    await memory.add_episode(group, "I went to Paris yesterday.", actor="Alice",
                             reference_time=datetime(2023, 5, 8, 9, 0, tzinfo=zone(2)))
    context = await memory.context("When did Alice go to Paris?", group_ids=[group])
    assert "on 2023-05-07" in context and "2023-05-06" not in context


def test_ingest_file_lines_with_offsets(db_dsn, group, tmp_path):
    """`pgmemory ingest FILE`: each line's reference time keeps its offset (here +14:00, where
    00:30 on May 9 is still May 8 in UTC)."""
    from tests.test_cli import run_cli, write_jsonl

    data = tmp_path / "episodes.jsonl"
    write_jsonl(data, group, [{"content": "I started at Acme yesterday.", "actor": "Alice",
                               "reference_time": "2023-05-09T00:30:00+14:00"}])
    assert run_cli("ingest", str(data), dsn=db_dsn).returncode == 0
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute("SELECT relation, target, valid_from FROM pgmemory.believed_facts WHERE group_id = %s",
                            (group,)).fetchall()
        assert rows == [("WORKS_FOR", "Acme", local_midnight("2023-05-08", zone(14)))]
        offset = conn.execute("SELECT reference_offset FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchone()
    assert offset == (timedelta(hours=14),)


async def test_an_episode_reads_back_with_the_offset_it_was_said_at(memory, group):
    """get_episode / get_episodes give the reference time as it was given (the same instant)."""
    result = await memory.add_episode(group, "I started at Acme yesterday.", actor="Alice", reference_time=EVENING)
    episode = await memory.get_episode(group, result.episode_id)
    assert episode.reference_time == EVENING and episode.reference_time.utcoffset() == timedelta(hours=-5)
    [listed] = await memory.get_episodes(group, last_n=5)
    assert listed.reference_time.isoformat() == "2023-05-08T23:30:00-05:00"


async def test_retry_of_a_queued_episode_keeps_its_offset(memory, group):
    """Memory.retry runs a pending episode from its stored row: the speaker's day, not UTC's."""
    await memory.enqueue_episode(group, "I started at Acme yesterday.", actor="Alice", reference_time=EVENING)
    [done] = await memory.retry(group)
    assert done.status == "done"
    assert (await believed(memory, group))[("WORKS_FOR", "Acme")] == (local_midnight("2023-05-07", CHICAGO), None)


async def test_episode_log_gives_the_speakers_offset(memory, group):
    """An analyst reads the speaker's local time from episode_log (said_offset)."""
    await memory.add_episode(group, "I started at Acme yesterday.", actor="Alice", reference_time=EVENING)
    result = await memory.sql("SELECT (said_at AT TIME ZONE said_offset)::text FROM episode_log", group_ids=[group])
    assert result.rows == [("2023-05-08 23:30:00",)]


async def test_a_zoneinfo_reference_reads_the_same_directly_and_queued(own_dsn, group):
    """An aware datetime of a zone with daylight saving: the offset at the reference instant
    (-04:00 in May in New York) places every date, so "last March" starts at 00:00-04:00 whether
    extracted at once or by the worker from the stored offset."""
    from zoneinfo import ZoneInfo

    said = datetime(2023, 5, 8, 23, 30, tzinfo=ZoneInfo("America/New_York"))
    memory = await Memory.open(own_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        await memory.add_episode(group, "I moved to Boston last March.", actor="Alice", reference_time=said)
        await memory.enqueue_episode(group + "-q", "I moved to Boston last March.", actor="Alice", reference_time=said)
        assert (await memory.worker(drain=True).run()).done == 1
        expected = (local_midnight("2023-03-01", zone(-4)), None)
        assert (await believed(memory, group))[("LIVES_IN", "Boston")] == expected
        assert (await believed(memory, group + "-q"))[("LIVES_IN", "Boston")] == expected
    finally:
        await memory.close()


@pytest.mark.parametrize("hours", [14, 13, -11])
async def test_the_context_names_a_day_by_the_speakers_date(memory, group, hours):
    """A one-day event said at +14:00 is [05-07T10:00Z, 05-08T10:00Z): the context names it by the
    speaker's date (May 8), as it names the episode, not by a UTC date (its middle is May 7 UTC)."""
    said = datetime(2024, 5, 8, 9, 0, tzinfo=zone(hours))
    await memory.add_episode(group, "I went to Paris today.", actor="Alice", reference_time=said)
    offset = said.strftime("%z")
    # the usual view, and as known now (search's general statement: known_at, several groups)
    for filters, groups in ((None, [group]), (SearchFilters(known_at=datetime.now(timezone.utc)), [group, "other"])):
        text = await memory.context("Paris", group_ids=groups, episodes=True, filters=filters)
        assert "- Alice went to Paris. (on 2024-05-08)" in text
        assert f"- [2024-05-08 09:00 {offset[:3]}:{offset[3:]}] Alice: I went to Paris today." in text


async def test_the_context_keeps_utc_for_a_speaker_without_an_offset(memory, group):
    """A UTC speaker (or a row from before offsets were kept) reads as before."""
    await memory.add_episode(group, "I went to Paris today.", actor="Alice",
                             reference_time=datetime(2024, 5, 8, 23, 0, tzinfo=timezone.utc))
    text = await memory.context("Paris", group_ids=[group], episodes=True)
    assert "- Alice went to Paris. (on 2024-05-08)" in text
    assert "- [2024-05-08 23:00 UTC] Alice: I went to Paris today." in text
