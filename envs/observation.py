"""The observation: a gymnasium ``Dict`` in one of two modes (``EnvConfig.observation``).

**camera** (the default: training, evaluation, export) -- what a car has: its cameras, its own
motion, and navigation from the map along its planned route, with the speed limits a car reads from
signs and maps. No agent, obstacle, lane map, elapsed time or anything derived from the expert's
logged drive.

| key           | dtype   | shape        | content (ego frame: x forward, y left, metres; see ``sim.frames``)     |
|---------------|---------|--------------|------------------------------------------------------------------------|
| cameras       | uint8   | [C, H, W, 3] | the rig's images of the digital twin at the ego's pose; [2C, ...] with |
|               |         |              | ``camera_history`` k > 0: now, then the images of k steps ago          |
| ego           | float32 | [4]          | speed m/s, yaw rate rad/s, accel m/s^2, steering rad                   |
| navigation    | float32 | [N, 2]       | points every ``navigation_spacing`` m ahead along the centre lines of  |
|               |         |              | the scenario's route lanes (``MapData.route_polyline(scenario.route)``)|
| command       | float32 | [3]          | one-hot route command: straight, left, right (:func:`route_command`)   |
| limits        | float32 | [3]          | speed limit m/s where the ego is on its route now, the next different  |
|               |         |              | limit ahead m/s (the same when none within ``LIMIT_RANGE``), metres    |
|               |         |              | along the route to where it changes (``LIMIT_RANGE`` when none)        |

**privileged** (the teacher, an upper bound: ground truth no car has, but no shortcut either -- no
elapsed time, nothing of the logged expert's timing, speeds or path) -- the images and:

| key           | dtype   | shape        | content                                                                |
|---------------|---------|--------------|------------------------------------------------------------------------|
| ego           | float32 | [6]          | speed m/s, yaw rate rad/s, accel m/s^2, steering rad, last lateral m,  |
|               |         |              | last longitudinal m (the anchor applied last step)                     |
| route         | float32 | [P, 2]       | points every ``route_spacing`` m ahead along the centre lines of the   |
|               |         |              | route lanes (the line navigation follows, the reactive expert's route) |
| limits        | float32 | [3]          | as in camera mode                                                      |
| agents        | float32 | [K, 8]       | nearest agents: x, y, cos yaw, sin yaw, length, width, vx, vy          |
| agents_mask   | float32 | [K]          | 1 where the agents row is a real agent                                 |
| map           | float32 | [M, 4]       | nearest lane-centre points: x, y, cos heading, sin heading             |
| map_mask      | float32 | [M]          | 1 where the map row is a real point                                    |

Rows are nearest first; padding rows are zero. Velocities and headings are turned into the ego frame.
The route points and the limits start from the ego's place on the route: its nearest point on the
route lanes' centre line (:class:`RoutePath`); a lane's limit holds from its first vertex on. Two
states with the same ego kinematics and surroundings observe the same, whatever the step.
The mode picks the part set; the config's part switches only switch parts of it off (``route``
switches camera mode's navigation and command off; ``agents`` and ``map`` are not in camera mode).
Camera mode's ego features are privileged's first four, in the same order.

**critic parts** (``EnvConfig.critic``, an asymmetric critic): privileged parts of the same state, in
privileged mode's shapes, beside the observation under ``critic_<key>`` (critic_agents, critic_agents_mask,
...). Only the value function reads them while training; the policy's space is the rest
(:func:`policy_space`), what exports and evaluation give a policy; the critic's, :func:`critic_space`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from gymnasium import spaces

from envs.config import CRITIC_PREFIX, MODE_PARTS, EnvConfig
from sim.geometry import clean_polyline, polyline_arclength, polyline_heading

EGO_FEATURES = ("speed", "yaw_rate", "accel", "steer", "last_lateral", "last_longitudinal")
CAMERA_EGO_FEATURES = EGO_FEATURES[:4]  # what the car measures of itself
LEGACY_EGO_FEATURES = (*EGO_FEATURES, "elapsed")  # privileged ego of spaces before the elapsed fraction was dropped
LIMIT_FEATURES = ("limit", "next_limit", "distance")
LIMIT_RANGE = 100.0  # m along the route ahead within which the limits part reports the next change
AGENT_FEATURES = ("x", "y", "cos_yaw", "sin_yaw", "length", "width", "vx", "vy")
MAP_FEATURES = ("x", "y", "cos", "sin")
COMMANDS = ("straight", "left", "right")
PRIVILEGED_KEYS = ("route", "agents", "agents_mask", "map", "map_mask")  # never in a camera observation
COMMAND_LOOKAHEAD = 40.0  # m along the route ahead over which the command looks at the heading change
COMMAND_ANGLE = math.radians(15.0)  # a heading change beyond this ahead is a turn (left > 0, right < 0)


BOUND = 1e3  # |value| bound of the float parts (metres, m/s, rad/s, m/s^2): far beyond what they reach


def observation_space(cfg: EnvConfig, num_cameras: int, width: int, height: int) -> spaces.Dict:
    f32 = np.float32
    on = set(cfg.parts)
    parts: dict[str, spaces.Space] = {}
    if "cameras" in on:
        frames = 2 if cfg.camera_history else 1  # now (and k steps ago): EnvConfig.camera_history
        parts["cameras"] = spaces.Box(0, 255, (frames * num_cameras, height, width, 3), np.uint8)
    if "ego" in on:
        n = len(CAMERA_EGO_FEATURES if cfg.observation == "camera" else EGO_FEATURES)
        parts["ego"] = spaces.Box(-BOUND, BOUND, (n,), f32)
    if "navigation" in on:
        parts["navigation"] = spaces.Box(-BOUND, BOUND, (cfg.navigation_points, 2), f32)
    if "command" in on:
        parts["command"] = spaces.Box(0.0, 1.0, (len(COMMANDS),), f32)
    if "route" in on:
        parts["route"] = spaces.Box(-BOUND, BOUND, (cfg.route_points, 2), f32)
    if "limits" in on:
        parts["limits"] = spaces.Box(0.0, BOUND, (len(LIMIT_FEATURES),), f32)
    if "agents" in on:
        parts["agents"] = spaces.Box(-BOUND, BOUND, (cfg.max_agents, len(AGENT_FEATURES)), f32)
        parts["agents_mask"] = spaces.Box(0.0, 1.0, (cfg.max_agents,), f32)
    if "map" in on:
        parts["map"] = spaces.Box(-BOUND, BOUND, (cfg.map_points, len(MAP_FEATURES)), f32)
        parts["map_mask"] = spaces.Box(0.0, 1.0, (cfg.map_points,), f32)
    if cfg.critic:  # the asymmetric critic's privileged parts, in privileged mode's shapes, prefixed
        priv = observation_space(EnvConfig.from_dict(cfg, observation="privileged", critic=()), 0, 1, 1)
        want = set(cfg.critic)
        for key, space in priv.spaces.items():
            if key in want or key.removesuffix("_mask") in want:
                parts[CRITIC_PREFIX + key] = space
    return spaces.Dict(parts)


def is_critic_key(key: str) -> bool:
    """A key of the asymmetric critic's privileged parts (``EnvConfig.critic``), not the policy's."""
    return key.startswith(CRITIC_PREFIX)


def policy_space(space: spaces.Dict) -> spaces.Dict:
    """The observation space less the critic's parts: what the policy reads (exports, evaluation)."""
    return spaces.Dict({k: v for k, v in space.spaces.items() if not is_critic_key(k)})


def critic_space(space: spaces.Dict) -> spaces.Dict:
    """The critic's parts of the observation space (``critic_<key>``, ``EnvConfig.critic``; empty without)."""
    return spaces.Dict({k: v for k, v in space.spaces.items() if is_critic_key(k)})


def observation_mode(space: spaces.Dict) -> str:
    """The mode an observation space belongs to: "privileged" when it holds a privileged part or an ego
    of more than the camera's 4 features (6, or 7 in spaces from before the elapsed fraction was dropped),
    "camera" otherwise (how spaces recorded before the modes existed are read). The critic's parts
    (``EnvConfig.critic``) are not the policy's and do not count."""
    keys = {k for k in space.spaces if not is_critic_key(k)}
    if keys & set(PRIVILEGED_KEYS):
        return "privileged"
    ego = space.spaces.get("ego")
    if ego is not None and tuple(ego.shape or ()) in ((len(EGO_FEATURES),), (len(LEGACY_EGO_FEATURES),)):
        return "privileged"
    return "camera" if keys <= set(MODE_PARTS["camera"]) else "privileged"


# -- the route from the map: navigation, command, route points, limits -------------------------------


class RoutePath(NamedTuple):
    """The route as the map gives it: the centre lines of the scenario's route lanes joined, repeated
    vertices removed. xy [M, 2] world m, s [M] arclength, yaw [M] heading (unwrapped, rad), dyaw [M-1]
    the heading change along each segment, z [M] zeros (``envs.kernels.project_path``'s arguments),
    limit [M] m/s: the speed limit from vertex i on (its lane's; ``MapData.route_speed_limits``)."""

    xy: np.ndarray
    s: np.ndarray
    yaw: np.ndarray
    dyaw: np.ndarray
    z: np.ndarray
    limit: np.ndarray


def route_path(scenario) -> RoutePath:
    """The scenario's route (lane ids in order, ``scenario.route``) from its map's lanes."""
    poly = np.asarray(scenario.map.route_polyline(scenario.route), dtype=np.float64)
    limit = np.asarray(scenario.map.route_speed_limits(scenario.route), dtype=np.float64)
    xy = np.ascontiguousarray(clean_polyline(poly), dtype=np.float64)
    # clean_polyline's repeats dropped: a kept vertex takes the limit of the last vertex of its run (the
    # limit that holds from there on)
    kept = np.flatnonzero(np.concatenate([[True], np.hypot(*np.diff(poly, axis=0).T) > 1e-9]))
    assert len(kept) == len(xy) and len(limit) == len(poly), "route_path: route_polyline and its limits differ"
    limit = np.ascontiguousarray(limit[np.append(kept[1:], len(poly)) - 1])
    yaw = np.unwrap(polyline_heading(xy))
    s = polyline_arclength(xy)
    return RoutePath(xy, s, yaw, np.ascontiguousarray(np.diff(yaw)), np.zeros(len(xy)), limit)


def speed_limits(s: np.ndarray, limit: np.ndarray, s0: float, horizon: float = LIMIT_RANGE) -> np.ndarray:
    """The limits part at arclength s0 along a route: float32 [3] (limit now m/s, next different limit m/s,
    metres to it); with no change within ``horizon`` m: (now, now, horizon).

    s [M] increasing arclength m, limit [M] m/s from vertex i on (before s[0]: limit[0]). The plain numpy
    reference of ``envs.kernels.route_limits``, which the env runs.
    """
    j = int(np.clip(np.searchsorted(s, s0, side="right") - 1, 0, len(s) - 1))
    now = float(limit[j])
    out = np.array([now, now, horizon], np.float32)
    change = np.flatnonzero(limit[j + 1 :] != now)
    if change.size:
        k = j + 1 + int(change[0])
        if s[k] - s0 <= horizon:
            out[1:] = (limit[k], s[k] - s0)
    return out


def route_command(path: RoutePath, s0: float, lookahead: float = COMMAND_LOOKAHEAD, angle: float = COMMAND_ANGLE):
    """One-hot float32 [3] (straight, left, right): how much the route turns between arclength s0 and
    s0 + lookahead (the heading change; left when > angle, right when < -angle, else straight)."""
    h0, h1 = np.interp([s0, s0 + lookahead], path.s, path.yaw)
    turn = float(h1 - h0)
    out = np.zeros(len(COMMANDS), np.float32)
    out[1 if turn > angle else 2 if turn < -angle else 0] = 1.0
    return out


def to_ego(xy: np.ndarray, ego_xy: np.ndarray, c: float, s: float) -> np.ndarray:
    """World points [N, 2] -> ego frame [N, 2], the ego at ego_xy [2] with heading (cos c, sin s)."""
    dx = xy[:, 0] - ego_xy[0]
    dy = xy[:, 1] - ego_xy[1]
    return np.stack([c * dx + s * dy, -s * dx + c * dy], axis=1)


def agent_features(
    xy: np.ndarray,
    yaw: np.ndarray,
    size: np.ndarray,
    vel: np.ndarray,
    ego_xy: np.ndarray,
    ego_yaw: float,
    k: int,
    radius: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest boxes within ``radius`` m: (features [k, 8] float32, mask [k] float32).

    xy: [N, 2] box centres, yaw: [N], size: [N, >=2] (length, width), vel: [N, 2] world m/s.
    """
    feats = np.zeros((k, 8), np.float32)
    mask = np.zeros(k, np.float32)
    if len(xy) == 0:
        return feats, mask
    c, s = np.cos(ego_yaw), np.sin(ego_yaw)
    local = to_ego(xy, ego_xy, c, s)
    d2 = np.einsum("ij,ij->i", local, local)
    idx = np.flatnonzero(d2 <= radius * radius)
    if len(idx) > k:
        idx = idx[np.argpartition(d2[idx], k - 1)[:k]]
    idx = idx[np.argsort(d2[idx], kind="stable")]
    n = len(idx)
    rel = yaw[idx] - ego_yaw
    v = vel[idx]
    feats[:n, 0:2] = local[idx]
    feats[:n, 2] = np.cos(rel)
    feats[:n, 3] = np.sin(rel)
    feats[:n, 4:6] = size[idx, :2]
    feats[:n, 6] = c * v[:, 0] + s * v[:, 1]
    feats[:n, 7] = -s * v[:, 0] + c * v[:, 1]
    mask[:n] = 1.0
    return feats, mask


def map_features(
    points: np.ndarray, ego_xy: np.ndarray, ego_yaw: float, m: int, radius: float
) -> tuple[np.ndarray, np.ndarray]:
    """The m nearest lane points [L, 3] (x, y, heading) within ``radius``: ([m, 4], [m]) float32."""
    feats = np.zeros((m, 4), np.float32)
    mask = np.zeros(m, np.float32)
    if len(points) == 0:
        return feats, mask
    c, s = np.cos(ego_yaw), np.sin(ego_yaw)
    dx = points[:, 0] - ego_xy[0]
    dy = points[:, 1] - ego_xy[1]
    d2 = dx * dx + dy * dy
    idx = np.flatnonzero(d2 <= radius * radius)
    if len(idx) > m:
        idx = idx[np.argpartition(d2[idx], m - 1)[:m]]
    idx = idx[np.argsort(d2[idx], kind="stable")]
    n = len(idx)
    rel = points[idx, 2] - ego_yaw
    feats[:n, 0] = c * dx[idx] + s * dy[idx]
    feats[:n, 1] = -s * dx[idx] + c * dy[idx]
    feats[:n, 2] = np.cos(rel)
    feats[:n, 3] = np.sin(rel)
    mask[:n] = 1.0
    return feats, mask
