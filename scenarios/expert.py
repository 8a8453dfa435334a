"""The expert driver of generated scenarios, and the expert's IL labels for any scenario.

**Plan.** The expert follows a fixed geometric path (the route's lane centres, shifted sideways
where it must nudge past an obstacle) with a speed profile s(t) chosen by a cross-entropy search
(:func:`plan_speed`): the acceleration is piecewise linear between knots 1 s apart (so jerk is
bounded), bounded to [``A_MIN``, ``A_MAX``]; the cost weighs speed tracking (the cruise speed,
capped on curves by the lateral-acceleration limit), acceleration, jerk, and -- heavily -- every
step where the ego box, inflated by a safety margin (longer at the front as speed grows), overlaps
an agent's box or a static obstacle.

**Drive.** The logged track is a closed-loop simulation through the env's kinematics
(:func:`drive`): at each 0.1 s step the target is the plan's pose 0.5 s ahead, seen from the
simulated ego; the action is the feasible anchor bin pair nearest to it (``scenarios.actions``),
turned into (accel, steer) by ``sim.dynamics.anchor_to_controls`` and applied for one step by
``bicycle_step``, as the env does. So what the expert does is exactly something the policy can do.

**Labels.** :func:`expert_displacements` gives, at each step, the expert's displacement over the
next 0.5 s in its own frame; the nearest feasible bins are the IL target. :func:`replay_labels`
replays those bins open-loop from the first pose, the check that labels reproduce the drive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scenarios.actions import ANCHOR_HORIZON, bins_to_displacement, nearest_feasible_bins
from scenarios.format import EgoSpec, Scenario
from sim.dynamics import anchor_to_controls, bicycle_step
from sim.geometry import boxes_overlap, interpolate_polyline, polyline_arclength, polyline_heading, world_to_local

A_MAX = 2.0  # m/s^2, planned acceleration bound (comfortable)
A_MIN = -3.0  # m/s^2, planned deceleration bound (firm but comfortable)
LAT_ACCEL = 2.0  # m/s^2, curve speed limit v = sqrt(LAT_ACCEL / curvature)
KNOT_DT = 1.0  # s between acceleration knots

# planning margins around the ego box (metres); the front one grows with speed (a time gap)
MARGIN_FRONT = 2.0
MARGIN_FRONT_PER_MPS = 0.6  # s: 0.6 s of headway on top of MARGIN_FRONT
MARGIN_REAR = 1.0
MARGIN_SIDE = 0.4


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


# -- speed planning --------------------------------------------------------------------------------


def curvature(path: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(arclength [M], |curvature| [M] in 1/m) at the vertices of path [M, 2], lightly smoothed."""
    s = polyline_arclength(path)
    h = np.unwrap(polyline_heading(path))
    k = np.abs(np.gradient(h, s, edge_order=1)) if len(s) > 2 else np.zeros(len(s))
    if len(k) >= 5:
        k = np.convolve(np.pad(k, 2, mode="edge"), np.ones(5) / 5, mode="valid")
    return s, k


@dataclass(frozen=True)
class SpeedPlan:
    """s [N] metres along the path and v [N] m/s, a [N] m/s^2 at times k * dt, k = 0..N-1."""

    s: np.ndarray
    v: np.ndarray
    a: np.ndarray
    cost: float
    collisions: int  # planned steps in (margin-grown) collision; 0 for a usable plan


def _integrate(knots: np.ndarray, v0: float, dt: float, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Acceleration knots [P, K] (every KNOT_DT s) -> s, v, a [P, n] at times k * dt (v >= 0)."""
    P, K = knots.shape
    t = np.arange(n) * dt
    a = np.empty((P, n))
    kt = np.arange(K) * KNOT_DT
    for p in range(P):
        a[p] = np.interp(t, kt, knots[p])
    v = np.empty((P, n))
    s = np.zeros((P, n))
    v[:, 0] = v0
    for i in range(1, n):
        vi = v[:, i - 1] + a[:, i - 1] * dt
        v[:, i] = np.maximum(vi, 0.0)
        a[:, i - 1] = (v[:, i] - v[:, i - 1]) / dt  # what was applied once speed is clipped at 0
        s[:, i] = s[:, i - 1] + 0.5 * (v[:, i] + v[:, i - 1]) * dt
    return s, v, a


def plan_speed(
    path: np.ndarray,
    v0: float,
    v_cruise: float,
    ego: EgoSpec,
    obstacles: Obstacles,
    dt: float,
    n: int,
    rng: np.random.Generator,
    s0: float = 0.0,
    population: int = 192,
    iterations: int = 8,
) -> SpeedPlan:
    """A speed profile along ``path`` [M, 2] (rear-axle path, world metres) from arclength ``s0``
    at speed ``v0`` (m/s), for times k * dt, k = 0..n-1; cross-entropy search over acceleration
    knots. Collisions are checked for the steps the obstacles cover (< obstacles.num_steps)."""
    K = int(np.ceil((n - 1) * dt / KNOT_DT)) + 1
    ps, pk = curvature(path)
    v_curve = np.sqrt(LAT_ACCEL / np.maximum(pk, 1e-4))
    n_check = min(n, obstacles.num_steps)
    steps = np.arange(n_check)

    def cost(knots):
        s, v, a = _integrate(knots, v0, dt, n)
        s_abs = s0 + s
        vc = np.interp(s_abs, ps, v_curve)
        v_des = np.minimum(v_cruise, vc)
        c = np.sum((v - v_des) ** 2, axis=1) * dt
        c += 4.0 * np.sum(np.maximum(v - vc, 0.0) ** 2, axis=1) * dt
        c += 0.5 * np.sum(a**2, axis=1) * dt
        jerk = np.diff(knots, axis=1) / KNOT_DT
        c += 2.0 * np.sum(jerk**2, axis=1)
        c += 0.5 * (knots[:, 0] ** 2)  # start smoothly from cruising
        xy, yaw = interpolate_polyline(path, s_abs[:, :n_check])
        front = MARGIN_FRONT + MARGIN_FRONT_PER_MPS * v[:, :n_check]
        hits = overlaps(xy, yaw, ego, obstacles, steps, front, MARGIN_REAR, MARGIN_SIDE)
        ncol = np.sum(hits > 0, axis=1)
        # every colliding step costs a lot, earlier ones more, so the search has a gradient
        c += 1000.0 * ncol + 50.0 * np.sum((hits > 0) * (n_check - steps), axis=1) / n_check
        c += 1000.0 * (s_abs[:, -1] > ps[-1])  # do not run off the end of the path
        return c, ncol

    # seeds: keep speed; reach cruise; brake gently / firmly to a stop and wait; slow then go
    a_cruise = np.clip((v_cruise - v0) / 3.0, A_MIN, A_MAX)
    seeds = [np.zeros(K), np.r_[np.full(3, a_cruise), np.zeros(K - 3)]]
    for b in (-1.0, -2.0, -3.0):
        for go in (3, 5, 7):
            seeds.append(np.r_[np.full(go, b), np.full(K - go, 1.0)][:K])
        seeds.append(np.full(K, b))
    seeds = np.clip(np.array(seeds), A_MIN, A_MAX)
    mean = np.zeros(K)
    std = np.full(K, 1.5)
    best_k, best_c = None, np.inf
    for it in range(iterations):
        cand = np.clip(mean + std * rng.standard_normal((population, K)), A_MIN, A_MAX)
        cand[:, 0] = np.clip(cand[:, 0], -1.0, 1.0)  # no step in acceleration at t = 0
        if it == 0:
            cand[: len(seeds)] = seeds
        if best_k is not None:
            cand[0] = best_k
        c, _ = cost(cand)
        order = np.argsort(c)
        elite = cand[order[: max(population // 10, 4)]]
        if c[order[0]] < best_c:
            best_c, best_k = float(c[order[0]]), cand[order[0]].copy()
        mean = elite.mean(axis=0)
        std = np.maximum(elite.std(axis=0), 0.05)
    c, ncol = cost(best_k[None])
    s, v, a = _integrate(best_k[None], v0, dt, n)
    return SpeedPlan(s0 + s[0], v[0], a[0], float(c[0]), int(ncol[0]))


# -- closed-loop drive -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Drive:
    """A simulated drive: states [T, 4] (x, y, yaw, v of the rear axle) at steps 0..T-1 and the
    actions [T-1, 2] (lateral index, longitudinal index) taken between them."""

    states: np.ndarray
    actions: np.ndarray


def drive(path: np.ndarray, plan_s: np.ndarray, v0: float, ego: EgoSpec, dt: float, steps: int) -> Drive:
    """Follow the plan in closed loop: ``steps`` steps from the path's pose at plan_s[0].

    At step k the target is the path point at plan_s[k + L] (L = 0.5 s / dt; the plan is held at
    its end beyond), in the simulated ego's frame; the nearest feasible bins are the action, and
    ``anchor_to_controls`` + ``bicycle_step`` move the ego for one dt, as in the env.
    """
    look = round(ANCHOR_HORIZON / dt)
    xy0, h0 = interpolate_polyline(path, plan_s[0])
    state = np.array([[xy0[0], xy0[1], h0, v0]])
    states = [state[0]]
    actions = []
    for k in range(steps):
        target, _ = interpolate_polyline(path, plan_s[min(k + look, len(plan_s) - 1)])
        local = world_to_local(target, state[0, :2], state[0, 2])  # (x forward, y left)
        idx = nearest_feasible_bins(np.array([local[1], max(local[0], 0.0)]))
        lat, lon = bins_to_displacement(idx)
        acc, steer = anchor_to_controls(state[:, 3], lat, lon, ANCHOR_HORIZON, ego.wheelbase)
        state = bicycle_step(state, acc, steer, dt, ego.wheelbase)
        states.append(state[0])
        actions.append(idx)
    return Drive(np.array(states), np.array(actions, dtype=np.int64).reshape(-1, 2))


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
    s = np.asarray(states, dtype=np.float64)[:1].copy()
    out = [s[0]]
    disp = bins_to_displacement(labels)
    for k in range(len(labels)):
        acc, steer = anchor_to_controls(s[:, 3], disp[k, 0], disp[k, 1], ANCHOR_HORIZON, ego.wheelbase)
        s = bicycle_step(s, acc, steer, dt, ego.wheelbase)
        out.append(s[0])
    return np.array(out)
