"""The scenario kinds' traffic: the ego's route, start and speed, and the log-replayed agents on a
place (``scenarios.places``), drawn from a traffic generator, so that every scenario is a pure function
of its place seed and traffic seed.

Each ``traffic_<kind>(place, rng, garage, horizon, dt)`` returns a :class:`Draft`: the place's road
network and static obstacles, the ego's route (lane ids) and start (arclength along the route's
centre line, heading along it, speed ``v0``), the agents (poses for steps 0..horizon), and which
collision a driver who holds its initial speed straight ahead must have (``must_collide``): that is
what makes the kind real, and ``scenarios.generation`` redraws the traffic when it does not happen.
Traffic speeds follow the roads' speed limits.

Frames as ``sim.frames``: world xy metres, yaw from +x towards +y; agent poses are box
bottom-centres on flat ground (z = 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scenarios.places import EGO, ObstacleDraft, Place, route_path
from scenarios.reactive import quantise_down
from scenarios.roads import RoadNet, lane_offset, smooth_step
from sim.geometry import interpolate_polyline, polyline_arclength

SPEED_QUANTUM = 0.5  # m/s: the reactive expert cruises at the limit rounded down to this


@dataclass
class AgentDraft:
    id: str
    type: str
    asset: str | None
    size: np.ndarray  # [3]
    poses: np.ndarray  # [H + 1, 4]
    present: np.ndarray  # [H + 1] bool


@dataclass
class Draft:
    """A drawn scenario before its expert drive: the place's ``net`` and ``obstacles``, the ego's
    ``route`` (lane ids) and ``start`` (m along the route's centre line) at speed ``v0`` (m/s), the agents."""

    kind: str
    net: RoadNet
    route: list[str]
    start: float
    v0: float
    agents: list[AgentDraft] = field(default_factory=list)
    obstacles: list[ObstacleDraft] = field(default_factory=list)
    # "dynamic" / "static": holding v0 straight ahead must hit that; "route": an agent, holding v0 along
    # the route (a merge); None: nothing to hit
    must_collide: str | None = None
    params: dict = field(default_factory=dict)

    def start_state(self) -> np.ndarray:
        """[4] (x, y, yaw, v): the ego's rear axle on the route's centre line at ``start``, heading along it."""
        xy, h = interpolate_polyline(route_path(self.net, self.route), self.start)
        return np.array([xy[0], xy[1], h, self.v0])


@dataclass
class Garage:
    """Where vehicles come from. ``pick_vehicle(rng) -> (asset name, size [3] (l, w, h) m)``: a moving
    vehicle's asset; ``parked(rng, barrier) -> (prop kind, size [3])``: something to bake into the
    background as a static obstacle (a ``sim.procedural.Prop`` kind: a vehicle kind, or "barrier")."""

    pick_vehicle: Callable[[np.random.Generator], tuple[str, np.ndarray]]
    parked: Callable[[np.random.Generator, bool], tuple[str, np.ndarray]]


# -- motion helpers --------------------------------------------------------------------------------


def speed_profile(v0: float, changes, n: int, dt: float, jerk: float = 4.0) -> tuple[np.ndarray, np.ndarray]:
    """Distance s [n] (m, from 0) and speed v [n] (m/s) at times k * dt of a vehicle starting at v0.

    changes: list of (t_start s, rate m/s^2 > 0, v_target m/s), by t_start: from t_start the speed
    approaches v_target at up to ``rate``; acceleration changes at most ``jerk`` m/s^3 (no steps).
    """
    fine = 10
    h = dt / fine
    m = (n - 1) * fine + 1
    changes = sorted(changes)
    v = np.empty(m)
    v[0] = v0
    a = 0.0
    for i in range(1, m):
        tc = (i - 1) * h
        active = [c for c in changes if c[0] <= tc + 1e-9]
        want = 0.0
        if active:
            _, rate, target = active[-1]
            want = float(np.clip((target - v[i - 1]) / 0.5, -rate, rate))
        a += float(np.clip(want - a, -jerk * h, jerk * h))
        v[i] = v[i - 1] + a * h
        if v[i] <= 0.0:
            v[i], a = 0.0, 0.0
    s = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * h)])
    return s[::fine].copy(), v[::fine].copy()


def poses_along(path: np.ndarray, s: np.ndarray, offset=None) -> np.ndarray:
    """Box poses [n, 4] (x, y, z=0, yaw) of a vehicle at arclengths s [n] along path [M, 2], shifted
    ``offset`` [n] metres to the left (a lane change); yaw follows the motion."""
    xy, h = interpolate_polyline(path, s)
    if offset is None:
        return np.concatenate([xy, np.zeros((len(s), 1)), h[:, None]], axis=1)
    offset = np.asarray(offset, dtype=np.float64)
    n = np.stack([-np.sin(h), np.cos(h)], -1)
    xy = xy + offset[:, None] * n
    ds = np.gradient(s)
    do = np.gradient(offset)
    yaw = h + np.arctan2(do, np.maximum(ds, 1e-3))
    return np.concatenate([xy, np.zeros((len(s), 1)), yaw[:, None]], axis=1)


def present_on(path: np.ndarray, s: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """[n] bool: the vehicle is on the mapped part of its path (arclength within [margin, end - margin])."""
    total = polyline_arclength(path)[-1]
    return (s >= margin) & (s <= total - margin)


def _vehicle_agent(aid: str, garage: Garage, rng, path, s, offset=None, margin=0.0) -> AgentDraft:
    asset, size = garage.pick_vehicle(rng)
    poses = poses_along(path, s, offset)
    return AgentDraft(aid, "vehicle", asset, np.asarray(size, dtype=np.float64), poses, present_on(path, s, margin))


def _traffic_in_lanes(net, ids, skip, garage, rng, n, dt, ego_s, limit, prefix="traffic", p=0.6):
    """Vehicles at constant speed (60-105 % of the limit) in the lanes ``ids`` (not in ``skip``), one per
    lane at most."""
    agents = []
    for key, lid in ids.items():
        if lid in skip or rng.random() > p:
            continue
        lane = net.lane(lid).centerline
        total = polyline_arclength(lane)[-1]
        v = limit * rng.uniform(0.6, 1.05)
        if key.startswith("f"):
            s0 = ego_s + rng.uniform(-25.0, 60.0)
        else:  # oncoming: starts ahead of the ego, i.e. early on its own (reversed) lane
            s0 = total - ego_s - rng.uniform(40.0, 160.0)
        s = s0 + v * dt * np.arange(n)
        agents.append(_vehicle_agent(f"{prefix}{len(agents)}", garage, rng, lane, s, margin=1.0))
    return agents


def _cruise(limit: float) -> float:
    """The reactive expert's cruise speed under a limit (m/s, rounded down to the bins' 0.5 m/s)."""
    return float(quantise_down(limit, SPEED_QUANTUM))


def _ego_speed(rng, limit: float, lo: float = 0.6) -> float:
    """An initial speed: lo..100 % of the cruise speed under ``limit``, at least 4 m/s."""
    return float(max(_cruise(limit) * rng.uniform(lo, 1.0), 4.0))


# -- kinds ---------------------------------------------------------------------------------------


def traffic_lane_keep_straight(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    lay = place.layout
    e = int(rng.integers(0, lay["n_fwd"]))
    route = [lay["ids"][f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    v0 = _ego_speed(rng, lay["limit"])
    agents = _traffic_in_lanes(place.net, lay["ids"], set(route), garage, rng, horizon + 1, dt, ego_s, lay["limit"])
    return Draft(place.kind, place.net, route, ego_s, v0, agents)


def traffic_lane_keep_curve(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    lay = place.layout
    e = int(rng.integers(0, lay["n_fwd"]))
    route = [lay["ids"][f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    v0 = _ego_speed(rng, lay["limit"])
    n = horizon + 1
    agents = _traffic_in_lanes(place.net, lay["ids"], set(route), garage, rng, n, dt, ego_s, lay["limit"], p=0.5)
    return Draft(place.kind, place.net, route, ego_s, v0, agents)


def traffic_lead_vehicle(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    """A vehicle ahead in the ego's lane that is slow, or brakes (1-3 m/s^2), maybe to a stop."""
    lay, n = place.layout, horizon + 1
    e = int(rng.integers(0, lay["n_fwd"]))
    route = [lay["ids"][f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    lane = route_path(place.net, route)
    v0 = _ego_speed(rng, lay["limit"], 0.85)
    asset, size = garage.pick_vehicle(rng)
    ego_front = ego_s + EGO.center_offset + EGO.length / 2
    if rng.random() < 0.35:  # a slow vehicle ahead
        mode = "slow"
        v_lead = float(v0 * rng.uniform(0.25, 0.55))
        gap = float(rng.uniform(15.0, 35.0))
        s_l, _ = speed_profile(v_lead, [], n, dt)
    else:  # it brakes, maybe to a stop
        mode = "braking"
        v_lead = float(np.clip(v0 + rng.uniform(-1.0, 1.0), 4.0, 16.0))
        gap = float(rng.uniform(12.0, 28.0))
        t_b = float(rng.uniform(0.5, 3.0))
        decel = float(rng.uniform(1.0, 3.0))
        v_end = 0.0 if rng.random() < 0.35 else float(rng.uniform(0.0, max(v_lead - 4.0, 0.5)))
        s_l, _ = speed_profile(v_lead, [(t_b, decel, v_end)], n, dt)
    s_center = ego_front + gap + size[0] / 2 + s_l
    lead = AgentDraft(
        "lead", "vehicle", asset, np.asarray(size, float), poses_along(lane, s_center), present_on(lane, s_center, 1.0)
    )
    others = _traffic_in_lanes(place.net, lay["ids"], set(route), garage, rng, n, dt, ego_s, lay["limit"], p=0.4)
    return Draft(
        place.kind, place.net, route, ego_s, v0, [lead, *others], must_collide="dynamic",
        params={"mode": mode, "gap": gap},
    )  # fmt: skip


def traffic_cut_in(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    """A faster vehicle from the next lane changes into the ego's lane ahead (over 2-3.5 s), then slows."""
    lay, n = place.layout, horizon + 1
    w, n_fwd, ids = lay["width"], lay["n_fwd"], lay["ids"]
    e = int(rng.integers(0, n_fwd))
    sides = [d for d in (-1, 1) if 0 <= e + d < n_fwd]
    src = e + sides[int(rng.integers(len(sides)))]
    route = [ids[f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    lane_src = place.net.lane(ids[f"f{src}"]).centerline
    v0 = _ego_speed(rng, lay["limit"], 0.85)
    asset, size = garage.pick_vehicle(rng)
    ego_front = ego_s + EGO.center_offset + EGO.length / 2
    v_c = float(v0 + rng.uniform(0.5, 3.0))
    t_lc = float(rng.uniform(0.5, 2.5))
    dur = float(rng.uniform(2.0, 3.5))
    v_slow = float(max(v0 - rng.uniform(2.5, 6.0), 0.0))
    decel = float(rng.uniform(1.0, 2.5))
    s_c, _ = speed_profile(v_c, [(t_lc + 0.5 * dur, decel, v_slow)], n, dt)
    start = ego_front + rng.uniform(-3.0, 8.0) + size[0] / 2  # its centre, relative to the ego's front
    t = np.arange(n) * dt
    shift = lane_offset(e, True, w) - lane_offset(src, True, w)  # metres left, from its lane to the ego's
    offset = shift * smooth_step((t - t_lc) / dur)
    s_center = start + s_c
    poses = poses_along(lane_src, s_center, offset)
    cutter = AgentDraft("cut_in", "vehicle", asset, np.asarray(size, float), poses, present_on(lane_src, s_center, 1.0))
    skip = {route[0], ids[f"f{src}"]}
    others = _traffic_in_lanes(place.net, ids, skip, garage, rng, n, dt, ego_s, lay["limit"], p=0.4)
    return Draft(
        place.kind, place.net, route, ego_s, v0, [cutter, *others], must_collide="dynamic",
        params={"from": "left" if src < e else "right", "t_lane_change": t_lc},
    )  # fmt: skip


def traffic_parked_obstacle(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    """The ego in the curb-side lane, the place's obstacle 3-5 s ahead of its front at its initial speed;
    no traffic in the lane its nudge leans into (the next lane left, or the oncoming one)."""
    lay = place.layout
    e, ids = lay["lane"], lay["ids"]
    route = [ids[f"f{e}"]]
    (obstacle,) = place.obstacles
    v0 = _ego_speed(rng, lay["limit"], 0.85)
    ego_s = lay["s_obs"] - obstacle.size[0] / 2 - (EGO.center_offset + EGO.length / 2) - v0 * rng.uniform(3.0, 5.0)
    skip = {route[0], ids[f"f{e - 1}"] if e > 0 else ids["b0"]}
    n = horizon + 1
    agents = _traffic_in_lanes(place.net, ids, skip, garage, rng, n, dt, ego_s, lay["limit"], p=0.3)
    return Draft(place.kind, place.net, route, float(ego_s), v0, agents, list(place.obstacles), must_collide="static")


def traffic_crossing(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    """A platoon of 1-3 vehicles on the crossing road, timed so that one is where the ego's box would be
    at 3-5.5 s if it held its initial speed; sometimes oncoming traffic on the main road."""
    lay, n = place.layout, horizon + 1
    net, w, wc, X = place.net, lay["width"], lay["cross_width"], lay["X"]
    v0 = _ego_speed(rng, lay["limit"], 0.85)
    e = int(rng.integers(0, lay["n_fwd"]))
    route = [lay["main_in"][f"f{e}"], lay["main_box"][f"f{e}"], lay["main_out"][f"f{e}"]]
    full = route_path(net, route)
    y_e = lane_offset(e, True, w)
    forward = rng.random() < 0.5  # crossing lane driving +y (from the ego's right)
    key = "f0" if forward else "b0"
    lane_ids = [lay["cross_in"][key], lay["cross_box"][key], lay["cross_out"][key]]
    if not forward:
        lane_ids = lane_ids[::-1]
    cross_path = route_path(net, lane_ids)
    x_lane = X + (wc / 2 if forward else -wc / 2)  # the crossing lane's centre line
    t_star = float(rng.uniform(3.0, 5.5))
    ego_s = float(x_lane - EGO.center_offset - v0 * t_star - full[0, 0])
    v_c = float(lay["cross_limit"] * rng.uniform(0.75, 1.0))
    k = int(rng.integers(1, 4))
    hit = int(rng.integers(0, k))
    headway = float(rng.uniform(1.6, 3.0))
    s_conf = float(abs(y_e - cross_path[0, 1]))  # arclength along the crossing path of the ego lane's centre
    agents = []
    t = np.arange(n) * dt
    for i in range(k):
        asset, size = garage.pick_vehicle(rng)
        s_i = s_conf + v_c * (t - t_star) - (i - hit) * headway * v_c
        poses = poses_along(cross_path, s_i)
        agents.append(
            AgentDraft(f"crossing{i}", "vehicle", asset, np.asarray(size, float), poses, present_on(cross_path, s_i, 1))
        )
    if rng.random() < 0.5:  # oncoming traffic on the main road, before or after the intersection
        lane = route_path(net, [lay["main_out"]["b0"], lay["main_box"]["b0"], lay["main_in"]["b0"]])
        v = lay["limit"] * rng.uniform(0.6, 1.0)
        agents.append(_vehicle_agent("oncoming", garage, rng, lane, rng.uniform(0.0, 60.0) + v * t, margin=1.0))
    return Draft(
        place.kind, net, route, ego_s, v0, agents, must_collide="dynamic",
        params={"from": "right" if forward else "left", "vehicles": k, "t_conflict": t_star},
    )  # fmt: skip


def traffic_merge(place: Place, rng, garage: Garage, horizon: int, dt: float) -> Draft:
    """Main-road traffic in the right lane at 80-100 % of the limit; the ego on the ramp, faster, would
    reach vehicle A 0.6-1.4 s behind it at the merge point if it held its speed: it must fit in behind A."""
    lay, n = place.layout, horizon + 1
    net, r = place.net, lay["right"]
    v_m = float(lay["limit"] * rng.uniform(0.8, 1.0))
    v0 = float(v_m + rng.uniform(1.5, 3.5))
    route = ["ramp", lay["main_b"][f"f{r}"]]
    t = np.arange(n) * dt
    t_m = float(rng.uniform(3.0, 5.0))  # holding v0, the ego reaches the merge point then
    ego_s = lay["s_merge"] - v0 * t_m
    lane = route_path(net, [lay["main_a"][f"f{r}"], lay["main_b"][f"f{r}"]])
    s_merge_main = float(lay["x_m"] - lane[0, 0]) + EGO.center_offset
    agents = []
    # the slot between A and B is the one to merge into; more traffic ahead of A and behind B
    g_ab = float(rng.uniform(45.0, 65.0))  # centre to centre
    slots = [("main_lead", float(rng.uniform(30.0, 50.0))), ("main_a", 0.0), ("main_b", -g_ab)]
    if rng.random() < 0.5:
        slots.append(("main_c", -g_ab - float(rng.uniform(30.0, 50.0))))
    lead_time = float(rng.uniform(0.6, 1.4))  # A reaches the merge point this much before the ego would
    for name, offs in slots:
        asset, size = garage.pick_vehicle(rng)
        s_j = s_merge_main + offs + v_m * (t - t_m + lead_time)
        poses = poses_along(lane, s_j)
        agents.append(AgentDraft(name, "vehicle", asset, np.asarray(size, float), poses, present_on(lane, s_j, 1.0)))
    for key in lay["main_b"]:  # other lanes: constant speed, one vehicle each at most
        if key == f"f{r}" or rng.random() > 0.4:
            continue
        fwd = key.startswith("f")
        pair = [lay["main_a"][key], lay["main_b"][key]]
        other = route_path(net, pair if fwd else pair[::-1])
        v = lay["limit"] * rng.uniform(0.6, 1.05)
        s0 = lay["L_before"] + rng.uniform(-60.0, 40.0) if fwd else lay["L_after"] + rng.uniform(-40.0, 80.0)
        agents.append(_vehicle_agent(f"other_{key}", garage, rng, other, s0 + v * t, margin=1.0))
    return Draft(
        place.kind, net, route, float(ego_s), v0, agents, must_collide="route",
        params={"t_merge": t_m, "main_speed": v_m},
    )  # fmt: skip


TRAFFIC = {
    "lane_keep_straight": traffic_lane_keep_straight,
    "lane_keep_curve": traffic_lane_keep_curve,
    "lead_vehicle": traffic_lead_vehicle,
    "cut_in": traffic_cut_in,
    "parked_obstacle": traffic_parked_obstacle,
    "crossing": traffic_crossing,
    "merge": traffic_merge,
}
