"""Checks of a scenario's expert and of its kind, in pure geometry (the env's boxes, no rendering).

- :func:`collision_steps`: where a sequence of ego states hits agents (dynamic) or static obstacles
  (static), with an optional safety margin around the ego box.
- :func:`constant_speed_states`: the ego holding its initial speed, straight ahead (or along its
  route): in a lead-vehicle, cut-in or crossing scenario this must collide with an agent; with a
  parked obstacle it must hit the obstacle. That is what makes a kind real.
- :func:`expert_report`: the expert's figures -- clearance, speeds and accelerations, how far it drives,
  how far it strays from its route, and how well its IL labels, replayed open-loop (what the env's
  ``expert`` baseline drives), reproduce it; :func:`expert_checks` turns them into failures by reason.

Accelerations are measured over 0.5 s windows (the anchor horizon): within a window the bins' 2 m/s^2
steps of one 0.1 s step average out, as they do for any driver of RAD's action space.
"""

from __future__ import annotations

import numpy as np

from scenarios.actions import nearest_feasible_bins
from scenarios.expert import Obstacles, expert_displacements, overlaps, replay_labels
from scenarios.format import Scenario
from sim.geometry import interpolate_polyline, project_to_polyline

# what a good expert drive satisfies (generated scenarios are redrawn otherwise)
CLEARANCE = 0.3  # metres around the ego box that no agent or obstacle may enter, along the expert's drive
REPLAY_CLEARANCE = 0.1  # ... and along the replay of its labels (the env's `expert` baseline)
MAX_REPLAY_ERROR = 1.0  # metres: labels replayed open-loop stay this close to the expert
MAX_ACCEL = 3.0  # m/s^2: speed gained over any 0.5 s, per second
MAX_DECEL = 6.0  # m/s^2: speed lost over any 0.5 s, per second (the reactive expert brakes at up to 5)
MAX_DEVIATION = 0.75  # metres from the route's centre line (plus the largest nudge where there are obstacles)
MIN_DISTANCE = 25.0  # metres the expert covers over the horizon: a clip where it barely moves tests nothing
MIN_TIME_TO_COLLISION = 1.5  # s: a must-collide kind gives the ego at least this long to react
# metres the constant-speed driver may be behind the expert when it collides: so that it collides in the
# env before it falls the default progress_threshold (10 m) behind
MAX_LAG_AT_COLLISION = 8.0
WINDOW = 5  # steps of a 0.5 s window


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


def window_accelerations(speed: np.ndarray, dt: float) -> np.ndarray:
    """[S - 5] m/s^2: the speed change over each 0.5 s window (5 steps of dt), per second."""
    v = np.asarray(speed, dtype=np.float64)
    if len(v) <= WINDOW:
        return np.zeros(0)
    return (v[WINDOW:] - v[:-WINDOW]) / (WINDOW * dt)


def expert_replay(scenario: Scenario) -> np.ndarray:
    """[horizon + 1, 4] states of the expert's IL labels replayed open-loop from its first pose: what the
    env's ``expert`` baseline drives."""
    states = scenario.expert.states()
    labels = nearest_feasible_bins(expert_displacements(scenario))[: scenario.horizon]
    return replay_labels(states, labels, scenario.dt, scenario.ego)


def expert_report(scenario: Scenario) -> dict:
    """Figures of the expert drive over steps 0..horizon (JSON-able).

    max_accel / max_decel: largest speed gain / loss over a 0.5 s window (m/s^2); mean_jerk: mean |d2v/dt2|
    of the window accelerations (m/s^3); min_speed / max_speed (m/s); distance (m along its track);
    collisions_with_margin: steps where the ego box grown by ``CLEARANCE`` overlaps an agent or obstacle;
    replay_collisions: the same for the labels' replay with ``REPLAY_CLEARANCE``; replay_max_error /
    replay_mean_error: distance (m) between the expert and that replay; deviation: largest distance (m)
    from the route's centre line; heading_deviation: largest heading difference to it (degrees).
    """
    H, dt = scenario.horizon, scenario.dt
    states = scenario.expert.states()[: H + 1]
    v = states[:, 3]
    a = window_accelerations(v, dt)
    jerk = np.diff(a) / dt if len(a) > 1 else np.zeros(1)
    hits = collision_steps(states, scenario, CLEARANCE)
    replay = expert_replay(scenario)
    rhits = collision_steps(replay, scenario, REPLAY_CLEARANCE)
    err = np.linalg.norm(replay[:, :2] - states[:, :2], axis=1)
    route = scenario.map.route_polyline(scenario.route)
    _, lat, h = project_to_polyline(states[:, :2], route)
    dh = np.abs((states[:, 2] - h + np.pi) % (2 * np.pi) - np.pi)
    return {
        "max_accel": float(max(a.max(initial=0.0), 0.0)),
        "max_decel": float(max(-a.min(initial=0.0), 0.0)),
        "mean_jerk": float(np.abs(jerk).mean()),
        "min_speed": float(v.min()),
        "max_speed": float(v.max()),
        "distance": float(np.hypot(*np.diff(states[:, :2], axis=0).T).sum()),
        "collisions_with_margin": int(len(hits["dynamic"]) + len(hits["static"])),
        "replay_collisions": int(len(rhits["dynamic"]) + len(rhits["static"])),
        "replay_max_error": float(err.max()),
        "replay_mean_error": float(err.mean()),
        "deviation": float(np.abs(lat).max()),
        "heading_deviation": float(np.rad2deg(dh.max())),
    }


MUST_COLLIDE = {"lead_vehicle": "dynamic", "cut_in": "dynamic", "crossing": "dynamic", "parked_obstacle": "static"}
# why a drawn scenario is redrawn: the keys of expert_checks (and of the suite manifest's rejections)
REASONS = ("collision", "replay", "deviation", "comfort", "progress", "kind", "static_gaussians")


def expert_checks(scenario: Scenario, must_collide: str | None = None, nudge: float = 0.0) -> dict[str, str]:
    """What is wrong with a (generated) scenario's expert and kind, by reason (``REASONS``); {} when good.

    must_collide: "dynamic" / "static" (straight ahead at constant speed must hit that, early enough
    to leave ``MIN_TIME_TO_COLLISION`` s), "route" (the same along the route, e.g. a merge), None.
    nudge: metres the expert may stray from its route's centre line beyond ``MAX_DEVIATION`` (around
    an obstacle).
    """
    r = expert_report(scenario)
    out: dict[str, str] = {}
    if r["collisions_with_margin"]:
        n = r["collisions_with_margin"]
        out["collision"] = f"expert comes within {CLEARANCE} m of an agent/obstacle at {n} steps"
    if r["replay_collisions"]:
        n = r["replay_collisions"]
        out["replay"] = f"its replayed labels come within {REPLAY_CLEARANCE} m of something at {n} steps"
    elif r["replay_max_error"] > MAX_REPLAY_ERROR:
        out["replay"] = f"replayed labels drift {r['replay_max_error']:.2f} m from the expert (> {MAX_REPLAY_ERROR})"
    if r["deviation"] > MAX_DEVIATION + nudge or r["heading_deviation"] > 30.0:
        out["deviation"] = (
            f"expert strays {r['deviation']:.2f} m / {r['heading_deviation']:.0f} deg from its route "
            f"(> {MAX_DEVIATION + nudge:.2f} m / 30 deg)"
        )
    if r["max_accel"] > MAX_ACCEL + 1e-9 or r["max_decel"] > MAX_DECEL + 1e-9:
        out["comfort"] = (
            f"expert acceleration over 0.5 s out of +{MAX_ACCEL}/-{MAX_DECEL} m/s^2: "
            f"+{r['max_accel']:.2f} / -{r['max_decel']:.2f}"
        )
    if r["distance"] < MIN_DISTANCE:
        out["progress"] = f"expert drives {r['distance']:.1f} m over the clip (< {MIN_DISTANCE})"
    if must_collide:
        kind, step = first_constant_speed_collision(scenario, along_route=must_collide == "route")
        want = "dynamic" if must_collide == "route" else must_collide
        if kind != want:
            out["kind"] = f"holding the initial speed does not lead to a {want} collision (got {kind})"
        elif step is not None and step * scenario.dt < MIN_TIME_TO_COLLISION:  # a collision has a step
            out["kind"] = f"the constant-speed collision comes at {step * scenario.dt:.1f} s, too early to react"
        elif step is not None:
            xy = scenario.expert.states()[: step + 1, :2]
            lag = float(np.hypot(*np.diff(xy, axis=0).T).sum()) - float(scenario.expert.speed[0]) * step * scenario.dt
            if lag > MAX_LAG_AT_COLLISION:
                out["kind"] = (
                    f"the constant-speed driver collides {lag:.1f} m behind the expert (> {MAX_LAG_AT_COLLISION})"
                )
    return out


def expert_problems(scenario: Scenario, must_collide: str | None = None, nudge: float = 0.0) -> list[str]:
    """:func:`expert_checks`' messages: empty when the scenario is good."""
    return list(expert_checks(scenario, must_collide, nudge).values())
