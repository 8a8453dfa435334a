"""The expert's IL labels for any scenario, the kinematics its drive goes through, and box overlaps.

The logged expert of generated scenarios is the reactive expert (``scenarios.reactive``) driven in
closed loop (``scenarios.drive``); this module holds what any logged drive is read with.

**Labels.** :func:`expert_displacements` gives, at each step, the expert's displacement over the
next 0.5 s in its own frame; the nearest feasible bins are the IL target. :func:`replay_labels`
replays those bins open-loop from the first pose, the check that labels reproduce the drive.

**Kinematics.** :func:`simulate_actions` applies bin pairs through ``sim.dynamics.anchor_to_controls``
and ``bicycle_step``, exactly as the env does; ``_kin_step`` and ``_nearest`` are the same formulas
(and ``nearest_feasible_bins``' rule) for one ego in numba, for the drive kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from scenarios.actions import (
    bins_to_displacement,
    nearest_feasible_bins,
)
from scenarios.format import EgoSpec, Scenario
from sim.dynamics import ANCHOR_HORIZON, anchor_to_controls, bicycle_step
from sim.geometry import boxes_overlap, world_to_local

# -- obstacles -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Obstacles:
    """What the expert must avoid. agent_poses [N, T, 4] (x, y, z, yaw of the box bottom centre),
    agent_sizes [N, 3], agent_present [N, T] over steps 0..T-1; static_poses [K, 4], static_sizes [K, 3]."""

    agent_poses: np.ndarray
    agent_sizes: np.ndarray
    agent_present: np.ndarray
    static_poses: np.ndarray
    static_sizes: np.ndarray

    @staticmethod
    def of(scenario: Scenario) -> Obstacles:
        p, s, pr = scenario.agent_arrays()
        sp, ss = scenario.obstacle_arrays()
        return Obstacles(p, s, pr, sp, ss)

    @property
    def num_steps(self) -> int:
        return self.agent_poses.shape[1]


def ego_boxes(xy, yaw, ego: EgoSpec, front=0.0, rear=0.0, side=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Ego box centres [..., 2] and sizes [..., 2] (length, width) for rear-axle poses xy [..., 2],
    yaw [...], grown by ``front``/``rear``/``side`` metres (scalars or [...])."""
    yaw = np.asarray(yaw, dtype=np.float64)
    front = np.broadcast_to(np.asarray(front, dtype=np.float64), yaw.shape)
    rear = np.broadcast_to(np.asarray(rear, dtype=np.float64), yaw.shape)
    side = np.broadcast_to(np.asarray(side, dtype=np.float64), yaw.shape)
    shift = ego.center_offset + 0.5 * (front - rear)
    centers = np.asarray(xy, dtype=np.float64) + shift[..., None] * np.stack([np.cos(yaw), np.sin(yaw)], -1)
    sizes = np.stack([ego.length + front + rear, ego.width + 2.0 * side], -1)
    return centers, sizes


def overlaps(xy, yaw, ego: EgoSpec, obstacles: Obstacles, steps, front=0.0, rear=0.0, side=0.0) -> np.ndarray:
    """Which ego poses hit something. xy [..., S, 2], yaw [..., S] rear-axle poses at time steps
    ``steps`` [S] (int, < obstacles.num_steps); margins as :func:`ego_boxes`. Returns [..., S] int:
    the number of agents (present at that step) plus static obstacles the grown ego box overlaps."""
    steps = np.asarray(steps)
    c, sz = ego_boxes(xy, yaw, ego, front, rear, side)  # [..., S, 2]
    hits = np.zeros(np.shape(yaw), dtype=np.int64)
    for n in range(obstacles.agent_poses.shape[0]):
        pose = obstacles.agent_poses[n, steps]  # [S, 4]
        o = boxes_overlap(c, yaw, sz, pose[:, :2], pose[:, 3], obstacles.agent_sizes[n, :2])
        hits += o & obstacles.agent_present[n, steps]
    for k in range(obstacles.static_poses.shape[0]):
        pose = obstacles.static_poses[k]
        hits += boxes_overlap(c, yaw, sz, pose[:2], pose[3], obstacles.static_sizes[k, :2])
    return hits


# -- drives ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drive:
    """A simulated drive: states [T, 4] (x, y, yaw, v of the rear axle) at steps 0..T-1 and the
    actions [T-1, 2] (lateral index, longitudinal index) taken between them."""

    states: np.ndarray
    actions: np.ndarray


def simulate_actions(x0: np.ndarray, actions: np.ndarray, dt: float, ego: EgoSpec) -> np.ndarray:
    """States [S + 1, 4] from x0 [4] (x, y, yaw, v) applying bin pairs actions [S, 2] one dt each,
    through ``sim.dynamics.anchor_to_controls`` and ``bicycle_step`` (what the env does)."""
    s = np.asarray(x0, dtype=np.float64).reshape(1, 4)
    out = [s[0]]
    disp = bins_to_displacement(actions)
    for k in range(len(actions)):
        acc, steer = anchor_to_controls(s[:, 3], disp[k, 0], disp[k, 1], ANCHOR_HORIZON, ego.wheelbase)
        s = bicycle_step(s, acc, steer, dt, ego.wheelbase)
        out.append(s[0])
    return np.array(out)


@njit(cache=True)
def _sinc(u):
    if abs(u) < 1e-4:
        return 1.0 - u * u / 6.0
    return np.sin(u) / u


@njit(cache=True)
def _kin_step(x, y, yaw, v, lat, lon, L, dt, v_max, a_max, d_max, s_max, T):
    """anchor_to_controls then bicycle_step for one ego (scalars), as in sim.dynamics."""
    d2 = lon * lon + lat * lat
    k = 2.0 * lat / d2 if d2 > 0 else 0.0
    phi = np.arctan2(lat, lon)
    s = np.sqrt(d2) / _sinc(phi)
    steer = min(max(np.arctan(L * k), -s_max), s_max)
    if s < 0.5 * v * T:
        acc = -v * v / (2.0 * s) if s > 0 else -np.inf
    else:
        acc = 2.0 * (s - v * T) / (T * T)
    acc = min(max(acc, -d_max), a_max)
    v0 = min(max(v, 0.0), v_max)
    room = -v0 if acc < 0 else v_max - v0
    t1 = dt
    if acc != 0.0:
        t1 = min(dt, room / acc)
    v1 = min(max(v0 + acc * t1, 0.0), v_max)
    dist = max(v0 * t1 + 0.5 * acc * t1 * t1 + v1 * (dt - t1), 0.0)
    kk = np.tan(steer) / L
    u = 0.5 * kk * dist
    chord = dist * _sinc(u)
    nyaw = (yaw + 2.0 * u + np.pi) % (2.0 * np.pi) - np.pi
    return x + chord * np.cos(yaw + u), y + chord * np.sin(yaw + u), nyaw, v1


@njit(cache=True)
def _nearest(lat, lon, lat_bins, lon_bins, hw):
    """Nearest feasible (lateral index, longitudinal index), as nearest_feasible_bins."""
    c = (len(lat_bins) - 1) // 2
    step = lat_bins[1] - lat_bins[0]
    j0 = int(np.rint(lat / step)) + c
    best, bi, bj = np.inf, 0, c
    for i in range(len(lon_bins)):
        j = min(max(j0, c - hw[i]), c + hw[i])
        e = (lat_bins[j] - lat) ** 2 + (lon_bins[i] - lon) ** 2
        if e < best:
            best, bi, bj = e, i, j
    return bj, bi


# -- labels ----------------------------------------------------------------------------------------


def displacements_from_states(states: np.ndarray, t: np.ndarray, horizon: float = ANCHOR_HORIZON) -> np.ndarray:
    """[T, 2] (lateral, longitudinal) position at t + horizon in the frame of the pose at t.

    states: [T, 4] (x, y, yaw, v) at times t [T]. Positions between samples are interpolated
    linearly; past the last sample the track goes on straight at its last heading and speed.
    """
    states = np.asarray(states, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    tq = t + horizon
    inside = tq <= t[-1]
    x = np.interp(tq, t, states[:, 0])
    y = np.interp(tq, t, states[:, 1])
    extra = np.maximum(tq - t[-1], 0.0)
    yaw_end, v_end = states[-1, 2], states[-1, 3]
    x = np.where(inside, x, states[-1, 0] + extra * v_end * np.cos(yaw_end))
    y = np.where(inside, y, states[-1, 1] + extra * v_end * np.sin(yaw_end))
    local = world_to_local(np.stack([x, y], -1), states[:, :2], states[:, 2])
    return np.stack([local[:, 1], local[:, 0]], -1)


def expert_displacements(scenario: Scenario) -> np.ndarray:
    """[T, 2] (lateral m, left positive; longitudinal m, forward) the expert's displacement over the
    next 0.5 s in its own (rear-axle) frame at each of its T logged steps.

    The IL target at step k is ``scenarios.actions.nearest_feasible_bins`` of row k. Generated
    scenarios log horizon + 6 poses, so every step 0..horizon has a real label; for shorter tracks
    the last rows extend the track straight at its final speed.
    """
    return displacements_from_states(scenario.expert.states(), scenario.expert.t)


def expert_labels(scenario: Scenario) -> np.ndarray:
    """[T, 2] int64 (lateral index, longitudinal index): the nearest feasible bins to
    :func:`expert_displacements`, the IL targets."""
    return nearest_feasible_bins(expert_displacements(scenario))


def replay_labels(states: np.ndarray, labels: np.ndarray, dt: float, ego: EgoSpec) -> np.ndarray:
    """Open-loop replay: from states[0], apply labels [S, 2] (bin pairs) one dt each, as the env
    would. Returns the replayed states [S + 1, 4]."""
    return simulate_actions(np.asarray(states, dtype=np.float64)[0], labels, dt, ego)
