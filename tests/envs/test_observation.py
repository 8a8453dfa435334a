"""Observation modes: what camera mode observes (and never), its navigation, route command and speed limits
by hand, the privileged mode without shortcuts (no elapsed time, route points on the route lanes, not the
expert's path), the part switches within a mode, and the camera ablations (blank, shuffle)."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest

from envs.config import EnvConfig
from envs.driving import BLANK_GREY, DrivingEnv, rgb_to_uint8
from envs.kernels import route_limits
from envs.observation import (
    COMMANDS,
    LIMIT_RANGE,
    PRIVILEGED_KEYS,
    RoutePath,
    observation_mode,
    route_command,
    route_path,
    speed_limits,
)
from envs.vector import VectorDrivingEnv
from sim import rendering
from sim.seeding import derive_seed
from tests.envs.conftest import FAST


def test_camera_mode_is_the_default_and_holds_no_privileged_part(lead):
    env = gym.make("SplatDrive-v0", config=FAST, scenarios=[lead]).unwrapped
    assert env.config.observation == "camera"
    space = env.observation_space.spaces
    assert set(space) == {"cameras", "ego", "navigation", "command", "limits"}
    assert space["ego"].shape == (4,) and space["navigation"].shape == (5, 2) and space["command"].shape == (3,)
    assert space["limits"].shape == (3,)
    obs, info = env.reset(seed=0)
    assert not set(PRIVILEGED_KEYS) & set(obs) and set(obs) == set(space)
    for _ in range(3):
        obs, *_ = env.step(info["expert_action"])
        assert not set(PRIVILEGED_KEYS) & set(obs)
    assert observation_mode(env.observation_space) == "camera"


def test_camera_ego_is_the_privileged_egos_first_four(lead):
    """The same drive seen in both modes: camera ego = (speed, yaw rate, accel, steer) of privileged's 6;
    the limits part is the same in both."""
    cam = DrivingEnv(FAST, scenarios=[lead])
    priv = DrivingEnv({**FAST, "observation": "privileged"}, scenarios=[lead])
    assert observation_mode(priv.observation_space) == "privileged"
    oc, _ = cam.reset(seed=0)
    op, _ = priv.reset(seed=0)
    for action in ([30, 24], [33, 22], [28, 20]):
        np.testing.assert_array_equal(oc["ego"], op["ego"][:4])
        np.testing.assert_array_equal(oc["cameras"], op["cameras"])  # the images do not depend on the mode
        np.testing.assert_array_equal(oc["limits"], op["limits"])
        oc, *_ = cam.step(action)
        op, *_ = priv.step(action)
    np.testing.assert_array_equal(oc["ego"], op["ego"][:4])
    assert oc["ego"][0] == pytest.approx(float(op["ego"][0])) and op["ego"].shape == (6,)


def test_navigation_and_command_by_hand(plain):
    """The route is the lane at y = 0 (x from -20 m); the ego starts on it at x = 0, heading +x."""
    env = DrivingEnv(FAST, scenarios=[plain])
    obs, _ = env.reset(seed=0)
    want = np.stack([10.0 * np.arange(1, 6), np.zeros(5)], 1)
    np.testing.assert_allclose(obs["navigation"], want, atol=1e-4)
    assert obs["command"].tolist() == [1.0, 0.0, 0.0]  # straight
    # drive left of the lane for a few steps: the route points lie to the right (y < 0) and get closer
    for _ in range(6):
        obs, *_, info = env.step([40, 20])
    x, y, yaw, _ = info["ego_state"]
    c, s = math.cos(yaw), math.sin(yaw)
    # by hand: the route point 10 m further along the lane than the ego's foot point, in the ego frame
    px, py = x + 10.0, 0.0
    want0 = (c * (px - x) + s * (py - y), -s * (px - x) + c * (py - y))
    assert y > 0.2 and obs["navigation"][0, 1] < 0
    np.testing.assert_allclose(obs["navigation"][0], want0, atol=1e-3)
    # the navigation does not come from the expert's log: a scenario whose route is the other lane
    moved = DrivingEnv(FAST, scenarios=[dataclasses.replace(plain, route=("left_lane",))])
    obs, _ = moved.reset(seed=0)
    np.testing.assert_allclose(obs["navigation"][:, 1], 3.5, atol=1e-4)


def _arc(turn_deg: float) -> RoutePath:
    """100 m straight along +x, then a 40 m arc turning by turn_deg, then straight on."""
    pts = [np.array([x, 0.0]) for x in np.arange(0.0, 100.0, 2.0)]
    R = 40.0 / math.radians(abs(turn_deg)) if turn_deg else None
    heading, p = 0.0, np.array([100.0, 0.0])
    for _ in range(20):  # 20 x 2 m of arc
        pts.append(p.copy())
        if R:
            heading += math.copysign(2.0 / R, turn_deg)
        p = p + 2.0 * np.array([math.cos(heading), math.sin(heading)])
    for _ in range(30):
        pts.append(p.copy())
        p = p + 2.0 * np.array([math.cos(heading), math.sin(heading)])
    sc = type("Sc", (), {})()
    sc.map = type(
        "Map",
        (),
        {
            "route_polyline": staticmethod(lambda route: np.array(pts)),
            "route_speed_limits": staticmethod(lambda route: np.full(len(pts), 13.9)),
        },
    )()
    sc.route = ("r",)
    return route_path(sc)


@pytest.mark.parametrize(
    "turn, at, want",
    [(0.0, 90.0, "straight"), (60.0, 90.0, "left"), (-60.0, 90.0, "right"), (60.0, 20.0, "straight"),
     (10.0, 90.0, "straight"), (-20.0, 100.0, "right")],
)  # fmt: skip
def test_route_command_from_the_heading_change_ahead(turn, at, want):
    """A turn of more than 15 degrees within the next 40 m is the command; farther turns are not yet."""
    cmd = route_command(_arc(turn), at)
    assert cmd.dtype == np.float32 and cmd.sum() == 1.0 and COMMANDS[int(cmd.argmax())] == want


@pytest.mark.parametrize(
    "x, y, want",
    [
        (0.0, 0.0, (10.0, 15.0, 60.0)),  # s = 100; the change at s = 160
        (0.0, 1.2, (10.0, 15.0, 60.0)),  # off the centre line: the same place along the route
        (30.0, 0.0, (10.0, 15.0, 30.0)),  # slow_a -> slow_b keeps 10 m/s: not a change
        (59.5, 0.0, (10.0, 15.0, 0.5)),  # just before the change
        (60.0, 0.0, (15.0, 15.0, LIMIT_RANGE)),  # at it: the new limit holds, no change ahead
        (200.0, 0.0, (15.0, 15.0, LIMIT_RANGE)),
        (450.0, 0.0, (15.0, 15.0, LIMIT_RANGE)),  # past the route's end: its last limit
        (-39.5, 0.0, (10.0, 15.0, 99.5)),  # the change just within range
        (-50.0, 0.0, (10.0, 10.0, LIMIT_RANGE)),  # 110 m ahead: beyond range, reported as none
        (-130.0, 0.0, (10.0, 10.0, LIMIT_RANGE)),  # before the route's start
    ],
)
def test_speed_limits_by_hand(limits, x, y, want):
    """The route: 10 m/s on slow_a (x -100..30) and slow_b (x 30..60), 15 m/s on fast (x 60..); s = x + 100.
    The left lane (20 m/s) is on no route and never shows. Both modes observe the same."""
    for mode in ("camera", "privileged"):
        env = DrivingEnv({**FAST, "observation": mode, "cameras": False}, scenarios=[limits])
        obs = env.observe_state("limits", 3, [x, y, 0.0, 10.0], cameras=False)
        assert obs["limits"].dtype == np.float32 and obs["limits"].shape == (3,)
        np.testing.assert_allclose(obs["limits"], want, atol=1e-4)


def test_speed_limits_along_a_drive(limits):
    """Reset on the expert's start (x = 0): 10 m/s now, 15 m/s 60 m ahead; each step the distance shrinks by
    exactly the metres driven along the route."""
    env = DrivingEnv(FAST, scenarios=[limits])
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs["limits"], [10.0, 15.0, 60.0], atol=1e-5)
    assert env.observation_space["limits"].contains(obs["limits"])
    for _ in range(8):
        obs, *_, info = env.step([30, 24])  # speeding up along the lane
        x = float(info["ego_state"][0])
        np.testing.assert_allclose(obs["limits"], [10.0, 15.0, 60.0 - x], atol=1e-4)
    assert x > 8.0


def test_route_limits_kernel_matches_the_numpy_reference():
    """``envs.kernels.route_limits`` against ``envs.observation.speed_limits`` on random routes: limits from
    few values (so runs repeat), the ego before, on and past the route, on vertices exactly, and horizons
    that cut a change off or not."""
    rng = np.random.default_rng(0)
    out = np.empty(3, np.float32)
    for _ in range(300):
        M = int(rng.integers(2, 40))
        s = np.concatenate([[0.0], np.cumsum(rng.uniform(0.1, 20.0, M - 1))])
        limit = rng.choice([8.33, 13.9, 13.9, 22.2], M)
        horizon = float(rng.choice([LIMIT_RANGE, rng.uniform(1.0, 150.0)]))
        queries = [*rng.uniform(-20.0, s[-1] + 20.0, 5), *s[rng.integers(0, M, 3)]]
        for s0 in queries:
            route_limits(s, limit, float(s0), horizon, out)
            want = speed_limits(s, limit, float(s0), horizon)
            np.testing.assert_array_equal(out, want)
            assert want[2] <= horizon and (want[0] != want[1] or want[2] == np.float32(horizon))


def test_route_path_limits_follow_the_lanes(limits):
    """route_path's limit [M] per vertex: 10 m/s up to the last vertex before x = 60, 15 m/s from the vertex
    at x = 60 on (the shared vertices appear once)."""
    path = route_path(limits)
    np.testing.assert_allclose(path.xy[:, 0], [-100, -40, 30, 60, 100, 400])
    np.testing.assert_allclose(path.s, [0, 60, 130, 160, 200, 500])
    np.testing.assert_allclose(path.limit, [10, 10, 10, 15, 15, 15])


def test_privileged_ego_has_no_elapsed_time(plain):
    """Two states at different steps with the same kinematics observe the same: ego [6] (speed, yaw rate,
    accel, steer, last anchor) and every other part (no agent in this clip: nothing else moves)."""
    env = DrivingEnv({**FAST, "observation": "privileged"}, scenarios=[plain])
    state, kin = [12.0, 0.4, 0.05, 9.0], dict(yaw_rate=0.1, accel=-1.0, steer=0.02, last_anchor=(0.25, 4.5))
    early = env.observe_state("plain", 2, state, **kin)
    late = env.observe_state("plain", 25, state, **kin)
    assert early["ego"].shape == (6,)
    np.testing.assert_allclose(early["ego"], [9.0, 0.1, -1.0, 0.02, 0.25, 4.5], rtol=1e-6)
    assert set(early) == set(late)
    for key in early:
        np.testing.assert_array_equal(early[key], late[key], err_msg=key)
    # the episode's last step observes the same too (the old ego ended in t / horizon = 1)
    np.testing.assert_array_equal(env.observe_state("plain", 30, state, **kin)["ego"], early["ego"])


def test_privileged_route_lies_on_the_route_lanes_not_the_expert_path(plain, limits):
    """The expert drives y = 0; with the route on the left lane (y = 3.5), the route points lie on that lane,
    every route_spacing (5) m ahead of the ego's place on it, whatever the step."""
    moved = dataclasses.replace(plain, route=("left_lane",))
    env = DrivingEnv({**FAST, "observation": "privileged", "cameras": False}, scenarios=[moved])
    obs, _ = env.reset(seed=0)
    want = np.stack([5.0 * np.arange(1, 11), np.full(10, 3.5)], 1)
    np.testing.assert_allclose(obs["route"], want, atol=1e-4)
    # the ego 20 m on and 1 m left of the expert, heading +x: the same points, seen from there
    obs = env.observe_state(0, 17, [20.0, 1.0, 0.0, 10.0], cameras=False)
    np.testing.assert_allclose(obs["route"], want - [0.0, 1.0], atol=1e-4)
    # heading 90 degrees left: the points ahead along the lane lie on the ego's right (y < 0)
    obs = env.observe_state(0, 17, [20.0, 3.5, math.pi / 2, 10.0], cameras=False)
    np.testing.assert_allclose(obs["route"], np.stack([np.zeros(10), -5.0 * np.arange(1, 11)], 1), atol=1e-4)
    # a route over several lanes: the points run on across the joins (slow_b -> fast at x = 60)
    env = DrivingEnv({**FAST, "observation": "privileged", "cameras": False}, scenarios=[limits])
    obs = env.observe_state(0, 0, [48.0, 0.0, 0.0, 10.0], cameras=False)
    np.testing.assert_allclose(obs["route"], np.stack([5.0 * np.arange(1, 11), np.zeros(10)], 1), atol=1e-4)


def test_part_switches_only_switch_parts_of_the_mode_off(plain):
    cfg = EnvConfig.from_dict({"route": False})
    assert cfg.parts == ("cameras", "ego", "limits")
    assert EnvConfig.from_dict({"agents": False, "map": False}).parts == (
        "cameras", "ego", "navigation", "command", "limits",
    )  # fmt: skip
    assert EnvConfig.from_dict({"limits": False}).parts == ("cameras", "ego", "navigation", "command")
    priv = EnvConfig.from_dict({"observation": "privileged", "agents": False})
    assert priv.parts == ("cameras", "ego", "route", "limits", "map")
    assert EnvConfig.from_dict({"observation": "privileged", "limits": False}).parts == (
        "cameras", "ego", "route", "agents", "map",
    )  # fmt: skip
    env = DrivingEnv({**FAST, "route": False, "cameras": False}, scenarios=[plain])
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"ego", "limits"} and obs["ego"].shape == (4,)
    for mode in ("camera", "privileged"):  # the limits switch, in both modes
        env = DrivingEnv({**FAST, "observation": mode, "limits": False, "cameras": False}, scenarios=[plain])
        obs, _ = env.reset(seed=0)
        assert "limits" not in env.observation_space.spaces and "limits" not in obs
        assert "limits" not in env.step([30, 20])[0]
    with pytest.raises(ValueError, match=r"EnvConfig.observation: expected 'camera' or 'privileged', got 'lidar'"):
        EnvConfig.from_dict({"observation": "lidar"})
    with pytest.raises(ValueError, match=r"camera_ablation: expected 'none' or 'blank' or 'shuffle'"):
        EnvConfig.from_dict({"camera_ablation": "noise"})


def test_blank_cameras_are_flat_grey(lead):
    env = DrivingEnv({**FAST, "camera_ablation": "blank"}, scenarios=[lead])
    obs, info = env.reset(seed=0)
    assert obs["cameras"].shape == (3, 16, 32, 3) and (obs["cameras"] == BLANK_GREY).all()
    obs, *_ = env.step(info["expert_action"])
    assert (obs["cameras"] == BLANK_GREY).all()
    venv = VectorDrivingEnv([lead], 2, {**FAST, "camera_ablation": "blank"})
    vobs, _ = venv.reset(seed=0)
    assert (vobs["cameras"] == BLANK_GREY).all()


def test_shuffled_cameras_show_another_clip_on_its_expert_pose(plain, lead):
    """Pool [plain, lead]: plain's episode shows lead's scene from lead's expert pose at the same step."""
    env = DrivingEnv({**FAST, "camera_ablation": "shuffle"}, scenarios=[plain, lead])
    obs, info = env.reset(seed=0, options={"scenario": "plain"})
    for _ in range(4):
        obs, *_, info = env.step([36, 24])  # off the expert's path: the images do not follow the ego
    t = info["step"]
    k = env.pool.index_of("lead")
    d = env.pool.data(k)
    x, y, _, yaw = d.expert_poses[t]
    want = rgb_to_uint8(
        rendering.render(*env.view_request(k, t, x, y, yaw)[:2], env._Ks, 32, 16, backend="cpu", far_plane=200.0).rgb
    )
    np.testing.assert_array_equal(obs["cameras"], want)
    own = DrivingEnv(FAST, scenarios=[plain, lead])
    own_obs, _ = own.reset(seed=0, options={"scenario": "plain"})
    for _ in range(4):
        own_obs, *_ = own.step([36, 24])
    assert not np.array_equal(own_obs["cameras"], obs["cameras"])
    np.testing.assert_array_equal(own_obs["ego"], obs["ego"])  # only the images differ
    # a pool of one clip: its own frames from half its horizon later (30 steps: step t + 15)
    alone = DrivingEnv({**FAST, "camera_ablation": "shuffle"}, scenarios=[lead])
    obs, _ = alone.reset(seed=0)
    x, y, _, yaw = alone.pool.data(0).expert_poses[15]
    want = rgb_to_uint8(
        rendering.render(*alone.view_request(0, 15, x, y, yaw)[:2], alone._Ks, 32, 16, backend="cpu").rgb
    )
    np.testing.assert_array_equal(obs["cameras"], want)


def test_vector_env_in_camera_mode_matches_single_envs(plain, lead):
    venv = VectorDrivingEnv([plain, lead], 2, FAST)
    singles = [DrivingEnv(FAST, scenarios=[plain, lead]) for _ in range(2)]
    vobs, _ = venv.reset(seed=5)
    sobs = [e.reset(seed=derive_seed(5, i))[0] for i, e in enumerate(singles)]
    for _ in range(3):
        for key in vobs:
            np.testing.assert_array_equal(vobs[key], np.stack([o[key] for o in sobs]))
        actions = np.array([[30, 20], [31, 21]])
        vobs, *_ = venv.step(actions)
        sobs = [e.step(actions[i])[0] for i, e in enumerate(singles)]


def test_observation_mode_read_from_the_parts():
    """Spaces recorded without a mode: an ego of 4 is a car's, of 6 (or 7, from before the elapsed fraction
    was dropped) the teacher's; the limits part belongs to both modes and decides nothing."""

    def space(ego: int, *extra: str) -> gym.spaces.Dict:
        parts = {"ego": gym.spaces.Box(-1.0, 1.0, (ego,), np.float32)}
        parts |= {k: gym.spaces.Box(-1.0, 1.0, (3,), np.float32) for k in extra}
        return gym.spaces.Dict(parts)

    assert observation_mode(space(4)) == observation_mode(space(4, "limits", "command")) == "camera"
    for priv in (space(6), space(7), space(6, "limits")):
        assert observation_mode(priv) == "privileged"
    assert observation_mode(space(4, "route")) == "privileged"
