"""Summary statistics and the significance test used by the comparison tables.

Conventions (the mmtests ones):
- times (lower is better) are summarised by the arithmetic mean (Amean), rates and throughput
  (higher is better) by the harmonic mean (Hmean), which is the right mean for a rate measured
  over a fixed amount of work;
- Stddev is the sample standard deviation (n - 1 in the denominator), 0 for a single sample;
- significance is Welch's unequal-variances t-test, two-sided, at p < 0.05. For Hmean rows the
  test runs on the reciprocals (the harmonic mean is the arithmetic mean of the reciprocals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
TEST_NAME = "Welch's t-test (two-sided, unequal variances)"


def _arr(xs: Sequence[float]) -> np.ndarray:
    a = np.asarray(list(xs), dtype=float)
    if a.size == 0:
        raise ValueError("no samples")
    return a


def amean(xs: Sequence[float]) -> float:
    return float(np.mean(_arr(xs)))


def hmean(xs: Sequence[float]) -> float:
    a = _arr(xs)
    if np.any(a <= 0):
        # the harmonic mean is undefined for non-positive values; fall back to 0 like a stall
        return 0.0
    return float(a.size / np.sum(1.0 / a))


def stddev(xs: Sequence[float]) -> float:
    a = _arr(xs)
    if a.size < 2:
        return 0.0
    return float(np.std(a, ddof=1))


def median(xs: Sequence[float]) -> float:
    return float(np.median(_arr(xs)))


def coeffvar(xs: Sequence[float]) -> float:
    m = amean(xs)
    return 0.0 if m == 0 else 100.0 * stddev(xs) / m


STATISTICS = {
    "Min": lambda xs: float(np.min(_arr(xs))),
    "Max": lambda xs: float(np.max(_arr(xs))),
    "Amean": amean,
    "Hmean": hmean,
    "Median": median,
    "P99": lambda xs: float(np.percentile(_arr(xs), 99)),
    "Stddev": stddev,
    "CoeffVar": coeffvar,
}


@dataclass
class TTest:
    t: float
    df: float
    p: float

    @property
    def significant(self) -> bool:
        return self.p < ALPHA


def welch_ttest(a: Sequence[float], b: Sequence[float]) -> TTest | None:
    """Welch's t-test of equal means; None when either side has fewer than two samples."""
    x, y = _arr(a), _arr(b)
    if x.size < 2 or y.size < 2:
        return None
    vx, vy = np.var(x, ddof=1) / x.size, np.var(y, ddof=1) / y.size
    diff = float(np.mean(x) - np.mean(y))
    se2 = vx + vy
    if se2 == 0:
        # both sides constant: identical means are not different, distinct ones certainly are
        return TTest(0.0, float("nan"), 1.0 if diff == 0 else 0.0)
    t = diff / math.sqrt(se2)
    df = se2 ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    p = float(2.0 * sps.t.sf(abs(t), df))
    return TTest(float(t), float(df), p)


def significance(stat: str, base: Sequence[float], other: Sequence[float]) -> TTest | None:
    """The test that backs a `stat` row, or None if that row carries no significance mark."""
    if stat == "Hmean":
        if min(base) <= 0 or min(other) <= 0:
            return None
        return welch_ttest([1.0 / v for v in base], [1.0 / v for v in other])
    if stat in ("Amean", "Median"):
        return welch_ttest(base, other)
    return None


def pct_better(base: float, value: float, higher_better: bool) -> float:
    """Relative difference to the baseline, positive when `value` is better."""
    if base == value:
        return 0.0
    if base == 0:
        return math.inf if (value > base) == higher_better else -math.inf
    d = (value - base) / abs(base) * 100.0
    return d if higher_better else -d
