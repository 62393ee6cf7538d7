"""A zero-latency "scripted model" for FakeOpenAI: answers pgmemory's prompts like the rules would.

Extraction: parses CURRENT EPISODE / SPEAKER / REFERENCE TIME from the request and replies with the
offline extractor's entities and facts for that text as an ExtractionReply. Entity resolution: a
candidate is the same entity when one name's words start the other's (RuleExtractor's rule). Fact
judgement: a same-pair fact with the same relation and direction is a duplicate; a functional new fact
contradicts related facts of the same relation and source with another target (RuleExtractor's
rule). Fact endpoints are not in the judge prompt, so the model remembers the endpoints of every
fact sentence it extracted. Token counts are computed here (count_tokens over the message texts and
the response schema; the reply text): synthetic, not a real model's usage.
"""
from __future__ import annotations

import json
import re
import threading
from collections import Counter
from datetime import datetime
from typing import Any

from pgmemory.extract import community_prompts, prompts
from pgmemory.extract.offline import OfflineExtractor
from pgmemory.extract.types import EpisodeInput
from pgmemory.providers.tokens import count_tokens
from tests.fake_openai import Reply, Status

_EPISODE = re.compile(r"<CURRENT EPISODE>\n(.*?)\n</CURRENT EPISODE>", re.DOTALL)
_SPEAKER = re.compile(r"^SPEAKER: (.*?) \(first-person words refer to the speaker\)$", re.MULTILINE)
_REFERENCE = re.compile(r"^REFERENCE TIME: (\S+)$", re.MULTILINE)
_ENTITY = re.compile(r"^([EN]\d+): (.+?)(?: \[[^\]]*\])?: ")
_CANDIDATES = re.compile(r"^\s+candidates: (.*)$")
_FACT = re.compile(r"^([FN]\d+): \[([A-Z0-9_]+)\] (.*) \(valid: [^)]*\)(?: \{([^}]*)\})?$")
_LISTS = re.compile(r"^\s+(same-pair|related) facts: (.*)$")
KINDS = {prompts.EXTRACT_SYSTEM: "extraction", prompts.RESOLVE_SYSTEM: "resolution",
         prompts.JUDGE_SYSTEM: "judgement", community_prompts.COMMUNITY_SYSTEM: "community"}


def kind_of(body: dict[str, Any]) -> str:
    """Which pipeline step a recorded chat request is, by its system prompt."""
    messages = body.get("messages") or [{}]
    return KINDS.get(messages[0].get("content", ""), "other")


def _section(text: str, tag: str) -> list[str]:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return match.group(1).splitlines() if match else []


def _ids(text: str) -> list[str]:
    return [] if text.strip() == "(none)" else [part.strip() for part in text.split(",") if part.strip()]


def same_name(a: str, b: str) -> bool:
    """RuleExtractor's entity rule: one name's words are a prefix of the other's (case-insensitive)."""
    x, y = a.lower().split(), b.lower().split()
    short, long_ = (x, y) if len(x) <= len(y) else (y, x)
    return bool(short) and long_[:len(short)] == short


class ScriptedModel:
    """The FakeOpenAI responder; thread-safe, one instance per benchmark run."""

    def __init__(self) -> None:
        self._rules = OfflineExtractor()
        self._endpoints: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def __call__(self, body: dict[str, Any]) -> Reply | Status:
        """Answer one chat completion request."""
        kind = kind_of(body)
        user = body["messages"][-1]["content"]
        if kind == "extraction":
            reply = self.extract(user)
        elif kind == "resolution":
            reply = self.resolve(user)
        elif kind == "judgement":
            reply = self.judge(user)
        elif kind == "community":
            reply = self.summarise(user)
        else:
            return Status(400, "scripted model: unknown system prompt")
        with self._lock:
            self.calls[kind] += 1
        content = json.dumps(reply)
        schema = json.dumps(body.get("response_format", {}))
        prompt = sum(count_tokens(m.get("content", "")) for m in body["messages"]) + count_tokens(schema)
        return Reply(reply, prompt_tokens=prompt, completion_tokens=count_tokens(content))

    def extract(self, user: str) -> dict[str, Any]:
        """The offline extractor's reading of the current episode, as an ExtractionReply."""
        rendered = _EPISODE.search(user).group(1)
        speaker_match = _SPEAKER.search(user)
        speaker = speaker_match.group(1) if speaker_match else None
        content = rendered[len(speaker) + 2:] if speaker and rendered.startswith(f"{speaker}: ") else rendered
        ref = datetime.fromisoformat(_REFERENCE.search(user).group(1).replace("Z", "+00:00"))
        found = self._rules.extract(EpisodeInput(content, "message", ref, speaker), [])
        with self._lock:
            for f in found.facts:
                self._endpoints[f.fact] = (f.source, f.target)
        summaries = {}
        for f in found.facts:
            summaries.setdefault(f.source, f.fact)
            summaries.setdefault(f.target, f.fact)
        return {
            "entities": [{"name": e.name, "type": None, "summary": summaries.get(e.name, ""), "attributes": {}}
                         for e in found.entities],
            "missed_entities": [], "invalid_entities": [],
            "facts": [{"source": f.source, "target": f.target, "relation_type": f.relation, "fact": f.fact,
                       "valid_at": prompts.iso(f.valid_at) if f.valid_at else None,
                       "invalid_at": prompts.iso(f.invalid_at) if f.invalid_at else None,
                       "negated": f.negated, "functional": f.functional, "attributes": {},
                       "kind": f.attributes.get("kind", "state")}
                      for f in found.facts],
        }

    def summarise(self, user: str) -> dict[str, Any]:
        """A community summary: its first facts (or member lines / partial summaries), named after
        the first three names listed."""
        lines = _section(user, "ENTITIES") or _section(user, "SUMMARIES")
        facts = [f for f in _section(user, "FACTS") if f != "(none)"]
        names = [line.split(":", 1)[0] for line in lines]
        body = facts[:3] or [line.split(":", 1)[-1].strip() for line in lines[:3]]
        return {"summary": " ".join(body), "name": ", ".join(names[:3])}

    def resolve(self, user: str) -> dict[str, Any]:
        """Each new entity is its first candidate whose name extends (or is extended by) its own."""
        existing = {m.group(1): m.group(2) for line in _section(user, "EXISTING ENTITIES")
                    if (m := _ENTITY.match(line))}
        answers: list[dict[str, Any]] = []
        current: tuple[str, str] | None = None
        for line in _section(user, "NEW ENTITIES"):
            if m := _ENTITY.match(line):
                current = (m.group(1), m.group(2))
            elif (c := _CANDIDATES.match(line)) and current:
                new_id, name = current
                match = next((cid for cid in _ids(c.group(1)) if same_name(name, existing.get(cid, ""))), None)
                if match is None:
                    answers.append({"new_id": new_id, "duplicate_of": None, "name": name})
                else:
                    fuller = max(existing[match], name, key=lambda n: (len(n.split()), len(n)))
                    answers.append({"new_id": new_id, "duplicate_of": match, "name": fuller})
        return {"resolutions": answers}

    def judge(self, user: str) -> dict[str, Any]:
        """Duplicates: same relation and direction; contradictions: functional, same source, other target."""
        existing: dict[str, tuple[str, str, str]] = {}
        for line in _section(user, "EXISTING FACTS"):
            if m := _FACT.match(line):
                existing[m.group(1)] = (m.group(2), *self._ends(m.group(3)))
        answers: list[dict[str, Any]] = []
        new: dict[str, Any] | None = None
        for line in _section(user, "NEW FACTS"):
            if m := _FACT.match(line):
                flags = m.group(4) or ""
                new = {"id": m.group(1), "relation": m.group(2), "ends": self._ends(m.group(3)),
                       "negated": "NEGATED" in flags, "functional": "FUNCTIONAL" in flags}
            elif (lists := _LISTS.match(line)) and new is not None:
                new[lists.group(1)] = _ids(lists.group(2))
                if lists.group(1) == "related":
                    answers.append(self._judgement(new, existing))
        return {"judgements": answers}

    def _ends(self, sentence: str) -> tuple[str, str]:
        with self._lock:
            return self._endpoints.get(sentence, ("", ""))

    @staticmethod
    def _judgement(new: dict[str, Any], existing: dict[str, tuple[str, str, str]]) -> dict[str, Any]:
        source, target = new["ends"]
        dup = next((fid for fid in new.get("same-pair", []) if fid in existing
                    and existing[fid][0] == new["relation"] and same_name(existing[fid][1], source)
                    and same_name(existing[fid][2], target)), None)
        ended: list[str] = []
        if new["functional"] and not new["negated"]:
            ended = [fid for fid in new.get("related", []) if fid in existing
                     and existing[fid][0] == new["relation"] and same_name(existing[fid][1], source)
                     and not same_name(existing[fid][2], target)]
        return {"new_id": new["id"], "duplicate_of": dup, "contradicts": ended}
