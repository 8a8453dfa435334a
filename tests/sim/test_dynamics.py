"""Kinematic bicycle model and anchor -> controls: values by hand, and an ODE reference."""

from __future__ import annotations

import numpy as np
import pytest

from sim.dynamics import WHEELBASE, anchor_to_controls, bicycle_step, ego_box_center

L = WHEELBASE
NO_LIMITS = {"max_accel": 1e9, "max_decel": 1e9, "max_steer": np.deg2rad(89.9)}


def reference_step(state, accel, steer, dt, n=4000, v_max=30.0):
    """Small-step midpoint integration of the same ODE, speed clipped to [0, v_max] each substep."""
    x, y, yaw, v = (float(t) for t in state)
    h = dt / n
    k = np.tan(steer) / L
    for _ in range(n):
        v_next = min(max(v + accel * h, 0.0), v_max)
        vm = 0.5 * (v + v_next)
        ym = yaw + 0.5 * vm * k * h
        x += vm * np.cos(ym) * h
        y += vm * np.sin(ym) * h
        yaw += vm * k * h
        v = v_next
    return np.array([x, y, yaw, v])


def step1(state, accel, steer, dt, **kw):
    return bicycle_step(np.asarray(state, dtype=float)[None], [accel], [steer], dt, **kw)[0]


# -- bicycle_step: by hand ----------------------------------------------------------------------


def test_straight_line_at_constant_speed():
    out = step1([1.0, 2.0, np.pi / 6, 10.0], 0.0, 0.0, 0.1)
    np.testing.assert_allclose(out, [1.0 + np.cos(np.pi / 6), 2.0 + np.sin(np.pi / 6), np.pi / 6, 10.0], atol=1e-12)


def test_straight_line_accelerating():
    out = step1([0, 0, 0, 2.0], 3.0, 0.0, 0.5)
    np.testing.assert_allclose(out, [2.0 * 0.5 + 0.5 * 3.0 * 0.25, 0, 0, 3.5], atol=1e-12)


def test_quarter_circle_lands_on_the_analytic_point():
    steer = 0.3
    k = np.tan(steer) / L
    r = 1.0 / k
    v = 5.0
    dt = (np.pi / 2) * r / v  # time for a quarter turn at speed v
    out = step1([0, 0, 0, v], 0.0, steer, dt)
    np.testing.assert_allclose(out, [r, r, np.pi / 2, v], atol=1e-9)
    # turning right mirrors it
    out = step1([0, 0, 0, v], 0.0, -steer, dt)
    np.testing.assert_allclose(out, [r, -r, -np.pi / 2, v], atol=1e-9)


def test_half_circle_from_a_rotated_pose():
    steer = 0.5
    r = L / np.tan(steer)
    v = 8.0
    yaw0 = np.pi / 2  # heading +y: a left half-circle ends at (x0 - 2r, y0), heading -y
    out = step1([3.0, -1.0, yaw0, v], 0.0, steer, np.pi * r / v)
    np.testing.assert_allclose(out[:2], [3.0 - 2 * r, -1.0], atol=1e-9)
    assert abs(abs(out[2]) - np.pi / 2) < 1e-9 and out[2] < 0  # wrapped to -pi/2


def test_braking_stops_at_v2_over_2a_and_never_reverses():
    v0, a = 10.0, -8.0  # stops after 1.25 s, 6.25 m
    out = step1([0, 0, 0, v0], a, 0.0, 3.0)
    np.testing.assert_allclose(out, [v0**2 / (2 * -a), 0, 0, 0], atol=1e-12)
    # stepping in 0.1 s pieces: monotone along x, same stop point, speed hits 0 and stays
    s = np.array([[0, 0, 0, v0]], dtype=float)
    xs = [0.0]
    for _ in range(30):
        s = bicycle_step(s, [a], [0.0], 0.1)
        xs.append(s[0, 0])
        assert s[0, 3] >= 0.0
    assert np.all(np.diff(xs) >= 0)
    np.testing.assert_allclose(xs[-1], 6.25, atol=1e-12)
    # stop within one step on a curve: arc length v^2 / 2|a| along the circle
    steer = 0.2
    k = np.tan(steer) / L
    out = step1([0, 0, 0, 3.0], -9.0, steer, 0.1)  # needs 1/3 s to stop: still moving after dt
    assert out[3] == pytest.approx(3.0 - 0.9)
    out = step1([0, 0, 0, 0.5], -9.0, steer, 0.1)  # stops after 0.0556 s, 0.01389 m along the arc
    s_stop = 0.5**2 / 18
    np.testing.assert_allclose(out, [np.sin(k * s_stop) / k, (1 - np.cos(k * s_stop)) / k, k * s_stop, 0.0], atol=1e-14)


def test_at_rest_with_braking_stays_put():
    out = step1([4.0, 5.0, 1.0, 0.0], -5.0, 0.4, 0.1)
    np.testing.assert_allclose(out, [4.0, 5.0, 1.0, 0.0], atol=1e-15)


def test_speed_cap_mid_step():
    # from 28 m/s at +4 m/s^2 the cap (30) is hit after 0.5 s, then cruise for 0.5 s
    out = step1([0, 0, 0, 28.0], 4.0, 0.0, 1.0)
    np.testing.assert_allclose(out, [28 * 0.5 + 0.5 * 4 * 0.25 + 30 * 0.5, 0, 0, 30.0], atol=1e-12)
    out = step1([0, 0, 0, 35.0], 0.0, 0.0, 1.0)  # an incoming speed above v_max is clipped
    np.testing.assert_allclose(out, [30.0, 0, 0, 30.0])


def test_steps_compose_exactly():
    state = np.array([[1.0, -2.0, 0.4, 6.0]])
    one = bicycle_step(state, [1.5], [0.25], 0.5)
    s = state
    for _ in range(5):
        s = bicycle_step(s, [1.5], [0.25], 0.1)
    np.testing.assert_allclose(s, one, atol=1e-12)


def test_tiny_curvature_is_continuous_with_straight():
    base = step1([0, 0, 0.2, 12.0], 1.0, 0.0, 0.1)
    for steer in (1e-12, 1e-9, 1e-6):
        out = step1([0, 0, 0.2, 12.0], 1.0, steer, 0.1)
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out[:2], base[:2], atol=2 * steer)


@pytest.mark.parametrize("seed", range(3))
def test_matches_ode_reference(seed):
    rng = np.random.default_rng(seed)
    B = 12
    state = np.stack(
        [rng.uniform(-50, 50, B), rng.uniform(-50, 50, B), rng.uniform(-np.pi, np.pi, B), rng.uniform(0, 30, B)],
        axis=1,
    )
    state[:3, 3] = [0.0, 29.5, 1.0]  # at rest; near the cap; slow with hard braking below
    accel = rng.uniform(-9, 6, B)
    accel[1], accel[2] = 5.0, -9.0
    steer = rng.uniform(-0.8, 0.8, B)
    out = bicycle_step(state, accel, steer, 0.5)
    for b in range(B):
        ref = reference_step(state[b], accel[b], steer[b], 0.5)
        np.testing.assert_allclose(out[b, [0, 1, 3]], ref[[0, 1, 3]], atol=1e-6)
        assert abs(np.angle(np.exp(1j * (out[b, 2] - ref[2])))) < 1e-6


def test_vectorised_equals_per_row_loop():
    rng = np.random.default_rng(9)
    B = 50
    state = np.stack(
        [rng.normal(0, 100, B), rng.normal(0, 100, B), rng.uniform(-4, 4, B), rng.uniform(-1, 35, B)], axis=1
    )
    accel = rng.uniform(-12, 12, B)
    steer = rng.uniform(-1.2, 1.2, B)
    steer[:5] = 0.0
    out = bicycle_step(state, accel, steer, 0.1)
    for b in range(B):
        np.testing.assert_array_equal(out[b], step1(state[b], accel[b], steer[b], 0.1))
    assert out.dtype == np.float64 and out.shape == (B, 4)
    assert np.all((out[:, 3] >= 0) & (out[:, 3] <= 30.0))
    assert np.all((out[:, 2] >= -np.pi) & (out[:, 2] < np.pi))
    # scalar controls broadcast over the batch
    np.testing.assert_array_equal(
        bicycle_step(state, 1.0, 0.1, 0.1), bicycle_step(state, np.ones(B), np.full(B, 0.1), 0.1)
    )


def test_bicycle_step_rejects_bad_input():
    s = np.zeros((2, 4))
    with pytest.raises(ValueError, match=r"state must be \[B, 4\]"):
        bicycle_step(np.zeros(4), [0, 0], [0, 0], 0.1)
    with pytest.raises(ValueError, match=r"accel must be \[B=2\]"):
        bicycle_step(s, [0, 0, 0], [0, 0], 0.1)
    with pytest.raises(ValueError, match="steer"):
        bicycle_step(s, [0, 0], [0, np.pi / 2], 0.1)
    with pytest.raises(ValueError, match="dt"):
        bicycle_step(s, [0, 0], [0, 0], 0.0)
    with pytest.raises(ValueError, match="finite"):
        bicycle_step(s, [np.nan, 0], [0, 0], 0.1)


# -- anchor_to_controls -------------------------------------------------------------------------


def test_straight_anchor_from_rest():
    a, steer = anchor_to_controls(0.0, 0.0, 5.0, **NO_LIMITS)
    assert a == pytest.approx(40.0) and steer == 0.0  # 2 * 5 / 0.5^2
    a, _ = anchor_to_controls(0.0, 0.0, 5.0)  # the default limits clip it
    assert a == pytest.approx(6.0)
    a, _ = anchor_to_controls(10.0, 0.0, 5.0)  # 10 m/s covers 5 m in 0.5 s: hold speed
    assert a == pytest.approx(0.0, abs=1e-12)


def test_zero_anchor_stops_and_arc_geometry():
    a, steer = anchor_to_controls([0.0, 8.0], [0.0, 0.0], [0.0, 0.0])
    np.testing.assert_array_equal(a, [0.0, -9.0])  # at rest stays; moving brakes as hard as allowed
    np.testing.assert_array_equal(steer, [0.0, 0.0])
    # (x, y) = (r, r) is a quarter circle of radius r: k = 1/r, s = pi r / 2
    r = 10.0
    a, steer = anchor_to_controls(0.0, r, r, **NO_LIMITS)
    assert np.tan(steer) / L == pytest.approx(1.0 / r)
    assert a == pytest.approx(2 * (np.pi * r / 2) / 0.25)
    # (0, y): a half circle of diameter |y| (the steering limit then bites)
    a, steer = anchor_to_controls(0.0, -0.5, 0.0)
    assert steer == pytest.approx(-np.deg2rad(49.0))
    assert a == pytest.approx(6.0)  # s = pi/4 m from rest needs 2 pi / 4 / 0.25 = 6.28, clipped


def test_brakes_to_stop_at_the_anchor_instead_of_reversing():
    # 10 m/s, anchor 1 m ahead: constant acceleration would end at -6 m/s; stop at 1 m instead
    a, _ = anchor_to_controls(10.0, 0.0, 1.0, **NO_LIMITS)
    assert a == pytest.approx(-50.0)
    s = np.array([[0.0, 0.0, 0.0, 10.0]])
    for _ in range(5):
        s = bicycle_step(s, a, [0.0], 0.1)
    np.testing.assert_allclose(s[0], [1.0, 0, 0, 0], atol=1e-12)
    # the two rules meet at s = v0 T / 2 (a = -v0 / T, ending exactly at rest)
    a1, _ = anchor_to_controls(10.0, 0.0, 2.5 + 1e-9, **NO_LIMITS)
    a2, _ = anchor_to_controls(10.0, 0.0, 2.5 - 1e-9, **NO_LIMITS)
    assert a1 == pytest.approx(-20.0) and a2 == pytest.approx(-20.0)


@pytest.mark.parametrize("v0", [0.0, 3.0, 12.0, 25.0])
def test_holding_the_controls_reaches_the_anchor(v0):
    # RAD's anchor grid: lateral -0.75..0.75 m, longitudinal 0..15 m
    lat, lon = np.meshgrid(np.linspace(-0.75, 0.75, 13), np.linspace(0.25, 15.0, 13))
    lat, lon = lat.ravel(), lon.ravel()
    B = len(lat)
    v = np.full(B, v0)
    a, steer = anchor_to_controls(v, lat, lon, **NO_LIMITS)
    s = np.zeros((B, 4))
    s[:, 3] = v0
    for _ in range(5):
        s = bicycle_step(s, a, steer, 0.1, v_max=1e6)
    np.testing.assert_allclose(s[:, 0], lon, atol=1e-9)
    np.testing.assert_allclose(s[:, 1], lat, atol=1e-9)
    # heading at the anchor is the arc's: twice the chord angle
    np.testing.assert_allclose(s[:, 2], 2 * np.arctan2(lat, lon), atol=1e-9)


def test_anchor_vectorised_equals_loop_and_limits():
    rng = np.random.default_rng(5)
    B = 40
    v0 = rng.uniform(0, 30, B)
    lat = rng.uniform(-0.75, 0.75, B)
    lon = rng.uniform(0, 15, B)
    lon[:3] = 0.0
    a, steer = anchor_to_controls(v0, lat, lon)
    for b in range(B):
        ab, sb = anchor_to_controls(v0[b], lat[b], lon[b])
        assert ab == a[b] and sb == steer[b]
    assert np.all((a >= -9.0) & (a <= 6.0))
    assert np.all(np.abs(steer) <= np.deg2rad(49.0) + 1e-15)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(steer))


def test_anchor_rejects_bad_input():
    with pytest.raises(ValueError, match="longitudinal must be >= 0"):
        anchor_to_controls(1.0, 0.0, -1.0)
    with pytest.raises(ValueError, match="v0 must be >= 0"):
        anchor_to_controls(-1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="horizon"):
        anchor_to_controls(1.0, 0.0, 1.0, horizon=0.0)
    with pytest.raises(ValueError, match="finite"):
        anchor_to_controls(1.0, np.inf, 1.0)


def test_ego_box_center():
    state = np.array([[1.0, 2.0, np.pi / 2, 3.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(ego_box_center(state, 1.5), [[1.0, 3.5], [1.5, 0.0]], atol=1e-12)
