"""ActionSpec bins, RAD's feasibility mask, nearest_bins (the IL target) and decode, against hand values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policy.action import ActionSpec, decode, is_feasible, nearest_bins

RAD = ActionSpec()


def test_default_bins_are_rads():
    lat, lon = RAD.lateral_values, RAD.longitudinal_values
    assert lat.shape == (61,) and lon.shape == (61,)
    assert lat[0] == -0.75 and lat[30] == 0.0 and lat[60] == 0.75
    np.testing.assert_allclose(np.diff(lat), 0.025, atol=1e-12)
    assert lon[0] == 0.0 and lon[1] == 0.25 and lon[60] == 15.0
    np.testing.assert_allclose(np.diff(lon), 0.25, atol=1e-12)
    assert RAD.center == 30


def test_feasibility_matches_rads_table():
    mask = RAD.feasibility()
    assert mask.shape == (61, 61) and mask.dtype == bool
    np.testing.assert_array_equal(RAD.half_widths()[:9], [0, 0, 2, 4, 8, 13, 20, 29, 30])
    assert (RAD.half_widths()[8:] == 30).all()
    # Standing still or 0.25 m forward: only zero lateral.
    assert np.flatnonzero(mask[0]).tolist() == [30]
    assert np.flatnonzero(mask[1]).tolist() == [30]
    # Longitudinal index 3 allows lateral indices 26..34 (half-width 4).
    assert np.flatnonzero(mask[3]).tolist() == list(range(26, 35))
    assert np.flatnonzero(mask[2]).tolist() == list(range(28, 33))
    assert np.flatnonzero(mask[7]).tolist() == list(range(1, 60))
    assert mask[8:].all()
    np.testing.assert_array_equal(mask.sum(1)[:9], [1, 1, 5, 9, 17, 27, 41, 59, 61])
    # Symmetric about the centre bin.
    np.testing.assert_array_equal(mask, mask[:, ::-1])


def test_feasibility_scaled_for_other_bin_counts():
    # 21 x 31 bins: u = 2j on RAD's grid; half-width = floor(h(u) * 10).
    # j=1: u=2, h=2/30 -> 0.67 -> 0; j=2: u=4, h=8/30 -> 2.67 -> 2; j=3: u=6, h=20/30 -> 6.67 -> 6; j=4: u=8 -> 10.
    spec = ActionSpec(n_lat=21, lat_max=0.75, n_long=31, long_max=15.0)
    np.testing.assert_array_equal(spec.half_widths()[:6], [0, 0, 2, 6, 10, 10])
    # 61 x 121 bins: u = j / 2, halfway points interpolate. j=3: u=1.5, h=1/30 -> 1; j=5: u=2.5, h=3/30 -> 3.
    spec = ActionSpec(n_lat=61, n_long=121)
    np.testing.assert_array_equal(spec.half_widths()[:6], [0, 0, 0, 1, 2, 3])
    for spec in (ActionSpec(21, 0.75, 31, 15.0), ActionSpec(61, 0.75, 121, 15.0), ActionSpec(11, 1.0, 9, 10.0)):
        hw = spec.half_widths()
        assert hw[0] == 0 and hw[-1] == spec.center
        assert (np.diff(hw) >= 0).all()
        u = np.arange(spec.n_long) * 60 / (spec.n_long - 1)
        rad_frac = np.interp(u, np.arange(9), np.array([0, 0, 2, 4, 8, 13, 20, 29, 30]) / 30)
        assert (hw / spec.center <= rad_frac + 1e-12).all(), "never wider than RAD's band"


@pytest.mark.parametrize("bad", [dict(n_lat=60), dict(n_lat=1), dict(n_long=1), dict(lat_max=0.0), dict(long_max=-1.0)])
def test_invalid_spec_is_rejected(bad):
    with pytest.raises(ValueError, match="ActionSpec"):
        ActionSpec(**bad)


def test_nearest_bins_hand_values():
    lat = np.array([0.0, 0.1, 2.0, 0.0, 0.0, 0.3, -0.26])
    lon = np.array([0.0, 7.3, 20.0, -1.0, 0.125, 0.5, 3.0])
    li, lo = nearest_bins(lat, lon, RAD)
    # (0, 0) -> centre, standing still. (0.1, 7.3) -> lat 0.1 = idx 34, long 7.25 = idx 29.
    # Out of range -> edge bins. Negative forward -> long 0. Exactly between long 0 and 1 -> lower one.
    # (0.3, 0.5): long 2 allows +-0.05 (d^2 = 0.25^2 = 0.0625); long 3 allows +-0.1 (0.2^2 + 0.25^2 = 0.1025)
    #  -> (32, 2). (-0.26, 3.0): long 12 is unconstrained; -0.26 is nearest to -0.25 = idx 20.
    assert li.tolist() == [30, 34, 60, 30, 30, 32, 20]
    assert lo.tolist() == [0, 29, 60, 0, 0, 2, 12]
    assert li.dtype == np.int64 and lo.dtype == np.int64


def test_nearest_bins_is_the_brute_force_nearest_feasible_pair():
    rng = np.random.default_rng(0)
    for spec in (RAD, ActionSpec(21, 0.5, 31, 12.0)):
        lat = rng.uniform(-1.0, 1.0, 2000)
        lon = np.concatenate([rng.uniform(-0.5, 3.0, 1000), rng.uniform(0.0, 16.0, 1000)])
        li, lo = nearest_bins(lat, lon, spec)
        assert is_feasible(li, lo, spec).all()
        L, G = np.meshgrid(spec.lateral_values, spec.longitudinal_values)  # [n_long, n_lat]
        feas = spec.feasibility()
        d2_all = (L[feas][None] - lat[:, None]) ** 2 + (G[feas][None] - lon[:, None]) ** 2
        best = d2_all.min(1)
        got = (spec.lateral_values[li] - lat) ** 2 + (spec.longitudinal_values[lo] - lon) ** 2
        np.testing.assert_allclose(got, best, rtol=0, atol=1e-12)


def test_nearest_bins_shapes_and_torch_in_torch_out():
    li, lo = nearest_bins(np.zeros((3, 4)), 5.0, RAD)
    assert li.shape == (3, 4) and lo.shape == (3, 4) and (lo == 20).all()
    li, lo = nearest_bins(torch.tensor([0.05, -0.05]), torch.tensor([1.0, 1.0]), RAD)
    assert isinstance(li, torch.Tensor) and li.dtype == torch.int64
    assert li.tolist() == [32, 28] and lo.tolist() == [4, 4]
    with pytest.raises(ValueError, match="finite"):
        nearest_bins(np.nan, 1.0, RAD)


def test_decode_hand_values_and_round_trip():
    lat, lon = decode(np.array([30, 34, 0, 60]), np.array([0, 29, 8, 60]), RAD)
    np.testing.assert_allclose(lat, [0.0, 0.1, -0.75, 0.75], atol=1e-12)
    np.testing.assert_allclose(lon, [0.0, 7.25, 2.0, 15.0], atol=1e-12)
    lat_t, lon_t = decode(torch.tensor([26]), torch.tensor([3]), RAD)
    assert lat_t.dtype == torch.float32 and lat_t.item() == pytest.approx(-0.1) and lon_t.item() == 0.75
    # Every feasible pair decodes to a displacement whose nearest feasible pair is itself.
    lo_all, li_all = np.nonzero(RAD.feasibility())
    li, lo = nearest_bins(*decode(li_all, lo_all, RAD), RAD)
    np.testing.assert_array_equal(li, li_all)
    np.testing.assert_array_equal(lo, lo_all)


def test_decode_rejects_bad_indices():
    with pytest.raises(IndexError, match="lat_idx"):
        decode(61, 0, RAD)
    with pytest.raises(IndexError, match="long_idx"):
        decode(0, -1, RAD)
    with pytest.raises(TypeError, match="integer"):
        decode(1.5, 0, RAD)


def test_agrees_with_the_envs_action_module_on_rads_bins():
    """Contract with envs.actions (the env's own spec): same mask and same IL targets on RAD's bins, and the
    functions here accept the env's spec (duck-typed)."""
    env_actions = pytest.importorskip("envs.actions")
    env_spec = env_actions.ActionSpec()
    np.testing.assert_array_equal(RAD.feasibility(), env_spec.feasibility())
    rng = np.random.default_rng(1)
    lat = np.concatenate([rng.uniform(-1.0, 1.0, 5000), np.arange(-0.7625, 0.76, 0.025)])  # incl. exact halves
    lon = np.concatenate([rng.uniform(-1.0, 16.0, 5000), np.full(61, 5.0)])
    li, lo = nearest_bins(lat, lon, RAD)
    np.testing.assert_array_equal(np.stack([li, lo], -1), env_actions.nearest_bins(lat, lon, env_spec))
    # A non-default range, where the two rules differ: with the env's spec we produce the env's targets.
    wide = env_actions.ActionSpec(n_lat=61, lat_max=0.75, n_long=61, long_max=30.0)
    li, lo = nearest_bins(lat, lon, wide)
    np.testing.assert_array_equal(np.stack([li, lo], -1), env_actions.nearest_bins(lat, lon, wide))
