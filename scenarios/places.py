"""Places: the static part of a generated scenario -- its road network (lanes with speed limits, curbs,
paint), its static obstacles and so its background PLY -- drawn from a place seed, apart from the
traffic (``scenarios.kinds``), so that one background serves many traffic variants.

Each ``place_<kind>(rng, garage)`` returns a :class:`Place`; ``layout`` holds what the kind's traffic
draw needs to know about the roads (lane ids, widths, where the intersection or the ramp is). A
place draws nothing that depends on the ego or the traffic. Frames as ``sim.frames``: world xy metres,
yaw from +x towards +y; flat ground (z = 0).
"""

from __future__ import annotations

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
    draw_limit,
    lane_offset,
    link,
    smooth_step,
    stop_line,
    straight,
)
from sim.geometry import interpolate_polyline, offset_polyline, polyline_arclength, resample_polyline

EGO = EgoSpec()
# metres of straight road, from 40 m behind the ego's earliest start: its drive (<= ~130 m) plus a view ahead
ROAD_LENGTH = 240.0


@dataclass
class ObstacleDraft:
    """A static obstacle: its box, and what to bake into the background there."""

    id: str
    pose: np.ndarray  # [4]
    size: np.ndarray  # [3]
    prop: str  # the sim.procedural Prop kind baked into the background at ``pose``


@dataclass
class Place:
    """A drawn place: the kind it is made for, its roads, its static obstacles, what traffic draws need
    (``layout``) and figures for the tags (``params``)."""

    kind: str
    net: RoadNet
    obstacles: list[ObstacleDraft] = field(default_factory=list)
    layout: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)


def route_path(net: RoadNet, route: list[str], spacing: float = 1.0) -> np.ndarray:
    """The centre lines of lanes ``route`` joined (a shared vertex once) and resampled every ``spacing`` m."""
    parts: list[np.ndarray] = []
    for i, lid in enumerate(route):
        c = np.asarray(net.lane(lid).centerline)
        if i and np.allclose(c[0], parts[-1][-1], atol=1e-6):
            c = c[1:]
        parts.append(c)
    return resample_polyline(np.concatenate(parts), spacing)


def _straight_road(rng, kind: str, fwd: tuple[int, int], back: tuple[int, int], width: tuple[float, float]) -> Place:
    w = float(rng.uniform(*width))
    n_fwd, n_back = int(rng.integers(fwd[0], fwd[1] + 1)), int(rng.integers(back[0], back[1] + 1))
    limit = draw_limit(rng)
    net = RoadNet()
    ids = add_road(net, "road", straight((-40.0, 0.0), 0.0, ROAD_LENGTH), n_fwd, n_back, w, speed_limit=limit)
    layout = dict(ids=ids, n_fwd=n_fwd, n_back=n_back, width=w, limit=limit)
    return Place(kind, net, layout=layout, params={"lanes": n_fwd + n_back, "limit_kmh": round(limit * 3.6)})


def place_lane_keep_straight(rng, garage) -> Place:
    return _straight_road(rng, "lane_keep_straight", (1, 3), (0, 2), (3.2, 3.8))


def place_lead_vehicle(rng, garage) -> Place:
    return _straight_road(rng, "lead_vehicle", (1, 2), (0, 1), (3.2, 3.8))


def place_cut_in(rng, garage) -> Place:
    return _straight_road(rng, "cut_in", (2, 3), (0, 1), (3.2, 3.7))


def place_lane_keep_curve(rng, garage) -> Place:
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
    limit = draw_limit(rng)
    net = RoadNet()
    ids = add_road(net, "road", arc_path((-40.0, 0.0), 0.0, pieces), n_fwd, n_back, w, speed_limit=limit)
    layout = dict(ids=ids, n_fwd=n_fwd, n_back=n_back, width=w, limit=limit)
    params = {"radius": radius, "turn_deg": float(np.rad2deg(turn)), "limit_kmh": round(limit * 3.6)}
    return Place("lane_keep_curve", net, layout=layout, params=params)


def place_parked_obstacle(rng, garage) -> Place:
    """A straight road with a parked vehicle or a barrier reaching 0.3-0.8 m into where the ego's side
    would be, driving in the curb-side lane's centre, 100-130 m along it."""
    place = _straight_road(rng, "parked_obstacle", (1, 2), (1, 2), (3.3, 3.8))
    lay = place.layout
    w, e = lay["width"], lay["n_fwd"] - 1  # the curb-side lane
    lane = route_path(place.net, [lay["ids"][f"f{e}"]])
    barrier = rng.random() < 0.3
    prop, size = garage.parked(rng, barrier)
    size = np.asarray(size, dtype=np.float64)
    s_obs = float(rng.uniform(100.0, 130.0))
    overlap = float(rng.uniform(0.3, 0.8))  # into the ego's path, driving in the lane's centre
    yaw_off = float(np.deg2rad(rng.uniform(-5.0, 5.0))) if not barrier else 0.0
    lat = -w / 2 + (w / 2 - EGO.width / 2 + overlap) - size[1] / 2  # its centre, metres left of the lane centre
    xy, h = interpolate_polyline(lane, s_obs)
    c = xy + lat * np.array([-np.sin(h), np.cos(h)])
    pose = np.array([c[0], c[1], 0.0, h + yaw_off])
    place.obstacles.append(ObstacleDraft("barrier" if barrier else "parked", pose, size, prop))
    lay.update(lane=e, s_obs=s_obs)
    place.params.update(obstacle="barrier" if barrier else "vehicle", overlap=overlap)
    return place


def place_crossing(rng, garage) -> Place:
    """A four-way intersection: the main road (1-2 lanes in the ego's direction, one oncoming) across a
    two-lane road, each with its own speed limit; a stop line on the main road's approach."""
    w = float(rng.uniform(3.2, 3.6))
    wc = float(rng.uniform(3.2, 3.6))
    n_fwd, n_back = int(rng.integers(1, 3)), 1
    nc_fwd, nc_back = 1, 1
    limit, limit_c = draw_limit(rng), draw_limit(rng)
    X = 0.0  # the crossing road's reference line is x = 0
    half_c = 0.5 * (nc_fwd + nc_back) * wc + 1.0  # half the box along x
    top = n_back * w + 1.0
    bottom = n_fwd * w + 1.0
    net = RoadNet()
    L = 110.0
    main_in = add_road(net, "main_in", straight((X - half_c - L, 0.0), 0.0, L), n_fwd, n_back, w, speed_limit=limit)
    main_box = add_road(net, "main_box", straight((X - half_c, 0.0), 0.0, 2 * half_c), n_fwd, n_back, w, False,
                        False, speed_limit=limit)  # fmt: skip
    main_out = add_road(net, "main_out", straight((X + half_c, 0.0), 0.0, L), n_fwd, n_back, w, speed_limit=limit)
    cross_in = add_road(
        net, "cross_in", straight((X, -bottom - L), np.pi / 2, L), nc_fwd, nc_back, wc, speed_limit=limit_c
    )
    cross_box = add_road(net, "cross_box", straight((X, -bottom), np.pi / 2, bottom + top), nc_fwd, nc_back, wc,
                         False, False, speed_limit=limit_c)  # fmt: skip
    cross_out = add_road(net, "cross_out", straight((X, top), np.pi / 2, L), nc_fwd, nc_back, wc, speed_limit=limit_c)
    for a, b, c in ((main_in, main_box, main_out), (cross_in, cross_box, cross_out)):
        for key in a:
            if key.startswith("f"):
                link(net, a[key], b[key])
                link(net, b[key], c[key])
            else:
                link(net, c[key], b[key])
                link(net, b[key], a[key])
    net.stripes.append(stop_line(straight((X - half_c - L, 0.0), 0.0, L), n_fwd, w))
    layout = dict(
        main_in=main_in, main_box=main_box, main_out=main_out, cross_in=cross_in, cross_box=cross_box,
        cross_out=cross_out, n_fwd=n_fwd, width=w, cross_width=wc, X=X, limit=limit, cross_limit=limit_c,
    )  # fmt: skip
    params = {"limit_kmh": round(limit * 3.6), "cross_limit_kmh": round(limit_c * 3.6)}
    return Place("crossing", net, layout=layout, params=params)


def place_merge(rng, garage) -> Place:
    """An on-ramp joining the right lane of a main road (1-2 lanes, 0-1 oncoming) at x = 0."""
    w = float(rng.uniform(3.3, 3.7))
    n_fwd, n_back = int(rng.integers(1, 3)), int(rng.integers(0, 2))
    limit = draw_limit(rng)
    x_m = 0.0  # where the ramp's centre line meets the main road's right lane
    L_before, L_after = 130.0, 130.0
    merge_len = float(rng.uniform(50.0, 70.0))
    depth = float(rng.uniform(6.0, 9.0))  # lateral distance of the ramp's start from the right lane
    net = RoadNet()
    before, after = straight((x_m - L_before, 0.0), 0.0, L_before), straight((x_m, 0.0), 0.0, L_after)
    main_a = add_road(net, "main_a", before, n_fwd, n_back, w, edges=False, speed_limit=limit)
    main_b = add_road(net, "main_b", after, n_fwd, n_back, w, edges=False, speed_limit=limit)
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
    net.lanes.append(Lane("ramp", ramp_c, w, None, None, (main_b[f"f{r}"],), limit))
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
    layout = dict(
        main_a=main_a, main_b=main_b, ramp=ramp_c, right=r, width=w, x_m=x_m, L_before=L_before, L_after=L_after,
        s_merge=float(polyline_arclength(ramp_c)[-1]), limit=limit,
    )  # fmt: skip
    params = {"limit_kmh": round(limit * 3.6), "merge_length": merge_len}
    return Place("merge", net, layout=layout, params=params)


PLACES = {
    "lane_keep_straight": place_lane_keep_straight,
    "lane_keep_curve": place_lane_keep_curve,
    "lead_vehicle": place_lead_vehicle,
    "cut_in": place_cut_in,
    "parked_obstacle": place_parked_obstacle,
    "crossing": place_crossing,
    "merge": place_merge,
}
