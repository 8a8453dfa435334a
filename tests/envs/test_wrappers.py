"""envs.wrappers: the rig as one conventional image and the rest as one vector, for SB3 / CleanRL."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import stable_baselines3 as sb3
from gymnasium import spaces
from stable_baselines3.common.env_checker import check_env

from envs.driving import DrivingEnv
from envs.vector import VectorDrivingEnv
from envs.wrappers import StandardObservation, StandardVectorObservation, flatten_vector, layout_image

# 64 x 36 cameras: stable-baselines3's CnnPolicy wants images of at least 36 x 36
CONFIG = {"resolution": (64, 36), "render_backend": "cpu", "rig": "front3"}


def cameras_by_hand(C=3, H=2, W=4, lead=()):
    """Camera c, pixel (y, x), channel k holds 100c + 10y + x + k (every value says where it came from)."""
    c, y, x, k = np.meshgrid(np.arange(C), np.arange(H), np.arange(W), np.arange(3), indexing="ij")
    one = (100 * c + 10 * y + x + k).astype(np.uint8)
    return np.broadcast_to(one, (*lead, C, H, W, 3)).copy()


def test_channels_layout_stacks_the_cameras_along_channels():
    cams = cameras_by_hand()
    img = layout_image(cams, "channels")
    assert img.shape == (2, 4, 9) and img.dtype == np.uint8
    assert img[1, 3, 0] == 13 and img[1, 3, 1] == 14 and img[1, 3, 3] == 113 and img[0, 2, 8] == 204
    for c in range(3):
        assert np.array_equal(img[..., 3 * c : 3 * c + 3], cams[c])


def test_tiled_layout_puts_the_cameras_side_by_side_in_rows():
    cams = cameras_by_hand()
    strip = layout_image(cams, "tiled")
    assert strip.shape == (2, 12, 3)
    assert strip[0, 0, 0] == 0 and strip[0, 4, 0] == 100 and strip[1, 11, 0] == 213
    grid = layout_image(cams, "tiled", columns=2)  # 2 x 2 tiles, the fourth black
    assert grid.shape == (4, 8, 3)
    assert grid[0, 4, 0] == 100 and grid[2, 0, 0] == 200 and grid[3, 3, 0] == 213
    assert not grid[2:, 4:].any()
    batched = layout_image(cameras_by_hand(lead=(5,)), "tiled", columns=2)
    assert batched.shape == (5, 4, 8, 3) and np.array_equal(batched[3], grid)
    with pytest.raises(ValueError, match="layout must be one of channels, tiled"):
        layout_image(cams, "mosaic")


def test_vector_parts_are_flattened_in_key_order():
    obs = {"ego": np.array([1.0, 2.0]), "route": np.array([[3.0, 4.0], [5.0, 6.0]]), "map_mask": np.array([7.0])}
    v = flatten_vector(obs, ("ego", "route", "map_mask"))
    assert v.dtype == np.float32 and v.tolist() == [1, 2, 3, 4, 5, 6, 7]
    batch = {k: np.stack([a, a + 10]) for k, a in obs.items()}
    vb = flatten_vector(batch, ("ego", "route", "map_mask"), batch_dims=1)
    assert vb.shape == (2, 7) and vb[1].tolist() == [11, 12, 13, 14, 15, 16, 17]


def test_the_wrapped_observation_is_the_env_observation_rearranged(plain):
    raw = DrivingEnv(CONFIG, scenarios=[plain])
    env = StandardObservation(DrivingEnv(CONFIG, scenarios=[plain]))
    o_raw, _ = raw.reset(seed=3)
    o, _ = env.reset(seed=3)
    assert env.observation_space.contains(o)
    assert o["image"].shape == (36, 64, 9)
    assert np.array_equal(o["image"][..., 3:6], o_raw["cameras"][1])
    keys = [k for k in raw.observation_space.spaces if k != "cameras"]
    assert len(keys) >= 2 and keys == sorted(keys)  # the Dict space's order: gymnasium sorts the keys
    assert o["vector"].shape == (sum(o_raw[k].size for k in keys),)
    assert np.array_equal(o["vector"], np.concatenate([o_raw[k].reshape(-1) for k in keys]))
    last = keys[-1]
    assert np.array_equal(o["vector"][env.vector_slices[last]], o_raw[last].reshape(-1))
    assert float(o["image"].max()) > 0  # a rendered picture, not zeros


def _check_env_warnings(env) -> list:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        check_env(env, warn=True)
    return [f"{w.category.__name__}: {w.message}" for w in seen]


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(layout="tiled"), dict(image_only=True), dict(layout="tiled", columns=2, image_only=True)],
)
def test_stable_baselines3_env_checker_passes_without_warnings(plain, kwargs):
    env = StandardObservation(DrivingEnv(CONFIG, scenarios=[plain]), **kwargs)
    assert _check_env_warnings(env) == []
    space = env.observation_space
    image = space if kwargs.get("image_only") else space["image"]
    assert isinstance(image, spaces.Box) and image.dtype == np.uint8 and image.shape[0] >= 36


def test_without_the_wrapper_the_checker_does_warn(plain):
    """The reason the wrapper exists: the raw Dict's camera stack is no image SB3 knows."""
    assert _check_env_warnings(DrivingEnv(CONFIG, scenarios=[plain])) != []


def test_a_stable_baselines3_image_policy_trains_through_it(plain):
    env = StandardObservation(DrivingEnv(CONFIG, scenarios=[plain]))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = sb3.PPO("MultiInputPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=8)
        action, _ = model.predict(env.reset(seed=0)[0], deterministic=True)
    assert [str(w.message) for w in seen] == []
    assert env.action_space.contains(np.asarray(action))


def test_vector_env_wrapper_matches_the_single_one(plain, lead):
    venv = StandardVectorObservation(VectorDrivingEnv([plain, lead], 2, CONFIG), layout="tiled")
    obs, _ = venv.reset(seed=0, options={"scenario": ["plain", "lead"]})
    assert obs["image"].shape == (2, 36, 192, 3) and obs["vector"].ndim == 2
    assert venv.observation_space.contains(obs)
    single = StandardObservation(DrivingEnv(CONFIG, scenarios=[lead]), layout="tiled")
    o, _ = single.reset(seed=0, options={"scenario": "lead"})
    assert np.array_equal(o["vector"], obs["vector"][1])
    assert np.array_equal(o["image"], obs["image"][1])
    for _ in range(40):  # through the end of an episode: the final observations are laid out too
        obs, _, term, trunc, infos = venv.step(np.array([[30, 20], [30, 20]]))
        assert venv.observation_space.contains(obs)
        if (term | trunc).any():
            i = int(np.flatnonzero(term | trunc)[0])
            assert venv.single_observation_space.contains(infos["final_obs"][i])
            break
    else:
        pytest.fail("no episode ended in 40 steps")
    venv.close()


def test_bad_wrapper_settings_are_refused(plain):
    env = DrivingEnv(CONFIG, scenarios=[plain])
    with pytest.raises(ValueError, match=r"columns must be in 1\.\.3"):
        StandardObservation(env, layout="tiled", columns=4)
    with pytest.raises(ValueError, match="image_only=True needs the cameras"):
        StandardObservation(DrivingEnv({**CONFIG, "cameras": False}, scenarios=[plain]), image_only=True)
    only_vector = StandardObservation(DrivingEnv({**CONFIG, "cameras": False}, scenarios=[plain]))
    assert isinstance(only_vector.observation_space, spaces.Box)
