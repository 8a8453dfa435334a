"""The anchor grid and IL labels on hand-made tracks (the reactive expert's drive: test_reactive.py)."""

from __future__ import annotations

import numpy as np

from scenarios.actions import (
    ActionSpec,
    bins_to_displacement,
    feasibility,
    nearest_bins,
    nearest_feasible_bins,
    nearest_feasible_bins_reference,
)
from scenarios.expert import displacements_from_states, replay_labels
from scenarios.format import EgoSpec


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
