"""The LLM extractor through the real openai client against the local fake server."""
from __future__ import annotations

import enum
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pydantic
import pytest

from pgmemory.extract.llm import LLMExtractor, normalize_relation, parse_datetime
from pgmemory.extract.prompts import ExtractionReply
from pgmemory.extract.types import (
    EntityCandidate,
    EntityQuestion,
    EpisodeInput,
    ExtractedEntity,
    ExtractedFact,
    FactCandidate,
    FactDecision,
    FactQuestion,
)
from pgmemory.providers.llm import LLMClient, Usage
from tests.fake_openai import FakeOpenAI, Status

UTC = timezone.utc
REF = datetime(2024, 1, 15, 10, 0, tzinfo=UTC)
EPISODE = EpisodeInput("I left Tencent last week and now work at OpenAI", "message", REF, actor="Alice")
PREVIOUS = [
    EpisodeInput("How is the new job going?", "message", REF - timedelta(minutes=5), actor="Bob"),
    EpisodeInput("Did you change teams?", "message", REF - timedelta(minutes=2), actor="Bob"),
]


def extractor(fake: FakeOpenAI) -> LLMExtractor:
    return LLMExtractor(LLMClient(model="test-model", base_url=fake.base_url, base_delay=0.01))


def entity(name: str, summary: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": None, "summary": summary, "attributes": {}, **extra}


def fact(source: str, target: str, relation: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    sentence = f"{source} {relation} {target}" if text is None else text
    return {"source": source, "target": target, "relation_type": relation, "fact": sentence, **extra}


def reply(entities: list[dict[str, Any]], facts: list[dict[str, Any]] = (), **extra: Any) -> dict[str, Any]:
    return {"entities": entities, "missed_entities": [], "invalid_entities": [], "facts": list(facts), **extra}


def prompt_text(fake: FakeOpenAI, index: int = 0) -> str:
    return "\n".join(m["content"] for m in fake.requests[index].body["messages"])


# --- extract ----------------------------------------------------------------------------


async def test_paper_example(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("Alice", "Alice left Tencent and works at OpenAI"),
         entity("Tencent", "Alice's former employer"), entity("OpenAI", "Alice's employer")],
        [fact("Alice", "Tencent", "WORKS_FOR", "Alice worked for Tencent",
              valid_at=None, invalid_at="2024-01-08T00:00:00Z", negated=True, functional=True),
         fact("Alice", "OpenAI", "works for", "Alice works at OpenAI",
              valid_at="2024-01-08", invalid_at=None, functional=True)],
    ))
    usage = Usage()
    out = await extractor(fake_openai).extract(EPISODE, PREVIOUS, usage)

    assert [e.name for e in out.entities] == ["Alice", "Tencent", "OpenAI"]
    assert out.entities[1].labels == ["Entity"] and out.entities[1].summary == "Alice's former employer"
    tencent, openai_ = out.facts
    assert tencent == ExtractedFact("Alice", "Tencent", "WORKS_FOR", "Alice worked for Tencent",
                                    valid_at=None, invalid_at=datetime(2024, 1, 8, tzinfo=UTC),
                                    functional=True, negated=True)
    assert (openai_.relation, openai_.target, openai_.negated) == ("WORKS_FOR", "OpenAI", False)
    assert openai_.valid_at == datetime(2024, 1, 8, tzinfo=UTC) and openai_.invalid_at is None

    assert usage.calls == 1 and len(fake_openai.requests) == 1
    body = fake_openai.requests[0].body
    assert body["response_format"]["json_schema"]["schema"] == ExtractionReply.model_json_schema()
    text = prompt_text(fake_openai)
    assert "Alice: I left Tencent last week and now work at OpenAI" in text
    assert "Bob: How is the new job going?" in text and "Bob: Did you change teams?" in text
    assert "2024-01-15T10:00:00Z" in text


async def test_speaker_first_missed_merged_invalid_dropped(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("OpenAI"), entity("alice", "the speaker"), entity("last week"), entity("OpenAI", "dup")],
        [fact("Alice", "OpenAI", "WORKS_FOR"), fact("Alice", "last week", "LEFT_AT"),
         fact("ALICE", "sam altman", "REPORTS_TO")],
        missed_entities=[entity("Sam Altman", "OpenAI's CEO"), entity("openai", "again")],
        invalid_entities=["last week", "Alice"],
    ))
    out = await extractor(fake_openai).extract(EPISODE, [], Usage())
    assert [e.name for e in out.entities] == ["Alice", "OpenAI", "Sam Altman"]
    assert out.entities[0].summary == "the speaker"  # the speaker survives a reject
    assert out.entities[1].summary == "dup"  # an empty summary is filled by a later mention
    assert [(f.source, f.relation, f.target) for f in out.facts] == [
        ("Alice", "WORKS_FOR", "OpenAI"), ("Alice", "REPORTS_TO", "Sam Altman")]


async def test_speaker_inserted_when_missing(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply([entity("OpenAI")]))
    out = await extractor(fake_openai).extract(EPISODE, [], Usage())
    assert [e.name for e in out.entities] == ["Alice", "OpenAI"]


async def test_unknown_endpoints_self_loops_and_repeats_dropped(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("Alice"), entity("OpenAI")],
        [fact("Alice", "Google", "WORKS_FOR"), fact("Mallory", "OpenAI", "WORKS_FOR"),
         fact("Alice", "alice", "KNOWS"), fact("Alice", "OpenAI", "works-for", "first"),
         fact("Alice", "OpenAI", "WORKS_FOR", "repeat"), fact("Alice", "OpenAI", "LIKES", "")],
    ))
    out = await extractor(fake_openai).extract(EPISODE, [], Usage())
    assert [(f.relation, f.fact) for f in out.facts] == [
        ("WORKS_FOR", "first"), ("LIKES", "Alice likes OpenAI")]


@pytest.mark.parametrize("raw, expected", [
    ("works for", "WORKS_FOR"), ("WORKS_FOR", "WORKS_FOR"), ("worksFor", "WORKS_FOR"),
    ("is-friends with", "IS_FRIENDS_WITH"), ("  loves ", "LOVES"), ("Employment", "EMPLOYMENT"),
    ("café owner", "CAFE_OWNER"), ("", "RELATES_TO"), ("2nd home", "RELATES_TO"), ("住在", "RELATES_TO"),
])
def test_normalize_relation(raw: str, expected: str) -> None:
    assert normalize_relation(raw) == expected


@pytest.mark.parametrize("raw, expected", [
    ("2024-01-08T00:00:00Z", datetime(2024, 1, 8, tzinfo=UTC)),
    ("2024-01-08T12:30:00+02:00", datetime(2024, 1, 8, 10, 30, tzinfo=UTC)),
    ("2024-01-08T12:30:00", datetime(2024, 1, 8, 12, 30, tzinfo=UTC)),
    ("2024-01-08", datetime(2024, 1, 8, tzinfo=UTC)),
    ("2019-06", datetime(2019, 6, 1, tzinfo=UTC)),
    ("2019", datetime(2019, 1, 1, tzinfo=UTC)),
    (" null ", None), ("", None), (None, None), ("last week", None), ("2024-13-45", None),
])
def test_parse_datetime(raw: str | None, expected: datetime | None) -> None:
    parsed = parse_datetime(raw)
    assert parsed == expected
    assert parsed is None or parsed.tzinfo is UTC


async def test_dates_in_extraction(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("Alice"), entity("Paris"), entity("Berlin"), entity("Rome")],
        [fact("Alice", "Paris", "LIVED_IN", valid_at=2015, invalid_at="2019-03-01T00:00:00"),
         fact("Alice", "Berlin", "LIVES_IN", valid_at="garbage", invalid_at="2024-01-15T10:00:00Z"),
         fact("Alice", "Rome", "VISITED", valid_at="2020-05-01", invalid_at="2020-01-01")],
    ))
    out = await extractor(fake_openai).extract(EPISODE, [], Usage())
    paris, berlin, rome = out.facts
    assert (paris.valid_at, paris.invalid_at) == (datetime(2015, 1, 1, tzinfo=UTC), datetime(2019, 3, 1, tzinfo=UTC))
    assert (berlin.valid_at, berlin.invalid_at) == (None, REF)
    # an end before the start: the end is kept, the start in doubt unknown (not an open fact)
    assert (rome.valid_at, rome.invalid_at) == (None, datetime(2020, 1, 1, tzinfo=UTC))


async def test_events_are_bounded_and_states_stay_open(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("Alice"), entity("Lisbon"), entity("Porto"), entity("Web Summit"), entity("Acme")],
        [fact("Alice", "Lisbon", "VISITED", kind="event", valid_at="2019-05-03"),
         fact("Alice", "Porto", "VISITED", kind="event"),
         fact("Alice", "Web Summit", "ATTENDED", kind="Event", valid_at="2023-06-01",
              invalid_at="2023-09-01"),
         fact("Alice", "Acme", "WORKS_FOR", kind="state", valid_at="2020-01-01")],
    ))
    out = await extractor(fake_openai).extract(EPISODE, [], Usage())
    lisbon, porto, summit, acme = out.facts
    assert (lisbon.valid_at, lisbon.invalid_at) == (datetime(2019, 5, 3, tzinfo=UTC), datetime(2019, 5, 4, tzinfo=UTC))
    assert (porto.valid_at, porto.invalid_at) == (datetime(2024, 1, 15, tzinfo=UTC), datetime(2024, 1, 16, tzinfo=UTC))
    assert (summit.valid_at, summit.invalid_at) == (datetime(2023, 6, 1, tzinfo=UTC), datetime(2023, 9, 1, tzinfo=UTC))
    assert all(f.attributes == {"kind": "event"} for f in (lisbon, porto, summit))
    assert (acme.invalid_at, acme.attributes) == (None, {})
    schema = fake_openai.requests[0].body["response_format"]["json_schema"]["schema"]
    assert "kind" in schema["$defs"]["FactOut"]["properties"]
    assert "EVENTS vs STATES" in prompt_text(fake_openai)


async def test_the_assistants_chatter_is_no_entity_and_no_fact(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("Assistant", ""), entity("Marta"), entity("Siemens")],
        [fact("Assistant", "Marta", "HELPS"), fact("Marta", "Siemens", "WORKS_FOR")],
    ))
    episode = EpisodeInput("Sure, I can help! So Marta works at Siemens.", "message", REF, actor="Assistant")
    out = await extractor(fake_openai).extract(episode, [], Usage())
    assert [e.name for e in out.entities] == ["Marta", "Siemens"]
    assert [(f.source, f.relation, f.target) for f in out.facts] == [("Marta", "WORKS_FOR", "Siemens")]
    assert "SPEAKER: Assistant (the AI assistant: not an entity" in prompt_text(fake_openai)


class Person(pydantic.BaseModel):
    """A human being, real or fictional."""

    age: int | None = pydantic.Field(None, description="Age in years")
    occupation: str | None = pydantic.Field(None, description="What the person does for a living")


class Size(str, enum.Enum):
    small = "small"
    large = "large"


class Company(pydantic.BaseModel):
    """A business organisation."""

    industry: str | None = None
    size: Size | None = None


class Employment(pydantic.BaseModel):
    """A person working for an organisation."""

    role: str | None = pydantic.Field(None, description="Job title")
    full_time: bool | None = None


async def test_custom_types(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply(
        [entity("Alice", type="person", attributes={"age": "31", "occupation": "researcher", "shoe": 38}),
         entity("OpenAI", type="Company", attributes={"industry": "AI", "size": "large"}),
         entity("Tencent", type="Planet", attributes={"industry": "tech"})],
        [fact("Alice", "OpenAI", "EMPLOYMENT", attributes={"role": "engineer", "full_time": "maybe"}),
         fact("Alice", "Tencent", "WORKS_FOR", attributes={"role": "intern"})],
    ))
    out = await extractor(fake_openai).extract(
        EPISODE, [], Usage(),
        entity_types={"Person": Person, "Company": Company}, edge_types={"Employment": Employment},
    )
    alice, openai_, tencent = out.entities
    assert alice.labels == ["Entity", "Person"] and alice.attributes == {"age": 31, "occupation": "researcher"}
    assert openai_.labels == ["Entity", "Company"] and openai_.attributes == {"industry": "AI", "size": "large"}
    assert tencent.labels == ["Entity"] and tencent.attributes == {}
    employment, works_for = out.facts
    assert employment.relation == "EMPLOYMENT" and employment.attributes == {"role": "engineer"}
    assert works_for.attributes == {}

    text = prompt_text(fake_openai)
    assert "<ENTITY TYPES>" in text and "Person: A human being, real or fictional." in text
    assert '"age"' in text and "Age in years" in text and "Company: A business organisation." in text
    assert '"enum": ["small", "large"]' in text and '"title"' not in text
    assert "<FACT TYPES>" in text and "EMPLOYMENT: A person working for an organisation." in text
    assert "Job title" in text


async def test_no_type_sections_without_types(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(reply([entity("Alice")]))
    await extractor(fake_openai).extract(EPISODE, [], Usage())
    text = prompt_text(fake_openai)
    assert "<ENTITY TYPES>" not in text and "<FACT TYPES>" not in text


@pytest.mark.parametrize("kind, content, marker", [
    ("text", "Acme Corp hired Dana Lee in 2020.", "plain text: do not invent a speaker"),
    ("json", json.dumps({"customer": "Dana Lee", "plan": "Pro"}), "JSON document (source: crm):"),
])
async def test_text_and_json_have_no_speaker(fake_openai: FakeOpenAI, kind: str, content: str, marker: str) -> None:
    fake_openai.script(reply([entity("Dana Lee"), entity("Acme Corp")]))
    episode = EpisodeInput(content, kind, REF, source_description="crm" if kind == "json" else "")
    out = await extractor(fake_openai).extract(episode, [], Usage())
    assert [e.name for e in out.entities] == ["Dana Lee", "Acme Corp"]
    text = prompt_text(fake_openai)
    assert marker in text and content in text


async def test_rate_limit_then_success_counts_two_calls(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Status(429, "slow down"), reply([entity("Alice")]))
    usage = Usage()
    out = await extractor(fake_openai).extract(EPISODE, [], usage)
    assert [e.name for e in out.entities] == ["Alice"]
    assert usage.calls == 2 and len(fake_openai.requests) == 2


# --- resolve_entities -------------------------------------------------------------------

ALICE_ID, ALICIA_ID, BOB_ID = "11111111-0000-0000-0000-000000000001", "22222222-0000-0000-0000-000000000002", \
    "33333333-0000-0000-0000-000000000003"
ALICE = EntityCandidate(ALICE_ID, "Alice", "A researcher", ("Entity", "Person"))
ALICIA = EntityCandidate(ALICIA_ID, "Alicia Keys", "A singer")
BOB = EntityCandidate(BOB_ID, "Bob", "Alice's colleague")


async def test_resolve_entities(fake_openai: FakeOpenAI) -> None:
    questions = [
        EntityQuestion(2, ExtractedEntity("Alice Smith", summary="Works at OpenAI"), [ALICIA, ALICE]),
        EntityQuestion(5, ExtractedEntity("Robert", summary="A colleague"), [BOB]),
        EntityQuestion(7, ExtractedEntity("Carol"), [ALICE]),
        EntityQuestion(9, ExtractedEntity("Dave"), [BOB]),
    ]
    # Candidates get short ids in first-seen order: E0 = Alicia, E1 = Alice, E2 = Bob.
    fake_openai.script({"resolutions": [
        {"new_id": "N0", "duplicate_of": "E1", "name": "Alice Smith"},
        {"new_id": "n1", "duplicate_of": "e2", "name": ""},
        {"new_id": "N2", "duplicate_of": "E2", "name": "Bob"},  # E2 is not Carol's candidate
        {"new_id": "N0", "duplicate_of": "E0", "name": "Alicia Keys"},  # a second answer is ignored
    ]})
    usage = Usage()
    decisions = await extractor(fake_openai).resolve_entities(EPISODE, PREVIOUS, questions, usage)
    assert [(d.index, d.duplicate_of, d.name) for d in decisions] == [
        (2, ALICE_ID, "Alice Smith"), (5, BOB_ID, "Bob"), (7, None, "Carol"), (9, None, "Dave")]
    assert usage.calls == 1 and len(fake_openai.requests) == 1
    text = prompt_text(fake_openai)
    assert ALICE_ID not in text
    assert "E1: Alice [Person]: A researcher" in text and "N0: Alice Smith: Works at OpenAI" in text
    assert "candidates: E0, E1" in text and "Bob: Did you change teams?" in text
    assert "Alice: I left Tencent last week" in text


async def test_resolve_without_candidates_makes_no_call(fake_openai: FakeOpenAI) -> None:
    usage = Usage()
    decisions = await extractor(fake_openai).resolve_entities(
        EPISODE, [], [EntityQuestion(0, ExtractedEntity("Zed"), [])], usage)
    assert [(d.index, d.duplicate_of, d.name) for d in decisions] == [(0, None, "Zed")]
    assert usage.calls == 0 and fake_openai.requests == []


# --- judge_facts ------------------------------------------------------------------------


def candidate(fact_id: str, target: str, text: str, start: datetime | None = None) -> FactCandidate:
    return FactCandidate(fact_id, "Alice", target, "WORKS_FOR", text, start, None)


async def test_judge_facts(fake_openai: FakeOpenAI) -> None:
    tencent = candidate("f-tencent", "Tencent", "Alice works for Tencent", datetime(2020, 1, 1, tzinfo=UTC))
    openai_old = candidate("f-openai", "OpenAI", "Alice is employed by OpenAI")
    google = candidate("f-google", "Google", "Alice works at Google")
    new_openai = ExtractedFact("Alice", "OpenAI", "WORKS_FOR", "Alice works at OpenAI",
                               valid_at=datetime(2024, 1, 8, tzinfo=UTC), functional=True)
    left = ExtractedFact("Alice", "Tencent", "WORKS_FOR", "Alice left Tencent", negated=True)
    questions = [
        FactQuestion(0, new_openai, [openai_old], [tencent, google]),
        FactQuestion(1, left, [tencent], [tencent]),
        FactQuestion(3, left, [], [google]),
    ]
    # Short ids in first-seen order: F0 = openai_old, F1 = tencent, F2 = google.
    fake_openai.script({"judgements": [
        {"new_id": "N0", "duplicate_of": "F0", "contradicts": ["F1", "F2", "F9", "F1"]},
        {"new_id": "N1", "duplicate_of": "F2", "contradicts": ["F1"]},  # F2 is not a same-pair fact
    ]})
    usage = Usage()
    decisions = await extractor(fake_openai).judge_facts(EPISODE, questions, usage)
    assert decisions == [
        FactDecision(0, "f-openai", ("f-tencent", "f-google")),
        FactDecision(1, None, ("f-tencent",)),
        FactDecision(3),
    ]
    assert usage.calls == 1 and len(fake_openai.requests) == 1
    text = prompt_text(fake_openai)
    assert "f-tencent" not in text
    assert "F1: [WORKS_FOR] Alice works for Tencent (valid: 2020-01-01T00:00:00Z - present)" in text
    assert "N1: [WORKS_FOR] Alice left Tencent (valid: unknown - present) {NEGATED}" in text
    assert "same-pair facts: F0" in text and "related facts: F1, F2" in text


async def test_judge_duplicate_is_not_also_contradicted(fake_openai: FakeOpenAI) -> None:
    old = candidate("f-old", "OpenAI", "Alice works at OpenAI")
    new = ExtractedFact("Alice", "OpenAI", "WORKS_FOR", "Alice is at OpenAI")
    fake_openai.script({"judgements": [{"new_id": "N0", "duplicate_of": "F0", "contradicts": ["F0"]}]})
    decisions = await extractor(fake_openai).judge_facts(EPISODE, [FactQuestion(4, new, [old], [old])], Usage())
    assert decisions == [FactDecision(4, "f-old", ())]
