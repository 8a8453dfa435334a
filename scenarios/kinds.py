"""The scenario kinds: road geometry, the ego's start and route, and log-replayed traffic, drawn
from a random generator (so every scenario is a pure function of its seed).

Each ``draft_<kind>(rng, garage, horizon, dt)`` returns a :class:`Draft`: the road network, the
ego's route and reference path (rear-axle, starting at the ego's start pose), its initial and
cruise speeds, the agents (poses for steps 0..horizon), static obstacles, and which collision a
driver who holds its initial speed straight ahead must have (``must_collide``): that is what makes
the kind real, and ``scenarios.generate`` rejects a draw where it does not happen.

Frames as ``sim.frames``: world xy metres, yaw from +x towards +y; agent poses are box
bottom-centres on flat ground (z = 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scenarios.format import EgoSpec, Lane
from scenarios.roads import (
    SHOULDER,
    Curb,
    RoadNet,
    Strip,
    Stripe,
    add_road,
    arc_path,
    lane_offset,
    link,
    smooth_step,
    stop_line,
    straight,
)
from sim.geometry import interpolate_polyline, offset_polyline, polyline_arclength, resample_polyline

EGO = EgoSpec()
# metres of straight road, from 40 m behind the ego's start: its drive (<= ~130 m) plus a view ahead
ROAD_LENGTH = 240.0


@dataclass
class AgentDraft:
    id: str
    type: str
    asset: str | None
    size: np.ndarray  # [3]
    poses: np.ndarray  # [H + 1, 4]
    present: np.ndarray  # [H + 1] bool


@dataclass
class ObstacleDraft:
    """A static obstacle: its box, and what to bake into the background there."""

    id: str
    pose: np.ndarray  # [4]
    size: np.ndarray  # [3]
    prop: str  # the sim.procedural Prop kind baked into the background at ``pose``


@dataclass
class Draft:
    kind: str
    net: RoadNet
    route: list[str]
    path: np.ndarray  # [M, 2] the ego's reference path (rear axle), from its start pose onwards
    v0: float
    v_cruise: float
    agents: list[AgentDraft] = field(default_factory=list)
    obstacles: list[ObstacleDraft] = field(default_factory=list)
    # "dynamic" / "static": holding v0 straight ahead must hit that; "route": an agent, holding v0 along
    # the route (a merge); None: nothing to hit
    must_collide: str | None = None
    params: dict = field(default_factory=dict)


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


def cut_path(path: np.ndarray, s0: float, length: float | None = None) -> np.ndarray:
    """The part of polyline ``path`` from arclength s0 (to s0 + length), resampled every metre."""
    total = polyline_arclength(path)[-1]
    end = total if length is None else min(total, s0 + length)
    n = max(int(np.ceil((end - s0) / 1.0)), 1)
    return interpolate_polyline(path, np.linspace(s0, end, n + 1))[0]


def _vehicle_agent(aid: str, garage: Garage, rng, path, s, offset=None, margin=0.0) -> AgentDraft:
    asset, size = garage.pick_vehicle(rng)
    poses = poses_along(path, s, offset)
    return AgentDraft(aid, "vehicle", asset, np.asarray(size, dtype=np.float64), poses, present_on(path, s, margin))


def _route_path(net: RoadNet, route: list[str]) -> np.ndarray:
    parts: list[np.ndarray] = []
    for i, lid in enumerate(route):
        c = np.asarray(net.lane(lid).centerline)
        if i and np.allclose(c[0], parts[-1][-1], atol=1e-6):
            c = c[1:]
        parts.append(c)
    return resample_polyline(np.concatenate(parts), 1.0)


def _traffic_in_lanes(net, ids, skip, garage, rng, n, dt, ego_s, prefix="traffic", p=0.6):
    """Vehicles at constant speed in the lanes ``ids`` (not in ``skip``), one per lane at most."""
    agents = []
    for key, lid in ids.items():
        if lid in skip or rng.random() > p:
            continue
        lane = net.lane(lid).centerline
        total = polyline_arclength(lane)[-1]
        v = rng.uniform(6.0, 14.0)
        if key.startswith("f"):
            s0 = ego_s + rng.uniform(-25.0, 60.0)
        else:  # oncoming: starts ahead of the ego, i.e. early on its own (reversed) lane
            s0 = total - ego_s - rng.uniform(40.0, 160.0)
        s = s0 + v * dt * np.arange(n)
        agents.append(_vehicle_agent(f"{prefix}{len(agents)}", garage, rng, lane, s, margin=1.0))
    return agents


def _ego_speeds(rng) -> tuple[float, float]:
    v0 = float(rng.uniform(6.0, 13.0))
    return v0, float(np.clip(v0 + rng.uniform(-0.5, 1.5), 5.0, 15.0))


# -- kinds ---------------------------------------------------------------------------------------


def draft_lane_keep_straight(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.2, 3.8))
    n_fwd, n_back = int(rng.integers(1, 4)), int(rng.integers(0, 3))
    net = RoadNet()
    length = ROAD_LENGTH
    ids = add_road(net, "road", straight((-40.0, 0.0), 0.0, length), n_fwd, n_back, w)
    e = int(rng.integers(0, n_fwd))
    route = [ids[f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    path = cut_path(_route_path(net, route), ego_s)
    v0, vc = _ego_speeds(rng)
    agents = _traffic_in_lanes(net, ids, set(route), garage, rng, n, dt, ego_s)
    return Draft("lane_keep_straight", net, route, path, v0, vc, agents, params={"lanes": n_fwd + n_back})


def draft_lane_keep_curve(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.3, 3.8))
    n_fwd, n_back = int(rng.integers(1, 3)), int(rng.integers(0, 2))
    radius = float(rng.uniform(40.0, 140.0))
    turn = float(rng.uniform(np.deg2rad(35.0), np.deg2rad(100.0)))
    sign = 1.0 if rng.random() < 0.5 else -1.0
    pieces = [(rng.uniform(50.0, 70.0), 0.0), (radius * turn, sign / radius)]
    if rng.random() < 0.4:  # an S-bend
        r2 = float(rng.uniform(60.0, 150.0))
        pieces += [(rng.uniform(10.0, 30.0), 0.0), (r2 * turn * rng.uniform(0.5, 1.0), -sign / r2)]
    pieces.append((130.0, 0.0))
    ref = arc_path((-40.0, 0.0), 0.0, pieces)
    net = RoadNet()
    ids = add_road(net, "road", ref, n_fwd, n_back, w)
    e = int(rng.integers(0, n_fwd))
    route = [ids[f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    path = cut_path(_route_path(net, route), ego_s)
    v0 = float(rng.uniform(6.0, 12.0))
    vc = float(np.clip(v0 + rng.uniform(-0.5, 2.0), 5.0, 14.0))
    agents = _traffic_in_lanes(net, ids, set(route), garage, rng, n, dt, ego_s, p=0.5)
    return Draft(
        "lane_keep_curve", net, route, path, v0, vc, agents, params={"radius": radius, "turn_deg": np.rad2deg(turn)}
    )


def draft_lead_vehicle(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.2, 3.8))
    n_fwd, n_back = int(rng.integers(1, 3)), int(rng.integers(0, 2))
    net = RoadNet()
    ids = add_road(net, "road", straight((-40.0, 0.0), 0.0, ROAD_LENGTH), n_fwd, n_back, w)
    e = int(rng.integers(0, n_fwd))
    route = [ids[f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    lane = _route_path(net, route)
    path = cut_path(lane, ego_s)
    v0, vc = _ego_speeds(rng)
    asset, size = garage.pick_vehicle(rng)
    ego_front = ego_s + EGO.center_offset + EGO.length / 2
    if rng.random() < 0.35:  # a slow vehicle ahead
        mode = "slow"
        v_lead = float(v0 * rng.uniform(0.25, 0.55))
        gap = float(rng.uniform(15.0, 35.0))
        s_l, _ = speed_profile(v_lead, [], n, dt)
    else:  # it brakes, maybe to a stop
        mode = "braking"
        v_lead = float(np.clip(v0 + rng.uniform(-1.0, 1.0), 4.0, 15.0))
        gap = float(rng.uniform(12.0, 28.0))
        t_b = float(rng.uniform(0.5, 3.0))
        decel = float(rng.uniform(1.0, 3.0))
        v_end = 0.0 if rng.random() < 0.35 else float(rng.uniform(0.0, max(v_lead - 4.0, 0.5)))
        s_l, _ = speed_profile(v_lead, [(t_b, decel, v_end)], n, dt)
    s_center = ego_front + gap + size[0] / 2 + s_l
    lead = AgentDraft(
        "lead", "vehicle", asset, np.asarray(size, float), poses_along(lane, s_center), present_on(lane, s_center, 1.0)
    )
    agents = [lead, *_traffic_in_lanes(net, ids, set(route), garage, rng, n, dt, ego_s, p=0.4)]
    return Draft(
        "lead_vehicle", net, route, path, v0, vc, agents, must_collide="dynamic", params={"mode": mode, "gap": gap}
    )


def draft_cut_in(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.2, 3.7))
    n_fwd, n_back = int(rng.integers(2, 4)), int(rng.integers(0, 2))
    net = RoadNet()
    ids = add_road(net, "road", straight((-40.0, 0.0), 0.0, ROAD_LENGTH), n_fwd, n_back, w)
    e = int(rng.integers(0, n_fwd))
    sides = [d for d in (-1, 1) if 0 <= e + d < n_fwd]
    src = e + sides[int(rng.integers(len(sides)))]
    route = [ids[f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    lane_e = _route_path(net, route)
    lane_src = net.lane(ids[f"f{src}"]).centerline
    path = cut_path(lane_e, ego_s)
    v0, vc = _ego_speeds(rng)
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
    others = _traffic_in_lanes(net, ids, {route[0], ids[f"f{src}"]}, garage, rng, n, dt, ego_s, p=0.4)
    return Draft(
        "cut_in",
        net,
        route,
        path,
        v0,
        vc,
        [cutter, *others],
        must_collide="dynamic",
        params={"from": "left" if src < e else "right", "t_lane_change": t_lc},
    )


def draft_parked_obstacle(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.3, 3.8))
    n_fwd, n_back = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    net = RoadNet()
    ids = add_road(net, "road", straight((-40.0, 0.0), 0.0, ROAD_LENGTH), n_fwd, n_back, w)
    e = n_fwd - 1  # the curb-side lane
    route = [ids[f"f{e}"]]
    ego_s = 40.0 + rng.uniform(0.0, 10.0)
    lane = _route_path(net, route)
    v0, vc = _ego_speeds(rng)
    barrier = rng.random() < 0.3
    asset, size = garage.parked(rng, barrier)
    size = np.asarray(size, dtype=np.float64)
    s_obs = ego_s + EGO.center_offset + rng.uniform(35.0, 70.0)
    # how far it reaches into the lane past where the ego's side would be, driving in the centre
    overlap = float(rng.uniform(0.3, 0.8))
    intrusion = w / 2 - EGO.width / 2 + overlap  # from the lane's right boundary
    yaw_off = float(np.deg2rad(rng.uniform(-5.0, 5.0))) if not barrier else 0.0
    lat = -w / 2 + intrusion - size[1] / 2  # obstacle centre, metres left of the lane centre
    xy, h = interpolate_polyline(lane, s_obs)
    nrm = np.array([-np.sin(h), np.cos(h)])
    c = xy + lat * nrm
    pose = np.array([c[0], c[1], 0.0, h + yaw_off])
    obstacle = ObstacleDraft("parked" if not barrier else "barrier", pose, size, asset)
    # the nudge: ego's right side clears the obstacle's left side by 0.7 m
    half_extent = 0.5 * (abs(size[1] * np.cos(yaw_off)) + abs(size[0] * np.sin(yaw_off)))
    need = (lat + half_extent) + 0.7 + EGO.width / 2
    ramp = max(25.0, 2.8 * vc)
    front_clear = EGO.center_offset + EGO.length / 2 + 1.0  # rear axle to front, plus a metre
    s_in = s_obs - size[0] / 2 - front_clear - ramp  # start moving over
    s_out = s_obs + size[0] / 2 + EGO.center_offset - EGO.length / 2 + 2.0  # rear clear of it
    s_lane = polyline_arclength(lane)
    bump = need * (smooth_step((s_lane - s_in) / ramp) - smooth_step((s_lane - s_out) / ramp))
    nudged = offset_polyline(lane, bump)
    path = cut_path(nudged, ego_s)
    # no traffic in the lane the nudge leans into (the next lane left, or the oncoming one)
    skip = {route[0], ids[f"f{e - 1}"] if e > 0 else ids["b0"]}
    agents = _traffic_in_lanes(net, ids, skip, garage, rng, n, dt, ego_s, p=0.3)
    return Draft(
        "parked_obstacle",
        net,
        route,
        path,
        v0,
        vc,
        agents,
        [obstacle],
        must_collide="static",
        params={"obstacle": "barrier" if barrier else "vehicle", "nudge": float(need)},
    )


def draft_crossing(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.2, 3.6))
    wc = float(rng.uniform(3.2, 3.6))
    n_fwd, n_back = int(rng.integers(1, 3)), 1
    nc_fwd, nc_back = 1, 1
    v0, vc = _ego_speeds(rng)
    X = 0.0  # the crossing road's reference line is x = 0
    half_c = 0.5 * (nc_fwd + nc_back) * wc + 1.0  # half the box along x
    top = n_back * w + 1.0
    bottom = n_fwd * w + 1.0
    net = RoadNet()
    L = 110.0
    main_in = add_road(net, "main_in", straight((X - half_c - L, 0.0), 0.0, L), n_fwd, n_back, w)
    main_box = add_road(net, "main_box", straight((X - half_c, 0.0), 0.0, 2 * half_c), n_fwd, n_back, w, False, False)
    main_out = add_road(net, "main_out", straight((X + half_c, 0.0), 0.0, L), n_fwd, n_back, w)
    cross_in = add_road(net, "cross_in", straight((X, -bottom - L), np.pi / 2, L), nc_fwd, nc_back, wc)
    cross_box = add_road(net, "cross_box", straight((X, -bottom), np.pi / 2, bottom + top), nc_fwd, nc_back, wc,
                         False, False)  # fmt: skip
    cross_out = add_road(net, "cross_out", straight((X, top), np.pi / 2, L), nc_fwd, nc_back, wc)
    for a, b, c in ((main_in, main_box, main_out), (cross_in, cross_box, cross_out)):
        for key in a:
            if key.startswith("f"):
                link(net, a[key], b[key])
                link(net, b[key], c[key])
            else:
                link(net, c[key], b[key])
                link(net, b[key], a[key])
    net.stripes.append(stop_line(straight((X - half_c - L, 0.0), 0.0, L), n_fwd, w))
    e = int(rng.integers(0, n_fwd))
    route = [main_in[f"f{e}"], main_box[f"f{e}"], main_out[f"f{e}"]]
    full = _route_path(net, route)
    y_e = lane_offset(e, True, w)

    # crossing vehicles: a platoon in one crossing lane; one of them is where the ego's box would
    # be if it held v0
    forward = rng.random() < 0.5  # crossing lane driving +y (from the ego's right)
    key = "f0" if forward else "b0"
    lane_ids = [cross_in[key], cross_box[key], cross_out[key]]
    if not forward:
        lane_ids = lane_ids[::-1]
    cross_path = _route_path(net, lane_ids)
    x_lane = X + (wc / 2 if forward else -wc / 2)  # the crossing lane's centre line
    t_star = float(rng.uniform(3.0, 5.5))
    ego_x0 = x_lane - EGO.center_offset - v0 * t_star
    ego_s = float(ego_x0 - full[0, 0])
    path = cut_path(full, ego_s)
    v_c = float(rng.uniform(7.0, 13.0))
    k = int(rng.integers(1, 4))
    hit = int(rng.integers(0, k))
    headway = float(rng.uniform(1.6, 3.0))
    # arclength along the crossing path of the ego lane's centre line
    s_conf = float(abs(y_e - cross_path[0, 1]))
    agents = []
    t = np.arange(n) * dt
    for i in range(k):
        asset, size = garage.pick_vehicle(rng)
        s_i = s_conf + v_c * (t - t_star) - (i - hit) * headway * v_c
        poses = poses_along(cross_path, s_i)
        agents.append(
            AgentDraft(f"crossing{i}", "vehicle", asset, np.asarray(size, float), poses, present_on(cross_path, s_i, 1))
        )
    # oncoming traffic on the main road, before or after the intersection
    if rng.random() < 0.5:
        lane = _route_path(net, [main_out["b0"], main_box["b0"], main_in["b0"]])
        v = rng.uniform(6.0, 12.0)
        s = rng.uniform(0.0, 60.0) + v * t
        agents.append(_vehicle_agent("oncoming", garage, rng, lane, s, margin=1.0))
    return Draft(
        "crossing",
        net,
        route,
        path,
        v0,
        vc,
        agents,
        must_collide="dynamic",
        params={"from": "right" if forward else "left", "vehicles": k, "t_conflict": t_star},
    )


def draft_merge(rng, garage: Garage, horizon: int, dt: float) -> Draft:
    n = horizon + 1
    w = float(rng.uniform(3.3, 3.7))
    n_fwd, n_back = int(rng.integers(1, 3)), int(rng.integers(0, 2))
    v_m = float(rng.uniform(8.0, 13.0))
    v0 = float(np.clip(v_m + rng.uniform(-2.0, 1.0), 5.0, 14.0))
    vc = v_m
    x_m = 0.0  # where the ramp's centre line meets the main road's right lane
    L_before, L_after = 130.0, 130.0
    merge_len = float(rng.uniform(50.0, 70.0))
    depth = float(rng.uniform(6.0, 9.0))  # lateral distance of the ramp's start from the right lane
    net = RoadNet()
    main_a = add_road(net, "main_a", straight((x_m - L_before, 0.0), 0.0, L_before), n_fwd, n_back, w, edges=False)
    main_b = add_road(net, "main_b", straight((x_m, 0.0), 0.0, L_after), n_fwd, n_back, w, edges=False)
    r = n_fwd - 1
    y_r = lane_offset(r, True, w)
    for key in main_a:
        if key.startswith("f"):
            link(net, main_a[key], main_b[key])
        else:
            link(net, main_b[key], main_a[key])
    # the ramp: straight, then a smooth sideways blend into the right lane ending at x_m
    xs = np.arange(x_m - L_before, x_m + 1e-9, 1.0)
    ys = y_r - depth * (1.0 - smooth_step((xs - (x_m - merge_len)) / merge_len))
    ramp_c = np.stack([xs, ys], 1)
    net.lanes.append(Lane("ramp", ramp_c, w, None, None, (main_b[f"f{r}"],)))
    net.strips.append(Strip(ramp_c, w + 2 * SHOULDER))
    # curbs: the main road's left curb throughout; its right curb until the ramp's left curb meets
    # it (the gore), the ramp's left curb up to there; the ramp's right curb, then the main road's
    y_curb = y_r - w / 2 - SHOULDER
    ramp_left = offset_polyline(ramp_c, w / 2 + SHOULDER)
    meet = max(int(np.argmax(ramp_left[:, 1] >= y_curb)), 2)
    x_meet = float(ramp_left[meet, 0])
    net.edges.append(
        Curb(np.array([[x_m - L_before, n_back * w + SHOULDER], [x_m + L_after, n_back * w + SHOULDER]]), 1)
    )
    net.edges.append(Curb(np.array([[x_m - L_before, y_curb], [x_meet, y_curb]]), -1))
    net.edges.append(Curb(ramp_left[: meet + 1], 1))
    ramp_right = offset_polyline(ramp_c, -w / 2 - SHOULDER)
    net.edges.append(Curb(np.concatenate([ramp_right, [[x_m + L_after, y_curb]]]), -1))
    # paint: the main road's right line is solid up to the gore, then dashed where the ramp joins
    y_line = y_r - w / 2
    net.stripes = [
        st for st in net.stripes if not (st.style == "solid" and np.allclose(st.polyline[:, 1], y_line)
                                         and st.polyline[-1, 0] <= x_m + 1e-6)
    ]  # fmt: skip
    left_line = offset_polyline(ramp_c, w / 2)
    x_line = float(left_line[np.argmax(left_line[:, 1] >= y_line - 1e-6), 0])  # the ramp's left line meets it
    net.stripes.append(Stripe(np.array([[x_m - L_before, y_line], [x_line, y_line]]), "solid", "white"))
    net.stripes.append(Stripe(np.array([[x_line, y_line], [x_m, y_line]]), "dashed", "white"))
    net.stripes.append(Stripe(offset_polyline(ramp_c, -w / 2), "solid", "white"))
    net.stripes.append(Stripe(left_line[left_line[:, 0] <= x_line], "solid", "white"))
    route = ["ramp", main_b[f"f{r}"]]
    full = _route_path(net, route)
    t = np.arange(n) * dt
    # the ego reaches the merge point (arclength of x_m on its route) at t_m if it holds v0
    t_m = float(rng.uniform(5.5, 7.0))
    s_merge = float(polyline_arclength(ramp_c)[-1])
    ego_s = s_merge - v0 * t_m
    path = cut_path(full, ego_s)
    # main-road traffic in the right lane: vehicle "A" is at the merge point when the ego would be
    lane = _route_path(net, [main_a[f"f{r}"], main_b[f"f{r}"]])
    s_merge_main = float(x_m - lane[0, 0]) + EGO.center_offset
    agents = []
    # the slot between A and B is the one to merge into; more traffic ahead of A and behind B
    g_ab = float(rng.uniform(45.0, 65.0))  # centre to centre
    slots = [("main_lead", float(rng.uniform(30.0, 50.0))), ("main_a", 0.0), ("main_b", -g_ab)]
    if rng.random() < 0.5:
        slots.append(("main_c", -g_ab - float(rng.uniform(30.0, 50.0))))
    lead_time = float(rng.uniform(0.2, 0.6))  # A reaches the merge point this much before the ego would
    for name, offs in slots:
        asset, size = garage.pick_vehicle(rng)
        s_j = s_merge_main + offs + v_m * (t - t_m + lead_time)
        poses = poses_along(lane, s_j)
        agents.append(AgentDraft(name, "vehicle", asset, np.asarray(size, float), poses, present_on(lane, s_j, 1.0)))
    for key in main_b:  # other lanes: constant speed, one vehicle each at most
        if key == f"f{r}" or rng.random() > 0.4:
            continue
        fwd = key.startswith("f")
        other = _route_path(net, [main_a[key], main_b[key]] if fwd else [main_b[key], main_a[key]])
        v = rng.uniform(7.0, 14.0)
        s0 = L_before + rng.uniform(-60.0, 40.0) if fwd else L_after + rng.uniform(-40.0, 80.0)
        agents.append(_vehicle_agent(f"other_{key}", garage, rng, other, s0 + v * t, margin=1.0))
    return Draft(
        "merge",
        net,
        route,
        path,
        v0,
        vc,
        agents,
        must_collide="route",
        params={"t_merge": t_m, "main_speed": v_m},
    )


DRAFTS = {
    "lane_keep_straight": draft_lane_keep_straight,
    "lane_keep_curve": draft_lane_keep_curve,
    "lead_vehicle": draft_lead_vehicle,
    "cut_in": draft_cut_in,
    "parked_obstacle": draft_parked_obstacle,
    "crossing": draft_crossing,
    "merge": draft_merge,
}
