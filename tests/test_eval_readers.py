"""Eval readers, metric arithmetic and baselines on hand-made files and the LoCoMo dev set."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pgmemory.eval.baselines import BM25Index, DenseIndex, tokenize
from pgmemory.eval.metrics import EvalRow, accuracy, percentile, recall_at_k, summarize
from pgmemory.eval.readers import (
    EvalFormatError,
    EvidenceNote,
    Turn,
    detect_format,
    read,
    read_locomo,
    read_longmemeval,
)

LOCOMO_DEV = Path("/work/shared/data/locomo/locomo-dev.json")
IRREGULAR = Path(__file__).parent / "data" / "locomo_irregular_evidence.json"
UTC = timezone.utc


def _write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _locomo() -> list[dict]:
    return [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                    {
                        "speaker": "Bob",
                        "dia_id": "D1:2",
                        "text": "Look at this!",
                        "img_url": ["http://example.invalid/a.jpg"],
                        "blip_caption": "a photo of a red kayak",
                        "query": "kayak",
                    },
                ],
                "session_2_date_time": "10:04 am on 1 June, 2023",
                "session_2": [
                    {"speaker": "Ann", "dia_id": "D2:1", "text": "The cat is named Tom."}
                ],
                "session_3_date_time": "9:00 am on 2 June, 2023",
                "session_2_summary": "not a session despite the prefix",
            },
            "qa": [
                {"question": "What pet?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
                {
                    "question": "Which year?",
                    "answer": 2023,
                    "evidence": ["D1:1; D2:1"],
                    "category": 2,
                },
                {"question": "Cat name?", "answer": "Tom", "evidence": ["D:2:1"], "category": 1},
                {
                    "question": "What did Bob's dog eat?",
                    "adversarial_answer": "kibble",
                    "evidence": ["D1:2"],
                    "category": 5,
                },
                {"question": "Open?", "answer": "maybe", "evidence": [], "category": 3},
            ],
            "event_summary": {},
            "observation": {},
        }
    ]


def _longmemeval() -> list[dict]:
    return [
        {
            "question_id": "q1",
            "question_type": "knowledge-update",
            "question": "Where do I live now?",
            "answer": "Lisbon",
            "question_date": "2023/06/10 (Sat) 09:15",
            "haystack_session_ids": ["late", "early"],
            "haystack_dates": ["2023/06/01 (Thu) 10:00", "2023/05/30 (Tue) 23:40"],
            "haystack_sessions": [
                [
                    {"role": "user", "content": "I moved to Lisbon.", "has_answer": True},
                    {"role": "assistant", "content": "Congratulations!"},
                ],
                [{"role": "user", "content": "I live in Porto."}],
            ],
            "answer_session_ids": ["late"],
        },
        {
            "question_id": "q2_abs",
            "question_type": "single-session-user",
            "question": "What is my dog's name?",
            "answer": 7,
            "question_date": "2023/06/10 (Sat) 09:15",
            "haystack_session_ids": ["s1", "s2"],
            "haystack_dates": ["2023/05/01 (Mon) 08:00", "2023/05/02 (Tue) 08:00"],
            "haystack_sessions": [
                [{"role": "user", "content": "I have a cat."}],
                [
                    {"role": "user", "content": "No dogs here."},
                    {"role": "assistant", "content": "Noted."},
                ],
            ],
            "answer_session_ids": ["s2"],
        },
    ]


# LoCoMo ---------------------------------------------------------------------


def test_locomo_sessions_turns_and_times(tmp_path: Path) -> None:
    (conv,) = read_locomo(_write(tmp_path, "l.json", _locomo()))
    assert conv.conversation_id == "conv-x"
    assert [t.turn_id for t in conv.turns] == ["D1:1", "D1:2", "D2:1"]
    assert [t.session_id for t in conv.turns] == ["session_1", "session_1", "session_2"]
    assert conv.turns[0].time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert conv.turns[2].time == datetime(2023, 6, 1, 10, 4, tzinfo=UTC)
    assert conv.turns[0].speaker == "Ann"
    assert conv.turns[1].text == "Look at this! [shares a photo: a photo of a red kayak]"


def test_locomo_questions_irregularities(tmp_path: Path) -> None:
    (conv,) = read_locomo(_write(tmp_path, "l.json", _locomo()))
    q = {x.question: x for x in conv.questions}
    assert q["What pet?"].category == "single-hop"
    assert q["What pet?"].question_time is None
    assert q["Which year?"].answer == "2023"
    assert q["Which year?"].evidence == ["D1:1", "D2:1"]
    assert q["Which year?"].category == "temporal"
    assert q["Cat name?"].evidence == ["D2:1"]
    assert q["Cat name?"].category == "multi-hop"
    adv = q["What did Bob's dog eat?"]
    assert (adv.adversarial, adv.answer, adv.category) == (True, "kibble", "adversarial")
    assert not q["What pet?"].adversarial
    assert q["Open?"].evidence == [] and q["Open?"].category == "open-domain"
    assert [x.question_id for x in conv.questions] == [f"conv-x:q{i}" for i in range(5)]


def test_locomo_missing_text_names_field_and_place(tmp_path: Path) -> None:
    data = _locomo()
    del data[0]["conversation"]["session_2"][0]["text"]
    with pytest.raises(EvalFormatError) as err:
        read_locomo(_write(tmp_path, "bad.json", data))
    assert str(err.value) == (
        "bad.json: conversation 0 (sample_id conv-x): session_2 turn 0: missing 'text'"
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[0].pop("sample_id"), "bad.json: conversation 0: missing 'sample_id'"),
        (
            lambda d: d[0]["conversation"].pop("session_1_date_time"),
            "bad.json: conversation 0 (sample_id conv-x): missing 'session_1_date_time'",
        ),
        (
            lambda d: d[0]["conversation"].update(session_2_date_time="yesterday"),
            "bad.json: conversation 0 (sample_id conv-x): session_2_date_time: "
            "unparseable date",
        ),
        (
            lambda d: d[0]["qa"][1].update(category="2"),
            "bad.json: conversation 0 (sample_id conv-x): qa 1: 'category' must be int, got str",
        ),
        (
            lambda d: d[0]["qa"][0].pop("answer"),
            "bad.json: conversation 0 (sample_id conv-x): qa 0: missing 'answer'",
        ),
        (
            lambda d: d[0]["qa"][3].pop("adversarial_answer"),
            "bad.json: conversation 0 (sample_id conv-x): qa 3: missing 'adversarial_answer'",
        ),
        (
            lambda d: d[0]["qa"][0].update(evidence={"D1:1": 1}),
            "bad.json: conversation 0 (sample_id conv-x): qa 0: 'evidence' must be list/str, got dict",
        ),
        (
            lambda d: d.append(json.loads(json.dumps(d[0]))),
            "bad.json: conversation 1 repeats sample_id 'conv-x' (of conversation 0); ids must be unique",
        ),
        (
            lambda d: d[0]["qa"][0].update(evidence=[11]),
            "bad.json: conversation 0 (sample_id conv-x): qa 0: evidence 0 must be str, got int",
        ),
        (
            lambda d: d[0]["conversation"]["session_1"][0].update(dia_id="first"),
            "bad.json: conversation 0 (sample_id conv-x): session_1 turn 0: dia_id: "
            "malformed dialogue id 'first'",
        ),
    ],
)
def test_locomo_errors(tmp_path: Path, mutate, message: str) -> None:
    data = _locomo()
    mutate(data)
    with pytest.raises(EvalFormatError, match="^" + re.escape(message)):
        read_locomo(_write(tmp_path, "bad.json", data))


def _turn(data: list[dict], session: str, j: int) -> dict:
    return data[0]["conversation"][session][j]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: _turn(d, "session_2", 0).update(text="a\x00b"),
            "bad.json: conversation 0 (sample_id conv-x): session_2 turn 0: content contains a NUL",
        ),
        (
            lambda d: _turn(d, "session_2", 0).update(text="x" * 50_001),
            "bad.json: conversation 0 (sample_id conv-x): session_2 turn 0: episode content has 50001 characters",
        ),
        (
            lambda d: _turn(d, "session_2", 0).update(dia_id="D1:2"),
            "bad.json: conversation 0 (sample_id conv-x): session_2 turn 0: dia_id 'D1:2' is also "
            "session_1 turn 1's, with another text, speaker or time; turn ids must be unique",
        ),
    ],
)
def test_locomo_turns_ingestion_would_refuse_are_named_when_read(tmp_path: Path, mutate, message: str) -> None:
    """A NUL character, an over-long text or one dia_id for two different turns is refused by the
    reader, naming the turn, before a run writes anything: ingestion would refuse it later as
    'episode 4: ...', naming no file or turn, after the run directory was claimed."""
    data = _locomo()
    mutate(data)
    with pytest.raises(EvalFormatError, match="^" + re.escape(message)):
        read_locomo(_write(tmp_path, "bad.json", data))


def test_locomo_turns_with_nothing_to_ingest_are_skipped_and_listed(tmp_path: Path) -> None:
    """An empty text without a caption, a blank text, an empty speaker: the turn is skipped and
    listed with why; the other turns and questions are read, and evidence naming a skipped turn
    counts as naming no turn."""
    data = _locomo()
    _turn(data, "session_2", 0).update(text="  ")
    _turn(data, "session_1", 1).update(text="", blip_caption=None)
    _turn(data, "session_1", 0).update(speaker=" ")
    [conv] = read_locomo(_write(tmp_path, "ok.json", data))
    assert conv.turns == []
    assert conv.skipped_turns == [
        {"turn": "session_1 turn 0 (D1:1)", "reason": "'speaker' is empty"},
        {"turn": "session_1 turn 1 (D1:2)", "reason": "'text' is empty and the turn has no 'blip_caption'"},
        {"turn": "session_2 turn 0 (D2:1)", "reason": "'text' is empty and the turn has no 'blip_caption'"},
    ]
    assert all(not q.evidence for q in conv.questions)
    assert conv.evidence_counts()["skipped"] > 0


def test_locomo_image_turn_with_empty_text_is_its_caption_and_a_repeated_turn_is_read_once(tmp_path: Path) -> None:
    data = _locomo()
    _turn(data, "session_1", 1)["text"] = ""
    data[0]["conversation"]["session_1"].append(dict(_turn(data, "session_1", 0)))
    [conv] = read_locomo(_write(tmp_path, "ok.json", data))
    assert [t.turn_id for t in conv.turns] == ["D1:1", "D1:2", "D2:1"]
    assert conv.turns[1].text == "[shares a photo: a photo of a red kayak]"
    assert conv.skipped_turns == []


def test_longmemeval_empty_turn_is_skipped_and_listed(tmp_path: Path) -> None:
    data = _longmemeval()
    data[0]["haystack_sessions"][0][1]["content"] = ""
    conv = read_longmemeval(_write(tmp_path, "lme.json", data))[0]
    assert conv.skipped_turns == [{"turn": "haystack session 0 (late) turn 1", "reason": "'content' is empty"}]
    assert "late:1" not in {t.turn_id for t in conv.turns} and conv.turns


def test_locomo_irregular_evidence_is_normalised_or_skipped_and_counted() -> None:
    irregular, clean = read_locomo(IRREGULAR)
    evidence = {q.question: q.evidence for q in irregular.questions}
    assert evidence == {
        "What day are Maya's pottery classes?": ["D1:1"],
        "Where did Maya visit Lena?": ["D8:6", "D9:17"],
        "What happened to Juniper?": ["D9:1", "D4:4", "D4:6"],
        "Who is Theo teaching to sail?": ["D11:26"],
        "When was Maya asked to show a vase?": ["D30:5"],
        "What is Theo's sailboat called?": ["D1:2", "D1:3"],
        "What colour was Maya's first bowl?": [],
        "Would Maya enjoy a ceramics museum?": [],
        "What did Theo's sister bake?": ["D9:17"],
    }
    q = "conv-irregular:q"
    assert irregular.evidence_notes == [
        EvidenceNote(f"{q}1", "D8:6; D9:17", ("D8:6", "D9:17"), ()),
        EvidenceNote(f"{q}2", "D9:1 D4:4 D4:6", ("D9:1", "D4:4", "D4:6"), ()),
        EvidenceNote(f"{q}3", "D:11:26", ("D11:26",), ()),
        EvidenceNote(f"{q}4", "D30:05", ("D30:5",), ()),
        EvidenceNote(f"{q}5", "D", (), (("D", "unreadable"),)),
        EvidenceNote(f"{q}6", "D8:99", (), (("D8:99", "no such turn"),)),
    ]
    assert irregular.evidence_counts() == {
        "as_is": 4, "normalised": 7, "skipped": 2, "questions_without_evidence": 2}
    assert clean.evidence_counts() == {
        "as_is": 1, "normalised": 0, "skipped": 0, "questions_without_evidence": 0}
    assert clean.evidence_notes == []


def test_locomo_evidence_duplicates_and_commas(tmp_path: Path) -> None:
    data = _locomo()
    data[0]["qa"][0]["evidence"] = ["D1:1", "D1:1,D2:1", "turn one"]
    (conv,) = read_locomo(_write(tmp_path, "l.json", data))
    assert conv.questions[0].evidence == ["D1:1", "D2:1"]
    assert [n.to_dict() for n in conv.evidence_notes[:2]] == [
        {"question_id": "conv-x:q0", "raw": "D1:1,D2:1", "kept": ["D1:1", "D2:1"], "skipped": []},
        {"question_id": "conv-x:q0", "raw": "turn one", "kept": [],
         "skipped": [{"token": "turn", "reason": "unreadable"}, {"token": "one", "reason": "unreadable"}]},
    ]


def test_locomo_evidence_that_is_not_a_list_of_ids_is_read_or_counted(tmp_path: Path) -> None:
    """One id alone, lower case, blank entries and a missing or null list: what names a turn is
    kept, the rest is counted as skipped, and the run goes on."""
    data = _locomo()
    data[0]["qa"][0]["evidence"] = "D1:1"
    data[0]["qa"][1]["evidence"] = ["d2:1", "  "]
    data[0]["qa"][2].pop("evidence")
    data[0]["qa"][4]["evidence"] = None
    (conv,) = read_locomo(_write(tmp_path, "l.json", data))
    assert [q.evidence for q in conv.questions][:3] == [["D1:1"], ["D2:1"], []]
    assert conv.questions[4].evidence == []
    assert conv.evidence_counts() == {"as_is": 1 + len(data[0]["qa"][3]["evidence"]), "normalised": 1,
                                      "skipped": 3, "questions_without_evidence": 2}
    assert [(n.raw, n.skipped) for n in conv.evidence_notes if not n.kept] == [
        ("  ", (("  ", "empty"),)), (None, (("(none)", "no evidence given"),)),
        (None, (("(none)", "no evidence given"),))]


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe\x00\x01garbage\x80")
    with pytest.raises(EvalFormatError, match=r"^bin\.json: not UTF-8 text"):
        read_locomo(path)


def test_locomo_reader_rejects_longmemeval_file(tmp_path: Path) -> None:
    with pytest.raises(EvalFormatError, match=r"^lme\.json: conversation 0: missing 'sample_id'"):
        read_locomo(_write(tmp_path, "lme.json", _longmemeval()))


def test_top_level_must_be_list(tmp_path: Path) -> None:
    message = r"^x\.json: top level must be a list of conversations, got dict"
    with pytest.raises(EvalFormatError, match=message):
        read_locomo(_write(tmp_path, "x.json", {"sample_id": "c"}))


# LongMemEval ----------------------------------------------------------------


def test_longmemeval_one_conversation_per_question(tmp_path: Path) -> None:
    convs = read_longmemeval(_write(tmp_path, "lme.json", _longmemeval()))
    assert [c.conversation_id for c in convs] == ["q1", "q2_abs"]
    first = convs[0]
    # Sessions are put in date order: "early" (May 30) before "late" (June 1).
    assert [t.turn_id for t in first.turns] == ["early:0", "late:0", "late:1"]
    assert first.turns[0] == Turn(
        "early:0", "user", "I live in Porto.", datetime(2023, 5, 30, 23, 40, tzinfo=UTC), "early"
    )
    (q,) = first.questions
    assert (q.category, q.answer, q.adversarial) == ("knowledge-update", "Lisbon", False)
    assert q.question_time == datetime(2023, 6, 10, 9, 15, tzinfo=UTC)
    assert q.evidence == ["late:0"]


def test_longmemeval_abstention_and_session_fallback(tmp_path: Path) -> None:
    (q,) = read_longmemeval(_write(tmp_path, "lme.json", _longmemeval()))[1].questions
    assert q.adversarial and q.category == "single-session-user"
    assert q.answer == "7"
    # No turn has has_answer, so every turn of the answer session is evidence.
    assert q.evidence == ["s2:0", "s2:1"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d[0]["haystack_sessions"][1][0].pop("content"),
            "lme.json: item 0 (question_id q1): haystack session 1 (early) turn 0: "
            "missing 'content'",
        ),
        (
            lambda d: d[1]["haystack_dates"].pop(),
            "lme.json: item 1 (question_id q2_abs): "
            "'haystack_session_ids' (2), 'haystack_dates' (1)",
        ),
        (
            lambda d: d[0].update(question_date="May 30"),
            "lme.json: item 0 (question_id q1): question_date: unparseable date",
        ),
        (
            lambda d: d[0]["haystack_dates"].__setitem__(0, 20230601),
            "lme.json: item 0 (question_id q1): haystack session 0: "
            "'haystack_dates' entry must be str",
        ),
        (lambda d: d[1].pop("question_id"), "lme.json: item 1: missing 'question_id'"),
    ],
)
def test_longmemeval_errors(tmp_path: Path, mutate, message: str) -> None:
    data = _longmemeval()
    mutate(data)
    with pytest.raises(EvalFormatError, match="^" + re.escape(message)):
        read_longmemeval(_write(tmp_path, "lme.json", data))


def test_detect_format(tmp_path: Path) -> None:
    assert detect_format(_write(tmp_path, "a.json", _locomo())) == "locomo"
    assert detect_format(_write(tmp_path, "b.json", _longmemeval())) == "longmemeval"
    convs = read(_write(tmp_path, "c.json", _longmemeval()))
    assert [c.conversation_id for c in convs] == ["q1", "q2_abs"]
    with pytest.raises(EvalFormatError, match=r"^d\.json: item 0: neither LoCoMo"):
        detect_format(_write(tmp_path, "d.json", [{"foo": 1}]))
    with pytest.raises(EvalFormatError, match=r"^e\.json: empty list"):
        detect_format(_write(tmp_path, "e.json", []))
    bad = tmp_path / "f.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(EvalFormatError, match=r"^f\.json: not valid JSON"):
        detect_format(bad)


# Metrics --------------------------------------------------------------------


def test_recall_at_k_by_hand() -> None:
    retrieved = ["c", "a", "d", "b"]
    gold = ["a", "b"]
    assert recall_at_k(retrieved, gold, 1) == 0.0
    assert recall_at_k(retrieved, gold, 2) == 0.5
    assert recall_at_k(retrieved, gold, 3) == 0.5
    assert recall_at_k(retrieved, gold, 4) == 1.0
    assert recall_at_k(retrieved, gold, 10) == 1.0
    # Duplicates collapse to their first occurrence: distinct top-2 is [c, a].
    assert recall_at_k(["c", "c", "a", "b"], gold, 2) == 0.5
    assert recall_at_k(["a", "a"], ["a", "a", "b"], 5) == 0.5
    assert recall_at_k(["a"], [], 5) is None
    with pytest.raises(ValueError):
        recall_at_k(["a"], ["a"], 0)


def test_percentile_linear_interpolation() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 0) == 1
    assert percentile([1, 2, 3, 4], 100) == 4
    # rank = 0.95 * 4 = 3.8 between 40 and 50 -> 48.
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48.0)
    assert percentile([7], 95) == 7
    with pytest.raises(ValueError):
        percentile([], 50)


def test_accuracy_skips_unjudged() -> None:
    assert accuracy([True, False, None, True]) == pytest.approx(2 / 3)
    assert accuracy([None]) is None


def test_summarize_by_hand() -> None:
    rows = [
        EvalRow("1", "temporal", ["c", "a", "d", "b"], ["a", "b"], correct=True, latency_ms=10),
        EvalRow("2", "temporal", ["x"], ["x"], correct=False, latency_ms=20),
        EvalRow("3", "adversarial", ["x"], [], latency_ms=30),
    ]
    report = summarize(rows, ks=(1, 2))
    overall = report["overall"]
    # recall@1: (0 + 1) / 2 ; recall@2: (0.5 + 1) / 2 ; row 3 has no gold.
    assert overall["n"] == 3 and overall["n_with_gold"] == 2
    assert overall["recall@1"] == 0.5
    assert overall["recall@2"] == 0.75
    assert overall["n_judged"] == 2 and overall["accuracy"] == 0.5
    assert overall["latency_p50_ms"] == 20
    assert overall["latency_p95_ms"] == pytest.approx(29.0)
    temporal = report["by_category"]["temporal"]
    assert temporal["recall@2"] == 0.75 and temporal["n"] == 2
    adversarial = report["by_category"]["adversarial"]
    assert adversarial["recall@1"] is None and adversarial["accuracy"] is None
    assert list(report["by_category"]) == ["adversarial", "temporal"]
    assert set(summarize(rows)["overall"]) >= {"recall@5", "recall@10", "recall@20"}


# Baselines ------------------------------------------------------------------


def _turns(*texts: str) -> list[Turn]:
    when = datetime(2023, 1, 1, tzinfo=UTC)
    return [Turn(f"t{i}", "user", text, when, "s") for i, text in enumerate(texts)]


def test_tokenize_drops_stopwords() -> None:
    words = tokenize("I'm going to the Kayak club, it's GREAT!")
    assert words == ["going", "kayak", "club", "great"]


def test_bm25_ranks_matching_turn_first() -> None:
    index = BM25Index(
        _turns(
            "I had pasta for dinner yesterday.",
            "My sister adopted a golden retriever puppy named Max.",
            "The weather is nice and the dinner was nice.",
            "We talked about the weather.",
        )
    )
    assert index.search("What is the name of the puppy my sister adopted?")[0] == "t1"
    assert index.search("weather")[:2] == ["t3", "t2"]
    assert index.search("the and of") == []
    assert len(index.search("dinner weather", k=1)) == 1


def test_dense_ranks_by_cosine() -> None:
    vocab = ["cat", "dog", "car"]

    def embed(texts: list[str]) -> list[list[float]]:
        return [[float(t.lower().count(w)) for w in vocab] for t in texts]

    index = DenseIndex(_turns("a car", "cat and cat", "dog", "nothing"), embed)
    assert index.search("my cat")[0] == "t1"
    assert index.search("a dog or a car", k=2) == ["t0", "t2"]
    assert index.scores("zzz") == [0.0, 0.0, 0.0, 0.0]


# The real LoCoMo dev subset ---------------------------------------------------

# Counted independently with jq over locomo-dev.json (sessions = keys matching
# ^session_[0-9]+$, turns = their lengths, questions grouped by category).
LOCOMO_DEV_COUNTS = {
    "conv-26": {
        "sessions": 19,
        "turns": 419,
        "photo_turns": 116,
        "questions": {
            "multi-hop": 32,
            "temporal": 37,
            "open-domain": 13,
            "single-hop": 70,
            "adversarial": 47,
        },
    },
    "conv-30": {
        "sessions": 19,
        "turns": 369,
        "photo_turns": 72,
        "questions": {"multi-hop": 11, "temporal": 26, "single-hop": 44, "adversarial": 24},
    },
}


@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason="LoCoMo dev subset not present")
def test_real_locomo_dev_counts() -> None:
    assert detect_format(LOCOMO_DEV) == "locomo"
    convs = read_locomo(LOCOMO_DEV)
    assert [c.conversation_id for c in convs] == ["conv-26", "conv-30"]
    for conv in convs:
        expected = LOCOMO_DEV_COUNTS[conv.conversation_id]
        assert len({t.session_id for t in conv.turns}) == expected["sessions"]
        assert len(conv.turns) == expected["turns"]
        assert sum("[shares a photo: " in t.text for t in conv.turns) == expected["photo_turns"]
        by_category: dict[str, int] = {}
        for q in conv.questions:
            by_category[q.category] = by_category.get(q.category, 0) + 1
        assert by_category == expected["questions"]
        assert all(q.adversarial == (q.category == "adversarial") for q in conv.questions)
        turn_ids = {t.turn_id for t in conv.turns}
        assert len(turn_ids) == len(conv.turns)
        assert all(e in turn_ids for q in conv.questions for e in q.evidence)
        times = [t.time for t in conv.turns]
        assert times == sorted(times) and all(t.tzinfo is UTC for t in times)
    conv26 = convs[0]
    split = [q for q in conv26.questions if "D8:6" in q.evidence and "D9:17" in q.evidence]
    assert split, "the 'D8:6; D9:17' evidence entry is split into two ids"
    assert sum(1 for q in conv26.questions if not q.evidence) == 2
