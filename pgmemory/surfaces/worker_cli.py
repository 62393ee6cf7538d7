"""`pgmemory worker`: process queued episodes with a progress line; SIGTERM/SIGINT stop it cleanly."""
from __future__ import annotations

import asyncio
import signal
import sys
import time

from pgmemory.ingest.worker import WorkerStats
from pgmemory.memory import Memory


class ProgressLine:
    """One status line: rewritten in place on a terminal, plain lines (at most one per
    `every` seconds) when the output is a file or a pipe."""

    def __init__(self, stream=sys.stdout, every: float = 2.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every
        self._last = 0.0

    def update(self, stats: WorkerStats, *, final: bool = False) -> None:
        now = time.monotonic()
        if not (final or self.tty or now - self._last >= self.every):
            return
        self._last = now
        aside = f", {stats.set_aside} set aside (group busy)" if stats.set_aside else ""
        if stats.provider_waits:
            aside += f", {stats.provider_waits} given back (LLM or embedder unavailable: waiting)"
        if stats.unreachable:
            aside += f", groups of unreachable Citus worker(s) {', '.join(sorted(stats.unreachable))} wait"
        text = (f"worker: {stats.done} done, {stats.skipped} skipped, {stats.failed} failed{aside}, "
                f"{stats.in_progress} in progress; {stats.llm_calls} LLM calls, {stats.tokens} tokens")
        if self.tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


async def run_worker(*, concurrency: int, drain: bool, lease_seconds: float, poll_seconds: float,
                     grace_seconds: float) -> int:
    """Run a worker until SIGTERM/SIGINT (or, with drain, until nothing is ready); rc 1 on failures
    or when a Citus worker was still unreachable at the end (its groups were not processed)."""
    progress = ProgressLine()
    async with await Memory.open(pool_size=concurrency + 2, lease_seconds=lease_seconds) as memory:
        worker = memory.worker(concurrency=concurrency, drain=drain, poll_seconds=poll_seconds,
                               grace_seconds=grace_seconds, on_progress=progress.update)
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals == 1 and worker.stats.in_progress:
                print("\n" * progress.tty + f"worker: stopping: finishing {worker.stats.in_progress} episode(s) in "
                      f"progress, up to {grace_seconds:g} s (Ctrl-C or SIGTERM again gives them back now)",
                      file=sys.stderr, flush=True)
            worker.stop(now=signals > 1)

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        stats = await worker.run()
    progress.update(stats, final=True)
    for error in stats.errors[:10]:
        print(f"  failed: {error}", file=sys.stderr)
    if stats.failed:
        print("  run `pgmemory retry` to try the failed episodes again", file=sys.stderr)
    if stats.unreachable:
        nodes = ", ".join(sorted(stats.unreachable))
        print(f"  Citus worker(s) {nodes} unreachable: the episodes of their groups were not processed; "
              "they are once the worker is back (`pgmemory worker` again)", file=sys.stderr)
    return 1 if stats.failed or stats.unreachable else 0
