"""Standard clients: the rig as one conventional image and the rest as one flat vector.

``SplatDrive-v0`` observes a ``Dict`` of a camera stack ``[C, H, W, 3]`` and several small arrays
(``envs.observation``). Off-the-shelf image policies (stable-baselines3's ``CnnPolicy`` and
``MultiInputPolicy``, CleanRL's Atari-style networks) expect one ``H x W x channels`` uint8 image
and one flat float vector instead. ``StandardObservation`` gives them that, unchanged otherwise
(actions, rewards, ``info``):

    env = StandardObservation(gym.make("SplatDrive-v0", config={"resolution": (64, 36)}))
    env.observation_space  # Dict(image: Box(0, 255, (36, 64, 9), uint8), vector: Box(-1e3, 1e3, (D,), float32))

layout ``"channels"``: the C images stacked along the channel axis, ``[H, W, 3C]`` (camera c in
channels ``3c .. 3c+2``); ``"tiled"``: side by side in rows of ``columns`` cameras (default all in
one row), ``[rows * H, columns * W, 3]``, an ordinary RGB picture (black where a row is short).
``vector``: every other part flattened, concatenated in the order of the observation space's keys
(gymnasium sorts them by name), float32; ``vector_slices`` maps each part's name to its slice.
``image_only=True`` observes the image Box alone (``CnnPolicy``); without cameras the vector Box
alone is observed. ``StandardVectorObservation`` does the same for ``envs.VectorDrivingEnv``.
Note stable-baselines3's ``CnnPolicy`` wants images of at least 36 x 36 pixels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

LAYOUTS = ("channels", "tiled")


def layout_image(cameras: np.ndarray, layout: str = "channels", columns: int | None = None) -> np.ndarray:
    """cameras [..., C, H, W, 3] uint8 -> [..., H, W, 3C] ("channels") or [..., rows*H, cols*W, 3] ("tiled")."""
    *lead, C, H, W, ch = cameras.shape
    if layout == "channels":
        return np.ascontiguousarray(np.moveaxis(cameras, -4, -2).reshape(*lead, H, W, C * ch))
    if layout == "tiled":
        cols = C if columns is None else int(columns)
        rows = math.ceil(C / cols)
        if rows * cols != C:  # pad the last row with black cameras
            pad = np.zeros((*lead, rows * cols - C, H, W, ch), cameras.dtype)
            cameras = np.concatenate([cameras, pad], axis=-4)
        grid = cameras.reshape(*lead, rows, cols, H, W, ch)  # [..., rows, cols, H, W, 3]
        grid = np.moveaxis(grid, -3, -4)  # [..., rows, H, cols, W, 3]
        return np.ascontiguousarray(grid.reshape(*lead, rows * H, cols * W, ch))
    raise ValueError(f"layout_image: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def flatten_vector(obs: Mapping[str, np.ndarray], keys: tuple[str, ...], batch_dims: int = 0) -> np.ndarray:
    """The parts ``keys`` of an observation, each flattened, concatenated: [..., D] float32."""
    parts = [np.asarray(obs[k], np.float32) for k in keys]
    lead = parts[0].shape[:batch_dims] if parts else ()
    return np.concatenate([p.reshape(*lead, -1) for p in parts], axis=-1)


class _Layout:
    """The spaces and the transform, shared by the single and the vector wrapper."""

    def __init__(self, space: spaces.Space, layout: str, columns: int | None, image_only: bool):
        if not isinstance(space, spaces.Dict):
            raise TypeError(f"StandardObservation: expected a Dict observation space (SplatDrive-v0), got {space}")
        if layout not in LAYOUTS:
            raise ValueError(f"StandardObservation: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        boxes: dict[str, spaces.Box] = {}
        for k, sp in space.spaces.items():
            if not isinstance(sp, spaces.Box) or sp.shape is None:
                raise TypeError(f"StandardObservation: observation part {k!r} must be a Box, got {sp}")
            boxes[k] = sp
        cams = boxes.get("cameras")
        self.layout, self.image_only = layout, bool(image_only)
        self.vector_keys = tuple(k for k in boxes if k != "cameras")
        if image_only and cams is None:
            raise ValueError("StandardObservation: image_only=True needs the cameras (env config cameras=True)")
        out: dict[str, spaces.Space] = {}
        if cams is not None:
            cam_shape: tuple[int, ...] = cams.shape
            C = cam_shape[0]
            self.columns = C if columns is None else int(columns)
            if not 1 <= self.columns <= C:
                raise ValueError(f"StandardObservation: columns must be in 1..{C} (cameras), got {columns!r}")
            shape = layout_image(np.zeros(cam_shape, np.uint8), layout, self.columns).shape
            out["image"] = spaces.Box(0, 255, shape, np.uint8)
        if self.vector_keys and not image_only:
            low = np.concatenate([boxes[k].low.reshape(-1) for k in self.vector_keys]).astype(np.float32)
            high = np.concatenate([boxes[k].high.reshape(-1) for k in self.vector_keys]).astype(np.float32)
            out["vector"] = spaces.Box(low, high, low.shape, np.float32)
        if not out:
            raise ValueError("StandardObservation: the observation has no parts switched on")
        self.keys = tuple(out)
        sizes = [boxes[k].low.size for k in self.vector_keys] if "vector" in out else []
        ends = np.cumsum([0, *sizes])
        self.vector_slices = {k: slice(int(a), int(b)) for k, a, b in zip(self.vector_keys, ends[:-1], ends[1:])}
        self.space: spaces.Space = out[self.keys[0]] if len(out) == 1 else spaces.Dict(out)

    def __call__(self, obs: Mapping[str, np.ndarray], batch_dims: int = 0):
        out = {}
        if "image" in self.keys:
            out["image"] = layout_image(np.asarray(obs["cameras"]), self.layout, self.columns)
        if "vector" in self.keys:
            out["vector"] = flatten_vector(obs, self.vector_keys, batch_dims)
        return out[self.keys[0]] if len(out) == 1 else out


class StandardObservation(gym.ObservationWrapper):
    """SplatDrive-v0 observed as {"image": [H, W, 3C] or tiled uint8, "vector": [D] float32}."""

    def __init__(self, env: gym.Env, layout: str = "channels", columns: int | None = None, image_only: bool = False):
        super().__init__(env)
        self._layout = _Layout(env.observation_space, layout, columns, image_only)
        self.observation_space = self._layout.space
        self.vector_slices = self._layout.vector_slices  # part name -> its slice of "vector"

    def observation(self, observation):
        return self._layout(observation)


class StandardVectorObservation(gym.vector.VectorWrapper):
    """The same for a vector env (``envs.VectorDrivingEnv``): every array gains the leading [N].

    The env resets sub-envs in the same step (``AutoresetMode.SAME_STEP``), which gymnasium's
    ``VectorObservationWrapper`` refuses; the ended episodes' ``infos["final_obs"]`` are laid out too.
    """

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        layout: str = "channels",
        columns: int | None = None,
        image_only: bool = False,
    ):
        super().__init__(env)
        self._layout = _Layout(env.single_observation_space, layout, columns, image_only)
        self.single_observation_space = self._layout.space
        self.observation_space = batch_space(self._layout.space, env.num_envs)
        self.vector_slices = self._layout.vector_slices

    def reset(self, *, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._layout(obs, batch_dims=1), infos

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        if "final_obs" in infos:
            final = np.empty(len(infos["final_obs"]), dtype=object)
            for i, o in enumerate(infos["final_obs"]):
                final[i] = None if o is None else self._layout(o)
            infos = {**infos, "final_obs": final}
        return self._layout(obs, batch_dims=1), rewards, terminated, truncated, infos
