"""Small statistics for benchmark reports: percentiles, per-bucket summaries, growth, and the CPU
time of a server process (steadier than wall time on a shared machine)."""
from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, p95, mean and max of a sequence (rounded to 0.01), or zeros when empty."""
    if not values:
        return {"median": 0.0, "p95": 0.0, "mean": 0.0, "max": 0.0}
    return {"median": round(statistics.median(values), 2), "p95": round(percentile(values, 95), 2),
            "mean": round(statistics.fmean(values), 2), "max": round(max(values), 2)}


def slope_per_1000(values: Sequence[float]) -> float:
    """Least-squares slope of values against their position, per 1000 positions (0 if too few)."""
    if len(values) < 3:
        return 0.0
    fit = statistics.linear_regression(range(len(values)), values)
    return round(fit.slope * 1000, 3)


def backend_cpu_s(pid: int) -> float | None:
    """CPU seconds a server process on this machine has run: the scheduler's nanosecond count
    (/proc/<pid>/schedstat), else user + system time in clock ticks; None when not readable."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
