"""``render_mode="rgb_array"``: a bird's-eye view beside the camera images, one uint8 frame.

The view is ego-centred with the ego's heading up, ``bev_range`` metres to each side (more ahead
than behind), drawn with PIL (lines and polygons; it runs every frame, so no matplotlib).
Colours: road edges white, lane centres grey, expert path green, route waypoints yellow, agents
blue, static obstacles orange, the ego red (outlined in white when it has collided).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

ROAD_EDGE = (220, 220, 220)
LANE = (90, 90, 90)
EXPERT = (60, 200, 80)
ROUTE = (240, 210, 40)
AGENT = (70, 130, 255)
OBSTACLE = (255, 150, 40)
EGO = (235, 50, 50)
BACKGROUND = (25, 28, 32)


def _to_px(xy_world: np.ndarray, ego_xy, ego_yaw: float, scale: float, half: float) -> np.ndarray:
    """World xy [N, 2] -> pixel (col, row) [N, 2]: the ego centred across, 70% of the way down (more
    road ahead than behind), its heading up, its left to the left."""
    c, s = math.cos(ego_yaw), math.sin(ego_yaw)
    d = np.asarray(xy_world, dtype=np.float64) - ego_xy
    fx = c * d[:, 0] + s * d[:, 1]  # forward
    ly = -s * d[:, 0] + c * d[:, 1]  # left
    return np.stack([half - ly * scale, 1.4 * half - fx * scale], axis=1)


def _box(draw, center, yaw, length, width, tf, fill, outline=None):
    from sim.geometry import box_corners

    px = tf(box_corners(np.asarray(center, dtype=np.float64), yaw, np.array([length, width])))
    draw.polygon([tuple(p) for p in px], fill=fill, outline=outline)


def bird_eye_view(env) -> np.ndarray:
    """[P, P, 3] uint8 top view of the env's current state (P = config bev_pixels)."""
    d, cfg = env._data, env.config
    P = cfg.bev_pixels
    scale = P / (2.0 * cfg.bev_range)
    half = P / 2.0
    ego_xy = env._state[:2].copy()
    yaw = float(env._state[2])

    def tf(xy):
        return _to_px(np.asarray(xy).reshape(-1, 2), ego_xy, yaw, scale, half)

    img = Image.new("RGB", (P, P), BACKGROUND)
    draw = ImageDraw.Draw(img)
    for edge in d.road_edges:
        if len(edge) >= 2:
            draw.line([tuple(p) for p in tf(edge)], fill=ROAD_EDGE, width=1)
    for lane in d.lane_polylines:
        if len(lane) >= 2:
            draw.line([tuple(p) for p in tf(lane)], fill=LANE, width=1)
    draw.line([tuple(p) for p in tf(d.path_xy)], fill=EXPERT, width=2)
    s = env._s + cfg.route_spacing * np.arange(1, cfg.route_points + 1)
    for p in tf(d.path_points(s)):
        draw.ellipse([p[0] - 1.5, p[1] - 1.5, p[0] + 1.5, p[1] + 1.5], fill=ROUTE)
    for j in range(len(d.obstacle_pose)):
        o, sz = d.obstacle_pose[j], d.obstacle_size[j]
        _box(draw, o[:2], o[3], sz[0], sz[1], tf, OBSTACLE)
    t = min(env._t, d.horizon)
    for j in np.flatnonzero(d.agent_present[t]):
        sz = d.agent_size[j]
        _box(draw, d.agent_xy[t, j], d.agent_yaw[t, j], sz[0], sz[1], tf, AGENT)
    c, eyaw, esz = env.ego_box()
    hit = bool(getattr(env, "_last_event", ""))
    _box(draw, c, eyaw, esz[0], esz[1], tf, EGO, outline=(255, 255, 255) if hit else None)
    return np.asarray(img, dtype=np.uint8)


def compose_frame(env, cameras: np.ndarray) -> np.ndarray:
    """The bird's-eye view on the left, the camera images (left to right as a driver sees them,
    enlarged by a whole factor to fit the view's height) on the right: one [H, W, 3] uint8."""
    from sim.viz import tile_cameras, upscale

    bev = bird_eye_view(env)
    strip = tile_cameras(np.asarray(cameras), env.rig)
    P = bev.shape[0]
    factor = max(1, P // strip.shape[0])
    factor = min(factor, max(1, (4 * P) // strip.shape[1]))  # keep the strip at most 4 views wide
    strip = upscale(strip, factor)
    H = max(P, strip.shape[0])
    out = np.zeros((H, P + 4 + strip.shape[1], 3), np.uint8)
    out[:P, :P] = bev
    out[: strip.shape[0], P + 4 :] = strip
    return out
