"""The anchor grid, the expert's drive kernel against sim.dynamics, and IL labels on hand-made tracks."""

from __future__ import annotations

import numpy as np

from scenarios.actions import (
    LATERAL_BINS,
    LONGITUDINAL_BINS,
    ActionSpec,
    bins_to_displacement,
    feasibility,
    nearest_bins,
    nearest_feasible_bins,
    nearest_feasible_bins_reference,
)
from scenarios.expert import (
    _NEIGHBOURS,
    Obstacles,
    _drive_kernel,
    displacements_from_states,
    drive,
    plan_speed,
    replay_labels,
    simulate_actions,
    speed_profiles,
)
from scenarios.format import EgoSpec
from sim import dynamics


def test_feasible_mask_is_rads_table():
    m = feasibility()  # [longitudinal, lateral], the one orientation
    assert m.shape == (61, 61)
    half = (m.sum(axis=1) - 1) // 2
    assert list(half[:8]) == [0, 0, 2, 4, 8, 13, 20, 29] and (half[8:] == 30).all()


def test_nearest_bins_match_brute_force():
    rng = np.random.default_rng(0)
    d = np.stack([rng.uniform(-1.0, 1.0, 3000), rng.uniform(-1.0, 16.0, 3000)], axis=1)
    fast = nearest_feasible_bins(d)
    ref = np.array([nearest_feasible_bins_reference(x) for x in d])
    assert (fast == ref).all()
    assert feasibility()[fast[:, 1], fast[:, 0]].all()
    np.testing.assert_allclose(bins_to_displacement(nearest_feasible_bins([[0.1, 5.0]])), [[0.1, 5.0]])


def _rads_table_nearest(lat: float, lon: float) -> tuple[int, int]:
    """The nearest feasible bin pair by brute force over a mask written from RAD's table by hand
    (half-widths 0, 0, 2, 4, 8, 13, 20, 29 lateral bins either side of the centre, full from longitudinal
    bin 8 on), bins 0.025 m and 0.25 m apart; ties to the lower longitudinal bin, then the lower lateral."""
    half = [0, 0, 2, 4, 8, 13, 20, 29] + [30] * 53
    best, arg = np.inf, None
    for i in range(61):  # longitudinal
        for j in range(30 - half[i], 31 + half[i]):  # lateral, the band around the centre bin 30
            d2 = (-0.75 + 0.025 * j - lat) ** 2 + (0.25 * i - lon) ** 2
            if d2 < best - 1e-12:
                best, arg = d2, (j, i)
    return arg


def test_nearest_bins_of_the_env_and_the_expert_match_rads_table():
    """The env's IL target (``nearest_bins`` on its default ActionSpec) and the expert's
    (``nearest_feasible_bins``) against a brute force over RAD's table, not over the module's own mask."""
    rng = np.random.default_rng(1)
    d = np.stack([rng.uniform(-1.0, 1.0, 400), rng.uniform(-1.0, 16.0, 400)], axis=1)
    d[:50, 1] = rng.uniform(0.0, 2.0, 50)  # where the band is narrow
    want = np.array([_rads_table_nearest(*x) for x in d])
    np.testing.assert_array_equal(nearest_bins(d[:, 0], d[:, 1], ActionSpec()), want)
    np.testing.assert_array_equal(nearest_feasible_bins(d), want)


def test_drive_kernel_matches_sim_dynamics():
    """The numba kernel's states equal sim.dynamics applied to the same actions (to rounding)."""
    ego = EgoSpec()
    t = np.arange(0, 120.0, 1.0)
    path = np.stack([t, 8.0 * np.sin(t / 25.0)], 1)  # a gentle S
    plan_s = np.cumsum(np.full(100, 0.9)) - 0.9 + 1.5 * np.sin(np.arange(100) / 15.0)
    plan_s = np.maximum.accumulate(plan_s)
    from sim.geometry import interpolate_polyline

    goals = np.ascontiguousarray(interpolate_polyline(path, plan_s[5:])[0])
    xy0, h0 = interpolate_polyline(path, plan_s[0])
    x0 = np.array([xy0[0], xy0[1], h0, 9.0])
    for consistent in (False, True):
        states = np.zeros((86, 4))
        actions = np.zeros((85, 2), dtype=np.int64)
        _drive_kernel(
            goals, x0, 85, 5, consistent, LATERAL_BINS, LONGITUDINAL_BINS,
            np.array([0, 0, 2, 4, 8, 13, 20, 29] + [30] * 53), _NEIGHBOURS, ego.wheelbase, 0.1, dynamics.V_MAX,
            dynamics.MAX_ACCEL, dynamics.MAX_DECEL, dynamics.MAX_STEER, 0.5, states, actions,
        )  # fmt: skip
        ref = simulate_actions(x0, actions, 0.1, ego)
        np.testing.assert_allclose(states, ref, atol=1e-9)


def test_displacements_by_hand():
    # straight along 30 degrees at 10 m/s: 5 m ahead, nothing sideways, also past the end
    yaw = np.deg2rad(30.0)
    t = np.arange(20) * 0.1
    d = 10.0 * t
    states = np.stack([d * np.cos(yaw), d * np.sin(yaw), np.full(20, yaw), np.full(20, 10.0)], 1)
    np.testing.assert_allclose(displacements_from_states(states, t), np.tile([0.0, 5.0], (20, 1)), atol=1e-9)
    # a left circle of radius 20 m at 10 m/s: after 5 m of arc, (20 sin(0.25), 20 (1 - cos(0.25)))
    R, v = 20.0, 10.0
    th = v * t / R
    states = np.stack([R * np.sin(th), R * (1 - np.cos(th)), th, np.full(20, v)], 1)
    disp = displacements_from_states(states, t)[:10]
    np.testing.assert_allclose(disp, np.tile([R * (1 - np.cos(0.25)), R * np.sin(0.25)], (10, 1)), atol=1e-9)


def test_labels_replay_a_constant_speed_drive_exactly():
    t = np.arange(30) * 0.1
    states = np.stack([10.0 * t, np.zeros(30), np.zeros(30), np.full(30, 10.0)], 1)
    labels = nearest_feasible_bins(displacements_from_states(states, t))
    replay = replay_labels(states, labels[:25], 0.1, EgoSpec())
    np.testing.assert_allclose(replay, states[:26], atol=1e-9)


def test_speed_profiles_obey_bounds_and_quantum():
    rng = np.random.default_rng(2)
    params = np.abs(rng.normal(size=(50, 9)) * np.tile([3.0, 6.0, 1.5], 3))
    s, v, a = speed_profiles(params, 8.3, 0.1, 91)
    assert s.shape == v.shape == a.shape == (50, 91)
    assert (v >= 0).all() and (np.diff(s, axis=1) >= -1e-12).all()
    assert a.max() <= 2.0 + 1e-9 and a.min() >= -3.0 - 1e-9
    # cruising ends on a multiple of 0.5 m/s (no dithering between longitudinal bins)
    one = speed_profiles(np.array([[0, 11.3, 1.0, 9, 11.3, 1, 9, 11.3, 1]]), 8.0, 0.1, 91)[1]
    assert abs(one[0, -1] - 11.5) < 0.02


def test_plan_and_drive_a_free_road():
    path = np.stack([np.arange(0, 200.0), np.zeros(200)], 1)
    empty = Obstacles(
        np.zeros((0, 81, 4)), np.zeros((0, 3)), np.zeros((0, 81), bool), np.zeros((0, 4)), np.zeros((0, 3))
    )
    plan = plan_speed(path, 8.0, 10.0, EgoSpec(), empty, 0.1, 91, np.random.default_rng(0))
    assert plan.collisions == 0 and abs(plan.v[-1] - 10.0) < 0.1
    d = drive(path, plan.s, 8.0, EgoSpec(), 0.1, 85)
    assert d.states.shape == (86, 4) and d.actions.shape == (85, 2)
    assert np.abs(d.states[:, 1]).max() < 1e-6  # straight stays straight
    assert abs(d.states[-1, 3] - 10.0) < 0.3
