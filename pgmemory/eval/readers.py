"""Readers that turn LoCoMo and LongMemEval files into one shared shape.

Both benchmarks become a list of :class:`Conversation`: the turns to ingest, in
chronological order, and the questions asked about them, with gold evidence
given as turn ids.  Turn and session ids are unique within one Conversation
(LoCoMo ``dia_id`` such as ``"D1:3"``; LongMemEval ``"<session_id>:<index>"``),
not across conversations.  Every structural problem raises
:class:`EvalFormatError` naming the file, the item, and the offending field.

LoCoMo evidence is data, not structure: the public file has entries such as
``"D8:6; D9:17"``, ``"D9:1 D4:4 D4:6"``, ``"D:11:26"``, ``"D30:05"``, a bare
``"D"`` and ids of turns that do not exist.  What names a turn of the
conversation is normalised and kept, the rest is skipped; every such entry
is recorded as an :class:`EvidenceNote` so the report can count both.  A turn
holding nothing to ingest (an empty text without a photo caption, an empty
speaker) is skipped and listed too; one ingestion would refuse otherwise (a NUL
character, an over-long text, one dia_id for two different turns) stops the
read, naming the turn.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import validate_episode

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"[Dd]:?(\d+):(\d+)")
_LOCOMO_TIME_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y")
_HAYSTACK_KEYS = ("haystack_session_ids", "haystack_dates", "haystack_sessions")
_LME_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\(\w+\))?\s*(\d{1,2}):(\d{2})")


class EvalFormatError(ValueError):
    """A benchmark file does not have the structure its reader expects."""


@dataclass(frozen=True)
class Turn:
    """One utterance to ingest; ``time`` is the session's start time, tz-aware UTC."""

    turn_id: str
    speaker: str
    text: str
    time: datetime
    session_id: str


@dataclass(frozen=True)
class Question:
    """A benchmark question with its gold answer and gold evidence turn ids.

    ``adversarial`` marks questions whose correct response is to abstain
    (LoCoMo category 5, LongMemEval ids ending in ``_abs``).
    """

    question_id: str
    question: str
    answer: str
    category: str
    evidence: list[str]
    question_time: datetime | None
    adversarial: bool


@dataclass(frozen=True)
class EvidenceNote:
    """An evidence entry that was not exactly one turn id of its conversation: the turn ids
    recovered from it (``kept``) and the tokens skipped, each with why (``skipped``)."""

    question_id: str
    raw: str | None  # None: the question gave no evidence list
    kept: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"question_id": self.question_id, "raw": self.raw, "kept": list(self.kept),
                "skipped": [{"token": token, "reason": reason} for token, reason in self.skipped]}


@dataclass
class Conversation:
    """Turns in chronological order plus the questions asked about them; ``evidence_as_is``
    counts the evidence entries read as they stood, ``evidence_notes`` the others."""

    conversation_id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    evidence_as_is: int = 0
    evidence_notes: list[EvidenceNote] = field(default_factory=list)
    skipped_turns: list[dict[str, str]] = field(default_factory=list)  # {"turn": where, "reason": why}

    def evidence_counts(self) -> dict[str, int]:
        """Evidence entries read as they stood, ids recovered from irregular entries
        (normalised), tokens skipped (unreadable or naming no turn), questions left without."""
        return {
            "as_is": self.evidence_as_is,
            "normalised": sum(len(n.kept) for n in self.evidence_notes),
            "skipped": sum(len(n.skipped) for n in self.evidence_notes),
            "questions_without_evidence": sum(1 for q in self.questions if not q.evidence),
        }


def _fail(where: str, message: str) -> EvalFormatError:
    return EvalFormatError(f"{where}: {message}")


def _get(obj: dict[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise _fail(where, f"missing '{key}'")
    value = obj[key]
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        expected = "/".join(k.__name__ for k in allowed)
        raise _fail(where, f"'{key}' must be {expected}, got {type(value).__name__}")
    return value


def _load(path: str | Path) -> tuple[str, Any]:
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            return path.name, json.load(fh)
    except json.JSONDecodeError as exc:
        raise EvalFormatError(f"{path.name}: not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise EvalFormatError(f"{path.name}: not UTF-8 text (byte {exc.start}): save it as UTF-8 JSON") from exc


def _items(name: str, data: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise EvalFormatError(
            f"{name}: top level must be a list of {what}, got {type(data).__name__}"
        )
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise EvalFormatError(f"{name}: item {i} must be an object, got {type(item).__name__}")
    return data


def detect_format(path: str | Path) -> str:
    """Return ``"locomo"`` or ``"longmemeval"`` so callers can pick a reader without guessing."""
    name, data = _load(path)
    return _detect(name, data)


def _detect(name: str, data: Any) -> str:
    items = _items(name, data, "conversations or questions")
    if not items:
        raise EvalFormatError(f"{name}: empty list, cannot tell LoCoMo from LongMemEval")
    first = items[0]
    if "conversation" in first and "qa" in first:
        return "locomo"
    if "haystack_sessions" in first and "question_id" in first:
        return "longmemeval"
    raise EvalFormatError(
        f"{name}: item 0: neither LoCoMo ('conversation' and 'qa') "
        f"nor LongMemEval ('question_id' and 'haystack_sessions')"
    )


def read(path: str | Path) -> list[Conversation]:
    """Read a LoCoMo or LongMemEval file, detecting which one it is."""
    name, data = _load(path)
    fmt = _detect(name, data)
    return _read_locomo(name, data) if fmt == "locomo" else _read_longmemeval(name, data)


# LoCoMo -------------------------------------------------------------------


def read_locomo(path: str | Path) -> list[Conversation]:
    """Read a LoCoMo file (e.g. locomo10.json), normalising its known irregularities."""
    name, data = _load(path)
    return _read_locomo(name, data)


def _read_locomo(name: str, data: Any) -> list[Conversation]:
    items = _items(name, data, "conversations")
    return _unique(name, [_locomo_conversation(f"{name}: conversation {i}", c) for i, c in enumerate(items)],
                   "conversation", "sample_id")


def _unique(name: str, conversations: list[Conversation], what: str, key: str) -> list[Conversation]:
    """Refuse a file naming two items alike: each is one group and one result, so one would be lost."""
    seen: dict[str, int] = {}
    for i, c in enumerate(conversations):
        if c.conversation_id in seen:
            raise EvalFormatError(f"{name}: {what} {i} repeats {key} {c.conversation_id!r} "
                                  f"(of {what} {seen[c.conversation_id]}); ids must be unique")
        seen[c.conversation_id] = i
    return conversations


def _locomo_conversation(where: str, item: dict[str, Any]) -> Conversation:
    sample_id = _get(item, "sample_id", str, where)
    where = f"{where} (sample_id {sample_id})"
    conv = _get(item, "conversation", dict, where)
    qa = _get(item, "qa", list, where)
    sessions = sorted(
        (int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.fullmatch(key))
    )
    unique = _TurnList()
    skipped: list[dict[str, str]] = []
    for _, key in sessions:
        raw_time = _get(conv, f"{key}_date_time", str, where)
        time = parse_locomo_time(raw_time, f"{where}: {key}_date_time")
        for j, raw in enumerate(_get(conv, key, list, where)):
            twhere = f"{where}: {key} turn {j}"
            turn = _locomo_turn(twhere, raw, key, time)
            if (why := _check_turn(twhere, turn, "text", "speaker", " and the turn has no 'blip_caption'")):
                skipped.append({"turn": f"{key} turn {j} ({turn.turn_id})", "reason": why})
            else:
                unique.add(twhere, f"{key} turn {j}", turn)
    turns = unique.turns
    known = {t.turn_id for t in turns}
    notes: list[EvidenceNote] = []
    questions = [
        _locomo_question(f"{where}: qa {k}", q, f"{sample_id}:q{k}", known, notes)
        for k, q in enumerate(qa)
    ]
    entries = sum(len(_evidence_entries(q)) for q in qa if isinstance(q, dict))
    return Conversation(conversation_id=sample_id, turns=turns, questions=questions,
                        evidence_as_is=entries - sum(1 for n in notes if n.raw is not None), evidence_notes=notes,
                        skipped_turns=skipped)


def _evidence_entries(raw: dict[str, Any]) -> list[Any]:
    """A question's evidence entries: its list; one string alone as a list of it; none when the
    key is missing or null (the question then counts as having no evidence)."""
    value = raw.get("evidence")
    if value is None:
        return []
    return [value] if isinstance(value, str) else value


def _locomo_turn(where: str, raw: Any, session_id: str, time: datetime) -> Turn:
    if not isinstance(raw, dict):
        raise _fail(where, f"must be an object, got {type(raw).__name__}")
    speaker = _get(raw, "speaker", str, where)
    dia_id = normalize_dia_id(_get(raw, "dia_id", str, where), f"{where}: dia_id")
    text = _get(raw, "text", str, where)
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        photo = f"[shares a photo: {caption.strip()}]"
        text = f"{text} {photo}" if text.strip() else photo
    return Turn(turn_id=dia_id, speaker=speaker, text=text, time=time, session_id=session_id)


def _check_turn(where: str, turn: Turn, text_key: str, speaker_key: str, no_text: str = "") -> str | None:
    """Why a turn holding nothing to ingest (an empty text or speaker) is skipped, or None; what
    ingestion would refuse otherwise (a NUL character, a lone surrogate, a text over the episode
    limit) is refused now, naming the turn: ingestion would name only the batch position, after
    the run directory was claimed."""
    if not turn.text.strip():
        return f"'{text_key}' is empty{no_text}"
    if not turn.speaker.strip():
        return f"'{speaker_key}' is empty"
    try:
        validate_episode("eval", turn.text, actor=turn.speaker, reference_time=turn.time,
                         episode_id=turn.turn_id)
    except InvalidInput as exc:
        raise _fail(where, str(exc)) from None
    return None


class _TurnList:
    """A LoCoMo conversation's turns with unique ids: one id for two different turns is refused,
    naming both (ingestion would refuse the batch, naming neither); an exact repeat is kept once
    (as ingestion keeps it, so the group's episode count matches and it can be reused)."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self._seen: dict[str, tuple[str, Turn]] = {}

    def add(self, where: str, label: str, turn: Turn) -> None:
        """Append `turn` (found at `where`, called `label` in messages) unless it repeats one."""
        first = self._seen.setdefault(turn.turn_id, (label, turn))
        if first[1] is turn:
            self.turns.append(turn)
        elif first[1] != turn:
            raise _fail(where, f"dia_id {turn.turn_id!r} is also {first[0]}'s, with another text, "
                               "speaker or time; turn ids must be unique")


def _locomo_question(where: str, raw: Any, question_id: str, known: set[str],
                     notes: list[EvidenceNote]) -> Question:
    if not isinstance(raw, dict):
        raise _fail(where, f"must be an object, got {type(raw).__name__}")
    question = _get(raw, "question", str, where)
    category = _get(raw, "category", int, where)
    if category not in LOCOMO_CATEGORIES:
        raise _fail(where, f"'category' must be one of 1-5, got {category}")
    adversarial = category == 5
    key = "answer" if "answer" in raw or not adversarial else "adversarial_answer"
    answer = _get(raw, key, (str, int, float), where)
    evidence: list[str] = []
    if raw.get("evidence") is None:  # no list at all: nothing to read, counted as skipped
        notes.append(EvidenceNote(question_id, None, (), (("(none)", "no evidence given"),)))
    elif not isinstance(raw["evidence"], (list, str)):
        raise _fail(where, f"'evidence' must be list/str, got {type(raw['evidence']).__name__}")
    for e, entry in enumerate(_evidence_entries(raw)):
        if not isinstance(entry, str):
            raise _fail(where, f"evidence {e} must be str, got {type(entry).__name__}")
        kept, skipped = read_evidence_entry(entry, known)
        if skipped or kept != [entry]:
            notes.append(EvidenceNote(question_id, entry, tuple(kept), tuple(skipped)))
        evidence.extend(i for i in kept if i not in evidence)
    return Question(
        question_id=question_id,
        question=question,
        answer=str(answer),
        category=LOCOMO_CATEGORIES[category],
        evidence=evidence,
        question_time=None,
        adversarial=adversarial,
    )


def read_evidence_entry(entry: str, known: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The turn ids an evidence entry names (split on ";", "," and spaces, canonicalised, kept
    only if the turn exists) and the tokens skipped with the reason ("unreadable", "no such turn")."""
    kept: list[str] = []
    skipped: list[tuple[str, str]] = []
    if not entry.strip():
        return kept, [(entry, "empty")]
    for token in re.split(r"[;,\s]+", entry.strip()):
        if not token:
            continue
        m = _DIA_ID.fullmatch(token)
        if not m:
            skipped.append((token, "unreadable"))
            continue
        dia_id = f"D{int(m.group(1))}:{int(m.group(2))}"
        if dia_id not in known:
            skipped.append((token, "no such turn"))
        elif dia_id not in kept:
            kept.append(dia_id)
    return kept, skipped


def normalize_dia_id(raw: str, where: str = "dia_id") -> str:
    """Canonicalise a LoCoMo turn id ("D:11:26" -> "D11:26") so evidence matches turns."""
    m = _DIA_ID.fullmatch(raw.strip())
    if not m:
        raise _fail(where, f"malformed dialogue id {raw!r}")
    return f"D{int(m.group(1))}:{int(m.group(2))}"


def parse_locomo_time(raw: str, where: str = "date_time") -> datetime:
    """Parse "1:56 pm on 8 May, 2023" as UTC (LoCoMo gives no zone)."""
    text = " ".join(raw.split())
    for fmt in _LOCOMO_TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise _fail(where, f"unparseable date {raw!r} (expected like '1:56 pm on 8 May, 2023')")


# LongMemEval --------------------------------------------------------------


def read_longmemeval(path: str | Path) -> list[Conversation]:
    """Read a LongMemEval file (longmemeval_s/m/oracle.json): one Conversation per question.

    Evidence is the turns flagged ``has_answer``; a question with no flagged
    turn falls back to every turn of its ``answer_session_ids`` sessions.
    Sessions are ordered by date (stable), since the oracle file is unsorted.
    """
    name, data = _load(path)
    return _read_longmemeval(name, data)


def _read_longmemeval(name: str, data: Any) -> list[Conversation]:
    items = _items(name, data, "questions")
    return _unique(name, [_lme_item(f"{name}: item {i}", item) for i, item in enumerate(items)],
                   "item", "question_id")


def _lme_item(where: str, item: dict[str, Any]) -> Conversation:
    qid = _get(item, "question_id", str, where)
    where = f"{where} (question_id {qid})"
    qtype = _get(item, "question_type", str, where)
    question = _get(item, "question", str, where)
    answer = _get(item, "answer", (str, int, float), where)
    raw_qtime = _get(item, "question_date", str, where)
    qtime = parse_longmemeval_date(raw_qtime, f"{where}: question_date")
    session_ids = _get(item, "haystack_session_ids", list, where)
    dates = _get(item, "haystack_dates", list, where)
    sessions = _get(item, "haystack_sessions", list, where)
    answer_sessions = _get(item, "answer_session_ids", list, where)
    if not len(session_ids) == len(dates) == len(sessions):
        raise _fail(
            where,
            f"'haystack_session_ids' ({len(session_ids)}), 'haystack_dates' ({len(dates)}) and "
            f"'haystack_sessions' ({len(sessions)}) must have the same length",
        )
    dated: list[tuple[datetime, int, str, list[Any]]] = []
    for s, entries in enumerate(zip(session_ids, dates, sessions)):
        swhere = f"{where}: haystack session {s}"
        for key, value, kind in zip(_HAYSTACK_KEYS, entries, (str, str, list)):
            if not isinstance(value, kind):
                got = type(value).__name__
                raise _fail(swhere, f"'{key}' entry must be {kind.__name__}, got {got}")
        sid, date, session = entries
        dated.append((parse_longmemeval_date(date, f"{swhere}: haystack_dates"), s, sid, session))
    dated.sort(key=lambda d: (d[0], d[1]))
    turns: list[Turn] = []
    skipped: list[dict[str, str]] = []
    flagged: list[str] = []
    by_session: dict[str, list[str]] = {}
    for time, s, sid, session in dated:
        for j, raw in enumerate(session):
            twhere = f"{where}: haystack session {s} ({sid}) turn {j}"
            if not isinstance(raw, dict):
                raise _fail(twhere, f"must be an object, got {type(raw).__name__}")
            turn = Turn(
                turn_id=f"{sid}:{j}",
                speaker=_get(raw, "role", str, twhere),
                text=_get(raw, "content", str, twhere),
                time=time,
                session_id=sid,
            )
            if (why := _check_turn(twhere, turn, "content", "role")):
                skipped.append({"turn": f"haystack session {s} ({sid}) turn {j}", "reason": why})
                continue
            turns.append(turn)
            by_session.setdefault(sid, []).append(turn.turn_id)
            if raw.get("has_answer") is True:
                flagged.append(turn.turn_id)
    evidence = flagged or [t for sid in answer_sessions for t in by_session.get(str(sid), [])]
    q = Question(
        question_id=qid,
        question=question,
        answer=str(answer),
        category=qtype,
        evidence=evidence,
        question_time=qtime,
        adversarial=qid.endswith("_abs"),
    )
    return Conversation(conversation_id=qid, turns=turns, questions=[q], evidence_as_is=len(evidence),
                        skipped_turns=skipped)


def parse_longmemeval_date(raw: str, where: str = "date") -> datetime:
    """Parse "2023/05/30 (Tue) 23:40" as UTC (LongMemEval gives no zone; the weekday is ignored)."""
    m = _LME_DATE.fullmatch(raw.strip())
    if not m:
        raise _fail(where, f"unparseable date {raw!r} (expected like '2023/05/30 (Tue) 23:40')")
    try:
        return datetime(*(int(g) for g in m.groups()), tzinfo=timezone.utc)
    except ValueError as exc:
        raise _fail(where, f"invalid date {raw!r}: {exc}") from exc
