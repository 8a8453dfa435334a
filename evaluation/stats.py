"""Intervals and paired comparisons for evaluation metrics: pure functions of per-clip arrays.

- :func:`wilson`: 95 % Wilson score interval of a rate k/n (clips with an event / clips). Unlike the
  normal ("Wald") interval it stays inside [0, 1] and is not zero-width at k = 0 or k = n, which is
  where driving rates live (CR 0/14 does not mean "never").
- :func:`bootstrap_mean`: percentile bootstrap over clips for a mean of per-clip values (route
  completion, driving score, ADE), seeded so a report is reproducible.
- :func:`paired_difference`: B - A on the SAME clips, bootstrap over clips (pairs resampled together),
  which removes the between-clip variance that unpaired intervals carry.
- :func:`mcnemar`: exact McNemar test on paired failures (clips that fail under one policy only).
- :func:`seed_interval`: Student-t interval of a mean across training seeds (a study's spread).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

Z95 = 1.959963984540054  # standard normal 0.975 quantile

# Student t 0.975 quantiles for 1..30 degrees of freedom (standard tables); beyond: the normal's.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval (lo, hi) of the rate k/n; (nan, nan) when n == 0."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)  # exact ends: the bound is 0 (1) there, not a rounding
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


def _clean(values: ArrayLike) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    return v[np.isfinite(v)]


def bootstrap_mean(values: ArrayLike, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95 % interval of the mean over clips (non-finite values left out)."""
    v = _clean(values)
    if v.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n_boot, v.size))
    means = v[idx].mean(axis=1)
    return (float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975)))


def paired_difference(a: ArrayLike, b: ArrayLike, n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Mean of b - a over clips with its paired bootstrap 95 % interval.

    a, b: [N] per-clip values of two policies on the same N clips, in the same order (a failure
    indicator for a rate: 1.0 = the clip failed). Returns ``{"diff", "lo", "hi", "n"}``; the
    difference is significant at 5 % when the interval excludes 0.
    """
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired_difference: the two policies have {x.size} and {y.size} clips; pairs need the same")
    keep = np.isfinite(x) & np.isfinite(y)
    d = (y - x)[keep]
    if d.size == 0:
        return {"diff": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    means = d[idx].mean(axis=1)
    return {
        "diff": float(d.mean()),
        "lo": float(np.quantile(means, 0.025)),
        "hi": float(np.quantile(means, 0.975)),
        "n": int(d.size),
    }


def mcnemar(a_fail: ArrayLike, b_fail: ArrayLike) -> dict[str, float]:
    """Exact (binomial) two-sided McNemar test on paired failures.

    ``only_a``: clips that fail under A and not under B (B fixed them); ``only_b``: the reverse
    (B broke them). Under "no difference" each discordant clip is a fair coin.
    """
    x = np.asarray(a_fail, dtype=bool).reshape(-1)
    y = np.asarray(b_fail, dtype=bool).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"mcnemar: the two policies have {x.size} and {y.size} clips; pairs need the same")
    only_a = int(np.sum(x & ~y))
    only_b = int(np.sum(~x & y))
    n = only_a + only_b
    if n == 0:
        p = 1.0
    else:
        k = min(only_a, only_b)
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
        p = min(1.0, 2.0 * tail)
    return {"only_a": only_a, "only_b": only_b, "p_value": p}


def t975(df: int) -> float:
    """Student t 0.975 quantile (two-sided 95 %) for ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975: df must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else Z95


def seed_interval(values: ArrayLike) -> dict[str, float]:
    """Mean across seeds with its Student-t 95 % interval (``lo == hi == mean`` for one seed)."""
    v = _clean(values)
    if v.size == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    m = float(v.mean())
    if v.size == 1:
        return {"mean": m, "lo": m, "hi": m, "n": 1}
    half = t975(v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return {"mean": m, "lo": m - half, "hi": m + half, "n": int(v.size)}
