"""Progress of long commands (ingest, retry, eval): tqdm's bar on a terminal; elsewhere (a log, a
pipe, CI) a plain line every PLAIN_EVERY_S seconds, so a long run is never silent there and never
writes cursor codes into a file."""
from __future__ import annotations

import sys
import time
from typing import IO, Any

from tqdm import tqdm

PLAIN_EVERY_S = 10.0


class Progress:
    """A progress display with tqdm's update/write/close and use as a context manager."""

    def __init__(self, *, total: int | None = None, unit: str = "it", desc: str = "",
                 stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.bar = tqdm(total=total, unit=unit, desc=desc, file=self.stream, disable=not self.tty)
        self.total, self.unit, self.desc = total, unit, desc
        self.n = 0
        self._started = self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        """Count `n` more done; off a terminal, print the count when PLAIN_EVERY_S has passed."""
        self.n += n
        self.bar.update(n)
        now = time.monotonic()
        if not self.tty and now - self._last >= PLAIN_EVERY_S:
            self._last = now
            of = f"/{self.total}" if self.total is not None else ""
            rate = self.n / max(now - self._started, 1e-9)
            self.stream.write(f"{self.desc}: {self.n}{of} {self.unit} ({rate:.1f}/s)\n")
            self.stream.flush()

    def write(self, message: str) -> None:
        """A line that does not break the bar."""
        if self.tty:
            self.bar.write(message, file=self.stream)
        else:
            self.stream.write(message + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
