"""Vegetation: street trees in the verge behind the sidewalks (placed from the seed, then a trunk and
a canopy of leaf-sized Gaussians in a few lobes), and grass over the rest of the extent, with asphalt
aprons where curbs leave road-side ground that no road strip covers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.geometry import polyline_frames, polyline_stations
from sim.procedural.buildings import Building, clear_of_buildings
from sim.procedural.parts import (
    FLAT_SIGMA,
    GROUND_Z_JITTER,
    OPACITY,
    SIGMA_PER_PITCH,
    Noise,
    Parts,
    cylinder,
    jittered_grid,
    place,
    quats_yaw,
    random_quats,
    rot2,
    seeded_rng,
    vary,
)
from sim.procedural.streets import (
    CURB_WIDTH,
    GRASS_Z,
    SIDEWALK_WIDTH,
    Streets,
    clear_of_street,
    edge_zone,
    in_roads,
    road_distance,
)

# Relative densities (Gaussians per m^2 per unit of the background's solved density factor).
W_GRASS_NEAR, W_GRASS_FAR = 0.30, 0.06
GRASS_NEAR_DIST = 20.0  # metres from a road edge
W_CANOPY = 0.5
CANOPY_SIGMA_PER_PITCH = 0.65  # leaves overlap less than a closed surface: light shows through
TREE_SPACING = (9.0, 16.0)
CANOPY_BASE = (2.8, 3.6)  # canopies start above 2.5 m: clear of any vehicle
GRASS = (0.24, 0.40, 0.15)
GRASS_DRY = (0.45, 0.46, 0.24)
BARK = (0.29, 0.21, 0.15)
LEAVES = ((0.16, 0.33, 0.11), (0.22, 0.38, 0.12), (0.13, 0.28, 0.12), (0.30, 0.40, 0.14))


@dataclass
class Tree:
    """One planned tree (world frame): where it stands, trunk radius, canopy base and radii, leaf colour."""

    xy: np.ndarray
    trunk_r: float
    canopy_base: float
    radii: tuple[float, float]  # horizontal, vertical
    leaves: np.ndarray
    seed: int


def place_trees(streets: Streets, buildings: list[Building]) -> list[Tree]:
    """Trees in the verge 1-1.8 m behind each sidewalk, 9-16 m apart, clear of the street, of the
    buildings and of each other, inside the extent (all drawn from the seed)."""
    xmin, ymin, xmax, ymax = streets.extent
    paved = CURB_WIDTH + SIDEWALK_WIDTH
    rng = seeded_rng(streets.seed, "trees")
    trees: list[Tree] = []
    for poly, outward in streets.edges:
        length = float(polyline_stations(poly)[-1])
        s = rng.uniform(0.0, TREE_SPACING[1])
        while s < length:
            off = paved + rng.uniform(1.0, 1.8)
            r_h = rng.uniform(1.8, 3.0)
            tree = (
                rng.uniform(0.12, 0.2),
                rng.uniform(*CANOPY_BASE),
                r_h,
                rng.uniform(0.75, 1.05) * r_h,
                rng.integers(len(LEAVES)),
                int(rng.integers(2**31)),
            )
            xy, _, nrm = polyline_frames(poly, np.array([s]))
            s += rng.uniform(*TREE_SPACING)
            p = xy + nrm * outward * off
            inside = xmin <= p[0, 0] <= xmax and ymin <= p[0, 1] <= ymax
            if not inside or not clear_of_street(streets, p, 0.6)[0] or not clear_of_buildings(buildings, p, 0.8)[0]:
                continue
            if any(np.hypot(*(t.xy - p[0])) < 4.0 for t in trees):
                continue
            tr, base, rh, rv, leaf, tseed = tree
            trees.append(Tree(p[0], float(tr), float(base), (float(rh), float(rv)), np.asarray(LEAVES[leaf]), tseed))
    return trees


def gen_grass(streets: Streets, buildings: list[Building], pitch: float, asphalt) -> tuple[Parts, Parts]:
    """Grass over the extent outside roads, sidewalks and buildings (finer near roads), and asphalt
    aprons where the space between curbs and road strips (intersection corners) is not a road."""
    rng = seeded_rng(streets.seed, "grass")
    tone = Noise(seeded_rng(streets.seed, "grass", "tone"), 9.0)
    dry = Noise(seeded_rng(streets.seed, "grass", "dry"), 30.0)
    grass, apron = Parts(), Parts()
    xmin, ymin, xmax, ymax = streets.extent
    paved = CURB_WIDTH + SIDEWALK_WIDTH
    for w_rel, near in ((W_GRASS_NEAR, True), (W_GRASS_FAR, False)):
        a = pitch / math.sqrt(w_rel)
        fx, fy = jittered_grid(rng, math.ceil((xmax - xmin) / a), math.ceil((ymax - ymin) / a))
        xy = np.column_stack([xmin + fx * (xmax - xmin), ymin + fy * (ymax - ymin)])
        d_road = road_distance(streets, xy, GRASS_NEAR_DIST)
        xy = xy[(d_road <= GRASS_NEAR_DIST) if near else (d_road > GRASS_NEAR_DIST)]
        xy = xy[~in_roads(streets, xy, margin=-0.1)]  # under the road's edge: no seam where there is no curb
        xy = xy[~edge_zone(streets, xy, -0.05, paved - 0.1)]  # grass tucks under the sidewalk's edge
        # the road side of a curb that no road strip covers (corner fillets): pave it
        on_road_side = edge_zone(streets, xy, -8.0, 0.0) if near else np.zeros(len(xy), dtype=bool)
        if on_road_side.any():
            p = xy[on_road_side]
            n = len(p)
            z = rng.uniform(-GROUND_Z_JITTER, GROUND_Z_JITTER, n)
            apron.add(
                np.column_stack([p, z]),
                (SIGMA_PER_PITCH * a,) * 2 + (FLAT_SIGMA,),
                quats_yaw(rng.uniform(0, np.pi, n)),
                OPACITY,
                asphalt(p),
            )
        xy = xy[~on_road_side]
        for b in buildings:
            loc = (xy - b.center) @ rot2(b.yaw)
            xy = xy[~((np.abs(loc[:, 0]) < b.size[0] / 2 - 0.2) & (np.abs(loc[:, 1]) < b.size[1] / 2 - 0.2))]
        n = len(xy)
        f_dry = np.clip(0.5 + 0.5 * dry(xy), 0, 1)[:, None] * 0.6
        rgb = np.asarray(GRASS) * (1 - f_dry) + np.asarray(GRASS_DRY) * f_dry
        rgb = rgb * (1 + 0.12 * tone(xy) + rng.uniform(-0.1, 0.1, n))[:, None]
        z = GRASS_Z + rng.uniform(-0.01, 0.01, n)
        sig = SIGMA_PER_PITCH * a
        grass.add(np.column_stack([xy, z]), (sig, sig, FLAT_SIGMA), quats_yaw(rng.uniform(0, np.pi, n)), OPACITY, rgb)
    return grass, apron


def gen_trees(trees: list[Tree], pitch: float) -> Parts:
    parts = Parts()
    for t in trees:
        rng = seeded_rng(t.seed, "tree")
        local = Parts()
        trunk_h = t.canopy_base + 0.8 * t.radii[1]
        bark = lambda z, rng=rng: vary(rng, BARK, len(z), 0.08)  # noqa: E731
        cylinder(local, rng, trunk_h, 0.25, bark, t.trunk_r, 0.7 * t.trunk_r, pitch_z=0.4)
        # canopy: a few overlapping ellipsoidal lobes of leaf-sized Gaussians, shaded darker underneath
        rh, rv = t.radii
        zc = t.canopy_base + rv
        lobes = int(rng.integers(3, 6))
        centres = np.column_stack([rng.uniform(-0.35, 0.35, (lobes, 2)) * rh, rng.uniform(-0.2, 0.3, lobes) * rv])
        radii = rng.uniform(0.6, 0.8, (lobes, 1)) * np.array([rh, rh, rv])
        area = 4 * math.pi * (rh * rh + 2 * rh * rv) / 3
        n = int(np.clip(area * W_CANOPY / pitch**2, 30, 3000))
        lobe = rng.integers(lobes, size=n)
        d = rng.normal(size=(n, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        rho = 0.7 + 0.3 * np.sqrt(rng.random(n))
        p = centres[lobe] + d * rho[:, None] * radii[lobe]
        p[:, 2] += zc
        sig = math.sqrt(area / n) * CANOPY_SIGMA_PER_PITCH
        sc = np.column_stack([np.full(n, sig), np.full(n, 0.8 * sig), np.full(n, 0.35 * sig)])
        p[:, 2] = np.maximum(p[:, 2], 2.5 + 2.0 * sig)  # canopies stay above 2.5 m
        height = np.clip((p[:, 2] - t.canopy_base) / (2 * rv), 0, 1)
        rgb = vary(rng, t.leaves, n, 0.18) * (0.55 + 0.6 * height)[:, None]
        local.add(p, sc, random_quats(rng, n), rng.uniform(0.85, 0.97, n), rgb)
        parts.extend(place(local, t.xy[0], t.xy[1], GRASS_Z - 0.02, 0.0))
    return parts
