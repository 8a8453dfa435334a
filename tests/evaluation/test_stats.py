"""Intervals and paired tests of evaluation.stats, against values worked out by hand or by bisection."""

import math

import numpy as np
import pytest

from evaluation.stats import Z95, bootstrap_mean, mcnemar, paired_difference, seed_interval, t975, wilson


def _score_bound(k: int, n: int, upper: bool) -> float:
    """The p0 where the score statistic |k/n - p0| / sqrt(p0 (1 - p0) / n) equals z: found by bisection."""
    phat = k / n

    def excess(p0):
        return abs(phat - p0) / math.sqrt(p0 * (1 - p0) / n) - Z95

    lo, hi = (phat, 1 - 1e-12) if upper else (1e-12, phat)
    if (upper and k == n) or (not upper and k == 0):
        return 1.0 if upper else 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        inside = excess(mid) < 0
        if upper:
            lo, hi = (mid, hi) if inside else (lo, mid)
        else:
            lo, hi = (lo, mid) if inside else (mid, hi)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("k,n", [(0, 14), (5, 14), (14, 14), (1, 70), (33, 70), (7, 35)])
def test_wilson_is_the_score_interval(k, n):
    lo, hi = wilson(k, n)
    assert lo == pytest.approx(_score_bound(k, n, upper=False), abs=1e-9)
    assert hi == pytest.approx(_score_bound(k, n, upper=True), abs=1e-9)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_wilson_zero_of_fourteen_is_not_zero_width():
    lo, hi = wilson(0, 14)
    # z^2 = 3.8415: hi = (z^2/n) / (1 + z^2/n) = 0.27440 / 1.27440 = 0.2153
    assert lo == 0.0 and hi == pytest.approx(0.2153, abs=1e-4)


def test_wilson_refuses_bad_counts():
    with pytest.raises(ValueError, match="k <= n"):
        wilson(3, 2)
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_mcnemar_exact_by_hand():
    # B broke 8 clips and fixed none: p = 2 * 0.5^8 = 0.0078125
    a = [False] * 8 + [True] * 3 + [False] * 3
    b = [True] * 8 + [True] * 3 + [False] * 3
    r = mcnemar(a, b)
    assert (r["only_a"], r["only_b"]) == (0, 8) and r["p_value"] == pytest.approx(0.0078125)
    # 4 fixed, 8 broken: 2 * (1 + 12 + 66 + 220 + 495) / 4096 = 0.387695...
    a = [True] * 4 + [False] * 8
    b = [False] * 4 + [True] * 8
    assert mcnemar(a, b)["p_value"] == pytest.approx(2 * 794 / 4096)
    assert mcnemar([True, False], [True, False])["p_value"] == 1.0


def test_paired_difference():
    r = paired_difference([1, 1, 0, 0], [0, 0, 0, 0])
    assert r["diff"] == -0.5 and r["n"] == 4 and r["lo"] <= -0.5 <= r["hi"] <= 0.0
    same = paired_difference([0.3, 0.9, 0.5], [0.3, 0.9, 0.5])
    assert same["diff"] == same["lo"] == same["hi"] == 0.0
    # a constant shift is known exactly whatever the between-clip spread: the pairing removes it
    x = np.random.default_rng(0).uniform(0, 1, 50)
    shift = paired_difference(x, x + 0.1)
    assert (
        shift["diff"] == pytest.approx(0.1) and shift["lo"] == pytest.approx(0.1) and shift["hi"] == pytest.approx(0.1)
    )
    with pytest.raises(ValueError, match="same"):
        paired_difference([1, 0], [1])


def test_bootstrap_mean_brackets_the_mean_and_shrinks_with_more_clips():
    assert bootstrap_mean([0.7] * 10) == (0.7, 0.7)
    rng = np.random.default_rng(1)
    small, big = rng.uniform(0, 1, 20), rng.uniform(0, 1, 2000)
    lo, hi = bootstrap_mean(small)
    assert lo < small.mean() < hi
    blo, bhi = bootstrap_mean(big)
    assert bhi - blo < hi - lo
    assert bootstrap_mean([1.0, float("nan"), 1.0]) == (1.0, 1.0)  # non-finite values left out


def test_seed_interval_by_hand():
    r = seed_interval([1.0, 2.0, 3.0])
    # mean 2, sample sd 1, t(0.975, 2) = 4.303: half width 4.303 / sqrt(3) = 2.4843
    assert r["mean"] == 2.0 and r["hi"] - 2.0 == pytest.approx(4.303 / math.sqrt(3)) and r["n"] == 3
    assert seed_interval([0.25]) == {"mean": 0.25, "lo": 0.25, "hi": 0.25, "n": 1}
    assert t975(1) == 12.706 and t975(1000) == Z95


def test_paired_comparison_of_the_report_counts_fixed_and_broken_clips():
    from evaluation.report import paired_comparison, paired_table

    def rec(sid, event, rc):
        return dict(scenario=sid, event=event, steps=3, horizon=3, route_completion=[0.0, rc], speed=[1.0] * 4)

    a = [
        rec("s0", "dynamic_collision", 0.5),
        rec("s1", "", 1.0),
        rec("s2", "", 1.0),
        rec("s3", "static_collision", 0.2),
    ]
    b = [rec("s0", "", 1.0), rec("s1", "", 1.0), rec("s2", "position_deviation", 0.6), rec("s3", "", 1.0)]
    out = paired_comparison({"A": a, "B": b})
    row = out["B - A"]
    assert row["n"] == 4 and (row["mcnemar"]["only_a"], row["mcnemar"]["only_b"]) == (2, 1)
    assert row["collision"]["diff"] == pytest.approx(-0.5)  # two collisions gone, none new
    assert row["RC"]["diff"] == pytest.approx(((1.0 - 0.5) + 0 + (0.6 - 1.0) + (1.0 - 0.2)) / 4)
    # DS: A = [0.5 * 0.6, 1, 1, 0.2 * 0.65], B = [1, 1, 0.6 * 0.7, 1]
    assert row["DS"]["diff"] == pytest.approx(((1 - 0.3) + 0 + (0.42 - 1) + (1 - 0.13)) / 4)
    assert "B - A" in paired_table(out) and "2 / 1" in paired_table(out)
