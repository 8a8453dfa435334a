"""The observation space as JSON: a training checkpoint's ``obs_space.json`` (written by
``learner.checkpoint.encode``) and the ``inputs`` of an exported package's ``policy.json``.

An observation space is a gymnasium Dict of Boxes; each part becomes ``{name, shape (no batch), dtype,
low, high}`` (bounds: one number when uniform, else a nested list; non-finite -> null), and, described
for people outside (``describe=True``), its meaning, units, frame and feature names. ``obs_space.json``
adds the action bins, the camera rig and the observation mode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from envs.config import CRITIC_PREFIX
from envs.observation import (
    AGENT_FEATURES,
    CAMERA_EGO_FEATURES,
    COMMANDS,
    EGO_FEATURES,
    LEGACY_EGO_FEATURES,
    LIMIT_FEATURES,
    LIMIT_RANGE,
    MAP_FEATURES,
    observation_mode,
)
from policy.errors import PolicySourceError
from scenarios.actions import ActionSpec

SPACES_FILE = "obs_space.json"  # in a training checkpoint, next to config.json (learner.checkpoint)
SPACES_FORMAT = 1
ACTION_KEYS = ("n_lat", "lat_max", "n_long", "long_max", "max_curvature")

# What each observation part means; envs/observation.py's table, written out for people outside.
OBS_DOCS: dict[str, dict[str, str]] = {
    "cameras": dict(
        meaning="the rig's RGB images of the scene at the ego's pose, cameras in rig order (see 'rig')",
        units="uint8 0..255 per channel (RGB); the model scales to [0, 1] and normalises inside",
        frame="image rows top to bottom, columns left to right; layout [C, H, W, 3] (channels last)",
    ),
    "ego": dict(
        meaning="the ego's state: speed, yaw rate, acceleration, front-wheel steering angle; in privileged "
        "mode also the anchor applied at the last step (lateral, longitudinal) (see 'features')",
        units="m/s, rad/s, m/s^2, rad (privileged mode: then m, m), in the order of 'features'",
        frame="ego frame: x forward, y left (rear axle, z up); yaw rate positive to the left",
    ),
    "navigation": dict(
        meaning="camera mode: points evenly spaced ahead along the centre lines of the route's lanes (from "
        "the map, not the expert's drive), from the ego's place on the route",
        units="m",
        frame="ego frame: x forward, y left",
    ),
    "command": dict(
        meaning="camera mode: the route command, one-hot (see 'features'): the route's heading change over "
        "the next 40 m beyond +-15 degrees is a turn",
        units="1",
        frame="-",
    ),
    "limits": dict(
        meaning="the speed limits along the route (from the map, as a car reads them from signs and maps): "
        "the limit where the ego is on its route now, the next different limit ahead (the same when none "
        f"is within {LIMIT_RANGE:g} m) and the distance along the route to where it changes ({LIMIT_RANGE:g} "
        "when none) (see 'features')",
        units="m/s, m/s, m",
        frame="along the route",
    ),
    "route": dict(
        meaning="privileged mode: points evenly spaced ahead along the centre lines of the route's lanes (from "
        "the map, not the expert's drive), from the ego's place on the route",
        units="m",
        frame="ego frame: x forward, y left",
    ),
    "agents": dict(
        meaning="nearest agents (other vehicles, and static obstacles as stopped agents), nearest first; "
        "padding rows are zero, see agents_mask",
        units="m, m, 1, 1, m, m, m/s, m/s (in the order of 'features')",
        frame="ego frame: x forward, y left; yaw and velocity turned into the ego frame",
    ),
    "agents_mask": dict(meaning="1 where the agents row is a real agent, 0 for padding", units="1", frame="-"),
    "map": dict(
        meaning="nearest lane-centre points, nearest first; padding rows are zero, see map_mask",
        units="m, m, 1, 1 (in the order of 'features')",
        frame="ego frame: x forward, y left; heading as (cos, sin) relative to the ego's",
    ),
    "map_mask": dict(meaning="1 where the map row is a real lane point, 0 for padding", units="1", frame="-"),
}


def _features(space: gym.spaces.Dict | None = None) -> dict[str, list[str]]:
    ego: tuple[str, ...] = EGO_FEATURES
    if space is not None and "ego" in space.spaces:  # by its size: camera, privileged, or from before 'elapsed' went
        by_size = {len(CAMERA_EGO_FEATURES): CAMERA_EGO_FEATURES, len(LEGACY_EGO_FEATURES): LEGACY_EGO_FEATURES}
        ego = by_size.get(int(np.prod(space["ego"].shape or ())), ego)
    return {
        "ego": list(ego),
        "navigation": ["x", "y"],
        "command": list(COMMANDS),
        "limits": list(LIMIT_FEATURES),
        "route": ["x", "y"],
        "agents": list(AGENT_FEATURES),
        "map": list(MAP_FEATURES),
    }


def _bound(a: np.ndarray) -> float | list | None:
    """A Box bound as JSON: one number when uniform, else a nested list; non-finite -> None."""
    a = np.asarray(a, dtype=np.float64)
    if a.size and np.all(a == a.flat[0]):
        v = float(a.flat[0])
        return v if np.isfinite(v) else None
    return [None if not np.isfinite(v) else float(v) for v in a.ravel()] if a.ndim == 1 else a.tolist()


def space_to_json(space: gym.spaces.Dict, describe: bool = False) -> list[dict]:
    """[{name, shape (no batch), dtype, low, high}] per part of a Dict of Boxes, in the space's key order.

    describe: add meaning, units, frame and features (the inputs of policy.json).
    """
    if not isinstance(space, gym.spaces.Dict):
        raise TypeError(f"space_to_json: expected gymnasium.spaces.Dict, got {type(space).__name__}")
    feats = _features(space) if describe else {}
    out = []
    for name, s in space.spaces.items():
        if not isinstance(s, gym.spaces.Box):
            raise TypeError(f"space_to_json: observation part {name!r} is {type(s).__name__}, expected Box")
        entry: dict[str, Any] = dict(
            name=name, shape=[int(d) for d in s.shape], dtype=np.dtype(s.dtype).name, low=_bound(s.low)
        )
        entry["high"] = _bound(s.high)
        if describe:
            base = name.removeprefix(CRITIC_PREFIX)  # an asymmetric critic's part: privileged mode's meaning
            entry.update(OBS_DOCS.get(base, {}))
            if base != name:
                what = entry.get("meaning", "")
                entry["meaning"] = f"the value function's alone (privileged, while training): {what}"
                entry["features"] = list(EGO_FEATURES) if base == "ego" else feats.get(base, [])
                if not entry["features"]:
                    del entry["features"]
            elif name in feats:
                entry["features"] = feats[name]
        out.append(entry)
    return out


def space_from_json(entries: Any, where: str) -> gym.spaces.Dict:
    """Inverse of :func:`space_to_json`; ``where`` names the file/field in errors."""
    if not isinstance(entries, list) or not entries:
        raise PolicySourceError(f"{where}: expected a non-empty list of observation inputs")
    parts: dict[str, gym.spaces.Space] = {}
    for i, e in enumerate(entries):
        w = f"{where}[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            raise PolicySourceError(f"{w}: expected an object with a 'name'")
        shape, dtype = e.get("shape"), e.get("dtype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise PolicySourceError(f"{w} ({e['name']}): 'shape' must be a list of ints >= 0, got {shape!r}")
        if dtype not in ("uint8", "float32"):
            raise PolicySourceError(f"{w} ({e['name']}): 'dtype' must be 'uint8' or 'float32', got {dtype!r}")

        def bound(v, inf, e=e, w=w, shape=shape):
            if v is None:
                return np.full(shape, inf)
            a = np.asarray([inf if x is None else x for x in v] if isinstance(v, list) and np.ndim(v) == 1 else v)
            try:
                return np.broadcast_to(a.astype(np.float64), shape)
            except ValueError:
                raise PolicySourceError(f"{w} ({e['name']}): bound of shape {a.shape} does not fit {shape}") from None

        low, high = bound(e.get("low"), -np.inf), bound(e.get("high"), np.inf)
        parts[e["name"]] = gym.spaces.Box(low.astype(dtype), high.astype(dtype), tuple(shape), np.dtype(dtype))
    return gym.spaces.Dict(parts)


def spaces_json(observation_space: gym.spaces.Dict, action_spec=None, rig=None, mode: str | None = None) -> dict:
    """The content of a checkpoint's ``obs_space.json``: observation parts, action bins, camera rig, and
    the observation mode (``EnvConfig.observation``; read from the parts when not given).

    rig: (name, width, height), or an object with ``name``, ``width``, ``height`` (``sim.CameraRig``).
    """
    out: dict[str, Any] = dict(format=SPACES_FORMAT, observation=space_to_json(observation_space))
    out["observation_mode"] = mode or observation_mode(observation_space)
    if action_spec is not None:
        out["action"] = {k: getattr(action_spec, k) for k in ACTION_KEYS}
    if rig is not None:
        name, w, h = (rig.name, rig.width, rig.height) if hasattr(rig, "name") else tuple(rig)
        out["rig"] = dict(name=str(name), width=int(w), height=int(h))
    return out


def action_spec_from_json(d: Any, where: str, default: ActionSpec) -> ActionSpec:
    """The ActionSpec of an ``action`` object (``spaces_json``), or ``default`` when it is None."""
    if d is None:
        return default
    if not isinstance(d, dict) or any(k not in d for k in ACTION_KEYS):
        raise PolicySourceError(f"{where}: expected an object with {', '.join(ACTION_KEYS)}")
    try:
        return ActionSpec(
            int(d["n_lat"]), float(d["lat_max"]), int(d["n_long"]), float(d["long_max"]), float(d["max_curvature"])
        )
    except (TypeError, ValueError) as e:
        raise PolicySourceError(f"{where}: {e}") from None
