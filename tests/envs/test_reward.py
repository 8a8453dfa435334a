"""RAD's rewards and termination, on situations worked out by hand (``handmade.py``: a straight road
along +x, the expert on y = 0; the ego box front is 1.4 + 4.8 / 2 = 3.8 m ahead of the rear axle)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.config import EnvConfig
from envs.driving import DrivingEnv, location_name
from envs.reward import EVENTS, collision_part, detect_events, first_event, reward_parts, reward_terms
from tests.envs.conftest import FAST
from tests.envs.handmade import straight_scenario

KEEP_10 = [30, 20]  # lateral centre, 5 m per 0.5 s: holds 10 m/s exactly (accel 0)


def run(env, action, max_steps=100):
    """Step a fixed action until the episode ends: (steps taken, reward, terminated, truncated, info)."""
    for k in range(1, max_steps + 1):
        _, r, te, tr, info = env.step(action)
        if te or tr:
            return k, r, te, tr, info
    raise AssertionError("episode did not end")


# -- the pure functions --------------------------------------------------------------------------


def test_terms_and_parts_by_hand():
    ev = detect_events(False, False, 0.5, math.radians(10))
    assert not any(ev.values()) and first_event(ev) == ""
    assert reward_terms(ev) == dict.fromkeys(EVENTS, 0.0)
    ev = detect_events(True, False, 2.5, 0.0)
    terms = reward_terms(ev)
    assert terms == {
        "dynamic_collision": -1.0,
        "static_collision": 0.0,
        "position_deviation": -1.0,
        "heading_deviation": 0.0,
        "progress_deviation": 0.0,
    }
    np.testing.assert_array_equal(reward_parts(terms), [-1.0, -1.0])  # lateral, longitudinal
    assert first_event(ev) == "dynamic_collision"
    # thresholds are strict and heading counts in absolute value
    assert not detect_events(False, False, 2.0, math.radians(40))["position_deviation"]
    assert detect_events(False, False, 0.0, -math.radians(40.01))["heading_deviation"]
    np.testing.assert_array_equal(reward_parts(reward_terms(detect_events(False, True, 0, 0))), [-1.0, 0.0])
    # progress: strictly more than the threshold behind; None switches it off (RAD's four events)
    assert not detect_events(False, False, 0, 0, progress_lag=10.0, progress_threshold=10.0)["progress_deviation"]
    ev = detect_events(False, False, 0, 0, progress_lag=10.01, progress_threshold=10.0)
    assert ev["progress_deviation"] and first_event(ev) == "progress_deviation"
    np.testing.assert_array_equal(reward_parts(reward_terms(ev)), [0.0, -1.0])  # the longitudinal part
    assert not detect_events(False, False, 0, 0, progress_lag=1e6)["progress_deviation"]
    # RAD's events name the failure first when they coincide with it
    assert first_event(detect_events(False, False, 3.0, 0, progress_lag=11.0, progress_threshold=10.0)) == (
        "position_deviation"
    )


def test_location_names():
    assert location_name([2.0, 0.1], 2.4, 1.0) == "front"
    assert location_name([-2.0, -0.9], 2.4, 1.0) == "rear_right"
    assert location_name([0.1, 0.9], 2.4, 1.0) == "left"
    assert location_name([0.0, 0.0], 2.4, 1.0) == "centre"


# -- in the env ----------------------------------------------------------------------------------


def test_expert_on_a_clear_road_is_truncated_at_the_horizon(plain):
    env = DrivingEnv(FAST, scenarios=[plain])
    _, info = env.reset(seed=0)
    assert info["expert_action"].tolist() == KEEP_10
    k, r, te, tr, info = run(env, KEEP_10)
    assert (k, r, te, tr) == (30, 0.0, False, True)
    assert info["event"] == "" and info["reward_terms"] == dict.fromkeys(EVENTS, 0.0)
    assert info["path_distance"] < 1e-9 and abs(info["heading_error"]) < 1e-9
    assert info["static_gaussians"] == 0  # the ground is below the raised box, the walls are 8 m away


def test_dynamic_collision_with_a_stopped_car(hm_dir):
    # lead's rear 10.5 m ahead of the ego's front: at 1 m per step the boxes first overlap at step 11
    sc = straight_scenario(hm_dir, sid="lead105", lead_gap=10.5)
    env = DrivingEnv(FAST, scenarios=[sc])
    env.reset(seed=0)
    k, r, te, tr, info = run(env, KEEP_10)
    assert (k, r, te, tr) == (11, -1.0, True, False)
    assert info["event"] == "dynamic_collision" and info["collision_with"] == "lead"
    assert info["reward_terms"]["dynamic_collision"] == -1.0
    np.testing.assert_array_equal(info["reward_parts"], [0.0, -1.0])
    assert info["collision_location"] == "front"
    # 0.5 m of overlap: the contact is at the ego box's front face, on its axis
    np.testing.assert_allclose(info["collision_point"], [2.4 - 0.25, 0.0], atol=1e-6)


def test_static_collision_with_an_obstacle_box(parked_box):
    # parked car centred at x = 25 (rear face 22.75): the ego front (x + 3.8) reaches it at step 19
    env = DrivingEnv({**FAST, "static_gaussians": False}, scenarios=[parked_box])
    env.reset(seed=0)
    k, r, te, _tr, info = run(env, KEEP_10)
    assert (k, r, te) == (19, -1.0, True)
    assert info["event"] == "static_collision" and info["collision_with"] == "parked"
    np.testing.assert_array_equal(info["reward_parts"], [-1.0, 0.0])
    assert info["collision_location"] == "front"


def test_static_collision_found_from_the_gaussians_alone(hm_dir):
    # no obstacle box; the car is 600 Gaussians in the background. Rear face at 23.25: the ego box
    # first overlaps it at step 20, 0.55 m deep (about 600 * 0.55 / 4.5 * 1.2 / 1.5 = 59 Gaussians)
    sc = straight_scenario(hm_dir, sid="parked_gs255", parked_x=25.5, obstacle_box=False)
    env = DrivingEnv(FAST, scenarios=[sc])
    env.reset(seed=0)
    k, r, te, _tr, info = run(env, KEEP_10)
    assert (k, r, te) == (20, -1.0, True)
    assert info["event"] == "static_collision" and info["collision_with"] == "static_gaussians"
    assert 30 <= info["static_gaussians"] <= 90
    assert info["collision_location"] == "front"
    assert info["collision_point"][0] > 2.0  # the hits' mean is in the front 0.55 m of the box


def test_static_gaussian_threshold_is_the_config(hm_dir):
    sc = straight_scenario(hm_dir, sid="parked_gs255", parked_x=25.5, obstacle_box=False)
    env = DrivingEnv({**FAST, "static_min_gaussians": 1000}, scenarios=[sc])
    env.reset(seed=0)
    for _ in range(20):
        _, _r, te, _, info = env.step(KEEP_10)
    assert not te and info["static_gaussians"] >= 30  # counted, but below the threshold


def test_position_deviation(plain):
    # steer right (lateral bin 10 = -0.5 m) at 10 m/s: on the x axis the path distance is |y|
    env = DrivingEnv(FAST, scenarios=[plain])
    env.reset(seed=0)
    for _ in range(30):
        _, r, te, _tr, info = env.step([10, 20])
        y, yaw = env._state[1], env._state[2]
        assert info["path_distance"] == pytest.approx(abs(y), abs=1e-9)
        assert info["lateral_offset"] == pytest.approx(y, abs=1e-9)  # signed: right of the path is < 0
        assert info["heading_error"] == pytest.approx(yaw, abs=1e-9)
        assert te == (abs(y) > 2.0)
        if te:
            break
    assert info["event"] == "position_deviation" and r == -1.0
    assert abs(info["heading_error"]) < math.radians(40)
    np.testing.assert_array_equal(info["reward_parts"], [-1.0, 0.0])


def test_heading_deviation(slow):
    # at 2 m/s (1 m per 0.5 s), the widest feasible left anchor (0.2 m: 8 bins) turns 0.077 rad a
    # step; the heading passes 40 deg while the ego is still within 0.7 m of the path
    env = DrivingEnv(FAST, scenarios=[slow])
    env.reset(seed=0)
    k, r, te, _tr, info = run(env, [38, 4])
    assert te and r == -1.0 and info["event"] == "heading_deviation"
    assert math.degrees(info["heading_error"]) > 40.0 and info["path_distance"] < 2.0
    assert k == 9  # 9 x 4.5 deg > 40 >= 8 x 4.5 deg
    np.testing.assert_array_equal(info["reward_parts"], [-1.0, 0.0])


def test_thresholds_come_from_the_config(plain):
    env = DrivingEnv({**FAST, "position_threshold": 0.5}, scenarios=[plain])
    env.reset(seed=0)
    _k, *_, info = run(env, [10, 20])
    assert info["event"] == "position_deviation" and 0.5 < info["path_distance"] < 1.0


# -- progress against the logged expert ------------------------------------------------------------
STOP = [30, 0]  # longitudinal bin 0: brake as hard as allowed (9 m/s^2) and stay stopped


def test_stopped_ego_falls_behind_at_the_step_computed_by_hand(plain):
    # Expert: 1 m a step. The ego brakes from 10 m/s at 9 m/s^2: x_n = n - 0.045 n^2 until it stops after
    # 10 / 9 s at 100 / 18 = 5.556 m. Lag at step n = n - x_n: 0.045 n^2 (n <= 11), then n - 5.556:
    # 9.444 at step 15, 10.444 at step 16 > 10 m (the default threshold): progress_deviation at step 16.
    env = DrivingEnv(FAST, scenarios=[plain])
    _, info = env.reset(seed=0)
    assert info["progress_lag"] == 0.0 and info["route_completion"] == 0.0
    for n in range(1, 17):
        _, r, te, tr, info = env.step(STOP)
        x = n - 0.045 * n * n if n <= 11 else 100 / 18
        assert info["progress_lag"] == pytest.approx(n - x, abs=1e-6), n
        assert info["route_completion"] == pytest.approx(x / 30.0, abs=1e-6), n  # 30 m over the horizon
        assert te == (n == 16) and not tr
    assert info["event"] == "progress_deviation" and r == -1.0
    assert info["reward_terms"]["progress_deviation"] == -1.0
    np.testing.assert_array_equal(info["reward_parts"], [0.0, -1.0])


def test_progress_threshold_and_switch_come_from_the_config(plain):
    # threshold 3 m: 0.045 n^2 > 3 first at n = 9 (3.645; 2.88 at n = 8)
    env = DrivingEnv({**FAST, "progress_threshold": 3.0}, scenarios=[plain])
    env.reset(seed=0)
    k, r, te, _tr, info = run(env, STOP)
    assert (k, r, te, info["event"]) == (9, -1.0, True, "progress_deviation")
    # switched off (RAD's four events): the stopped ego survives the clip, 24.4 m behind at its end
    env = DrivingEnv({**FAST, "progress_event": False}, scenarios=[plain])
    env.reset(seed=0)
    k, r, te, tr, info = run(env, STOP)
    assert (k, r, te, tr, info["event"]) == (30, 0.0, False, True, "")
    assert info["progress_lag"] == pytest.approx(30 - 100 / 18, abs=1e-6)
    assert info["reward_terms"]["progress_deviation"] == 0.0
    with pytest.raises(ValueError, match="progress_threshold"):
        DrivingEnv({**FAST, "progress_threshold": 0.0}, scenarios=[plain])


def test_expert_never_falls_behind_and_completes_the_route(plain, slow):
    for sc, horizon in ((plain, 30), (slow, 40)):
        env = DrivingEnv(FAST, scenarios=[sc])
        _, info = env.reset(seed=0)
        lags = []
        while True:
            _, _, te, tr, info = env.step(info["expert_action"])
            lags.append(info["progress_lag"])
            if te or tr:
                break
        assert tr and not te and info["event"] == "" and info["step"] == horizon
        assert max(np.abs(lags)) < 1e-6  # its labels replay the log exactly on this road
        assert info["route_completion"] == pytest.approx(1.0, abs=1e-6)


def test_route_completion_is_one_when_the_expert_does_not_move(hm_dir):
    sc = straight_scenario(hm_dir, sid="parked_expert", speed=0.0, horizon=10)
    env = DrivingEnv(FAST, scenarios=[sc])
    _, info = env.reset(seed=0)
    assert info["route_completion"] == 1.0
    k, _r, te, tr, info = run(env, STOP)
    assert (k, te, tr, info["event"]) == (10, False, True, "")
    assert info["route_completion"] == 1.0 and info["progress_lag"] == 0.0


def test_ahead_of_the_expert_is_a_negative_lag(slow):
    # expert at 2 m/s; the ego accelerates at up to 6 m/s^2 toward 10 m per 0.5 s
    env = DrivingEnv(FAST, scenarios=[slow])
    env.reset(seed=0)
    _, _, te, _, info = env.step([30, 40])
    x = 0.2 + 0.5 * 6.0 * 0.01  # v0 t + a t^2 / 2 at the 6 m/s^2 limit
    assert not te and info["progress_lag"] == pytest.approx(0.2 - x, abs=1e-6)
    assert info["route_completion"] == pytest.approx(x / 8.0, abs=1e-6)  # 40 steps x 0.2 m


@pytest.mark.parametrize(
    "location, credit, part",
    [
        ("front", "location", "longitudinal"),
        ("rear_left", "location", "longitudinal"),
        ("front_right", "location", "longitudinal"),
        ("centre", "location", "longitudinal"),
        ("left", "location", "lateral"),
        ("right", "location", "lateral"),
        ("left", "rad", "longitudinal"),
        ("right", "rad", "longitudinal"),
    ],
)
def test_a_dynamic_collision_is_credited_by_where_the_ego_was_hit(location, credit, part):
    assert collision_part(location, credit) == part
    terms = reward_terms(detect_events(True, False, 0.0, 0.0))
    want = [-1.0, 0.0] if part == "lateral" else [0.0, -1.0]
    np.testing.assert_array_equal(reward_parts(terms, part), want)
    # the other events keep their parts whatever the collision's
    terms = reward_terms(detect_events(True, True, 3.0, 0.0))
    np.testing.assert_array_equal(reward_parts(terms, part), [-3.0, 0.0] if part == "lateral" else [-2.0, -1.0])


def test_collision_credit_is_checked():
    with pytest.raises(ValueError, match="credit must be one of"):
        collision_part("left", "brake")
    with pytest.raises(ValueError, match="collision_credit"):
        EnvConfig(collision_credit="brake")
