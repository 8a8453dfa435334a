"""The static background of a street: where everything goes (planned from the seed), then the
Gaussians of every part at one density, solved so that the total meets a Gaussian budget.

Sizes follow ``target_gaussians``: every surface is sampled at a density (Gaussians per m^2) scaled by
one factor that :func:`background_parts` solves for, so the count lands within a few per cent. Near,
often-seen surfaces get more Gaussians per m^2 than the backs of buildings and far grass (the ``W_*``
relative densities of each part's module).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from sim.gaussians import GaussianCloud
from sim.geometry import polyline_frames, polyline_stations
from sim.procedural.buildings import Building, gen_buildings, place_buildings
from sim.procedural.layout import Prop, StreetLayout
from sim.procedural.markings import Stripe, gen_stripe, plan_stripes, with_road_sigmas
from sim.procedural.parts import SIGMA_PER_PITCH, Parts, seeded_rng
from sim.procedural.props import STREET_LIGHT_ARM, build_prop
from sim.procedural.sky import gen_sky, sky_count
from sim.procedural.streets import (
    CURB_WIDTH,
    ROAD_ASPECT,
    W_ROAD,
    Streets,
    asphalt_fn,
    gen_edges,
    gen_roads,
    ground_z,
    in_roads,
    prepare_streets,
)
from sim.procedural.vegetation import Tree, gen_grass, gen_trees, place_trees
from sim.procedural.vehicles import VEHICLE_KINDS, build_vehicle

DENSITY_TOLERANCE = 0.03  # of the Gaussian budget
MIN_DENSITY = 0.05  # Gaussians per m^2 (a 4.5 m pitch): below, a scene is too coarse to be a street
LIGHT_SPACING = 40.0


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class Plan:
    """Where everything goes: the streets, buildings, trees, furniture (street lights placed here,
    plus the layout's props) and the paint's straight pieces."""

    streets: Streets
    buildings: list[Building]
    trees: list[Tree]
    furniture: list[Prop]
    stripes: list[Stripe]


def plan_background(layout: StreetLayout, seed: int) -> Plan:
    """Where everything of ``layout``'s background goes, drawn from ``seed`` (each part from its own generator)."""
    streets = prepare_streets(layout, seed)
    buildings = place_buildings(streets)
    trees = place_trees(streets, buildings)
    furniture = [*_place_street_lights(streets), *layout.props]
    return Plan(streets, buildings, trees, furniture, plan_stripes(streets.markings, streets.roads))


def _place_street_lights(streets: Streets) -> list[Prop]:
    """Street lights on the sidewalk by the curb, every ``LIGHT_SPACING`` metres or so, arms over the road."""
    rng = seeded_rng(streets.seed, "lights")
    out = []
    for poly, outward in streets.edges:
        length = float(polyline_stations(poly)[-1])
        s = rng.uniform(5.0, LIGHT_SPACING)
        while s < length - 2.0:
            xy, _, nrm = polyline_frames(poly, np.array([s]))
            s += LIGHT_SPACING * rng.uniform(0.9, 1.1)
            pole = xy[0] + nrm[0] * outward * (CURB_WIDTH + 0.45)
            if in_roads(streets, pole[None], 0.2)[0]:
                continue
            inward = -nrm[0] * outward
            yaw = math.atan2(inward[1], inward[0])
            L = STREET_LIGHT_ARM + 0.35
            c = pole + inward * (L / 2 - 0.15)
            out.append(Prop("street_light", float(c[0]), float(c[1]), yaw))
    return out


def _gen_furniture(plan: Plan) -> list[GaussianCloud]:
    """Street lights and the layout's props (and parked vehicles), posed on the ground under them."""
    out = []
    xy = np.array([[p.x, p.y] for p in plan.furniture]).reshape(-1, 2)
    zs = ground_z(plan.streets, xy) if len(xy) else np.zeros(0)
    for i, (p, z) in enumerate(zip(plan.furniture, zs)):
        seed = zlib.crc32(f"{plan.streets.seed}:{i}:{p.kind}".encode())
        if p.kind in VEHICLE_KINDS:
            cloud, _ = build_vehicle(p.kind, None, seed)
        else:
            cloud, _ = build_prop(p.kind, seed)
        c, s = math.cos(p.yaw), math.sin(p.yaw)
        T = np.array([[c, -s, 0, p.x], [s, c, 0, p.y], [0, 0, 1, float(z)], [0, 0, 0, 1.0]])
        out.append(cloud.transform(T))
    return out


def _scalable_parts(plan: Plan, density: float) -> dict[str, Parts]:
    """Every part whose size follows the density (Gaussians per m^2 at relative weight 1)."""
    pitch = 1.0 / math.sqrt(density)
    a_along = pitch / math.sqrt(W_ROAD) * math.sqrt(ROAD_ASPECT)
    a_across = pitch / math.sqrt(W_ROAD) / math.sqrt(ROAD_ASPECT)
    streets = plan.streets
    asphalt = asphalt_fn(streets.seed)
    stripes = with_road_sigmas(plan.stripes, SIGMA_PER_PITCH * a_along, SIGMA_PER_PITCH * a_across)
    marks = Parts()
    rng = seeded_rng(streets.seed, "markings")
    along = float(np.clip(pitch, 0.4, 1.0))
    for st in stripes:
        gen_stripe(marks, rng, st, along, asphalt, lambda xy: in_roads(streets, xy))
    road = gen_roads(streets, pitch, stripes, asphalt)
    curbs, walks = gen_edges(streets, pitch)
    grass, apron = gen_grass(streets, plan.buildings, pitch, asphalt)
    return {
        "road": road,
        "markings": marks,
        "apron": apron,
        "curbs": curbs,
        "sidewalks": walks,
        "grass": grass,
        "buildings": gen_buildings(plan.buildings, pitch),
        "trees": gen_trees(plan.trees, pitch),
    }


def background_parts(layout: StreetLayout, seed: int, target_gaussians: int = 100_000) -> dict[str, GaussianCloud]:
    """The background's named parts (world frame): road, markings, apron, curbs, sidewalks, grass,
    buildings, trees, furniture (street lights, the layout's props and parked vehicles) and sky.

    The density of every surface is solved so that the total is ``target_gaussians`` within a few per
    cent (for targets from about 20k up; the sky and furniture have fixed sizes).
    """
    if not isinstance(layout, StreetLayout):
        raise TypeError(f"background_parts: layout must be a StreetLayout, got {type(layout).__name__}")
    target = int(target_gaussians)
    if target < 1000:
        raise ValueError(f"target_gaussians must be at least 1000, got {target_gaussians}")
    plan = plan_background(layout, int(seed))
    sky = gen_sky(plan.streets.extent, plan.streets.seed, sky_count(target))
    fixed = {"furniture": GaussianCloud.cat(_gen_furniture(plan)), "sky": sky.cloud()}
    budget = max(target - sum(len(c) for c in fixed.values()), target // 5)
    # The count is close to affine in the density (paint, curbs and trunks have floors): a proportional
    # first step, then secant steps, until within DENSITY_TOLERANCE of the budget.
    tried: list[tuple[float, int]] = []
    density = 1.0
    for _ in range(6):
        parts = _scalable_parts(plan, density)
        n = sum(len(p) for p in parts.values())
        tried.append((density, n))
        if abs(n - budget) <= DENSITY_TOLERANCE * budget or (n > budget and density <= MIN_DENSITY):
            break
        if len(tried) > 1 and abs(n - tried[-2][1]) <= 0.01 * budget and n > budget:
            break  # at the floor: paint, curbs and trunks no longer shrink
        if len(tried) == 1:
            density *= budget / max(n, 1)
        else:
            (d0, n0), (d1, n1) = tried[-2], tried[-1]
            slope = (n1 - n0) / (d1 - d0) if d1 != d0 and n1 != n0 else n1 / d1
            density = float(np.clip(d1 + (budget - n1) / max(slope, 1e-6), d1 / 4, d1 * 4))
        density = max(density, MIN_DENSITY)
    out = {k: p.cloud() for k, p in parts.items()}
    out.update(fixed)
    return out


def build_background(layout: StreetLayout, seed: int, target_gaussians: int = 100_000) -> GaussianCloud:
    """The static background of ``layout`` as one world-frame cloud (SH degree 0), deterministic in
    ``seed``, with about ``target_gaussians`` Gaussians (within a few per cent). See :func:`background_parts`."""
    return GaussianCloud.cat(list(background_parts(layout, seed, target_gaussians).values()))
