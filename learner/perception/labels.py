"""The bird's-eye grid around the ego and its labels from the digital twin's ground truth.

A cell is occupied when it overlaps an agent's or a static obstacle's box (its centre within half a cell
of the box along the box's axes); its velocity is that agent's; drivable when its centre lies within half
a lane width of a lane centre line; lane centre within ``LANE_CENTRE_M`` of one. Cells no camera sees
(:func:`visible_cells`) are left out of losses and metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from learner.config import PerceptionConfig
from sim.camera import CameraRig

LANE_CENTRE_M = 0.75  # a cell is on a lane centre when its centre is this close to a centre line
LABEL_KEYS = ("occupancy", "velocity", "drivable", "lane")


@dataclass(frozen=True)
class BEVGrid:
    """cells x cells square cells over ``range_m`` m, from ``behind_m`` behind the rear axle forward,
    centred laterally (ego frame). Row i is along x (forward), column j along y (left)."""

    cells: int = 32
    range_m: float = 40.0
    behind_m: float = 4.0

    @property
    def cell_m(self) -> float:
        return self.range_m / self.cells

    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        """(x [G], y [G]) of the cell centres, metres, ego frame."""
        c = (np.arange(self.cells) + 0.5) * self.cell_m
        return c - self.behind_m, c - 0.5 * self.range_m

    def points(self) -> np.ndarray:
        """[G, G, 2] cell centres (x, y), ego frame: points[i, j] = (x[i], y[j])."""
        x, y = self.centres()
        return np.stack(np.meshgrid(x, y, indexing="ij"), axis=-1)


def grid_of(cfg: PerceptionConfig) -> BEVGrid:
    return BEVGrid(cfg.cells, cfg.range_m, cfg.behind_m)


def visible_cells(grid: BEVGrid, rig: CameraRig, min_depth: float = 0.5) -> np.ndarray:
    """bool [G, G]: cells whose centre on the ground (z = 0 in the ego frame) projects into some camera
    of the rig (at least ``min_depth`` m in front of it, inside its image columns)."""
    pts = grid.points().reshape(-1, 2)
    ground = np.concatenate([pts, np.zeros((len(pts), 1)), np.ones((len(pts), 1))], axis=1)  # [N, 4]
    seen = np.zeros(len(pts), dtype=bool)
    for cam in rig.cameras:
        p = (np.linalg.inv(cam.ego_T_cam) @ ground.T).T  # camera frame (OpenCV: z forward)
        z = p[:, 2]
        u = cam.fx * p[:, 0] / np.where(z > 0, z, 1.0) + cam.cx
        seen |= (z > min_depth) & (u >= 0) & (u < cam.width)
    return seen.reshape(grid.cells, grid.cells)


def _segment_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance [N] from points [N, 2] to the nearest of the segments a[s] -> b[s] (a, b: [S, 2], S >= 1).
    (The numpy reference of :func:`_segment_distance_fast`, which the labels use.)"""
    ab = b - a
    L2 = np.einsum("sk,sk->s", ab, ab)
    t = np.einsum("nsk,sk->ns", points[:, None, :] - a[None], ab) / np.where(L2 > 0, L2, 1.0)
    t = np.clip(t, 0.0, 1.0)
    d = points[:, None, :] - (a[None] + t[..., None] * ab[None])
    return np.sqrt(np.einsum("nsk,nsk->ns", d, d).min(axis=1))


@njit(cache=True, nogil=True)
def _segment_distance_fast(points, a, b):
    """:func:`_segment_distance` in numba: no [N, S, 2] temporaries (a frame's lanes: ~1 ms, not ~50)."""
    out = np.empty(points.shape[0])
    for n in range(points.shape[0]):
        px, py = points[n, 0], points[n, 1]
        best = np.inf
        for s in range(a.shape[0]):
            ex, ey = b[s, 0] - a[s, 0], b[s, 1] - a[s, 1]
            L2 = ex * ex + ey * ey
            qx, qy = px - a[s, 0], py - a[s, 1]
            u = (qx * ex + qy * ey) / L2 if L2 > 0 else 0.0
            u = min(max(u, 0.0), 1.0)
            dx, dy = qx - u * ex, qy - u * ey
            d2 = dx * dx + dy * dy
            if d2 < best:
                best = d2
        out[n] = math.sqrt(best)
    return out


def bev_labels(data, t: int, pose: Sequence[float] | np.ndarray, grid: BEVGrid) -> dict[str, np.ndarray]:
    """The ground truth around an ego at ``pose`` = (x, y, yaw) (world) at step t of a scenario.

    data: an ``envs.scenario_data.ScenarioData``. Returns occupancy uint8 [G, G], velocity float32
    [2, G, G] (vx, vy in the ego frame, m/s, zero where not occupied), drivable uint8 [G, G] and lane
    uint8 [G, G] (module docstring for the rules).
    """
    x, y, yaw = (float(v) for v in pose)
    c, s = math.cos(yaw), math.sin(yaw)
    local = grid.points().reshape(-1, 2)  # [N, 2] ego frame
    world = np.stack([x + c * local[:, 0] - s * local[:, 1], y + s * local[:, 0] + c * local[:, 1]], axis=1)
    G, half = grid.cells, 0.5 * grid.cell_m
    occ = np.zeros(len(local), dtype=np.uint8)
    vel = np.zeros((len(local), 2), dtype=np.float32)
    t = min(int(t), data.box_xy.shape[0] - 1)
    present = np.flatnonzero(data.box_present[t])
    reach = 0.5 * math.hypot(grid.range_m, grid.range_m) + grid.range_m  # far beyond any cell
    corner = float(np.hypot(local[:, 0], local[:, 1]).max()) + grid.cell_m  # the grid's farthest cell, and more
    for k in present:
        bx, by = data.box_xy[t, k]
        if math.hypot(bx - x, by - y) > reach:
            continue
        byaw = float(data.box_yaw[t, k])
        bc, bs = math.cos(byaw), math.sin(byaw)
        dx, dy = world[:, 0] - bx, world[:, 1] - by
        along, across = bc * dx + bs * dy, -bs * dx + bc * dy
        L, W = float(data.box_size[k, 0]), float(data.box_size[k, 1])
        inside = (np.abs(along) <= 0.5 * L + half) & (np.abs(across) <= 0.5 * W + half)
        if inside.any():
            occ[inside] = 1
            vx, vy = data.box_vel[t, k]
            vel[inside] = (c * vx + s * vy, -s * vx + c * vy)  # world -> ego frame
    drivable = np.zeros(len(local), dtype=bool)
    lane = np.zeros(len(local), dtype=bool)
    ego = np.array([[x, y]])
    for ln in data.scenario.map.lanes:
        line = np.asarray(ln.centerline, dtype=np.float64)
        if len(line) < 2:
            continue
        a, b = line[:-1], line[1:]
        # the segments that come near the grid (however long: a straight lane may be one segment)
        ab = b - a
        u = np.clip(np.einsum("sk,sk->s", ego - a, ab) / np.maximum(np.einsum("sk,sk->s", ab, ab), 1e-12), 0, 1)
        near = np.hypot(*(ego - (a + u[:, None] * ab)).T)  # [S] the ego's distance to each segment
        keep = near <= corner + 0.5 * float(ln.width)
        if not keep.any():
            continue
        dist = _segment_distance_fast(world, np.ascontiguousarray(a[keep]), np.ascontiguousarray(b[keep]))
        drivable |= dist <= 0.5 * float(ln.width)
        lane |= dist <= LANE_CENTRE_M
    return dict(
        occupancy=occ.reshape(G, G),
        velocity=np.ascontiguousarray(vel.reshape(G, G, 2).transpose(2, 0, 1)),
        drivable=drivable.reshape(G, G).astype(np.uint8),
        lane=lane.reshape(G, G).astype(np.uint8),
    )
