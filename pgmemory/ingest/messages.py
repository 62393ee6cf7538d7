"""mem0-style message lists ([{"role", "content", "name"?}]) as one chat episode."""
from __future__ import annotations

from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.validate import check_list, check_text


def messages_text(messages: Any) -> tuple[str, str | None]:
    """A mem0-style message list [{"role", "content", "name"?}] as one chat episode: "Speaker:
    text" lines (the speaker is `name`, else the role capitalised) and no actor; or, when one speaker
    said everything, the texts and that speaker as the actor. Raises InvalidInput naming the bad message."""
    items = check_list(messages, "messages")
    if not items:
        raise InvalidInput("messages is empty")
    lines, speakers, texts = [], set(), []
    for n, msg in enumerate(items, start=1):
        if not isinstance(msg, dict):
            raise InvalidInput(f"message {n}: expected an object with role and content")
        unknown = sorted(repr(k) for k in msg if k not in ("role", "content", "name"))
        if unknown:
            raise InvalidInput(f"message {n}: unknown field(s) {', '.join(unknown)[:200]}; allowed: role, content, name")
        role = check_text(msg.get("role"), f"message {n} role", max_chars=200)
        content = check_text(msg.get("content"), f"message {n} content")
        name = msg.get("name")
        speaker = (check_text(name, f"message {n} name", max_chars=200) if name is not None
                   else role.strip().capitalize()).strip()
        speakers.add(speaker)
        texts.append(" ".join(content.split()))
        lines.append(f"{speaker}: {texts[-1]}")
    if len(speakers) == 1:
        return "\n".join(texts), speakers.pop()
    return "\n".join(lines), None
