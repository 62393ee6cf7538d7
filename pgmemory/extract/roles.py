"""Speaker roles every extractor treats alike: the assistant's own chatter is not a fact source."""
from __future__ import annotations

ASSISTANT_NAMES = frozenset(["assistant", "ai", "ai assistant", "bot", "chatbot"])


def is_assistant(name: str | None) -> bool:
    """True for the assistant's role names ("Assistant", "AI", "bot"), in any case."""
    return name is not None and " ".join(name.split()).casefold() in ASSISTANT_NAMES
