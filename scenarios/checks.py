"""Checks of a scenario's expert and of its kind, in pure geometry (the env's boxes, no rendering).

- :func:`collision_steps`: where a sequence of ego states hits agents (dynamic) or static obstacles
  (static), with an optional safety margin around the ego box.
- :func:`constant_speed_states`: the ego holding its initial speed, straight ahead (or along its
  route): in a lead-vehicle, cut-in or crossing scenario this must collide with an agent; with a
  parked obstacle it must hit the obstacle. That is what makes a kind real.
- :func:`expert_report`: the expert's comfort figures, clearance, and how well its IL labels,
  replayed open-loop, reproduce it; :func:`expert_problems` turns them into a list of failures.
"""

from __future__ import annotations

import numpy as np

from scenarios.actions import nearest_feasible_bins
from scenarios.expert import Obstacles, expert_displacements, overlaps, replay_labels
from scenarios.format import Scenario
from sim.geometry import interpolate_polyline, project_to_polyline

# what a good expert satisfies (generated scenarios are rejected otherwise)
MAX_ACCEL = 3.0  # m/s^2, |dv/dt| of the logged speed, per step
MAX_MEAN_JERK = 6.0  # m/s^3, mean |d2v/dt2| over the drive (RAD's longitudinal jerk metric)
CLEARANCE = 0.3  # metres around the ego box that no agent or obstacle may enter
MAX_REPLAY_ERROR = 0.5  # metres: labels replayed open-loop stay this close to the expert
MIN_TIME_TO_COLLISION = 1.5  # s: a must-collide kind gives the ego at least this long to react


def collision_steps(states: np.ndarray, scenario: Scenario, margin: float = 0.0) -> dict[str, np.ndarray]:
    """Steps at which the ego hits something. states: [S, 4] (x, y, yaw, v) of the rear axle at steps
    0..S-1 (only steps <= horizon are checked); margin: metres added around the ego box on every side.

    Returns {"dynamic": steps [K] where an agent box overlaps, "static": steps where a static
    obstacle box overlaps}, both int arrays, ascending.
    """
    states = np.asarray(states, dtype=np.float64)[: scenario.horizon + 1]
    steps = np.arange(len(states))
    p, s, pr = scenario.agent_arrays()
    sp, ss = scenario.obstacle_arrays()
    empty_static = np.zeros((0, 4)), np.zeros((0, 3))
    dyn = Obstacles(p, s, pr, *empty_static)
    T = scenario.horizon + 1
    sta = Obstacles(np.zeros((0, T, 4)), np.zeros((0, 3)), np.zeros((0, T), bool), sp, ss)
    kw = dict(front=margin, rear=margin, side=margin)
    d = overlaps(states[:, :2], states[:, 2], scenario.ego, dyn, steps, **kw)
    st = overlaps(states[:, :2], states[:, 2], scenario.ego, sta, steps, **kw)
    return {"dynamic": np.flatnonzero(d > 0), "static": np.flatnonzero(st > 0)}


def constant_speed_states(scenario: Scenario, along_route: bool = False) -> np.ndarray:
    """[horizon + 1, 4] states of an ego that holds its initial speed from the expert's first pose:
    straight ahead (the default), or along the route's centre line (``along_route``)."""
    x0, y0, _, yaw0 = np.asarray(scenario.expert.poses[0], dtype=np.float64)
    v0 = float(scenario.expert.speed[0])
    t = np.arange(scenario.horizon + 1) * scenario.dt
    d = v0 * t
    if not along_route:
        xy = np.stack([x0 + d * np.cos(yaw0), y0 + d * np.sin(yaw0)], -1)
        yaw = np.full(len(t), yaw0)
    else:
        route = scenario.map.route_polyline(scenario.route)
        s0, _, _ = project_to_polyline(np.array([x0, y0]), route)
        xy, yaw = interpolate_polyline(route, float(s0) + d)
    return np.concatenate([xy, yaw[:, None], np.full((len(t), 1), v0)], axis=1)


def first_constant_speed_collision(scenario: Scenario, along_route: bool = False) -> tuple[str | None, int | None]:
    """(kind "dynamic"/"static", step) of the first collision of :func:`constant_speed_states`, or
    (None, None) when it drives through unharmed."""
    hits = collision_steps(constant_speed_states(scenario, along_route), scenario)
    firsts = [(int(v[0]), k) for k, v in hits.items() if len(v)]
    if not firsts:
        return None, None
    step, kind = min(firsts)
    return kind, step


def expert_report(scenario: Scenario) -> dict:
    """Figures of the expert drive over steps 0..horizon (JSON-able).

    max_accel / max_decel: largest speed increase / decrease rate (m/s^2) between steps;
    mean_jerk: mean |d2v/dt2| (m/s^3); collisions_with_margin: steps where the ego box grown by
    ``CLEARANCE`` overlaps an agent or obstacle; replay_max_error / replay_mean_error: distance (m)
    between the expert and an ego replaying the expert's IL labels open-loop from its first pose.
    """
    H, dt = scenario.horizon, scenario.dt
    states = scenario.expert.states()
    v = states[: H + 1, 3]
    a = np.diff(v) / dt
    jerk = np.diff(a) / dt
    hits = collision_steps(states, scenario, CLEARANCE)
    labels = nearest_feasible_bins(expert_displacements(scenario))[:H]
    replay = replay_labels(states, labels, dt, scenario.ego)
    err = np.linalg.norm(replay[:, :2] - states[: H + 1, :2], axis=1)
    return {
        "max_accel": float(max(a.max(), 0.0)),
        "max_decel": float(max(-a.min(), 0.0)),
        "mean_jerk": float(np.abs(jerk).mean()),
        "min_speed": float(v.min()),
        "max_speed": float(v.max()),
        "collisions_with_margin": int(len(hits["dynamic"]) + len(hits["static"])),
        "replay_max_error": float(err.max()),
        "replay_mean_error": float(err.mean()),
    }


MUST_COLLIDE = {"lead_vehicle": "dynamic", "cut_in": "dynamic", "crossing": "dynamic", "parked_obstacle": "static"}


def expert_problems(scenario: Scenario, must_collide: str | None = None) -> list[str]:
    """What is wrong with a (generated) scenario's expert and kind; empty when it is good.

    must_collide: "dynamic" / "static" (straight ahead at constant speed must hit that, early enough
    to leave ``MIN_TIME_TO_COLLISION`` s), "route" (the same along the route, e.g. a merge), None.
    """
    r = expert_report(scenario)
    out = []
    if r["collisions_with_margin"]:
        out.append(f"expert comes within {CLEARANCE} m of an agent/obstacle at {r['collisions_with_margin']} steps")
    if r["max_accel"] > MAX_ACCEL + 1e-9 or r["max_decel"] > MAX_ACCEL + 1e-9:
        out.append(f"expert acceleration out of +-{MAX_ACCEL} m/s^2: +{r['max_accel']:.2f} / -{r['max_decel']:.2f}")
    if r["mean_jerk"] > MAX_MEAN_JERK:
        out.append(f"expert mean jerk {r['mean_jerk']:.2f} m/s^3 above {MAX_MEAN_JERK}")
    if r["replay_max_error"] > MAX_REPLAY_ERROR:
        out.append(f"replayed labels drift {r['replay_max_error']:.2f} m from the expert (> {MAX_REPLAY_ERROR})")
    if must_collide:
        kind, step = first_constant_speed_collision(scenario, along_route=must_collide == "route")
        want = "dynamic" if must_collide == "route" else must_collide
        if kind != want:
            out.append(f"holding the initial speed does not lead to a {want} collision (got {kind})")
        elif step is not None and step * scenario.dt < MIN_TIME_TO_COLLISION:  # a collision has a step
            out.append(f"the constant-speed collision comes at {step * scenario.dt:.1f} s, too early to react")
    return out
