"""Observation modes: what camera mode observes (and never), its navigation and route command by hand, the
part switches within a mode, and the camera ablations (blank, shuffle)."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest

from envs.config import EnvConfig
from envs.driving import BLANK_GREY, DrivingEnv, rgb_to_uint8
from envs.observation import (
    COMMANDS,
    PRIVILEGED_KEYS,
    RoutePath,
    observation_mode,
    route_command,
    route_path,
)
from envs.vector import VectorDrivingEnv
from sim import rendering
from sim.seeding import derive_seed
from tests.envs.conftest import FAST


def test_camera_mode_is_the_default_and_holds_no_privileged_part(lead):
    env = gym.make("SplatDrive-v0", config=FAST, scenarios=[lead]).unwrapped
    assert env.config.observation == "camera"
    space = env.observation_space.spaces
    assert set(space) == {"cameras", "ego", "navigation", "command"}
    assert space["ego"].shape == (4,) and space["navigation"].shape == (5, 2) and space["command"].shape == (3,)
    obs, info = env.reset(seed=0)
    assert not set(PRIVILEGED_KEYS) & set(obs) and set(obs) == set(space)
    for _ in range(3):
        obs, *_ = env.step(info["expert_action"])
        assert not set(PRIVILEGED_KEYS) & set(obs)
    assert observation_mode(env.observation_space) == "camera"


def test_camera_ego_is_the_privileged_egos_first_four(lead):
    """The same drive seen in both modes: camera ego = (speed, yaw rate, accel, steer) of privileged's 7."""
    cam = DrivingEnv(FAST, scenarios=[lead])
    priv = DrivingEnv({**FAST, "observation": "privileged"}, scenarios=[lead])
    assert observation_mode(priv.observation_space) == "privileged"
    oc, _ = cam.reset(seed=0)
    op, _ = priv.reset(seed=0)
    for action in ([30, 24], [33, 22], [28, 20]):
        np.testing.assert_array_equal(oc["ego"], op["ego"][:4])
        np.testing.assert_array_equal(oc["cameras"], op["cameras"])  # the images do not depend on the mode
        oc, *_ = cam.step(action)
        op, *_ = priv.step(action)
    np.testing.assert_array_equal(oc["ego"], op["ego"][:4])
    assert oc["ego"][0] == pytest.approx(float(op["ego"][0])) and op["ego"].shape == (7,)


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
    sc.map = type("Map", (), {"route_polyline": staticmethod(lambda route: np.array(pts))})()
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


def test_part_switches_only_switch_parts_of_the_mode_off(plain):
    cfg = EnvConfig.from_dict({"route": False})
    assert cfg.parts == ("cameras", "ego")
    assert EnvConfig.from_dict({"agents": False, "map": False}).parts == ("cameras", "ego", "navigation", "command")
    priv = EnvConfig.from_dict({"observation": "privileged", "agents": False})
    assert priv.parts == ("cameras", "ego", "route", "map")
    env = DrivingEnv({**FAST, "route": False, "cameras": False}, scenarios=[plain])
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"ego"} and obs["ego"].shape == (4,)
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
