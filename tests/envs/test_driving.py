"""DrivingEnv: gymnasium's checker, the observation by hand, determinism, config and bad input."""

from __future__ import annotations

import logging
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs import ActionSpec, DrivingEnv, EnvConfig, default_config
from envs.observation import LIMIT_RANGE
from scenarios.format import DEFAULT_SPEED_LIMIT
from tests.envs.conftest import FAST
from tests.envs.handmade import straight_scenario


def checked(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium's checker warns about problems; make them fail
        check_env(env)


def test_registered_and_check_env(plain, lead):
    assert envs.ENV_ID in gym.registry
    env = gym.make("SplatDrive-v0", config=FAST, scenarios=[plain, lead], render_mode="rgb_array")
    checked(env.unwrapped)
    env.close()


def test_check_env_with_parts_switched_off(plain):
    for off in ({"cameras": False}, {"map": False, "agents": False}, {"ego": False, "route": False}):
        env = gym.make("SplatDrive-v0", config={**FAST, **off}, scenarios=[plain])
        assert not (set(off) & set(env.observation_space.spaces))
        checked(env.unwrapped)


def test_spaces(plain):
    env = DrivingEnv({"observation": "privileged"}, scenarios=[plain])  # the scenario's rig: front3 at 32x16
    obs_space = env.observation_space.spaces
    assert obs_space["cameras"].shape == (3, 16, 32, 3) and obs_space["cameras"].dtype == np.uint8
    assert obs_space["ego"].shape == (6,) and obs_space["route"].shape == (10, 2)
    assert obs_space["limits"].shape == (3,) and obs_space["limits"].dtype == np.float32
    assert obs_space["agents"].shape == (8, 8) and obs_space["agents_mask"].shape == (8,)
    assert obs_space["map"].shape == (64, 4) and obs_space["map_mask"].shape == (64,)
    assert env.action_space == gym.spaces.MultiDiscrete([61, 61])
    assert env.action_mask.shape == (61, 61) and not env.action_mask.flags.writeable
    env = DrivingEnv(
        {"observation": "privileged", "rig": "surround6", "resolution": (48, 24), "max_agents": 4}, scenarios=[plain]
    )
    assert env.observation_space["cameras"].shape == (6, 24, 48, 3)
    assert env.observation_space["agents"].shape == (4, 8)
    env = DrivingEnv({**FAST, "n_lat": 31, "n_long": 41}, scenarios=[plain])
    assert env.action_space == gym.spaces.MultiDiscrete([31, 41]) and env.action_mask.shape == (41, 31)


def test_observation_by_hand(lead):
    env = DrivingEnv({**FAST, "observation": "privileged"}, scenarios=[lead])
    obs, info = env.reset(seed=0)
    np.testing.assert_allclose(obs["ego"], [10.0, 0, 0, 0, 0, 5.0])
    np.testing.assert_allclose(obs["route"], np.stack([5.0 * np.arange(1, 11), np.zeros(10)], 1), atol=1e-5)
    # the route lane's default limit (scenarios.format.DEFAULT_SPEED_LIMIT), the same all along it
    np.testing.assert_allclose(obs["limits"], [DEFAULT_SPEED_LIMIT, DEFAULT_SPEED_LIMIT, LIMIT_RANGE])
    # the lead: box centre 3.8 (ego front) + 10 + 2.25 ahead of the rear axle, stopped
    np.testing.assert_allclose(obs["agents"][0], [16.05, 0, 1, 0, 4.5, 1.9, 0, 0], atol=1e-5)
    assert obs["agents_mask"].tolist() == [1] + [0] * 7
    # lanes at y = 0 and y = 3.5, points every 2 m from x = -20: the nearest is under the rear axle
    np.testing.assert_allclose(obs["map"][0], [0, 0, 1, 0], atol=1e-6)
    assert obs["map_mask"].sum() > 40 and set(np.round(obs["map"][obs["map_mask"] > 0, 1], 3)) <= {0.0, 3.5}
    assert obs["cameras"].any()  # the front cameras see the road and the walls
    info["action_mask"][0, 0] = True  # a copy: the env's table is untouched
    assert not env.action_mask[0, 0]
    obs, *_, info = env.step([30, 24])  # 6 m per 0.5 s: speed up
    ego = obs["ego"]
    assert ego[0] > 10.0 and ego[2] > 0 and ego[1] == 0 and ego[3] == 0
    np.testing.assert_allclose(ego[4:], [0.0, 6.0], atol=1e-6)
    assert obs["agents"][0, 0] < 16.05 - 1.0
    assert info["step"] == 1 and info["scenario"] == "lead"


def test_infeasible_action_is_projected(plain):
    env = DrivingEnv(FAST, scenarios=[plain])
    env.reset(seed=0)
    obs, _r, _te, _tr, info = env.step([60, 0])  # full left at standstill: not drivable
    assert info["action_projected"] and info["action_applied"].tolist() == [30, 0]
    assert obs["ego"][2] == pytest.approx(-9.0)  # stop in 0 m: the hardest braking
    _, _, _, _, info = env.step([30, 20])
    assert not info["action_projected"]


@pytest.mark.parametrize(
    "action, match",
    [
        ([61, 0], "out of range"),
        ([-1, 20], "out of range"),
        ([30, 61], "out of range"),
        ([30], "shape"),
        ([[30, 20]], "shape"),
        (np.zeros((2, 2), int), "shape"),
        ([1.5, 20], "whole bin"),
        ([np.nan, 20], "whole bin"),
        (np.array([True, False]), "integers"),
        (np.array(["a", "b"]), "integers"),
    ],
)
def test_bad_actions_raise(plain, action, match):
    env = DrivingEnv(FAST, scenarios=[plain])
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)
    env.step(np.array([30.0, 20.0]))  # whole floats are fine; the env is still usable


def test_step_before_reset_and_after_the_end(plain):
    env = DrivingEnv(FAST, scenarios=[plain])
    with pytest.raises(RuntimeError, match="reset"):
        env.step([30, 20])
    env.reset(seed=0, options={"scenario": "plain"})
    for _ in range(30):
        *_, _te, tr, _ = env.step([30, 20])
    assert tr
    with pytest.raises(RuntimeError, match="reset"):
        env.step([30, 20])
    with pytest.raises(ValueError, match="unknown options"):
        env.reset(options={"scenery": 1})
    with pytest.raises(ValueError, match="unknown scenario"):
        env.reset(options={"scenario": "nope"})


def test_config_rejects_unknown_keys(plain):
    with pytest.raises(ValueError, match=r"EnvConfig: unknown config key camras \(did you mean cameras\?\)"):
        DrivingEnv({"camras": False}, scenarios=[plain])
    with pytest.raises(ValueError, match="position_threshold"):
        EnvConfig.from_dict({"position_threshold": -1.0})
    with pytest.raises(ValueError, match="render_backend"):
        EnvConfig(render_backend="opengl")
    d = default_config()
    assert d["position_threshold"] == 2.0 and d["heading_threshold_deg"] == 40.0
    assert d["static_opacity_threshold"] == 0.5 and d["cameras"] and d["render_backend"] == "auto"
    assert EnvConfig.from_dict(d) == EnvConfig()
    assert EnvConfig().action_spec == ActionSpec()
    assert DrivingEnv.default_config() == d


def test_horizon_override(plain):
    env = DrivingEnv({**FAST, "horizon": 5, "observation": "privileged"}, scenarios=[plain])
    env.reset(seed=0)
    for k in range(5):
        _obs, _r, te, tr, info = env.step([30, 20])
        assert tr == (k == 4) and not te
    assert info["step"] == 5


def rollout(env, seed, n=80):
    """Seeded random (feasible-ish) actions through a few episodes; every output recorded."""
    rng = np.random.default_rng(seed)
    out = [env.reset(seed=seed)]
    for _ in range(n):
        a = np.array([30 + rng.integers(-6, 7), 20 + rng.integers(-3, 4)])
        step = env.step(a)
        out.append(step)
        if step[2] or step[3]:
            out.append(env.reset())
    return out


def test_same_seed_same_everything(plain, lead, parked_box):
    scs = [plain, lead, parked_box]
    a = rollout(DrivingEnv(FAST, scenarios=scs), seed=7)
    b = rollout(DrivingEnv(FAST, scenarios=scs), seed=7)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert gym.utils.env_checker.data_equivalence(x, y, exact=True)
    c = rollout(DrivingEnv(FAST, scenarios=scs), seed=8)
    assert not all(gym.utils.env_checker.data_equivalence(x, y, exact=True) for x, y in zip(a, c))


def test_config_seed_is_the_default_seed(plain, lead, parked_box):
    scs = [plain, lead, parked_box]
    ids = []
    for _ in range(2):
        env = DrivingEnv({**FAST, "seed": 3, "cameras": False}, scenarios=scs)
        ids.append([env.reset()[1]["scenario"] for _ in range(8)])
    assert ids[0] == ids[1] and len(set(ids[0])) > 1


def test_render_rgb_array(lead):
    env = DrivingEnv({**FAST, "cameras": False, "bev_pixels": 128}, scenarios=[lead], render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[0] == 128 and img.shape[1] > 128
    bev = img[:, :128]
    assert (bev == [235, 50, 50]).all(-1).sum() > 20  # the ego box
    assert (bev == [70, 130, 255]).all(-1).sum() > 20  # the lead car
    assert img[:, 132:].any()  # the cameras, rendered for the picture although not observed
    assert DrivingEnv(FAST, scenarios=[lead]).render() is None


def test_a_scenario_that_fails_at_reset_is_charged_and_skipped(plain, corrupt, caplog):
    env = DrivingEnv({**FAST, "quarantine_after": 1}, scenarios=[corrupt, plain])
    with caplog.at_level(logging.WARNING, logger="envs"):
        seen = set()
        for s in range(6):
            _, info = env.reset(seed=s)
            seen.add(info["scenario"])
            if "error" in info:
                assert "corrupt" in info["error"]
    assert seen == {"plain"} and env.quarantined == ["corrupt"]
    assert "quarantined" in caplog.text and "corrupt" in caplog.text
    with pytest.raises(RuntimeError, match="corrupt"):  # asked for by name, it raises
        env.reset(options={"scenario": "corrupt"})


def test_a_failure_mid_episode_truncates_with_the_error(plain, monkeypatch):
    env = DrivingEnv(FAST, scenarios=[plain])
    env.reset(seed=0)
    env.step([30, 20])
    calls = {"n": 0}
    real = env._scene.compose

    def broken(step, extra=()):
        calls["n"] += 1
        raise OSError("disk vanished")

    monkeypatch.setattr(env._scene, "compose", broken)
    obs, r, te, tr, info = env.step([30, 20])
    assert (r, te, tr) == (0.0, False, True) and "disk vanished" in info["error"] and "plain" in info["error"]
    assert env.observation_space.contains(obs)
    monkeypatch.setattr(env._scene, "compose", real)
    env.reset()  # carries on
    assert env.pool.failures.tolist() == [1]


def test_broken_suite_file_is_named_or_skipped(tmp_path, hm_dir):
    from scenarios.io import save

    save(straight_scenario(tmp_path, sid="good"), tmp_path / "good.json")
    (tmp_path / "bad.json").write_text('{"format_version": 1, "id": "bad"')
    with pytest.raises(ValueError, match=r"bad\.json"):
        DrivingEnv(FAST, scenarios=str(tmp_path))
    env = DrivingEnv(FAST, scenarios=str(tmp_path), skip_broken=True)
    assert env.pool.ids == ("good",)
    env = DrivingEnv({**FAST, "skip_broken": True}, scenarios=[str(tmp_path / "bad.json"), str(tmp_path)])
    assert env.pool.ids == ("good",)


def test_camera_history_stacks_the_images_of_k_steps_ago(plain):
    """cameras [2C, ...]: now, then the images rendered k steps before (the episode's first until it is k steps
    old), one render a step; a new episode starts its history afresh; the vector env stacks alike."""
    from envs.vector import VectorDrivingEnv

    env = DrivingEnv({**FAST, "camera_history": 2, "render_backend": "cpu"}, scenarios=[plain])
    C = len(env.rig)
    assert env.observation_space["cameras"].shape == (2 * C, 16, 32, 3)
    obs, _ = env.reset(seed=0)
    seen = [obs["cameras"][:C].copy()]
    assert np.array_equal(obs["cameras"][C:], seen[0])
    for t in range(1, 6):
        obs, *_ = env.step(np.array([30, 20]))
        seen.append(obs["cameras"][:C].copy())
        assert np.array_equal(obs["cameras"][C:], seen[max(t - 2, 0)])
    assert not np.array_equal(seen[5], seen[3])  # the ego moved: the pictures differ, so the check above bites
    obs, _ = env.reset(seed=1)
    assert np.array_equal(obs["cameras"][C:], obs["cameras"][:C])  # no image of the last episode
    venv = VectorDrivingEnv([plain], 2, {**FAST, "camera_history": 1, "render_backend": "cpu"})
    vobs, _ = venv.reset(seed=0)
    assert vobs["cameras"].shape == (2, 2 * C, 16, 32, 3)
    for _ in range(3):
        prev = vobs["cameras"][:, :C].copy()
        vobs, *_ = venv.step(np.array([[30, 20], [30, 20]]))
        assert np.array_equal(vobs["cameras"][:, C:], prev)  # k = 1: the images of the step before
    with pytest.raises(ValueError, match="camera_history"):
        DrivingEnv({"camera_history": -1}, scenarios=[plain])
