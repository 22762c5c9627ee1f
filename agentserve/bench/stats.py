"""The one percentile definition every benchmark reports.

Percentiles are over the raw samples (never over per-round medians), with the warm-up already left out by the caller
(`drop_warmup`). The definition is linear interpolation between closest ranks, numpy's default (Hyndman & Fan type
7): p50 equals `statistics.median` (the mean of the two middle samples for an even count), p0 / p100 are the
minimum / maximum. `summary` reports p50 and p90 always, p99 only with at least `P99_MIN_SAMPLES` samples: below that
the p99 is one of the last samples and says nothing.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

P99_MIN_SAMPLES = 100


def percentile(samples: Iterable[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of the samples; NaN when there are none."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    ys = sorted(samples)
    if not ys:
        return math.nan
    pos = (len(ys) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    frac = pos - lo
    if frac == 0 or ys[hi] == ys[lo]:
        return float(ys[lo])
    return ys[lo] + (ys[hi] - ys[lo]) * frac


def p50(samples: Iterable[float]) -> float:
    return percentile(samples, 50)


def drop_warmup(samples: Sequence[float], warmup: int) -> list[float]:
    """The samples after the first `warmup` (which are recorded, if at all, elsewhere)."""
    if warmup < 0:
        raise ValueError("warmup must be >= 0")
    return list(samples[warmup:])


def summary(samples: Sequence[float], *, digits: int | None = 2, p99_min: int = P99_MIN_SAMPLES) -> dict[str, float]:
    """{"n", "p50", "p90"[, "p99"]} of the raw samples; p99 only with >= p99_min samples. Rounded to `digits`."""
    xs = list(samples)
    out: dict[str, float] = {"n": len(xs), "p50": percentile(xs, 50), "p90": percentile(xs, 90)}
    if len(xs) >= p99_min:
        out["p99"] = percentile(xs, 99)
    if digits is not None:
        out = {k: (round(v, digits) if isinstance(v, float) else v) for k, v in out.items()}
    return out
