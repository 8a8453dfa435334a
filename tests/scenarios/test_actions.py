"""RAD's action bins: the feasibility table, projection, decoding and the IL target (nearest feasible bins)."""

from __future__ import annotations

import numpy as np
import pytest

from scenarios.actions import (
    RAD_HALF_WIDTHS,
    ActionSpec,
    decode,
    feasibility,
    half_widths,
    is_feasible,
    nearest_bins,
    project_feasible,
)


def test_default_bins_are_rads():
    spec = ActionSpec()
    np.testing.assert_allclose(spec.lateral, np.linspace(-0.75, 0.75, 61))
    np.testing.assert_allclose(spec.longitudinal, np.linspace(0.0, 15.0, 61))
    np.testing.assert_allclose(np.diff(spec.lateral), 0.025)
    np.testing.assert_allclose(np.diff(spec.longitudinal), 0.25)


def test_feasibility_reproduces_rads_table():
    mask = feasibility()
    assert mask.shape == (61, 61) and mask.dtype == bool
    hw = half_widths()
    assert hw[:8].tolist() == list(RAD_HALF_WIDTHS) == [0, 0, 2, 4, 8, 13, 20, 29]
    assert (hw[8:] == 30).all()
    # each row is the contiguous band centre +- half-width
    for i in range(61):
        want = np.abs(np.arange(61) - 30) <= hw[i]
        assert (mask[i] == want).all(), i


def test_rule_is_in_metres_for_other_bin_counts():
    """Half as many longitudinal bins (0.5 m apart): bin j sits at RAD's 2j, and the band is RAD's there."""
    coarse = ActionSpec(n_long=31)
    assert half_widths(coarse)[:5].tolist() == [0, 2, 8, 20, 30]
    # twice as many lateral bins (0.0125 m apart): the band in metres lies between RAD's bins
    fine = ActionSpec(n_lat=121)
    band_m = half_widths(fine)[:8] * 0.0125
    rad_m = np.array(RAD_HALF_WIDTHS) * 0.025
    assert ((band_m >= rad_m) & (band_m < rad_m + 0.025)).all()
    # an even number of lateral bins has no centre; the two bins nearest zero stay allowed
    even = ActionSpec(n_lat=20)
    assert even.mask[0].sum() == 2 and even.mask.any(axis=1).all()


def test_decode_and_is_feasible():
    lat, lon = decode(np.array([0, 30, 60]), np.array([0, 20, 60]))
    np.testing.assert_allclose(lat, [-0.75, 0.0, 0.75])
    np.testing.assert_allclose(lon, [0.0, 5.0, 15.0])
    assert is_feasible(30, 0) and not is_feasible(31, 0) and is_feasible(0, 8) and not is_feasible(0, 7)


def test_project_feasible_moves_only_the_lateral_bin():
    lat, moved = project_feasible(np.array([60, 0, 30, 45]), np.array([0, 3, 0, 20]))
    assert lat.tolist() == [30, 26, 30, 45]
    assert moved.tolist() == [True, True, False, False]


def test_nearest_bins_exact_on_bin_values_and_feasible_always():
    spec = ActionSpec()
    i, j = np.meshgrid(np.arange(61), np.arange(61), indexing="ij")
    ok = spec.mask[j, i]
    lat, lon = decode(i[ok], j[ok])
    got = nearest_bins(lat, lon)
    np.testing.assert_array_equal(got[:, 0], i[ok])
    np.testing.assert_array_equal(got[:, 1], j[ok])
    rng = np.random.default_rng(0)
    lat = rng.uniform(-1.5, 1.5, 2000)
    lon = rng.uniform(-1.0, 17.0, 2000)
    b = nearest_bins(lat, lon)
    assert spec.mask[b[:, 1], b[:, 0]].all()


def test_nearest_bins_matches_brute_force():
    spec = ActionSpec()
    jj, ii = np.nonzero(spec.mask)  # all feasible (long, lat)
    pts = np.stack([spec.lateral[ii], spec.longitudinal[jj]], 1)
    rng = np.random.default_rng(1)
    q = np.stack([rng.uniform(-1, 1, 500), rng.uniform(0, 3, 500)], 1)  # the masked corner is near 0
    d2 = ((q[:, None, :] - pts[None]) ** 2).sum(-1)
    best = d2.min(1)
    got = nearest_bins(q[:, 0], q[:, 1])
    got_d2 = (spec.lateral[got[:, 0]] - q[:, 0]) ** 2 + (spec.longitudinal[got[:, 1]] - q[:, 1]) ** 2
    np.testing.assert_allclose(got_d2, best, atol=1e-12)


def test_nearest_bins_shapes_and_bad_input():
    assert nearest_bins(0.0, 5.0).tolist() == [30, 20]
    assert nearest_bins(np.zeros((3, 4)), np.ones((3, 4))).shape == (3, 4, 2)
    with pytest.raises(ValueError, match="finite"):
        nearest_bins(np.nan, 1.0)


@pytest.mark.parametrize(
    "kwargs", [{"n_lat": 0}, {"n_long": 1}, {"lat_max": -1.0}, {"long_max": 0.0}, {"max_curvature": 0.0}]
)
def test_bad_specs(kwargs):
    with pytest.raises(ValueError, match="ActionSpec"):
        ActionSpec(**kwargs)
