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
from numba import njit

from scenarios.actions import (
    LATERAL_BINS,
    LONGITUDINAL_BINS,
    bins_to_displacement,
    half_widths,
    nearest_feasible_bins,
)
from scenarios.format import EgoSpec, Scenario
from sim.dynamics import ANCHOR_HORIZON, MAX_ACCEL, MAX_DECEL, MAX_STEER, V_MAX, anchor_to_controls, bicycle_step
from sim.geometry import boxes_overlap, interpolate_polyline, polyline_arclength, polyline_heading, world_to_local

A_MAX = 2.0  # m/s^2, planned acceleration bound (comfortable)
A_MIN = -3.0  # m/s^2, planned deceleration bound (firm but comfortable)
LAT_ACCEL = 2.0  # m/s^2, curve speed limit v = sqrt(LAT_ACCEL / curvature)

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


SPEED_QUANTUM = 0.5  # m/s: a longitudinal bin (0.25 m per 0.5 s) held steady drives at a multiple of this
NUM_EVENTS = 3
TAU = 0.5  # s: speed approaches its target with this time constant (then the acceleration bound)
MAX_JERK = 2.5  # m/s^3 of the planned profile


def speed_profiles(params: np.ndarray, v0: float, dt: float, n: int, fine: int = 5):
    """Speed profiles from event parameters [P, 3 * NUM_EVENTS] -> (s, v, a) [P, n] at times k * dt.

    Event e is (time, target speed, rate): from its time (event 0 at t = 0) the speed approaches the
    target -- rounded to ``SPEED_QUANTUM`` so that cruising needs no dithering between bins -- at up
    to ``rate`` m/s^2 (accelerating at most ``A_MAX``), with time constant ``TAU`` and jerk at most
    ``MAX_JERK``; speed stays >= 0. Integrated with ``fine`` sub-steps per dt.
    """
    P = params.shape[0]
    p = np.asarray(params, dtype=np.float64).reshape(P, NUM_EVENTS, 3)
    T = (n - 1) * dt
    times = np.clip(p[:, :, 0], 0.0, T)
    times[:, 0] = 0.0
    targets = np.round(np.clip(p[:, :, 1], 0.0, 20.0) / SPEED_QUANTUM) * SPEED_QUANTUM
    rates = np.clip(p[:, :, 2], 0.3, -A_MIN)
    order = np.argsort(times, axis=1, kind="stable")
    times = np.ascontiguousarray(np.take_along_axis(times, order, 1))
    targets = np.ascontiguousarray(np.take_along_axis(targets, order, 1))
    rates = np.ascontiguousarray(np.take_along_axis(rates, order, 1))
    out = np.zeros((3, P, n))
    _profiles_kernel(times, targets, rates, float(v0), dt, n, fine, TAU, A_MAX, MAX_JERK, out)
    return out[0], out[1], out[2]


@njit(cache=True)
def _profiles_kernel(times, targets, rates, v0, dt, n, fine, tau, a_max, jerk, out):
    h = dt / fine
    P, E = times.shape
    for p in range(P):
        v, a, s = v0, 0.0, 0.0
        out[1, p, 0] = v0
        e = 0
        for i in range(1, (n - 1) * fine + 1):
            tc = (i - 1) * h
            while e + 1 < E and times[p, e + 1] <= tc + 1e-9:
                e += 1
            rate = rates[p, e]
            want = (targets[p, e] - v) / tau
            want = min(max(want, -rate), min(rate, a_max))
            a += min(max(want - a, -jerk * h), jerk * h)
            v_new = v + a * h
            if v_new <= 0.0:
                v_new, a = 0.0, 0.0
            s += 0.5 * (v + v_new) * h
            v = v_new
            if i % fine == 0:
                k = i // fine
                out[0, p, k] = s
                out[1, p, k] = v
                out[2, p, k - 1] = a
        out[2, p, n - 1] = out[2, p, n - 2]


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
    population: int = 160,
    iterations: int = 6,
) -> SpeedPlan:
    """A speed profile along ``path`` [M, 2] (rear-axle path, world metres) from arclength ``s0``
    at speed ``v0`` (m/s), for times k * dt, k = 0..n-1: a cross-entropy search over
    :func:`speed_profiles` parameters, seeded with cruising, slowing-down-and-recovering and
    stop-and-go profiles. Collisions are checked for the steps the obstacles cover."""
    ps, pk = curvature(path)
    v_curve = np.sqrt(LAT_ACCEL / np.maximum(pk, 1e-4))
    n_check = min(n, obstacles.num_steps)
    steps = np.arange(n_check)
    T = (n - 1) * dt

    def cost(params):
        s, v, a = speed_profiles(params, v0, dt, n)
        s_abs = s0 + s
        vc = np.interp(s_abs, ps, v_curve)
        v_des = np.floor(np.minimum(v_cruise, vc) / SPEED_QUANTUM) * SPEED_QUANTUM
        c = np.sum((v - v_des) ** 2, axis=1) * dt
        c += 10.0 * np.sum(np.maximum(v - vc, 0.0) ** 2, axis=1) * dt
        c += 0.5 * np.sum(a**2, axis=1) * dt
        xy, yaw = interpolate_polyline(path, s_abs[:, :n_check])
        front = MARGIN_FRONT + MARGIN_FRONT_PER_MPS * v[:, :n_check]
        hits = overlaps(xy, yaw, ego, obstacles, steps, front, MARGIN_REAR, MARGIN_SIDE)
        ncol = np.sum(hits > 0, axis=1)
        # every colliding step costs a lot, earlier ones more, so the search has a gradient
        c += 1000.0 * ncol + 50.0 * np.sum((hits > 0) * (n_check - steps), axis=1) / n_check
        c += 1000.0 * (s_abs[:, -1] > ps[-1])  # do not run off the end of the path
        return c, ncol

    vd = float(np.floor(min(v_cruise, v_curve.min() if len(v_curve) else v_cruise) / SPEED_QUANTUM) * SPEED_QUANTUM)
    vd = max(vd, SPEED_QUANTUM)
    rows = []
    for r in (0.5, 1.0, 2.0):
        rows.append([0, vd, r, T, vd, 1, T, vd, 1])
        rows.append([0, v0, r, 2.0, vd, 1.0, T, vd, 1])
    for t1 in (0.0, 1.0, 2.0):
        for low in (0.6 * v0, 0.3 * v0, 0.0):
            for rate in (1.0, 2.0, 3.0):
                for hold in (1.5, 3.0, 5.0):
                    rows.append([0, vd, 1.0, t1, low, rate, t1 + hold, vd, 1.5])
        for high in (v0 + 2.0, v0 + 4.0):
            rows.append([0, vd, 1.0, t1, high, 2.0, t1 + 3.0, vd, 1.5])
    seeds = np.array(rows[:population], dtype=np.float64)
    lo = np.tile([0.0, 0.0, 0.3], NUM_EVENTS)
    hi = np.tile([T, 20.0, -A_MIN], NUM_EVENTS)
    mean = np.array([0, vd, 1.0, T / 3, vd, 1.0, 2 * T / 3, vd, 1.0])
    std = np.tile([2.0, 3.0, 1.0], NUM_EVENTS)
    best_p, best_c = None, np.inf
    for it in range(iterations):
        cand = np.clip(mean + std * rng.standard_normal((population, 3 * NUM_EVENTS)), lo, hi)
        if it == 0:
            cand[: len(seeds)] = seeds
            cand[len(seeds) :] = np.clip(
                seeds[rng.integers(len(seeds), size=population - len(seeds))]
                + std * 0.5 * rng.standard_normal((population - len(seeds), 3 * NUM_EVENTS)),
                lo,
                hi,
            )
        if best_p is not None:
            cand[0] = best_p
        c, _ = cost(cand)
        order = np.argsort(c)
        if c[order[0]] < best_c:
            best_c, best_p = float(c[order[0]]), cand[order[0]].copy()
        elite = cand[order[: max(population // 10, 4)]]
        mean = elite.mean(axis=0)
        std = np.maximum(elite.std(axis=0), np.tile([0.1, 0.25, 0.1], NUM_EVENTS))
    if best_p is None:
        raise ValueError(f"plan_speed: no finite cost in {iterations} iterations (iterations must be >= 1)")
    c, ncol = cost(best_p[None])
    s, v, a = speed_profiles(best_p[None], v0, dt, n)
    return SpeedPlan(s0 + s[0], v[0], a[0], float(c[0]), int(ncol[0]))


# -- closed-loop drive -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Drive:
    """A simulated drive: states [T, 4] (x, y, yaw, v of the rear axle) at steps 0..T-1 and the
    actions [T-1, 2] (lateral index, longitudinal index) taken between them."""

    states: np.ndarray
    actions: np.ndarray


# candidate offsets (lateral, longitudinal bins) around the plain choice, for label consistency
_NEIGHBOURS = np.array([(dl, dg) for dg in (0, -1, 1) for dl in (0, -1, 1, -2, 2)], dtype=np.int64)


def drive(
    path: np.ndarray, plan_s: np.ndarray, v0: float, ego: EgoSpec, dt: float, steps: int, consistent: bool = True
) -> Drive:
    """Follow the plan in closed loop: ``steps`` steps from the path's pose at plan_s[0].

    The plain choice at step k is the feasible bin pair nearest to the plan's pose at plan_s[k + L]
    (L = 0.5 s / dt; held at the plan's end beyond) in the simulated ego's frame; the bins turn into
    controls by ``anchor_to_controls`` and move the ego by ``bicycle_step`` for one dt, as in the env.

    ``consistent``: a label is the nearest bins to where the ego really is 0.5 s later, which lags
    the plain choice wherever the plan changes (entering a curve, braking), and replaying such
    labels open-loop drifts. So among the plain choice and its neighbours (+-2 lateral, +-1
    longitudinal bins), the expert takes the one nearest the target whose own label -- simulating the
    next 0.5 s with plain choices -- is itself; if none is, the plain choice.

    The choices are made by a numba kernel (:func:`_drive_kernel`, the same formulas as
    ``sim.dynamics``); the states returned are then re-simulated from the chosen actions with
    ``sim.dynamics`` itself, so the logged drive is exactly what the env does with those actions.
    """
    look = round(ANCHOR_HORIZON / dt)
    xy0, h0 = interpolate_polyline(path, plan_s[0])
    goals = np.ascontiguousarray(interpolate_polyline(path, plan_s[look:])[0])  # goal of step k: goals[k]
    x0 = np.array([xy0[0], xy0[1], h0, v0], dtype=np.float64)
    states = np.zeros((steps + 1, 4))
    actions = np.zeros((steps, 2), dtype=np.int64)
    _drive_kernel(
        goals, x0, steps, look, consistent, LATERAL_BINS, LONGITUDINAL_BINS, half_widths(), _NEIGHBOURS,
        float(ego.wheelbase), float(dt), V_MAX, MAX_ACCEL, MAX_DECEL, MAX_STEER, float(ANCHOR_HORIZON),
        states, actions,
    )  # fmt: skip
    return Drive(simulate_actions(x0, actions, dt, ego), actions)


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


@njit(cache=True)
def _local(gx, gy, x, y, yaw):
    dx, dy = gx - x, gy - y
    c, s = np.cos(yaw), np.sin(yaw)
    return -s * dx + c * dy, max(c * dx + s * dy, 0.0)  # (lateral, longitudinal >= 0)


@njit(cache=True)
def _drive_kernel(goals, x0, steps, look, consistent, lat_bins, lon_bins, hw, neigh, L, dt, v_max, a_max, d_max,
                  s_max, T, states, actions):  # fmt: skip
    G = goals.shape[0]
    c = (len(lat_bins) - 1) // 2
    x, y, yaw, v = x0[0], x0[1], x0[2], x0[3]
    states[0, 0], states[0, 1], states[0, 2], states[0, 3] = x, y, yaw, v
    for k in range(steps):
        g = goals[min(k, G - 1)]
        lat, lon = _local(g[0], g[1], x, y, yaw)
        pj, pi = _nearest(lat, lon, lat_bins, lon_bins, hw)
        cj, ci = pj, pi
        if consistent:
            best = np.inf
            for n in range(neigh.shape[0]):
                j, i = pj + neigh[n, 0], pi + neigh[n, 1]
                if i < 0 or i >= len(lon_bins) or abs(j - c) > hw[i]:
                    continue
                sx, sy, syaw, sv = _kin_step(x, y, yaw, v, lat_bins[j], lon_bins[i], L, dt, v_max, a_max, d_max,
                                             s_max, T)  # fmt: skip
                for m in range(1, look):
                    gm = goals[min(k + m, G - 1)]
                    la, lo = _local(gm[0], gm[1], sx, sy, syaw)
                    jj, ii = _nearest(la, lo, lat_bins, lon_bins, hw)
                    sx, sy, syaw, sv = _kin_step(sx, sy, syaw, sv, lat_bins[jj], lon_bins[ii], L, dt, v_max, a_max,
                                                 d_max, s_max, T)  # fmt: skip
                dx, dy = sx - x, sy - y
                cs, sn = np.cos(yaw), np.sin(yaw)
                rj, ri = _nearest(-sn * dx + cs * dy, cs * dx + sn * dy, lat_bins, lon_bins, hw)
                if rj == j and ri == i:
                    e = (lat_bins[j] - lat) ** 2 + (lon_bins[i] - lon) ** 2
                    if e < best:
                        best, cj, ci = e, j, i
        x, y, yaw, v = _kin_step(x, y, yaw, v, lat_bins[cj], lon_bins[ci], L, dt, v_max, a_max, d_max, s_max, T)
        states[k + 1, 0], states[k + 1, 1], states[k + 1, 2], states[k + 1, 3] = x, y, yaw, v
        actions[k, 0], actions[k, 1] = cj, ci


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
