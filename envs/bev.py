"""``render_mode="rgb_array"``: a bird's-eye view beside the camera images, one uint8 frame.

The view is ego-centred with the ego's heading up, ``bev_range`` metres to each side (more ahead
than behind), drawn with OpenCV every frame: filled polygons and anti-aliased lines at sub-pixel
precision (coordinates in 1/16 px). Colours: road edges white, lane centres grey, expert path green,
route waypoints yellow (points along the route lanes ahead of the ego, as the ``route`` part has them),
agents blue, static obstacles orange, the ego red (outlined in white when it has collided).
"""

from __future__ import annotations

import math

import numpy as np

from envs.kernels import path_points, project_path
from sim.geometry import box_corners
from sim.viz import tile_cameras, upscale

ROAD_EDGE = (220, 220, 220)
LANE = (90, 90, 90)
EXPERT = (60, 200, 80)
ROUTE = (240, 210, 40)
AGENT = (70, 130, 255)
OBSTACLE = (255, 150, 40)
EGO = (235, 50, 50)
BACKGROUND = (25, 28, 32)

SHIFT = 4  # fractional bits of the pixel coordinates handed to OpenCV
_FAR = 1e7  # px: farther coordinates are clipped (far off the picture), so they fit OpenCV's int32


def _to_px(xy_world: np.ndarray, ego_xy, ego_yaw: float, scale: float, half: float) -> np.ndarray:
    """World xy [N, 2] -> pixel (col, row) [N, 2] (pixel centres at whole numbers): the ego centred
    across, 70% of the way down (more road ahead than behind), its heading up, its left to the left."""
    c, s = math.cos(ego_yaw), math.sin(ego_yaw)
    d = np.asarray(xy_world, dtype=np.float64) - ego_xy
    fx = c * d[:, 0] + s * d[:, 1]  # forward
    ly = -s * d[:, 0] + c * d[:, 1]  # left
    return np.stack([half - ly * scale, 1.4 * half - fx * scale], axis=1)


def _fixed(px: np.ndarray) -> np.ndarray:
    """Pixel coordinates [N, 2] as OpenCV's fixed-point int32 [N, 2] (``SHIFT`` fractional bits)."""
    return np.round(np.clip(px, -_FAR, _FAR) * (1 << SHIFT)).astype(np.int32)


def bird_eye_view(env) -> np.ndarray:
    """[P, P, 3] uint8 top view of the env's current state (P = config bev_pixels)."""
    import cv2  # optional (the viz extra): only rgb_array rendering draws

    d, cfg = env._data, env.config
    P = cfg.bev_pixels
    scale = P / (2.0 * cfg.bev_range)
    half = P / 2.0
    ego_xy = env._state[:2].copy()
    yaw = float(env._state[2])

    def px(xy):
        return _fixed(_to_px(np.asarray(xy).reshape(-1, 2), ego_xy, yaw, scale, half))

    def line(pts, color, width=1):
        if len(pts) >= 2:
            cv2.polylines(img, [px(pts)], False, color, width, cv2.LINE_AA, SHIFT)

    def box(center, box_yaw, length, width, fill, outline=None):
        corners = px(box_corners(np.asarray(center, dtype=np.float64), box_yaw, np.array([length, width])))
        cv2.fillPoly(img, [corners], fill, cv2.LINE_AA, SHIFT)
        if outline is not None:
            cv2.polylines(img, [corners], True, outline, 1, cv2.LINE_AA, SHIFT)

    img = np.empty((P, P, 3), np.uint8)
    img[:] = BACKGROUND
    for edge in d.road_edges:
        line(edge, ROAD_EDGE)
    for lane in d.lane_polylines:
        line(lane, LANE)
    line(d.path_xy, EXPERT, 2)
    nav = env.episode_route()  # the route lanes, as the observation
    x, y = float(env._state[0]), float(env._state[1])
    s0 = project_path(x, y, nav.xy, nav.s, nav.yaw, nav.dyaw, nav.z)[1]
    s = s0 + cfg.route_spacing * np.arange(1, cfg.route_points + 1)
    pts = np.empty((len(s), 2))
    path_points(nav.xy, nav.s, s, pts)
    for p in px(pts):
        cv2.circle(img, tuple(int(v) for v in p), round(1.5 * (1 << SHIFT)), ROUTE, -1, cv2.LINE_AA, SHIFT)
    for j in range(len(d.obstacle_pose)):
        o, sz = d.obstacle_pose[j], d.obstacle_size[j]
        box(o[:2], o[3], sz[0], sz[1], OBSTACLE)
    t = min(env._t, d.horizon)
    for a in np.flatnonzero(d.agent_present[t]):
        sz = d.agent_size[a]
        box(d.agent_xy[t, a], d.agent_yaw[t, a], sz[0], sz[1], AGENT)
    c, eyaw, esz = env.ego_box()
    hit = bool(getattr(env, "_last_event", ""))
    box(c, eyaw, esz[0], esz[1], EGO, outline=(255, 255, 255) if hit else None)
    return img


def compose_frame(env, cameras: np.ndarray) -> np.ndarray:
    """The bird's-eye view on the left, the camera images (left to right as a driver sees them,
    enlarged by a whole factor to fit the view's height) on the right: one [H, W, 3] uint8."""
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
