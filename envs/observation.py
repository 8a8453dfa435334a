"""The observation: a gymnasium ``Dict`` whose parts can each be switched off in the config.

| key           | dtype   | shape        | content (ego frame: x forward, y left, metres; see ``sim.frames``)     |
|---------------|---------|--------------|------------------------------------------------------------------------|
| cameras       | uint8   | [C, H, W, 3] | the rig's images of the digital twin at the ego's pose                 |
| ego           | float32 | [7]          | speed m/s, yaw rate rad/s, accel m/s^2, steering rad, last lateral m,  |
|               |         |              | last longitudinal m (the anchor applied last step), elapsed fraction   |
| route         | float32 | [P, 2]       | waypoints every ``route_spacing`` m ahead along the expert path        |
| agents        | float32 | [K, 8]       | nearest agents: x, y, cos yaw, sin yaw, length, width, vx, vy          |
| agents_mask   | float32 | [K]          | 1 where the agents row is a real agent                                 |
| map           | float32 | [M, 4]       | nearest lane-centre points: x, y, cos heading, sin heading             |
| map_mask      | float32 | [M]          | 1 where the map row is a real point                                    |

Rows are nearest first; padding rows are zero. Velocities and headings are turned into the ego frame.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.config import EnvConfig

EGO_FEATURES = ("speed", "yaw_rate", "accel", "steer", "last_lateral", "last_longitudinal", "elapsed")
AGENT_FEATURES = ("x", "y", "cos_yaw", "sin_yaw", "length", "width", "vx", "vy")
MAP_FEATURES = ("x", "y", "cos", "sin")


BOUND = 1e3  # |value| bound of the float parts (metres, m/s, rad/s, m/s^2): far beyond what they reach


def observation_space(cfg: EnvConfig, num_cameras: int, width: int, height: int) -> spaces.Dict:
    f32 = np.float32
    parts: dict[str, spaces.Space] = {}
    if cfg.cameras:
        parts["cameras"] = spaces.Box(0, 255, (num_cameras, height, width, 3), np.uint8)
    if cfg.ego:
        parts["ego"] = spaces.Box(-BOUND, BOUND, (len(EGO_FEATURES),), f32)
    if cfg.route:
        parts["route"] = spaces.Box(-BOUND, BOUND, (cfg.route_points, 2), f32)
    if cfg.agents:
        parts["agents"] = spaces.Box(-BOUND, BOUND, (cfg.max_agents, len(AGENT_FEATURES)), f32)
        parts["agents_mask"] = spaces.Box(0.0, 1.0, (cfg.max_agents,), f32)
    if cfg.map:
        parts["map"] = spaces.Box(-BOUND, BOUND, (cfg.map_points, len(MAP_FEATURES)), f32)
        parts["map_mask"] = spaces.Box(0.0, 1.0, (cfg.map_points,), f32)
    return spaces.Dict(parts)


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
