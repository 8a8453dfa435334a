"""The street itself: the layout's polylines made ready for queries, and the Gaussians of road surfaces
(pushed out of the paint's clear zones), curbs and sidewalks.

Ground heights: road at z = 0, curb tops and sidewalks at ``CURB_HEIGHT``, grass at ``GRASS_Z``: all
under 0.15 m, below the floor of a collision box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.geometry import clean_polyline, nearest_on_polyline, polyline_frames, polyline_stations
from sim.procedural.layout import StreetLayout
from sim.procedural.markings import Stripe, out_of_stripes
from sim.procedural.parts import (
    FLAT_SIGMA,
    GROUND_Z_JITTER,
    OPACITY,
    SIGMA_PER_PITCH,
    Noise,
    Parts,
    jittered_grid,
    quats_from_axes,
    quats_yaw,
    seeded_rng,
    vary,
)

CURB_HEIGHT = 0.12  # sidewalks sit at this height; under the 0.3 m floor of a collision box
CURB_WIDTH = 0.25
SIDEWALK_WIDTH = 3.0
GRASS_Z = 0.10
# Relative densities (Gaussians per m^2 per unit of the background's solved density factor).
W_ROAD = 1.0
ROAD_ASPECT = 2.5  # road Gaussians are this much longer along the road than across (lane lines run along)
W_SIDEWALK = 0.8
ASPHALT = (0.24, 0.24, 0.25)
CURB = (0.74, 0.74, 0.71)
SIDEWALK = (0.58, 0.58, 0.56)


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class Streets:
    """A layout's polylines made ready for queries (clean, vertices at most 4 m apart), the extent to
    populate (xmin, ymin, xmax, ymax world metres) and the scene seed."""

    layout: StreetLayout
    extent: tuple[float, float, float, float]
    seed: int
    roads: list[tuple[np.ndarray, float]]  # centreline [M, 2], paved width
    edges: list[tuple[np.ndarray, int]]  # curb line [M, 2], outward (+1: outside to its left)
    markings: list[tuple[np.ndarray, str]]  # polyline [M, 2], marking kind


def prepare_streets(layout: StreetLayout, seed: int) -> Streets:
    """The layout's polylines cleaned and split into pieces of at most 4 m, its extent and the seed."""
    return Streets(
        layout,
        layout.resolved_extent(),
        seed,
        [(clean_polyline(r.centerline, max_step=4.0), float(r.width)) for r in layout.roads],
        [(clean_polyline(e.polyline, max_step=4.0), int(e.outward)) for e in layout.edges],
        [(clean_polyline(m.polyline, max_step=4.0), m.kind) for m in layout.markings],
    )


def in_roads(streets: Streets, xy: np.ndarray, margin: float = 0.0, upto: int | None = None) -> np.ndarray:
    """bool [n]: points within (half-width + margin) of a road's centreline, inside its span."""
    out = np.zeros(len(xy), dtype=bool)
    for poly, w in streets.roads[:upto]:
        d, lat, _, interior = nearest_on_polyline(xy, poly, max_dist=w / 2 + margin + 1.0)
        out |= (np.abs(lat) <= w / 2 + margin) & interior & (d <= w / 2 + margin + 1e-6)
    return out


def road_distance(streets: Streets, xy: np.ndarray, reach: float) -> np.ndarray:
    """[n] distance from points to the nearest road's paved edge (0 inside; inf beyond ``reach`` + 1 m)."""
    out = np.full(len(xy), np.inf)
    for poly, w in streets.roads:
        d = nearest_on_polyline(xy, poly, max_dist=w / 2 + reach + 1.0)[0]
        out = np.minimum(out, np.maximum(d - w / 2, 0.0))
    return out


def edge_zone(streets: Streets, xy: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """bool [n]: points whose outward offset from some edge lies in [lo, hi] (inside the edge's span)."""
    out = np.zeros(len(xy), dtype=bool)
    for poly, outward in streets.edges:
        _, lat, _, interior = nearest_on_polyline(xy, poly, max_dist=max(abs(lo), abs(hi)) + 1.0)
        o = lat * outward
        out |= interior & (o >= lo) & (o <= hi)
    return out


def clear_of_street(streets: Streets, xy: np.ndarray, margin: float) -> np.ndarray:
    """bool [n]: points more than ``margin`` metres off every road, curb and sidewalk."""
    paved = CURB_WIDTH + SIDEWALK_WIDTH
    return ~(in_roads(streets, xy, margin) | edge_zone(streets, xy, -margin, paved + margin))


def ground_z(streets: Streets, xy: np.ndarray) -> np.ndarray:
    """Ground height [n] under points: 0 on roads, the curb height on curbs and sidewalks, grass level else."""
    z = np.full(len(xy), GRASS_Z)
    z[edge_zone(streets, xy, 0.0, CURB_WIDTH + SIDEWALK_WIDTH)] = CURB_HEIGHT
    z[in_roads(streets, xy)] = 0.0
    return z


def asphalt_fn(seed: int):
    """The asphalt's colour at points: xy [n, 2] -> rgb [n, 3] (large and small stains, per-Gaussian grain)."""
    big = Noise(seeded_rng(seed, "asphalt", "big"), 25.0)
    mid = Noise(seeded_rng(seed, "asphalt", "mid"), 4.0)
    rng = seeded_rng(seed, "asphalt", "grain")

    def asphalt(xy):
        n = len(xy)
        f = 1.0 + 0.07 * big(xy) + 0.05 * mid(xy) + rng.uniform(-0.05, 0.05, n)
        return np.asarray(ASPHALT) * f[:, None]

    return asphalt


def gen_roads(streets: Streets, pitch: float, stripes: list[Stripe], asphalt) -> Parts:
    rng = seeded_rng(streets.seed, "road")
    parts = Parts()
    pitch = pitch / math.sqrt(W_ROAD)
    a_along = pitch * math.sqrt(ROAD_ASPECT)
    a_across = pitch / math.sqrt(ROAD_ASPECT)
    for i, (poly, w) in enumerate(streets.roads):
        length = float(polyline_stations(poly)[-1])
        n_s = math.ceil(length / a_along)
        n_t = math.ceil(w / a_across) + 1
        fs, ft = jittered_grid(rng, n_s, n_t, closed_v=True)  # edge rows on the edges: no seam at the curb
        s = fs * length
        t = (ft - 0.5) * w
        xy, tan, nrm = polyline_frames(poly, s)
        xy = xy + nrm * t[:, None]
        # where roads overlap the earlier one paves; tested before paint pushes points around, so a
        # point pushed towards an earlier road still closes the gap beside the paint
        mine = ~in_roads(streets, xy, upto=i) if i else np.ones(len(xy), dtype=bool)
        moved, keep = out_of_stripes(stripes, xy)
        keep &= mine
        # a point pushed past the road's edge (by an edge line's clear zone) stays on the road
        t_new = t + ((moved - xy) * nrm).sum(1)
        lim = w / 2 - 0.01
        xy = moved - nrm * (t_new - np.clip(t_new, -lim, lim))[:, None]
        xy, tan = xy[keep], tan[keep]
        n = len(xy)
        yaw = np.arctan2(tan[:, 1], tan[:, 0]) + rng.uniform(-0.05, 0.05, n)
        z = rng.uniform(-GROUND_Z_JITTER, GROUND_Z_JITTER, n)
        sc = (SIGMA_PER_PITCH * length / n_s, SIGMA_PER_PITCH * w / (n_t - 1), FLAT_SIGMA)
        parts.add(np.column_stack([xy, z]), sc, quats_yaw(yaw), OPACITY, asphalt(xy))
    return parts


def gen_edges(streets: Streets, pitch: float) -> tuple[Parts, Parts]:
    """Curbs (top and road-facing face) and sidewalks along every edge."""
    rng = seeded_rng(streets.seed, "edges")
    curbs, walks = Parts(), Parts()
    a_curb = float(np.clip(pitch, 0.25, 1.0))
    a_walk = pitch / math.sqrt(W_SIDEWALK)
    slab = 1.5
    slab_tint = seeded_rng(streets.seed, "slabs").uniform(-0.06, 0.06, 4096)
    for poly, outward in streets.edges:
        length = float(polyline_stations(poly)[-1])
        n_s = math.ceil(length / a_curb)
        # curb top: two rows, on its two edges
        fs, ft = jittered_grid(rng, n_s, 2, jitter=0.2, closed_v=True)
        xy, tan, nrm = polyline_frames(poly, fs * length)
        xy = xy + nrm * (outward * ft * CURB_WIDTH)[:, None]
        keep = ~in_roads(streets, xy)
        xy, tan = xy[keep], tan[keep]
        n = len(xy)
        yaw = np.arctan2(tan[:, 1], tan[:, 0])
        z = CURB_HEIGHT + rng.uniform(-0.002, 0.002, n)
        sc = (SIGMA_PER_PITCH * a_curb, SIGMA_PER_PITCH * CURB_WIDTH, FLAT_SIGMA)
        curbs.add(np.column_stack([xy, z]), sc, quats_yaw(yaw), OPACITY, vary(rng, CURB, n, 0.04))
        # curb face towards the road: rows at its foot, middle and top (thin: nothing pokes above it)
        fs, fz = jittered_grid(rng, n_s, 3, jitter=0.2, closed_v=True)
        xy, tan, nrm = polyline_frames(poly, fs * length)
        xy = xy + nrm * (outward * 0.004)
        keep = ~in_roads(streets, xy, margin=-0.05)
        xy, tan = xy[keep], tan[keep]
        z = fz[keep] * CURB_HEIGHT
        n = len(xy)
        t1 = np.column_stack([tan, np.zeros(n)])
        t2 = np.broadcast_to(np.array([0.0, 0.0, 1.0]), (n, 3))
        sc = (SIGMA_PER_PITCH * a_curb, SIGMA_PER_PITCH * CURB_HEIGHT / 2, FLAT_SIGMA)
        curbs.add(np.column_stack([xy, z]), sc, quats_from_axes(t1, t2), OPACITY, vary(rng, CURB, n, 0.04) * 0.9)
        # sidewalk: concrete slabs, each with its own tint
        n_s = math.ceil(length / a_walk)
        n_t = max(2, math.ceil(SIDEWALK_WIDTH / a_walk) + 1)
        fs, ft = jittered_grid(rng, n_s, n_t, closed_v=True)
        s = fs * length
        off = CURB_WIDTH + ft * SIDEWALK_WIDTH
        xy, tan, nrm = polyline_frames(poly, s)
        xy = xy + nrm * (outward * off)[:, None]
        keep = ~in_roads(streets, xy, margin=0.1)
        xy, tan, s, off = xy[keep], tan[keep], s[keep], off[keep]
        n = len(xy)
        slab_id = (np.floor(s / slab).astype(np.int64) * 7 + np.floor(off / slab).astype(np.int64) * 131) % 4096
        rgb = vary(rng, SIDEWALK, n, 0.04) * (1.0 + slab_tint[slab_id])[:, None]
        yaw = np.arctan2(tan[:, 1], tan[:, 0])
        z = CURB_HEIGHT + rng.uniform(-0.002, 0.002, n)
        sc = (SIGMA_PER_PITCH * length / n_s, SIGMA_PER_PITCH * SIDEWALK_WIDTH / (n_t - 1), FLAT_SIGMA)
        walks.add(np.column_stack([xy, z]), sc, quats_yaw(yaw), OPACITY, rgb)
    return curbs, walks
