"""envs.bev: the bird's-eye view puts boxes where the ego-centred, heading-up mapping says (by hand)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from envs.bev import BACKGROUND, EGO, OBSTACLE, ROAD_EDGE, bird_eye_view
from envs.observation import RoutePath


def far_route() -> RoutePath:
    """A route 100 m to the ego's left (off the picture): the view draws no route point on it."""
    xy = np.array([[-100.0, -2.0], [-100.0, 50.0]])
    return RoutePath(xy, np.array([0.0, 52.0]), np.full(2, math.pi / 2), np.zeros(1), np.zeros(2), np.full(2, 10.0))


def stub_env(obstacle_xy, obstacle_yaw, road_edges=(), hit=""):
    """The parts of a DrivingEnv the view reads: 100 px over 50 m (2 px/m, the ego at column 50,
    row 70), the ego at world (3, -2) heading +y (yaw pi/2), its 4 x 2 m box centred there."""
    n = np.zeros((1, 0))
    data = SimpleNamespace(
        road_edges=tuple(np.asarray(e, dtype=np.float64) for e in road_edges),
        lane_polylines=(),
        path_xy=np.array([[-100.0, -2.0], [-100.0, 50.0]]),  # 100 m to the ego's left: off the picture
        path_points=lambda s: np.zeros((len(s), 2)),
        obstacle_pose=np.array([[obstacle_xy[0], obstacle_xy[1], 0.0, obstacle_yaw]]),
        obstacle_size=np.array([[4.0, 2.0, 1.0]]),
        horizon=0,
        agent_present=np.zeros((1, 0), dtype=bool),
        agent_size=np.zeros((0, 3)),
        agent_xy=n.reshape(1, 0, 2),
        agent_yaw=n,
    )
    config = SimpleNamespace(bev_pixels=100, bev_range=25.0, route_spacing=5.0, route_points=0)
    state = np.array([3.0, -2.0, math.pi / 2, 0.0])
    return SimpleNamespace(
        _data=data,
        config=config,
        _state=state,
        _s=0.0,
        _t=0,
        _last_event=hit,
        episode_route=far_route,
        ego_box=lambda: (state[:2].copy(), math.pi / 2, np.array([4.0, 2.0, 1.5])),
    )


def coverage(img, color) -> np.ndarray:
    """[H, W] how far each pixel went from the background to ``color`` (0: untouched, 1: all colour);
    anti-aliased edges land in between."""
    bg, c = np.asarray(BACKGROUND, float), np.asarray(color, float)
    t = ((img.astype(float) - bg) @ (c - bg)) / ((c - bg) @ (c - bg))
    off_line = np.linalg.norm(img - (bg + t[..., None] * (c - bg)), axis=-1) > 8.0  # another colour
    return np.where(off_line, 0.0, t)


def extent(mask) -> tuple[int, int, int, int]:
    rows, cols = np.nonzero(mask)
    return int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())


def test_an_obstacle_box_lands_where_computed_by_hand():
    # the obstacle 10 m ahead of the ego and 5 m to its left, turned with it: world (3 - 5, -2 + 10).
    # Ahead x in [8, 12] m -> rows 70 - 2x in [46, 54]; left y in [4, 6] m -> columns 50 - 2y in [38, 42]
    img = bird_eye_view(stub_env((-2.0, 8.0), math.pi / 2))
    assert img.shape == (100, 100, 3) and img.dtype == np.uint8
    cov = coverage(img, OBSTACLE)
    assert extent(cov > 0.5) == (46, 54, 38, 42)
    assert (img[47:54, 39:42] == OBSTACLE).all()  # the inside is filled, not only outlined
    assert (img[:44] == BACKGROUND).all() and (img[57:64] == BACKGROUND).all()  # 2 px off the box: untouched
    assert (img[40:60, :36] == BACKGROUND).all() and (img[40:60, 45:] == BACKGROUND).all()
    rows, cols = np.nonzero(cov > 0.01)
    w = cov[rows, cols]
    assert abs(np.average(rows, weights=w) - 50.0) < 0.3 and abs(np.average(cols, weights=w) - 40.0) < 0.3
    # the ego box: 4 m along its heading (up), 2 m across, centred at column 50, row 70; no outline
    assert extent(coverage(img, EGO) > 0.5) == (66, 74, 48, 52)
    assert img[60:80, 40:60, 1].max() <= EGO[1]  # nothing brighter than the fill: not outlined


def test_a_box_turned_against_the_ego_a_road_edge_and_the_collision_outline():
    # turned 90 degrees from the ego: its 4 m run across (columns 36..44), its 2 m along (rows 48..52)
    edge = [[3.0 + 10.0, -2.0], [3.0 + 10.0, 20.0]]  # 10 m to the ego's right, 0 to 22 m ahead
    img = bird_eye_view(stub_env((-2.0, 8.0), 0.0, road_edges=[edge], hit="dynamic_collision"))
    assert extent(coverage(img, OBSTACLE) > 0.5) == (48, 52, 36, 44)
    # the edge: column 50 + 2 * 10 = 70, from row 70 up to row 70 - 2 * 22 = 26, one pixel wide
    cov = coverage(img, ROAD_EDGE)
    assert (cov[27:70, 70] > 0.8).all() and (cov[27:70, [69, 71]] < 0.3).all()
    assert (img[20:80, 60:68] == BACKGROUND).all() and (img[20:80, 73:80] == BACKGROUND).all()
    # a collision outlines the ego box in white: its rim is bright, its inside still the ego's red
    rim = img[[66, 74], 49:52, 1]
    assert (rim > 200).all() and (img[68:73, 50] == EGO).all()
