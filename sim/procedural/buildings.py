"""Buildings along the street: placed from the seed behind each sidewalk, then built as façades with
window grids, shop fronts or doors, cornices, plain side and back walls and a flat roof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.geometry import polyline_frames, polyline_stations
from sim.procedural.parts import OPACITY, Parts, place, rect_surface, rot2, seeded_rng, vary
from sim.procedural.streets import CURB_WIDTH, GRASS_Z, SIDEWALK_WIDTH, Streets, clear_of_street

# Relative densities (Gaussians per m^2 per unit of the background's solved density factor).
W_FACADE, W_SIDE_WALL, W_BACK_WALL = 0.9, 0.5, 0.15
# Walls are mostly seen obliquely (foreshortened along the street): wider-than-tall Gaussians then
# look round on screen, and round on-screen footprints are what the renderer draws cheapest.
FACADE_ASPECT = 1.7
SETBACK_RANGE = (2.0, 10.0)  # from the sidewalk's outer edge
FRONTAGE_RANGE = (10.0, 24.0)
DEPTH_RANGE = (8.0, 16.0)
GAP_RANGE = (1.5, 6.0)
GROUND_FLOOR_HEIGHT = 3.6
FLOOR_HEIGHT = 3.2
FLOORS = (2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 7, 9)
WINDOW_DARK = (0.10, 0.13, 0.17)
WINDOW_BRIGHT = (0.36, 0.44, 0.52)
WALLS = (
    (0.62, 0.33, 0.25), (0.72, 0.64, 0.52), (0.84, 0.82, 0.78), (0.55, 0.55, 0.56), (0.80, 0.72, 0.48),
    (0.50, 0.30, 0.24), (0.66, 0.70, 0.72), (0.77, 0.58, 0.45), (0.42, 0.44, 0.47), (0.86, 0.78, 0.66),
)  # fmt: skip
SHOP_SIGNS = ((0.70, 0.12, 0.10), (0.12, 0.30, 0.55), (0.15, 0.45, 0.25), (0.85, 0.65, 0.15), (0.2, 0.2, 0.22))


@dataclass
class Building:
    """One planned building (world frame): footprint, height, which wall faces the street, its look."""

    center: np.ndarray  # [2] footprint centre
    yaw: float  # local x along the street
    size: tuple[float, float, float]  # frontage (x), depth (y), height
    front: int  # +1: the street-facing wall is at local +y, -1: at -y
    wall: np.ndarray
    bay: float
    shop: bool
    sign: np.ndarray
    seed: int


def _rect_corners(center, yaw, lx, ly) -> np.ndarray:
    R = rot2(yaw)
    c = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * np.array([lx / 2, ly / 2])
    return np.asarray(center) + c @ R.T


def _rects_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Separating-axis test for two convex quads [4, 2]."""
    for poly in (a, b):
        for i in range(4):
            e = poly[(i + 1) % 4] - poly[i]
            n = np.array([-e[1], e[0]])
            pa, pb = a @ n, b @ n
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


def place_buildings(streets: Streets) -> list[Building]:
    """Buildings along each curb line's outward side, set back from the sidewalk, clear of the street
    and of each other, inside the extent (all drawn from the seed)."""
    xmin, ymin, xmax, ymax = streets.extent
    paved = CURB_WIDTH + SIDEWALK_WIDTH
    rng = seeded_rng(streets.seed, "buildings")
    buildings: list[Building] = []
    footprints: list[np.ndarray] = []
    for poly, outward in streets.edges:
        length = float(polyline_stations(poly)[-1])
        s = rng.uniform(0.0, 6.0)
        while s < length:
            width = rng.uniform(*FRONTAGE_RANGE)
            depth = rng.uniform(*DEPTH_RANGE)
            setback = rng.uniform(*SETBACK_RANGE)
            gap = rng.uniform(*GAP_RANGE)
            floors = int(rng.choice(FLOORS))
            style = (rng.integers(len(WALLS)), rng.uniform(2.4, 3.6), rng.random() < 0.5, rng.integers(len(SHOP_SIGNS)))
            bseed = int(rng.integers(2**31))
            s_mid = s + width / 2
            s += width + gap
            if s_mid > length:
                break
            xy, tan, nrm = polyline_frames(poly, np.array([s_mid]))
            out_dir = nrm[0] * outward
            center = xy[0] + out_dir * (paved + setback + depth / 2)
            yaw = math.atan2(tan[0, 1], tan[0, 0])
            if not (xmin <= center[0] <= xmax and ymin <= center[1] <= ymax):
                continue
            corners = _rect_corners(center, yaw, width, depth)
            g = np.stack(np.meshgrid(np.linspace(-0.5, 0.5, 6), np.linspace(-0.5, 0.5, 5)), -1).reshape(-1, 2)
            samples = center + (g * [width, depth]) @ rot2(yaw).T
            if not clear_of_street(streets, np.concatenate([corners, samples]), 1.0).all():
                continue
            grown = _rect_corners(center, yaw, width + 2.0, depth + 2.0)
            if any(_rects_overlap(grown, f) for f in footprints):
                continue
            footprints.append(corners)
            # the street-facing wall: local y points left of the edge's direction; the street is inward
            front = -outward
            height = GROUND_FLOOR_HEIGHT + (floors - 1) * FLOOR_HEIGHT + 0.6
            wall, bay, shop, sign = style
            buildings.append(
                Building(
                    center,
                    yaw,
                    (width, depth, height),
                    front,
                    np.asarray(WALLS[wall]),
                    float(bay),
                    bool(shop),
                    np.asarray(SHOP_SIGNS[sign]),
                    bseed,
                )
            )
    return buildings


def clear_of_buildings(buildings: list[Building], xy: np.ndarray, margin: float) -> np.ndarray:
    """bool [n]: points [n, 2] outside every building's footprint grown by ``margin`` metres."""
    ok = np.ones(len(xy), dtype=bool)
    for b in buildings:
        loc = (xy - b.center) @ rot2(b.yaw)
        ok &= ~((np.abs(loc[:, 0]) < b.size[0] / 2 + margin) & (np.abs(loc[:, 1]) < b.size[1] / 2 + margin))
    return ok


def _facade_rgb(b: Building, rng, wall: str, u: np.ndarray, v: np.ndarray, width: float) -> np.ndarray:
    """Colours [n, 3] at wall coordinates u (along, 0..width) and v (up) metres: a window grid on the
    upper floors, a shop front or a door on the ground floor, a cornice at the top."""
    n = len(u)
    H = b.size[2]
    rgb = vary(rng, b.wall, n, 0.05)
    rgb *= (0.85 + 0.15 * np.clip(v / 2.0, 0, 1))[:, None]  # grime at the foot of the wall
    if wall == "back":
        return rgb
    bays = max(1, int((width - 1.0) // b.bay))
    margin = (width - bays * b.bay) / 2
    ub = u - margin
    bay_i = np.floor(ub / b.bay)
    in_bays = (ub > 0) & (ub < bays * b.bay)
    fu = ub - bay_i * b.bay
    fl = np.floor((v - GROUND_FLOOR_HEIGHT) / FLOOR_HEIGHT)
    fv = v - GROUND_FLOOR_HEIGHT - fl * FLOOR_HEIGHT
    win = in_bays & (v > GROUND_FLOOR_HEIGHT) & (v < H - 1.0) & (fv > 0.8) & (fv < 2.45)
    win &= (fu > 0.5) & (fu < b.bay - 0.5)
    # each window gets its own shade: some reflect the sky, some are dark
    h = (bay_i * 73856093 + fl * 19349663 + b.seed) % 1000 / 1000.0
    shade = np.asarray(WINDOW_DARK) + (np.asarray(WINDOW_BRIGHT) - np.asarray(WINDOW_DARK)) * (h**2)[:, None]
    rgb[win] = shade[win]
    sill = in_bays & (v > GROUND_FLOOR_HEIGHT) & (v < H - 1.0) & (fv > 0.65) & (fv <= 0.8) & (fu > 0.4)
    sill &= fu < b.bay - 0.4
    rgb[sill] = rgb[sill] * 1.2
    top = v > H - 0.45
    rgb[top] = rgb[top] * 0.75
    if wall == "front" and b.shop:
        glass = (v > 0.35) & (v < 2.9) & in_bays & (fu > 0.25) & (fu < b.bay - 0.25)
        rgb[glass] = np.asarray(WINDOW_DARK) * 1.3 + 0.06 * (v[glass] / 2.9)[:, None]
        sign = (v >= 2.95) & (v < 3.5) & in_bays
        rgb[sign] = b.sign
    elif wall == "front":
        mid = width / 2
        door = (np.abs(u - mid) < 0.6) & (v < 2.3)
        rgb[door] = (0.25, 0.17, 0.12)
        gwin = in_bays & (v > 1.0) & (v < 2.5) & (fu > 0.5) & (fu < b.bay - 0.5) & ~(np.abs(u - mid) < 1.2)
        rgb[gwin] = WINDOW_DARK
    return rgb


def gen_buildings(buildings: list[Building], pitch: float) -> Parts:
    parts = Parts()
    for b in buildings:
        rng = seeded_rng(b.seed, "building")
        W_, D_, H = b.size
        local = Parts()
        # walls in the local frame (x along the street, y across), each with outward normal
        walls = (
            ("front", W_, np.array([-W_ / 2, b.front * D_ / 2, 0.0]), np.array([1.0, 0, 0]), W_FACADE),
            ("back", W_, np.array([-W_ / 2, -b.front * D_ / 2, 0.0]), np.array([1.0, 0, 0]), W_BACK_WALL),
            ("side", D_, np.array([W_ / 2, -D_ / 2, 0.0]), np.array([0, 1.0, 0]), W_SIDE_WALL),
            ("side", D_, np.array([-W_ / 2, -D_ / 2, 0.0]), np.array([0, 1.0, 0]), W_SIDE_WALL),
        )
        for name, width, origin, e_u, w_rel in walls:
            a = pitch / math.sqrt(w_rel)
            pts, u, v, q, sc = rect_surface(rng, origin, e_u, (0, 0, 1), width, H, a, FACADE_ASPECT)
            if name == "front" and b.front < 0:
                u = width - u  # read the façade left to right from the street
            local.add(pts, sc, q, OPACITY, _facade_rgb(b, rng, name, u, v, width))
        # a flat roof, coarse: seen only from far away or from above
        a = 2 * pitch / math.sqrt(W_BACK_WALL)
        pts, _, _, q, sc = rect_surface(rng, (-W_ / 2, -D_ / 2, H), (1, 0, 0), (0, 1, 0), W_, D_, a)
        local.add(pts, sc, q, OPACITY, vary(rng, np.asarray(b.wall) * 0.55, len(pts), 0.05))
        parts.extend(place(local, b.center[0], b.center[1], GRASS_Z - 0.02, b.yaw))
    return parts
