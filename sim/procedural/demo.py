"""The demo scene: a demo layout's background plus a handful of vehicle actors driving their lanes."""

from __future__ import annotations

import numpy as np

from sim.geometry import clean_polyline, offset_polyline, polyline_frames, polyline_stations
from sim.procedural.background import build_background
from sim.procedural.layout import LANE_WIDTH, StreetLayout, demo_layout
from sim.procedural.parts import seeded_rng
from sim.procedural.vehicles import build_vehicle
from sim.scene import ActorTrack, Scene

DEMO_DT = 0.1  # s per step of the demo tracks (scenarios' default, 10 Hz)
DEMO_STEPS = 80
DEMO_LENGTH = 200.0  # metres of main road in demo_scene


def _lane_track(poly: np.ndarray, s0: float, speed: float, steps: int, dt: float):
    """Poses [steps, 4] (x, y, z=0, yaw) and presence [steps] of a vehicle driving along ``poly`` [M, 2]."""
    s = s0 + speed * dt * np.arange(steps)
    xy, tan, _ = polyline_frames(poly, s)
    yaw = np.arctan2(tan[:, 1], tan[:, 0])
    present = (s >= 0.0) & (s <= float(polyline_stations(poly)[-1]))
    return np.column_stack([xy, np.zeros(steps), yaw]), present


def _demo_traffic(kind: str, layout: StreetLayout, length: float):
    """(vehicle kind, lane polyline, start arclength, speed m/s) for the demo actors of a layout kind."""
    main = clean_polyline(layout.roads[0].centerline, max_step=2.0)
    x0 = -0.25 * length
    ego_s = -x0  # the ego's arclength on the main road

    def lane(poly, offset, reverse=False):
        p = offset_polyline(poly, offset, miter=False)
        return clean_polyline(p[::-1] if reverse else p, max_step=2.0)

    r1, r2 = lane(main, -LANE_WIDTH / 2), lane(main, -1.5 * LANE_WIDTH)
    o1, o2 = lane(main, LANE_WIDTH / 2, True), lane(main, 1.5 * LANE_WIDTH, True)
    L = float(polyline_stations(main)[-1])
    cars = [
        ("sedan", r1, ego_s + 24.0, 7.0),
        ("suv", r2, ego_s + 12.0, 9.5),
        ("hatchback", o1, L - ego_s - 70.0, 9.0),
        ("bus", o2, L - ego_s - 110.0, 7.5),
        ("van", o1, L - ego_s - 25.0, 9.0),
        ("truck", r2, ego_s + 65.0, 0.0),  # stopped in the right lane
    ]
    if kind == "intersection":
        cross = clean_polyline(layout.roads[1].centerline, max_step=2.0)
        half_cross = float(polyline_stations(cross)[-1]) / 2
        north = lane(cross, -LANE_WIDTH / 2)  # +y, keeps right (x > xc)
        south = lane(cross, LANE_WIDTH / 2, True)
        cars = [
            *cars[:3],
            ("sedan", north, half_cross - 45.0, 8.0),
            ("suv", south, half_cross - 20.0, 0.0),  # waiting at its stop line
            ("van", south, half_cross - 60.0, 6.0),
        ]
    if kind == "merge":
        ramp = clean_polyline(layout.roads[1].centerline, max_step=2.0)
        cars = [*cars[:4], ("hatchback", ramp, 20.0, 9.0), ("van", ramp, 0.0, 8.5)]
    return cars


def demo_scene(seed: int = 0, target_gaussians: int = 100_000, kind: str = "straight") -> Scene:
    """The background of ``demo_layout(kind)`` plus a handful of vehicle actors (one asset each, in
    varied kinds and colours): traffic in both directions and a stopped vehicle, with ``DEMO_STEPS``
    steps of ``DEMO_DT`` s. The ego is not among them; it can start at (0, -1.75) heading +x."""
    length = DEMO_LENGTH
    layout = demo_layout(kind, length)
    background = build_background(layout, seed, target_gaussians)
    rng = seeded_rng(seed, "demo", kind)
    assets, actors = {}, {}
    for i, (vkind, poly, s0, speed) in enumerate(_demo_traffic(kind, layout, length)):
        name = f"{vkind}_{i}"
        assets[name], _ = build_vehicle(vkind, None, int(rng.integers(2**31)))
        s0 = s0 + rng.uniform(-3.0, 3.0)
        v = speed * rng.uniform(0.9, 1.1)
        poses, present = _lane_track(poly, s0, v, DEMO_STEPS, DEMO_DT)
        actors[f"car{i}"] = ActorTrack(name, poses, present)
    return Scene(background, assets, actors)
