"""Procedural digital twins: deterministic street scenes made of 3D Gaussians.

The embedded default world. Users swap in real reconstructions (PLY files); out of the box every
scenario's scene comes from here: a :class:`StreetLayout` (roads, markings, curbs, props) is turned
into a background :class:`~sim.gaussians.GaussianCloud` with sidewalks, grass, buildings with
window grids, trees, street lights and a sky dome, and :func:`build_vehicle` makes actor assets.

Frames and units (``sim.frames``): world z up, metres, road surface at z = 0; an asset is built in
its box frame (origin at the centre of the box's bottom face, x forward, y left, z up).

How the Gaussians are shaped, and why (the CPU renderer's cost grows with each Gaussian's on-screen
footprint and with how many overlap a pixel before it saturates):

- Surfaces are tiled by *flat*, nearly opaque Gaussians (normal-axis scale ``FLAT_SIGMA``, opacity
  ``OPACITY``) whose tangent scales follow the sampling pitch, on jittered grids (equal depths would
  make the compositing order ambiguous). Ground Gaussians lie at z = 0 (road), or at the curb height
  (curb tops, sidewalks) or just below it (grass): all under 0.15 m.
- Compositing is front to back by the depth of each Gaussian's *centre*, so a road Gaussian whose
  footprint covers a lane line could paint over it. Paint is therefore laid as a *stripe*: rows of
  small Gaussians for the paint plus graded rows of asphalt beside it ("flanks"), and the coarse
  road Gaussians keep out of a clear zone around each stripe; lines stay crisp from every view.
- Static obstacles (parked vehicles, barriers, poles, trunks) also get opaque Gaussians through
  their volume, so a Gaussian-count collision query (``sim.collision``) finds them.
- The sky is a dome of large flat Gaussians around the populated extent (blue gradient, hazy at
  the horizon, a band of distant-ground colour just below it), so every view is covered. It stops
  just under the horizon: a dome under the ground would be drawn (at a cost) behind every ground
  pixel the ground does not quite saturate, for no visible gain.

Sizes follow ``target_gaussians``: every surface is sampled at a density (Gaussians per m^2) scaled
by one factor that :func:`background_parts` solves for, so the count lands within a few per cent.

``python -m sim.procedural --out DIR --seed 0 --kind straight --gaussians 100000`` writes the
background as a standard 3DGS PLY.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.gaussians import GaussianCloud
from sim.geometry import check_polyline
from sim.scene import ActorTrack, Scene

# --------------------------------------------------------------------------------------------------
# Constants: sizes in metres, colours linear RGB in [0, 1]
# --------------------------------------------------------------------------------------------------

LANE_WIDTH = 3.5
SHOULDER = 0.5  # paved strip between the edge line and the curb
CURB_HEIGHT = 0.12  # sidewalks sit at this height; under the 0.3 m floor of a collision box
CURB_WIDTH = 0.25
SIDEWALK_WIDTH = 3.0
GRASS_Z = 0.10
MARKING_Z = 0.004  # paint sits a few mm above the asphalt
GROUND_Z_JITTER = 0.002
FLAT_SIGMA = 0.008  # normal-axis scale of surface Gaussians: flat discs
OPACITY = 0.99  # the renderers cap alpha at 0.99: surfaces saturate pixels as fast as they can
FILL_OPACITY = 0.96  # volume fill of obstacles (hidden behind their surfaces)
SIGMA_PER_PITCH = 0.6  # tangent sigma / sampling pitch: neighbours overlap without holes
JITTER = 0.08  # of a grid cell: enough to break exact grids (equal depths), small enough to leave no holes

# Markings (US-style): 0.15 m lines, dashes 3 m on / 9 m off.
MARKING_WIDTH = 0.15
DASH_ON, DASH_OFF = 3.0, 9.0
DOUBLE_YELLOW_GAP = 0.10
STOP_LINE_WIDTH = 0.45
CROSSWALK_WIDTH = 3.0  # along the traffic direction
CROSSWALK_BAR, CROSSWALK_PERIOD = 0.55, 1.1
MARKING_KINDS = ("solid_white", "dashed_white", "solid_yellow", "double_yellow", "stop_line", "crosswalk")
# Flank rows beside paint: offsets from the paint edge and their sigmas, finest first. A stripe uses
# the rows finer than 0.35 of the road Gaussians' sigma across it (at most MAX_FLANK_ROWS), then the
# coarse road, pushed out of the stripe's clear zone, takes over.
FLANK_OFFSETS = (0.05, 0.14, 0.27, 0.45, 0.70, 1.00)
FLANK_SIGMAS = (0.035, 0.06, 0.09, 0.13, 0.18, 0.25)
PAINT_ROW_PITCH = 0.075
ZEBRA_COLUMN_PITCH = 0.1
STRIPE_CLEARANCE = 1.0  # road Gaussians keep this many of their sigmas clear of a stripe's last row
MAX_FLANK_ROWS = 2  # beyond, the clear zone grows instead (coarse scenes: cheaper paint, softer edges)

# Relative densities (Gaussians per m^2 per unit of the solved density factor): near, often-seen
# surfaces get more, the backs of buildings and far grass less.
W_ROAD = 1.0
ROAD_ASPECT = 2.5  # road Gaussians are this much longer along the road than across (lane lines run along)
W_SIDEWALK = 0.8
W_GRASS_NEAR, W_GRASS_FAR = 0.30, 0.06
GRASS_NEAR_DIST = 20.0  # metres from a road edge
W_FACADE, W_SIDE_WALL, W_BACK_WALL = 0.9, 0.5, 0.15
# Walls are mostly seen obliquely (foreshortened along the street): wider-than-tall Gaussians then
# look round on screen, and round on-screen footprints are what the renderer draws cheapest.
FACADE_ASPECT = 1.7
W_CANOPY = 0.5
CANOPY_SIGMA_PER_PITCH = 0.65  # leaves overlap less than a closed surface: light shows through

DENSITY_TOLERANCE = 0.03  # of the Gaussian budget
MIN_DENSITY = 0.05  # Gaussians per m^2 (a 4.5 m pitch): below, a scene is too coarse to be a street
EXTENT_MARGIN = 32.0  # default populated margin around the roads
SKY_MARGIN = 15.0  # dome distance beyond the extent (render distances are ~200-250 m)
SKY_SIGMA_PER_PITCH = 0.68  # the dome must cover every pixel (alpha ~ 1)
SKY_BELOW = 0.12  # rad of dome below the horizon: the distant ground seen past the extent

# Buildings.
SETBACK_RANGE = (2.0, 10.0)  # from the sidewalk's outer edge
FRONTAGE_RANGE = (10.0, 24.0)
DEPTH_RANGE = (8.0, 16.0)
GAP_RANGE = (1.5, 6.0)
GROUND_FLOOR_HEIGHT = 3.6
FLOOR_HEIGHT = 3.2
FLOORS = (2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 7, 9)
# Trees and street lights.
TREE_SPACING = (9.0, 16.0)
CANOPY_BASE = (2.8, 3.6)  # canopies start above 2.5 m: clear of any vehicle
LIGHT_SPACING = 40.0

ASPHALT = (0.24, 0.24, 0.25)
PAINT_WHITE = (0.93, 0.93, 0.90)
PAINT_YELLOW = (0.95, 0.74, 0.14)
CURB = (0.74, 0.74, 0.71)
SIDEWALK = (0.58, 0.58, 0.56)
GRASS = (0.24, 0.40, 0.15)
GRASS_DRY = (0.45, 0.46, 0.24)
BARK = (0.29, 0.21, 0.15)
LEAVES = ((0.16, 0.33, 0.11), (0.22, 0.38, 0.12), (0.13, 0.28, 0.12), (0.30, 0.40, 0.14))
METAL = (0.48, 0.49, 0.51)
LAMP = (1.0, 0.97, 0.86)
WINDOW_DARK = (0.10, 0.13, 0.17)
WINDOW_BRIGHT = (0.36, 0.44, 0.52)
WALLS = (
    (0.62, 0.33, 0.25), (0.72, 0.64, 0.52), (0.84, 0.82, 0.78), (0.55, 0.55, 0.56), (0.80, 0.72, 0.48),
    (0.50, 0.30, 0.24), (0.66, 0.70, 0.72), (0.77, 0.58, 0.45), (0.42, 0.44, 0.47), (0.86, 0.78, 0.66),
)  # fmt: skip
SHOP_SIGNS = ((0.70, 0.12, 0.10), (0.12, 0.30, 0.55), (0.15, 0.45, 0.25), (0.85, 0.65, 0.15), (0.2, 0.2, 0.22))
SKY_ZENITH = (0.30, 0.50, 0.82)
SKY_LOW = (0.60, 0.73, 0.90)
SKY_HAZE = (0.80, 0.84, 0.88)
FAR_GROUND = (0.36, 0.38, 0.33)

# Vehicles.
VEHICLE_KINDS = ("sedan", "hatchback", "suv", "van", "truck", "bus")
CAR_PAINTS = (
    (0.86, 0.86, 0.87), (0.06, 0.06, 0.07), (0.62, 0.63, 0.65), (0.33, 0.34, 0.36), (0.62, 0.06, 0.06),
    (0.10, 0.20, 0.50), (0.08, 0.26, 0.16), (0.70, 0.62, 0.48), (0.85, 0.68, 0.08), (0.45, 0.10, 0.12),
)  # fmt: skip
BUS_PAINTS = ((0.90, 0.72, 0.08), (0.86, 0.86, 0.84), (0.70, 0.10, 0.08), (0.12, 0.30, 0.62), (0.20, 0.50, 0.30))
GLASS = (0.06, 0.08, 0.10)
GLASS_TOP = (0.22, 0.27, 0.33)  # glass reflects the sky towards its top
TYRE = (0.035, 0.035, 0.04)
RIM = (0.55, 0.56, 0.58)
TRIM = (0.08, 0.08, 0.09)
HEADLIGHT = (1.0, 0.97, 0.88)
TAILLIGHT = (0.80, 0.05, 0.04)
PLATE = (0.88, 0.88, 0.84)
INTERIOR = (0.04, 0.04, 0.045)
VEHICLE_FILL_PITCH = 0.3  # volume fill of vehicle bodies, for collision queries

# Props.
PROP_KINDS = ("barrier", "cone", "pole", "street_light", "bollard")
CONCRETE = (0.72, 0.71, 0.68)
SAFETY_RED = (0.80, 0.10, 0.08)
SAFETY_WHITE = (0.92, 0.92, 0.90)
CONE_ORANGE = (0.95, 0.36, 0.06)
PROP_PITCH = 0.06
STREET_LIGHT_HEIGHT = 7.5
STREET_LIGHT_ARM = 1.8

DEMO_DT = 0.1  # s per step of the demo tracks (scenarios' default, 10 Hz)
DEMO_STEPS = 80
DEMO_LENGTH = 200.0  # metres of main road in demo_scene
LAYOUT_KINDS = ("straight", "curve", "intersection", "merge")


# --------------------------------------------------------------------------------------------------
# Layout (the public description of a street)
# --------------------------------------------------------------------------------------------------


def _polyline_array(a, where: str) -> np.ndarray:
    """A layout polyline (world xy metres): ``sim.geometry.check_polyline``'s checks, and a length."""
    p = check_polyline(a, where)
    if np.hypot(*np.diff(p, axis=0).T).sum() <= 0.0:
        raise ValueError(f"{where}: polyline has zero length")
    return p


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class RoadSurface:
    """An asphalt strip: ``centerline`` [M, 2] world xy metres (M >= 2), ``width`` full paved width (m)."""

    centerline: np.ndarray
    width: float

    def __post_init__(self):
        object.__setattr__(self, "centerline", _polyline_array(self.centerline, "RoadSurface.centerline"))
        if not (math.isfinite(self.width) and self.width > 0):
            raise ValueError(f"RoadSurface.width must be a positive number of metres, got {self.width}")


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class Marking:
    """Road paint along ``polyline`` [M, 2]; ``kind`` one of ``MARKING_KINDS``.

    Lines (solid/dashed/double) run along the polyline. A ``stop_line`` is 0.45 m wide along it; a
    ``crosswalk``'s polyline crosses the road and its bars (3 m long) run across the polyline.
    """

    polyline: np.ndarray
    kind: str

    def __post_init__(self):
        object.__setattr__(self, "polyline", _polyline_array(self.polyline, f"Marking({self.kind!r}).polyline"))
        if self.kind not in MARKING_KINDS:
            raise ValueError(f"Marking.kind: expected one of {', '.join(MARKING_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class RoadEdge:
    """A curb line ``polyline`` [M, 2]; sidewalk, then verge and buildings, on the outward side.

    outward: +1 when the outside is to the left of the polyline's direction, -1 to the right.
    """

    polyline: np.ndarray
    outward: int

    def __post_init__(self):
        object.__setattr__(self, "polyline", _polyline_array(self.polyline, "RoadEdge.polyline"))
        if self.outward not in (1, -1):
            raise ValueError(f"RoadEdge.outward must be +1 (outside to the left) or -1 (right), got {self.outward}")


@dataclass(frozen=True)
class Prop:
    """Static furniture baked into the background: its box frame's bottom-face centre at (x, y) on the
    ground there, turned ``yaw`` (rad). ``kind``: one of ``PROP_KINDS`` or ``VEHICLE_KINDS`` (a parked
    vehicle). A street light's box spans its arm: the pole stands at the box's -x end, the lamp at +x.
    """

    kind: str
    x: float
    y: float
    yaw: float

    def __post_init__(self):
        if self.kind not in PROP_KINDS + VEHICLE_KINDS:
            raise ValueError(f"Prop.kind: expected one of {', '.join(PROP_KINDS + VEHICLE_KINDS)}, got {self.kind!r}")
        if not all(math.isfinite(v) for v in (self.x, self.y, self.yaw)):
            raise ValueError(f"Prop({self.kind!r}): x, y, yaw must be finite, got {(self.x, self.y, self.yaw)}")


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class StreetLayout:
    """Everything :func:`build_background` needs. ``extent`` = (xmin, ymin, xmax, ymax) world metres to
    populate with verges and buildings (default: the roads' bounding box plus ``EXTENT_MARGIN``)."""

    roads: tuple[RoadSurface, ...]
    markings: tuple[Marking, ...] = ()
    edges: tuple[RoadEdge, ...] = ()
    props: tuple[Prop, ...] = ()
    extent: tuple[float, float, float, float] | None = None

    def __post_init__(self):
        for name, cls in (("roads", RoadSurface), ("markings", Marking), ("edges", RoadEdge), ("props", Prop)):
            items = tuple(getattr(self, name))
            for i, it in enumerate(items):
                if not isinstance(it, cls):
                    raise TypeError(f"StreetLayout.{name}[{i}]: expected a {cls.__name__}, got {type(it).__name__}")
            object.__setattr__(self, name, items)
        if not self.roads:
            raise ValueError("StreetLayout.roads: at least one RoadSurface is needed")
        if self.extent is not None:
            e = tuple(float(v) for v in self.extent)
            if len(e) != 4 or not all(math.isfinite(v) for v in e) or e[2] <= e[0] or e[3] <= e[1]:
                raise ValueError(f"StreetLayout.extent: expected (xmin, ymin, xmax, ymax) with min < max, got {e}")
            object.__setattr__(self, "extent", e)

    def resolved_extent(self) -> tuple[float, float, float, float]:
        if self.extent is not None:
            return self.extent
        pts = np.concatenate([r.centerline for r in self.roads])
        m = max(r.width for r in self.roads) / 2.0 + EXTENT_MARGIN
        lo, hi = pts.min(0) - m, pts.max(0) + m
        return (float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1]))


# --------------------------------------------------------------------------------------------------
# Small helpers: seeded generators, Gaussian accumulation, orientations, noise
# --------------------------------------------------------------------------------------------------


def _rng(seed: int, *keys) -> np.random.Generator:
    """A generator for one component: stable across runs and independent of generation order."""
    words = [int(seed) & 0xFFFFFFFF] + [zlib.crc32(str(k).encode()) for k in keys]
    return np.random.default_rng(np.random.SeedSequence(words))


class _Parts:
    """Gaussians accumulated as arrays (float64 while building): means [n, 3], scales [n, 3] along the
    rotation's columns, quats [n, 4] wxyz, opacities [n], rgb [n, 3]."""

    def __init__(self):
        self.m: list[np.ndarray] = []
        self.s: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.o: list[np.ndarray] = []
        self.c: list[np.ndarray] = []

    def add(self, means, scales, quats, opacities, rgb) -> None:
        means = np.asarray(means, dtype=np.float64).reshape(-1, 3)
        n = len(means)
        if n == 0:
            return
        self.m.append(means)
        self.s.append(np.broadcast_to(np.asarray(scales, dtype=np.float64), (n, 3)))
        self.q.append(np.broadcast_to(np.asarray(quats, dtype=np.float64), (n, 4)))
        self.o.append(np.broadcast_to(np.asarray(opacities, dtype=np.float64), (n,)))
        self.c.append(np.broadcast_to(np.asarray(rgb, dtype=np.float64), (n, 3)))

    def extend(self, other: _Parts) -> None:
        for a, b in ((self.m, other.m), (self.s, other.s), (self.q, other.q), (self.o, other.o), (self.c, other.c)):
            a.extend(b)

    def __len__(self) -> int:
        return sum(len(m) for m in self.m)

    def cloud(self) -> GaussianCloud:
        if not self.m:
            return GaussianCloud.empty()
        cat = np.concatenate
        return GaussianCloud.from_rgb(
            cat(self.m),
            cat(self.q),
            np.maximum(cat(self.s), 1e-4),
            np.clip(cat(self.o), 0.01, 0.995),
            np.clip(cat(self.c), 0.0, 1.0),
        )


def _quats_from_axes(t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
    """wxyz quats [n, 4] of the rotations with columns (t1, t2', t1 x t2'), t2' = t2 made orthonormal to t1.

    t1, t2: [n, 3] (need not be unit). Scales [s1, s2, s3] then run along t1, t2', and the normal.
    """
    t1 = np.asarray(t1, dtype=np.float64)
    t1 = t1 / np.linalg.norm(t1, axis=-1, keepdims=True)
    t2 = np.asarray(t2, dtype=np.float64)
    t2 = t2 - (t2 * t1).sum(-1, keepdims=True) * t1
    t2 = t2 / np.linalg.norm(t2, axis=-1, keepdims=True)
    t3 = np.cross(t1, t2)
    return _quats_from_rotmats(np.stack([t1, t2, t3], axis=-1))


def _quats_from_rotmats(R: np.ndarray) -> np.ndarray:
    """[n, 3, 3] rotations -> [n, 4] wxyz (Shepperd's method, vectorised: the largest pivot per row)."""
    R = np.asarray(R, dtype=np.float64)
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = (tuple(R[:, i, j] for j in range(3)) for i in range(3))
    k = np.argmax(np.stack([m00 + m11 + m22, m00, m11, m22], axis=1), axis=1)
    q = np.empty((len(R), 4))
    sel = k == 0
    s = 2.0 * np.sqrt(np.maximum(1.0 + m00 + m11 + m22, 1e-12))
    q[sel] = np.stack([s / 4, (m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s], 1)[sel]
    sel = k == 1
    s = 2.0 * np.sqrt(np.maximum(1.0 + m00 - m11 - m22, 1e-12))
    q[sel] = np.stack([(m21 - m12) / s, s / 4, (m01 + m10) / s, (m02 + m20) / s], 1)[sel]
    sel = k == 2
    s = 2.0 * np.sqrt(np.maximum(1.0 - m00 + m11 - m22, 1e-12))
    q[sel] = np.stack([(m02 - m20) / s, (m01 + m10) / s, s / 4, (m12 + m21) / s], 1)[sel]
    sel = k == 3
    s = 2.0 * np.sqrt(np.maximum(1.0 - m00 - m11 + m22, 1e-12))
    q[sel] = np.stack([(m10 - m01) / s, (m02 + m20) / s, (m12 + m21) / s, s / 4], 1)[sel]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q


def _quats_yaw(yaw) -> np.ndarray:
    """[n, 4] wxyz rotations about +z by ``yaw`` [n] rad (scale 0 along the yaw direction, 2 along z)."""
    yaw = np.asarray(yaw, dtype=np.float64).reshape(-1)
    z = np.zeros_like(yaw)
    return np.stack([np.cos(yaw / 2), z, z, np.sin(yaw / 2)], axis=1)


def _random_quats(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


class _Noise:
    """Smooth 2D value noise in about [-1, 1]: a sum of random plane waves (cheap, deterministic)."""

    def __init__(self, rng: np.random.Generator, wavelength: float, waves: int = 6):
        ang = rng.uniform(0, 2 * np.pi, waves)
        lam = wavelength * rng.uniform(0.6, 1.6, waves)
        self.k = np.stack([np.cos(ang), np.sin(ang)], 1) * (2 * np.pi / lam)[:, None]  # [W, 2]
        self.phase = rng.uniform(0, 2 * np.pi, waves)
        self.norm = 1.0 / math.sqrt(waves / 2.0)

    def __call__(self, xy: np.ndarray) -> np.ndarray:
        return np.sin(np.asarray(xy)[:, :2] @ self.k.T + self.phase).sum(1) * self.norm


def _jittered_grid(rng: np.random.Generator, n_u: int, n_v: int, jitter: float = JITTER, closed_v: bool = False):
    """Samples in [0, 1]^2 on an n_u x n_v grid, each moved within +-jitter of its cell: u [n], v [n].

    closed_v: the v rows run from edge to edge (v = 0 and v = 1 included, pitch 1 / (n_v - 1)), so a
    strip's boundary rows sit on its boundary and strips meet without a seam.
    """
    n_u, n_v = max(int(n_u), 1), max(int(n_v), 2 if closed_v else 1)
    i, j = np.meshgrid(np.arange(n_u), np.arange(n_v), indexing="ij")
    u = (i.ravel() + 0.5 + rng.uniform(-jitter, jitter, i.size)) / n_u
    if closed_v:
        v = np.clip((j.ravel() + rng.uniform(-jitter, jitter, j.size)) / (n_v - 1), 0.0, 1.0)
    else:
        v = (j.ravel() + 0.5 + rng.uniform(-jitter, jitter, j.size)) / n_v
    return u, v


def _vary(rng: np.random.Generator, rgb, n: int, amount: float) -> np.ndarray:
    """[n, 3] copies of ``rgb`` with per-Gaussian brightness noise (+-amount, relative) and slight tint."""
    base = np.broadcast_to(np.asarray(rgb, dtype=np.float64), (n, 3))
    gain = 1.0 + rng.uniform(-amount, amount, (n, 1))
    tint = 1.0 + rng.uniform(-amount / 4, amount / 4, (n, 3))
    return base * gain * tint


def _rot2(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s], [s, c]])


def _place(parts: _Parts, x: float, y: float, z: float, yaw: float) -> _Parts:
    """``parts`` moved from their local frame to the world by the planar pose (x, y, z, yaw)."""
    out = _Parts()
    if not parts.m:
        return out
    R = np.eye(3)
    R[:2, :2] = _rot2(yaw)
    qz = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
    for m, s, q, o, c in zip(parts.m, parts.s, parts.q, parts.o, parts.c):
        w, x_, y_, z_ = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
        qw, qzz = qz[0], qz[3]
        # qz * q for qz = (qw, 0, 0, qzz)
        qq = np.stack([qw * w - qzz * z_, qw * x_ - qzz * y_, qw * y_ + qzz * x_, qw * z_ + qzz * w], 1)
        out.add(m @ R.T + np.array([x, y, z]), s, qq, o, c)
    return out


# --------------------------------------------------------------------------------------------------
# Polylines
# --------------------------------------------------------------------------------------------------


_PROJECT_CELL = 16.0  # metres: point groups in Polyline.project


class _Polyline:
    """A 2D polyline with arclength queries and point projection (vectorised)."""

    def __init__(self, pts, max_step: float | None = None):
        p = np.asarray(pts, dtype=np.float64)
        keep = np.concatenate([[True], np.hypot(*np.diff(p, axis=0).T) > 1e-9])
        p = p[keep]
        if max_step is not None:
            out = [p[:1]]
            for a, b in itertools.pairwise(p):
                k = max(1, math.ceil(np.hypot(*(b - a)) / max_step))
                out.append(a + (b - a) * (np.arange(1, k + 1) / k)[:, None])
            p = np.concatenate(out)
        self.p = p
        d = np.diff(p, axis=0)
        self.seg_len = np.hypot(d[:, 0], d[:, 1])
        self.u = d / self.seg_len[:, None]
        self.cum = np.concatenate([[0.0], np.cumsum(self.seg_len)])
        self.length = float(self.cum[-1])
        # vertex normals (left), averaged over the adjacent segments, for smooth offsets
        n_seg = np.stack([-self.u[:, 1], self.u[:, 0]], 1)
        vn = np.zeros_like(p)
        vn[:-1] += n_seg
        vn[1:] += n_seg
        self.vn = vn / np.maximum(np.linalg.norm(vn, axis=1, keepdims=True), 1e-9)
        self.lo, self.hi = p.min(0), p.max(0)

    def at(self, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Points [n, 2], unit tangents [n, 2] and smooth left normals [n, 2] at arclengths s [n] (clamped)."""
        s = np.clip(np.asarray(s, dtype=np.float64).reshape(-1), 0.0, self.length)
        k = np.clip(np.searchsorted(self.cum, s, side="right") - 1, 0, len(self.seg_len) - 1)
        t = s - self.cum[k]
        f = (t / self.seg_len[k])[:, None]
        xy = self.p[k] + self.u[k] * t[:, None]
        n = self.vn[k] * (1 - f) + self.vn[k + 1] * f
        n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-9)
        tan = np.stack([n[:, 1], -n[:, 0]], 1)
        return xy, tan, n

    def offset(self, d: float) -> np.ndarray:
        """Vertices [M, 2] of the polyline shifted ``d`` metres to its left (miter-free: for smooth curves)."""
        return self.p + d * self.vn

    def project(self, pts, max_dist: float = np.inf):
        """For points [n, 2]: distance to the polyline [n], signed lateral offset [n] (+ left), arclength of
        the nearest point [n], and whether the nearest point is inside the span (not an end cap) [n].
        Points farther than ``max_dist`` from every segment get dist = inf and interior False."""
        pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        n = len(pts)
        dist = np.full(n, np.inf)
        lat = np.zeros(n)
        s = np.zeros(n)
        interior = np.zeros(n, dtype=bool)
        idx = np.flatnonzero(np.all((pts >= self.lo - max_dist) & (pts <= self.hi + max_dist), axis=1))
        if not len(idx):
            return dist, lat, s, interior
        a, u, L = self.p[:-1], self.u, self.seg_len
        S = len(L)
        seg_lo = np.minimum(self.p[:-1], self.p[1:]) - max_dist
        seg_hi = np.maximum(self.p[:-1], self.p[1:]) + max_dist
        # points grouped by 16 m cells: each group is tested only against the segments near it
        cell = np.floor(pts[idx] / _PROJECT_CELL).astype(np.int64)
        key = cell[:, 0] * 1_000_003 + cell[:, 1]
        order = np.argsort(key, kind="stable")
        idx = idx[order]
        bounds = np.flatnonzero(np.diff(key[order])) + 1
        for grp in np.split(idx, bounds):
            q = pts[grp]
            lo, hi = q.min(0), q.max(0)
            segs = np.flatnonzero(np.all((seg_lo <= hi) & (seg_hi >= lo), axis=1)) if S > 8 else np.arange(S)
            if not len(segs):
                continue
            rel = q[:, None, :] - a[segs][None]  # [g, s, 2]
            uu, LL = u[segs], L[segs]
            t = rel[..., 0] * uu[:, 0] + rel[..., 1] * uu[:, 1]
            tc = np.clip(t, 0.0, LL)
            perp = uu[:, 0] * rel[..., 1] - uu[:, 1] * rel[..., 0]
            d2 = (t - tc) ** 2 + perp**2
            j = np.argmin(d2, axis=1)
            r = np.arange(len(grp))
            k = segs[j]
            dist[grp] = np.sqrt(d2[r, j])
            lat[grp] = perp[r, j]
            s[grp] = self.cum[k] + tc[r, j]
            tk = t[r, j]
            interior[grp] = ~(((k == 0) & (tk < 0.0)) | ((k == S - 1) & (tk > L[-1])))
        far = dist > max_dist
        dist[far], interior[far] = np.inf, False
        return dist, lat, s, interior


def _arc(center, radius: float, a0: float, a1: float, step: float = 2.0) -> np.ndarray:
    """Points [k, 2] on a circular arc from angle a0 to a1 (rad), at most ``step`` metres apart."""
    k = max(2, math.ceil(abs(a1 - a0) * radius / step) + 1)
    a = np.linspace(a0, a1, k)
    return np.asarray(center) + radius * np.stack([np.cos(a), np.sin(a)], 1)


# --------------------------------------------------------------------------------------------------
# Generic primitives (local frames)
# --------------------------------------------------------------------------------------------------


def _rect_surface(rng, origin, e_u, e_v, size_u: float, size_v: float, pitch: float, aspect: float = 1.0):
    """Jittered samples on a planar rectangle origin + u e_u + v e_v, u in [0, size_u], v in [0, size_v].

    The sampling pitch is ``pitch * sqrt(aspect)`` along e_u and ``pitch / sqrt(aspect)`` along e_v.
    Returns (points [n, 3], u [n], v [n], quats [n, 4], scales [n, 3]): flat Gaussians whose first two
    scales follow the pitch along e_u and e_v.
    """
    pu, pv = pitch * math.sqrt(aspect), pitch / math.sqrt(aspect)
    n_u, n_v = math.ceil(size_u / pu - 1e-9), math.ceil(size_v / pv - 1e-9)
    n_u, n_v = max(n_u, 1), max(n_v, 1)
    fu, fv = _jittered_grid(rng, n_u, n_v)
    u, v = fu * size_u, fv * size_v
    e_u, e_v = np.asarray(e_u, dtype=np.float64), np.asarray(e_v, dtype=np.float64)
    pts = np.asarray(origin, dtype=np.float64) + u[:, None] * e_u + v[:, None] * e_v
    q = np.broadcast_to(_quats_from_axes(e_u[None], e_v[None]), (len(pts), 4))
    sc = np.array([SIGMA_PER_PITCH * size_u / n_u, SIGMA_PER_PITCH * size_v / n_v, FLAT_SIGMA])
    return pts, u, v, q, np.broadcast_to(sc, pts.shape)


def _box_shell(parts: _Parts, rng, lo, hi, pitch: float, rgb_fn, faces: str = "xXyYzZ", opacity: float = OPACITY):
    """Flat Gaussians on the faces of the axis-aligned box [lo, hi] (local metres), 5 mm inside it.

    faces: subset of "xXyYzZ" (lower case: the -axis face, upper case: the +axis face).
    rgb_fn(face, points [n, 3]) -> [n, 3] or a colour.
    """
    lo = np.asarray(lo, dtype=np.float64) + 0.005
    hi = np.asarray(hi, dtype=np.float64) - 0.005
    ext = hi - lo
    for f in faces:
        ax = "xyz".index(f.lower())
        a1, a2 = [i for i in range(3) if i != ax]
        origin = lo.copy()
        if f.isupper():
            origin[ax] = hi[ax]
        e1, e2 = np.eye(3)[a1], np.eye(3)[a2]
        pts, _, _, q, sc = _rect_surface(rng, origin, e1, e2, ext[a1], ext[a2], pitch)
        rgb = rgb_fn(f, pts) if callable(rgb_fn) else rgb_fn
        parts.add(pts, sc, q, opacity, rgb)


def _volume_fill(parts: _Parts, rng, lo, hi, pitch: float, rgb, inside=None):
    """Opaque round Gaussians through the box [lo, hi] (a jittered 3D grid), optionally masked by
    ``inside(points [n, 3]) -> bool [n]``: obstacles' volume, for collision queries."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    n = np.maximum(np.ceil((hi - lo) / pitch).astype(int), 1)
    g = np.stack(np.meshgrid(*[np.arange(k) for k in n], indexing="ij"), -1).reshape(-1, 3)
    pts = lo + (g + 0.5 + rng.uniform(-JITTER, JITTER, g.shape)) / n * (hi - lo)
    if inside is not None:
        pts = pts[inside(pts)]
    sig = 0.45 * (hi - lo) / n
    parts.add(pts, np.broadcast_to(sig, pts.shape), _random_quats(rng, len(pts)), FILL_OPACITY, rgb)


def _cylinder(
    parts: _Parts,
    rng,
    height: float,
    pitch: float,
    rgb_fn,
    r0: float,
    r1: float | None = None,
    z0: float = 0.0,
    cx: float = 0.0,
    cy: float = 0.0,
    fill: bool = True,
    pitch_z: float | None = None,
):
    """A vertical cylinder (or cone frustum, radius r0 at the bottom to r1 at the top) about (cx, cy),
    from z0 to z0 + height: flat Gaussians on its side (``pitch`` around, ``pitch_z`` up: poles and
    trunks use tall ones), and round ones along its axis (the volume). rgb_fn(z [n]) -> [n, 3] or a colour."""
    r1 = r0 if r1 is None else r1
    n_a = max(6, math.ceil(2 * math.pi * max(r0, r1) / pitch))
    n_z = max(2, math.ceil(height / (pitch_z or pitch)))
    fa, fz = _jittered_grid(rng, n_a, n_z)
    ang = fa * 2 * math.pi
    z = z0 + fz * height
    r = r0 + (r1 - r0) * fz
    pts = np.stack([cx + r * np.cos(ang), cy + r * np.sin(ang), z], 1)
    t1 = np.stack([-np.sin(ang), np.cos(ang), np.zeros_like(ang)], 1)
    t2 = np.stack([(r1 - r0) * np.cos(ang), (r1 - r0) * np.sin(ang), np.full_like(ang, height)], 1)
    sc = np.stack(
        [
            SIGMA_PER_PITCH * 2 * math.pi * r / n_a,
            np.full_like(r, SIGMA_PER_PITCH * height / n_z),
            np.full_like(r, FLAT_SIGMA),
        ],
        1,
    )
    rgb = rgb_fn(z) if callable(rgb_fn) else rgb_fn
    parts.add(pts, sc, _quats_from_axes(t1, t2), OPACITY, rgb)
    if fill:
        n_f = max(2, math.ceil(height / max(0.6 * min(r0, r1) + 0.05, 0.1, pitch_z or 0.0)))
        zf = z0 + (np.arange(n_f) + 0.5 + rng.uniform(-0.2, 0.2, n_f)) / n_f * height
        rf = r0 + (r1 - r0) * (zf - z0) / height
        pf = np.stack([np.full(n_f, cx), np.full(n_f, cy), zf], 1)
        sig = np.stack([0.6 * rf, 0.6 * rf, np.full(n_f, 0.5 * height / n_f)], 1)
        rgbf = rgb_fn(zf) if callable(rgb_fn) else rgb_fn
        parts.add(pf, sig, np.array([1.0, 0, 0, 0]), FILL_OPACITY, rgbf)


def _disc(parts: _Parts, rng, center, e_u, e_v, radius: float, pitch: float, rgb_fn):
    """Flat Gaussians on a disc in the plane spanned by unit e_u, e_v. rgb_fn(rho [n] / radius) -> colours."""
    n_r = max(2, math.ceil(radius / pitch))
    pts, rho = [], []
    for i in range(n_r):
        r = (i + 0.5) / n_r * radius
        k = max(3, math.ceil(2 * math.pi * r / pitch))
        a = (np.arange(k) + rng.uniform(-JITTER, JITTER, k)) / k * 2 * math.pi + rng.uniform(0, 2 * math.pi)
        pts.append(np.stack([r * np.cos(a), r * np.sin(a)], 1))
        rho.append(np.full(k, r / radius))
    uv = np.concatenate(pts)
    rho = np.concatenate(rho)
    e_u, e_v = np.asarray(e_u, dtype=np.float64), np.asarray(e_v, dtype=np.float64)
    p = np.asarray(center, dtype=np.float64) + uv[:, :1] * e_u + uv[:, 1:] * e_v
    sig = SIGMA_PER_PITCH * radius / n_r
    q = _quats_from_axes(np.broadcast_to(e_u, p.shape), np.broadcast_to(e_v, p.shape))
    parts.add(p, (sig, sig, FLAT_SIGMA), q, OPACITY, rgb_fn(rho) if callable(rgb_fn) else rgb_fn)


def _point_in_polygon(pts: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Even-odd test: points [n, 2] inside the closed polygon [k, 2] -> bool [n]."""
    x, y = pts[:, 0:1], pts[:, 1:2]
    a, b = poly, np.roll(poly, -1, axis=0)
    cond = (a[:, 1] > y) != (b[:, 1] > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        xc = a[:, 0] + (y - a[:, 1]) * (b[:, 0] - a[:, 0]) / (b[:, 1] - a[:, 1])
    return (np.count_nonzero(cond & (x < xc), axis=1) % 2) == 1


def _extrusion(
    parts: _Parts, rng, profile: np.ndarray, half_width, pitch: float, rgb_top, rgb_side, top_segments=None, cut=None
):
    """A solid made by sweeping a profile in the (x, z) plane across y.

    profile: [K, 2] (x, z) vertices, counter-clockwise (x right, z up), starting and ending on the
    bottom edge, which gets no Gaussians (the ground side). half_width(z [n]) -> [n] half-width at
    height z (a narrower cabin top: tumblehome). top_segments: indices of the profile edges to cover
    (default: every edge but the closing bottom one). cut(x [n], z [n]) -> bool [n]: side-face holes
    (wheel arches). rgb_top(seg, x, y, z, normal_xz [n, 2]) and rgb_side(x, y, z) -> [n, 3].
    """
    prof = np.asarray(profile, dtype=np.float64)
    segs = range(len(prof) - 1) if top_segments is None else top_segments
    for k in segs:
        a, b = prof[k], prof[k + 1]
        d = b - a
        ln = float(np.hypot(*d))
        if ln < 1e-6:
            continue
        zmid = 0.5 * (a[1] + b[1])
        hw_mid = float(half_width(np.array([zmid]))[0])
        n_l = max(1, math.ceil(ln / pitch))
        n_w = max(2, math.ceil(2 * hw_mid / pitch))
        fl, fw = _jittered_grid(rng, n_l, n_w)
        xz = a + fl[:, None] * d
        hw = half_width(xz[:, 1])
        y = (2 * fw - 1) * hw
        pts = np.stack([xz[:, 0], y, xz[:, 1]], 1)
        t1 = np.broadcast_to(np.array([d[0], 0.0, d[1]]), pts.shape)
        t2 = np.broadcast_to(np.array([0.0, 1.0, 0.0]), pts.shape)
        nrm = np.broadcast_to(np.array([d[1], -d[0]]) / ln, (len(pts), 2))  # outward for a CCW profile
        sc = (SIGMA_PER_PITCH * ln / n_l, SIGMA_PER_PITCH * 2 * hw_mid / n_w, FLAT_SIGMA)
        parts.add(pts, sc, _quats_from_axes(t1, t2), OPACITY, rgb_top(k, pts[:, 0], y, pts[:, 2], nrm))
    # the two side faces: the profile polygon filled, at +-half_width(z)
    lo, hi = prof.min(0), prof.max(0)
    n_x = math.ceil((hi[0] - lo[0]) / pitch)
    n_z = math.ceil((hi[1] - lo[1]) / pitch)
    for side in (1.0, -1.0):
        fx, fz = _jittered_grid(rng, n_x, n_z)
        xz = lo + np.stack([fx, fz], 1) * (hi - lo)
        # keep samples half a pitch inside the outline, so the splats stay within the box
        keep = _point_in_polygon(xz, prof) & (_Polyline(np.concatenate([prof, prof[:1]])).project(xz)[0] > 0.4 * pitch)
        if cut is not None:
            keep &= ~cut(xz[:, 0], xz[:, 1])
        xz = xz[keep]
        hw = half_width(xz[:, 1])
        # the side leans in with the tumblehome: its tangent follows d(half_width)/dz
        dz = 0.02
        slope = (half_width(xz[:, 1] + dz) - half_width(xz[:, 1] - dz)) / (2 * dz)
        pts = np.stack([xz[:, 0], side * hw, xz[:, 1]], 1)
        t1 = np.broadcast_to(np.array([1.0, 0.0, 0.0]), pts.shape)
        t2 = np.stack([np.zeros(len(pts)), side * slope, np.ones(len(pts))], 1)
        sc = (SIGMA_PER_PITCH * (hi[0] - lo[0]) / n_x, SIGMA_PER_PITCH * (hi[1] - lo[1]) / n_z, FLAT_SIGMA)
        parts.add(pts, sc, _quats_from_axes(t1, t2), OPACITY, rgb_side(pts[:, 0], pts[:, 1], pts[:, 2]))


# --------------------------------------------------------------------------------------------------
# Vehicles
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _VehicleSpec:
    """A vehicle's shape in its box frame (metres). outline: side profile (x, z) counter-clockwise from
    the front bottom over the roof to the rear bottom; glass: indices of outline edges that are glass
    (windscreens); side glass spans x in side_glass, above ``belt``, ``pillar`` from the outline, minus
    the ``posts`` (x of B/C pillars, or a window pitch for buses)."""

    size: tuple[float, float, float]
    wheel_r: float
    axles: tuple[float, ...]
    outline: tuple[tuple[float, float], ...]
    glass: tuple[int, ...]
    belt: float
    side_glass: tuple[float, float]
    posts: tuple[float, ...] = ()
    post_pitch: float = 0.0
    pillar: float = 0.08
    tumble: float = 0.10
    head_z: tuple[float, float] = (0.55, 0.72)
    tail_z: tuple[float, float] = (0.78, 0.95)
    gaussians: int = 6000
    cargo_x: float | None = None  # x behind which the body is a (white) cargo box


def _vehicle_spec(kind: str) -> _VehicleSpec:
    if kind == "sedan":
        L, W, H = 4.6, 1.85, 1.45
        return _VehicleSpec(
            (L, W, H), 0.32, (1.38, -1.32),
            ((2.30, 0.22), (2.30, 0.62), (2.15, 0.79), (0.95, 0.92), (0.12, 1.43), (-0.95, 1.45),
             (-1.75, 1.00), (-2.25, 0.95), (-2.30, 0.62), (-2.30, 0.22)),
            glass=(3, 5), belt=0.93, side_glass=(-1.65, 0.9), posts=(-0.35,), gaussians=3000,
        )  # fmt: skip
    if kind == "hatchback":
        L, W, H = 4.1, 1.78, 1.48
        return _VehicleSpec(
            (L, W, H), 0.31, (1.30, -1.22),
            ((2.05, 0.22), (2.05, 0.60), (1.90, 0.80), (0.95, 0.93), (0.15, 1.46), (-1.45, 1.48),
             (-1.95, 1.18), (-2.05, 0.90), (-2.05, 0.22)),
            glass=(3, 5), belt=0.95, side_glass=(-1.65, 0.9), posts=(-0.45,), head_z=(0.55, 0.72),
            tail_z=(0.92, 1.12), gaussians=3000,
        )  # fmt: skip
    if kind == "suv":
        L, W, H = 4.8, 1.95, 1.75
        return _VehicleSpec(
            (L, W, H), 0.37, (1.45, -1.40),
            ((2.40, 0.28), (2.40, 0.78), (2.22, 0.99), (1.05, 1.10), (0.30, 1.70), (-1.95, 1.75),
             (-2.32, 1.62), (-2.40, 1.08), (-2.40, 0.28)),
            glass=(3, 6), belt=1.10, side_glass=(-2.2, 1.0), posts=(-0.45, -1.5), head_z=(0.75, 0.92),
            tail_z=(1.02, 1.25), gaussians=3400,
        )  # fmt: skip
    if kind == "van":
        L, W, H = 5.2, 2.0, 2.15
        return _VehicleSpec(
            (L, W, H), 0.35, (1.75, -1.6),
            ((2.60, 0.28), (2.60, 0.80), (2.25, 1.08), (1.45, 1.98), (1.15, 2.15), (-2.52, 2.15),
             (-2.60, 2.05), (-2.60, 0.28)),
            glass=(2,), belt=1.12, side_glass=(0.55, 1.6), posts=(), head_z=(0.78, 0.98),
            tail_z=(0.85, 1.35), gaussians=3800,
        )  # fmt: skip
    if kind == "truck":
        L, W, H = 7.5, 2.45, 3.4
        return _VehicleSpec(
            (L, W, H), 0.50, (2.55, -2.15),
            ((3.75, 0.40), (3.75, 1.35), (3.62, 2.55), (3.35, 2.75), (1.55, 2.78), (1.45, 3.40),
             (-3.75, 3.40), (-3.75, 0.55)),
            glass=(1,), belt=1.55, side_glass=(1.75, 3.35), posts=(), pillar=0.12, tumble=0.05,
            head_z=(0.65, 0.90), tail_z=(0.70, 0.95), gaussians=5000, cargo_x=1.5,
        )  # fmt: skip
    if kind == "bus":
        L, W, H = 12.0, 2.55, 3.2
        return _VehicleSpec(
            (L, W, H), 0.50, (3.40, -2.70),
            ((6.0, 0.35), (6.0, 1.00), (5.96, 2.85), (5.80, 3.12), (-5.85, 3.20), (-6.0, 3.0),
             (-6.0, 0.35)),
            glass=(1,), belt=1.10, side_glass=(-5.7, 5.6), post_pitch=1.35, pillar=0.15, tumble=0.05,
            head_z=(0.55, 0.80), tail_z=(0.60, 1.00), gaussians=7000,
        )  # fmt: skip
    raise ValueError(f"build_vehicle: unknown kind {kind!r}; expected one of {', '.join(VEHICLE_KINDS)}")


def _segment_distance(pts: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Distance [n] from points [n, 2] to an open polyline [k, 2]."""
    return _Polyline(poly).project(pts)[0]


def build_vehicle(kind: str, color: tuple[float, float, float] | None = None, seed: int = 0):
    """A vehicle asset in its box frame and its box size.

    kind: one of ``VEHICLE_KINDS``; color: body paint (linear RGB in [0, 1]) or None for one picked by
    ``seed`` from a palette. Returns (cloud, size) with size [3] = (length, width, height) metres; every
    Gaussian's mean lies inside the box [-L/2, L/2] x [-W/2, W/2] x [0, H]. The body has glass
    (windscreens, side windows), four wheels, headlights, taillights and plates, and an opaque dark
    volume fill (so static-collision queries find a parked one).
    """
    spec = _vehicle_spec(kind)
    rng = _rng(seed, "vehicle", kind)
    if color is None:
        pal = BUS_PAINTS if kind == "bus" else CAR_PAINTS
        color = pal[int(rng.integers(len(pal)))]
    paint = np.clip(np.asarray(color, dtype=np.float64), 0.0, 1.0)
    if paint.shape != (3,):
        raise ValueError(f"build_vehicle: color must be (r, g, b) in [0, 1], got {color!r}")
    L, W, H = spec.size
    # the outline lies on the box's faces; keep every mean a few mm inside
    prof = np.asarray(spec.outline) * [(L / 2 - 0.005) / (L / 2), 1.0]
    prof[:, 1] = np.minimum(prof[:, 1], H - 0.005)
    r_w = spec.wheel_r
    clearance = prof[0, 1]
    hw_body = W / 2 - 0.01
    top_z = prof[:, 1].max()

    def half_width(z):
        f = np.clip((np.asarray(z) - spec.belt) / max(top_z - spec.belt, 1e-6), 0.0, 1.0)
        return hw_body - spec.tumble * f

    # pitch from the surface area and the Gaussian budget of this kind
    area = 2 * abs(np.dot(prof[:, 0], np.roll(prof[:, 1], -1)) - np.dot(prof[:, 1], np.roll(prof[:, 0], -1))) / 2
    area += np.hypot(*np.diff(prof, axis=0).T).sum() * W
    pitch = math.sqrt(area / (0.85 * spec.gaussians))
    cargo = np.array([0.88, 0.88, 0.87]) if spec.cargo_x is not None else None

    def body_rgb(x, n):
        c = np.broadcast_to(paint, (n, 3)).copy()
        if cargo is not None:
            c[x < spec.cargo_x] = cargo
        return c * (1 + rng.uniform(-0.02, 0.02, (n, 1)))

    def glass_rgb(z, z_lo, z_hi):
        f = np.clip((z - z_lo) / max(z_hi - z_lo, 1e-6), 0.0, 1.0)[:, None]
        return np.asarray(GLASS) * (1 - f) + np.asarray(GLASS_TOP) * f

    def rgb_top(seg, x, y, z, nrm):
        n = len(x)
        c = body_rgb(x, n)
        if seg in spec.glass:
            c = glass_rgb(z, prof[seg : seg + 2, 1].min(), prof[seg : seg + 2, 1].max())
        ay = np.abs(y)
        hw = half_width(z)
        front = nrm[:, 0] > 0.6
        rear = nrm[:, 0] < -0.6
        h0, h1 = spec.head_z
        t0, t1 = spec.tail_z
        in_head = front & (z >= h0) & (z <= h1)
        c[in_head & (ay > hw - 0.45) & (ay < hw - 0.06)] = HEADLIGHT
        c[in_head & (ay < hw - 0.52)] = TRIM  # grille
        c[front & (z < h0 - 0.08) & (z > h0 - 0.28) & (ay < 0.26)] = PLATE
        c[front & (z < clearance + 0.12)] = TRIM
        in_tail = rear & (z >= t0) & (z <= t1)
        c[in_tail & (ay > hw - 0.38) & (ay < hw - 0.04)] = TAILLIGHT
        c[rear & (z < t0 - 0.05) & (z > t0 - 0.25) & (ay < 0.26)] = PLATE
        c[rear & (z < clearance + 0.12)] = TRIM
        if kind == "bus":  # rear window band and destination sign
            c[rear & (z > 2.2) & (z < 2.85) & (ay < hw - 0.15)] = GLASS
            c[front & (z > 2.6) & (z < 2.85) & (ay < hw - 0.3)] = (0.9, 0.55, 0.1)
        if kind == "van":
            c[rear & (z > 1.35) & (z < 1.95) & (ay < hw - 0.12) & (ay > 0.04)] = GLASS
        return c

    def rgb_side(x, y, z):
        n = len(x)
        c = body_rgb(x, n)
        g0, g1 = spec.side_glass
        d_edge = _segment_distance(np.stack([x, z], 1), prof)  # pillars: glass keeps off the outline
        glass = (z > spec.belt + 0.03) & (x > g0) & (x < g1) & (d_edge > spec.pillar)
        for p in spec.posts:
            glass &= np.abs(x - p) > 0.06
        if spec.post_pitch:
            glass &= np.abs(((x - g0) % spec.post_pitch) - spec.post_pitch / 2) < spec.post_pitch / 2 - 0.08
            glass &= z < top_z - 0.3
        c[glass] = glass_rgb(z[glass], spec.belt, top_z)
        if kind == "bus":  # front door on the kerb (right) side
            door = (y < 0) & (x > 4.3) & (x < 5.4) & (z > 0.4) & (z < 2.8)
            c[door] = glass_rgb(z[door], 0.4, 2.8)
        c[z < clearance + 0.10] = TRIM  # sills
        # side markers: amber at the front corners, red at the rear
        c[(x > L / 2 - 0.12) & (z > spec.head_z[0]) & (z < spec.head_z[1])] = (0.95, 0.6, 0.1)
        c[(x < -L / 2 + 0.10) & (z > spec.tail_z[0]) & (z < spec.tail_z[1])] = TAILLIGHT
        return c

    def wheel_cut(x, z):
        cut = np.zeros(len(x), dtype=bool)
        for ax in spec.axles:
            cut |= (x - ax) ** 2 + (z - r_w) ** 2 < (r_w + 0.05) ** 2
        return cut | (z < clearance)

    parts = _Parts()
    _extrusion(parts, rng, prof, half_width, pitch, rgb_top, rgb_side, cut=wheel_cut)
    # wheels: the outer disc (tyre, rim, hub) and the tread
    wheel_pitch = min(pitch, r_w / 4)
    for ax in spec.axles:
        for side in (1.0, -1.0):
            y_out = side * (W / 2 - 0.03)

            def wheel_rgb(rho):
                c = np.empty((len(rho), 3))
                c[:] = TYRE
                c[rho < 0.66] = RIM
                c[rho < 0.18] = TRIM
                return c

            _disc(parts, rng, (ax, y_out, r_w), (1, 0, 0), (0, 0, 1), r_w - 0.005, wheel_pitch, wheel_rgb)
            n_a = max(12, math.ceil(2 * math.pi * r_w / wheel_pitch))
            n_y = max(2, math.ceil(0.24 / wheel_pitch))
            fa, fy = _jittered_grid(rng, n_a, n_y)
            a = fa * 2 * math.pi
            r_t = r_w - 0.01
            pts = np.stack([ax + r_t * np.cos(a), side * (W / 2 - 0.27 + 0.24 * fy), r_w + r_t * np.sin(a)], 1)
            t1 = np.stack([-np.sin(a), np.zeros_like(a), np.cos(a)], 1)
            t2 = np.broadcast_to(np.array([0.0, 1.0, 0.0]), pts.shape)
            sc = (SIGMA_PER_PITCH * 2 * math.pi * r_t / n_a, SIGMA_PER_PITCH * 0.24 / n_y, FLAT_SIGMA)
            parts.add(pts, sc, _quats_from_axes(t1, t2), OPACITY, TYRE)
    # volume fill: dark interior, seen through the glass, and what collision queries count
    fill_lo = np.array([-L / 2 + 0.1, -W / 2 + 0.15, clearance + 0.06])
    fill_hi = np.array([L / 2 - 0.1, W / 2 - 0.15, top_z - 0.08])

    def inside(p):
        ok = _point_in_polygon(p[:, [0, 2]], prof) & (np.abs(p[:, 1]) < half_width(p[:, 2]) - 0.1)
        ok &= p[:, 2] > clearance  # the arches are open only where the wheels are, at the sides
        return ok & ~(wheel_cut(p[:, 0], p[:, 2]) & (np.abs(p[:, 1]) > W / 2 - 0.35))

    _volume_fill(parts, rng, fill_lo, fill_hi, VEHICLE_FILL_PITCH, INTERIOR, inside)
    return parts.cloud(), np.array([L, W, H])


# --------------------------------------------------------------------------------------------------
# Props
# --------------------------------------------------------------------------------------------------


def _prop_parts(kind: str, seed: int) -> tuple[_Parts, np.ndarray]:
    rng = _rng(seed, "prop", kind)
    parts = _Parts()
    a = PROP_PITCH
    if kind == "barrier":
        # a jersey barrier: concrete, with a red and white striped band (road works)
        L, W, H = 2.0, 0.6, 0.8
        prof = np.array(
            [(0.30, 0.0), (0.30, 0.08), (0.13, 0.30), (0.09, H), (-0.09, H), (-0.13, 0.30), (-0.30, 0.08), (-0.30, 0.0)]
        )
        plastic = bool(rng.integers(2))

        def stripes(x, y, z):
            c = _vary(rng, CONCRETE, len(x), 0.05)
            band = (z > 0.42) & (z < 0.74)
            if plastic:
                band = z > 0.05
            red = ((y + z) % 0.5) < 0.25  # y runs along the barrier here (rotated below)
            c[band & red] = SAFETY_RED
            c[band & ~red] = SAFETY_WHITE
            return c

        sub = _Parts()
        # sweep the (across, up) profile along the barrier's length: build with the profile in (x, z)
        # and the length along y, then turn it 90 degrees so the length runs along box x
        _extrusion(
            sub,
            rng,
            prof,
            lambda z: np.full(np.shape(z), L / 2 - 0.005),
            a,
            lambda k, x, y, z, n: stripes(x, y, z),
            stripes,
        )
        _volume_fill(
            sub,
            rng,
            (-0.2, -L / 2 + 0.08, 0.05),
            (0.2, L / 2 - 0.08, H - 0.1),
            0.15,
            CONCRETE,
            lambda p: _point_in_polygon(p[:, [0, 2]], prof * 0.9),
        )
        parts = _place(sub, 0.0, 0.0, 0.0, math.pi / 2)
        return parts, np.array([L, W, H])
    if kind == "cone":
        H = 0.70

        def cone_rgb(z):
            c = np.empty((len(z), 3))
            c[:] = CONE_ORANGE
            c[(z > 0.36) & (z < 0.50)] = SAFETY_WHITE
            return c

        _box_shell(parts, rng, (-0.19, -0.19, 0.0), (0.19, 0.19, 0.035), 0.05, TRIM, faces="xXyYZ")
        _cylinder(parts, rng, H - 0.04, 0.03, cone_rgb, 0.16, 0.025, z0=0.035)
        return parts, np.array([0.38, 0.38, H])
    if kind == "pole":
        # a sign post: a round sign (red rim, white face) facing +x
        H, R = 2.75, 0.045
        _cylinder(parts, rng, H - 0.01, a, METAL, R, z0=0.0)
        c = np.array([0.06, 0.0, 2.42])

        def sign_rgb(rho):
            out = np.empty((len(rho), 3))
            out[:] = SAFETY_WHITE
            out[rho > 0.72] = SAFETY_RED
            return out

        _disc(parts, rng, c, (0, 1, 0), (0, 0, 1), 0.30, 0.04, sign_rgb)
        _disc(parts, rng, c - (0.02, 0, 0), (0, 1, 0), (0, 0, 1), 0.30, 0.06, METAL)
        return parts, np.array([0.16, 0.62, H])
    if kind == "street_light":
        H, arm = STREET_LIGHT_HEIGHT, STREET_LIGHT_ARM
        L = arm + 0.35
        px = -L / 2 + 0.15
        _cylinder(parts, rng, H - 0.05, 0.12, METAL, 0.12, 0.07, cx=px, pitch_z=0.35)
        _box_shell(parts, rng, (px, -0.05, H - 0.45), (L / 2 - 0.3, 0.05, H - 0.35), 0.15, METAL, faces="yYzZ")

        def head_rgb(face, p):
            return LAMP if face == "z" else METAL

        _box_shell(parts, rng, (L / 2 - 0.75, -0.16, H - 0.5), (L / 2, 0.16, H - 0.32), 0.08, head_rgb)
        return parts, np.array([L, 0.32, H])
    if kind == "bollard":
        H, R = 0.9, 0.1

        def bollard_rgb(z):
            c = np.empty((len(z), 3))
            c[:] = (0.2, 0.2, 0.21)
            c[(z > 0.68) & (z < 0.78)] = SAFETY_WHITE
            return c

        _cylinder(parts, rng, H - 0.02, 0.05, bollard_rgb, R)
        _disc(parts, rng, (0, 0, H - 0.01), (1, 0, 0), (0, 1, 0), R, 0.05, (0.2, 0.2, 0.21))
        return parts, np.array([2 * R, 2 * R, H])
    raise ValueError(f"build_prop: unknown kind {kind!r}; expected one of {', '.join(PROP_KINDS)}")


def build_prop(kind: str, seed: int = 0) -> tuple[GaussianCloud, np.ndarray]:
    """Street furniture in its box frame and its box size [3] (length, width, height) metres.

    kind: one of ``PROP_KINDS``. Every mean lies inside the box; obstacles (barrier, cone, bollard,
    poles) have opaque Gaussians through their volume, for static-collision queries.
    """
    parts, size = _prop_parts(kind, seed)
    return parts.cloud(), size


# --------------------------------------------------------------------------------------------------
# Background: planning (where things go, from the seed) then generation (Gaussians, at a density)
# --------------------------------------------------------------------------------------------------


@dataclass
class _Building:
    center: np.ndarray  # [2] footprint centre
    yaw: float  # local x along the street
    size: tuple[float, float, float]  # frontage (x), depth (y), height
    front: int  # +1: the street-facing wall is at local +y, -1: at -y
    wall: np.ndarray
    bay: float
    shop: bool
    sign: np.ndarray
    seed: int


@dataclass
class _Tree:
    xy: np.ndarray
    trunk_r: float
    canopy_base: float
    radii: tuple[float, float]  # horizontal, vertical
    leaves: np.ndarray
    seed: int


@dataclass
class _Stripe:
    """Paint on a straight piece: centre [2], unit direction [2], half-length, paint pattern, road sigmas
    (the coarse road Gaussians' sigma along and across this stripe)."""

    center: np.ndarray
    direction: np.ndarray
    half_len: float
    kind: str  # "line", "double", "zebra"
    half_paint: float  # half-width of the painted band (line/double) or half-length of the bars (zebra)
    rgb: tuple[float, float, float]
    ends: tuple[bool, bool]  # whether the start / end are free (get flanks), not joints
    road_cos: float = 1.0  # |cos| of the angle between the stripe and the road under it
    sig_par: float = 0.3
    sig_perp: float = 0.1
    clear: tuple[float, float] = (0.0, 0.0)  # half-length, half-width of the zone the road keeps out of


@dataclass
class _Plan:
    layout: StreetLayout
    extent: tuple[float, float, float, float]
    roads: list[tuple[_Polyline, float]]
    edges: list[tuple[_Polyline, int]]
    markings: list[tuple[_Polyline, str]]
    buildings: list[_Building]
    trees: list[_Tree]
    furniture: list[Prop]  # street lights placed here, plus the layout's props
    seed: int
    stripes: list[_Stripe] = dataclasses.field(default_factory=list)


def _in_roads(plan: _Plan, xy: np.ndarray, margin: float = 0.0, upto: int | None = None) -> np.ndarray:
    """bool [n]: points within (half-width + margin) of a road's centreline, inside its span."""
    out = np.zeros(len(xy), dtype=bool)
    for poly, w in plan.roads[:upto]:
        d, lat, _, interior = poly.project(xy, max_dist=w / 2 + margin + 1.0)
        out |= (np.abs(lat) <= w / 2 + margin) & interior & (d <= w / 2 + margin + 1e-6)
    return out


def _road_distance(plan: _Plan, xy: np.ndarray) -> np.ndarray:
    """[n] distance from points to the nearest road's paved edge (0 inside)."""
    out = np.full(len(xy), np.inf)
    for poly, w in plan.roads:
        d = poly.project(xy, max_dist=w / 2 + GRASS_NEAR_DIST + 1.0)[0]
        out = np.minimum(out, np.maximum(d - w / 2, 0.0))
    return out


def _edge_zone(plan: _Plan, xy: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """bool [n]: points whose outward offset from some edge lies in [lo, hi] (inside the edge's span)."""
    out = np.zeros(len(xy), dtype=bool)
    for poly, outward in plan.edges:
        _, lat, _, interior = poly.project(xy, max_dist=max(abs(lo), abs(hi)) + 1.0)
        o = lat * outward
        out |= interior & (o >= lo) & (o <= hi)
    return out


def _ground_z(plan: _Plan, xy: np.ndarray) -> np.ndarray:
    """Ground height [n] under points: 0 on roads, the curb height on curbs and sidewalks, grass level else."""
    z = np.full(len(xy), GRASS_Z)
    z[_edge_zone(plan, xy, 0.0, CURB_WIDTH + SIDEWALK_WIDTH)] = CURB_HEIGHT
    z[_in_roads(plan, xy)] = 0.0
    return z


def _rect_corners(center, yaw, lx, ly) -> np.ndarray:
    R = _rot2(yaw)
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


def _plan(layout: StreetLayout, seed: int) -> _Plan:
    extent = layout.resolved_extent()
    roads = [(_Polyline(r.centerline, max_step=4.0), float(r.width)) for r in layout.roads]
    edges = [(_Polyline(e.polyline, max_step=4.0), int(e.outward)) for e in layout.edges]
    marks = [(_Polyline(m.polyline, max_step=4.0), m.kind) for m in layout.markings]
    plan = _Plan(layout, extent, roads, edges, marks, [], [], [], seed)
    xmin, ymin, xmax, ymax = extent
    paved = CURB_WIDTH + SIDEWALK_WIDTH

    def clear_of_street(pts, margin):
        return ~(_in_roads(plan, pts, margin) | _edge_zone(plan, pts, -margin, paved + margin))

    # buildings along each edge's outward side
    rng = _rng(seed, "buildings")
    footprints: list[np.ndarray] = []
    for poly, outward in edges:
        s = rng.uniform(0.0, 6.0)
        while s < poly.length:
            width = rng.uniform(*FRONTAGE_RANGE)
            depth = rng.uniform(*DEPTH_RANGE)
            setback = rng.uniform(*SETBACK_RANGE)
            gap = rng.uniform(*GAP_RANGE)
            floors = int(rng.choice(FLOORS))
            style = (rng.integers(len(WALLS)), rng.uniform(2.4, 3.6), rng.random() < 0.5, rng.integers(len(SHOP_SIGNS)))
            bseed = int(rng.integers(2**31))
            s_mid = s + width / 2
            s += width + gap
            if s_mid > poly.length:
                break
            xy, tan, nrm = poly.at(np.array([s_mid]))
            out_dir = nrm[0] * outward
            center = xy[0] + out_dir * (paved + setback + depth / 2)
            yaw = math.atan2(tan[0, 1], tan[0, 0])
            if not (xmin <= center[0] <= xmax and ymin <= center[1] <= ymax):
                continue
            corners = _rect_corners(center, yaw, width, depth)
            g = np.stack(np.meshgrid(np.linspace(-0.5, 0.5, 6), np.linspace(-0.5, 0.5, 5)), -1).reshape(-1, 2)
            samples = center + (g * [width, depth]) @ _rot2(yaw).T
            if not clear_of_street(np.concatenate([corners, samples]), 1.0).all():
                continue
            grown = _rect_corners(center, yaw, width + 2.0, depth + 2.0)
            if any(_rects_overlap(grown, f) for f in footprints):
                continue
            footprints.append(corners)
            # the street-facing wall: local y points left of the edge's direction; the street is inward
            front = -outward
            height = GROUND_FLOOR_HEIGHT + (floors - 1) * FLOOR_HEIGHT + 0.6
            wall, bay, shop, sign = style
            plan.buildings.append(
                _Building(
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

    def clear_of_buildings(p, margin):
        ok = np.ones(len(p), dtype=bool)
        for b in plan.buildings:
            loc = (p - b.center) @ _rot2(b.yaw)
            ok &= ~((np.abs(loc[:, 0]) < b.size[0] / 2 + margin) & (np.abs(loc[:, 1]) < b.size[1] / 2 + margin))
        return ok

    # trees in the verge behind the sidewalk
    rng = _rng(seed, "trees")
    for poly, outward in edges:
        s = rng.uniform(0.0, TREE_SPACING[1])
        while s < poly.length:
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
            xy, _, nrm = poly.at(np.array([s]))
            s += rng.uniform(*TREE_SPACING)
            p = xy + nrm * outward * off
            inside = xmin <= p[0, 0] <= xmax and ymin <= p[0, 1] <= ymax
            if not inside or not clear_of_street(p, 0.6)[0] or not clear_of_buildings(p, 0.8)[0]:
                continue
            if any(np.hypot(*(t.xy - p[0])) < 4.0 for t in plan.trees):
                continue
            tr, base, rh, rv, leaf, tseed = tree
            plan.trees.append(
                _Tree(p[0], float(tr), float(base), (float(rh), float(rv)), np.asarray(LEAVES[leaf]), tseed)
            )

    # street lights on the sidewalk by the curb, arms over the road
    rng = _rng(seed, "lights")
    for poly, outward in edges:
        s = rng.uniform(5.0, LIGHT_SPACING)
        while s < poly.length - 2.0:
            xy, _, nrm = poly.at(np.array([s]))
            s += LIGHT_SPACING * rng.uniform(0.9, 1.1)
            pole = xy[0] + nrm[0] * outward * (CURB_WIDTH + 0.45)
            if _in_roads(plan, pole[None], 0.2)[0]:
                continue
            inward = -nrm[0] * outward
            yaw = math.atan2(inward[1], inward[0])
            L = STREET_LIGHT_ARM + 0.35
            c = pole + inward * (L / 2 - 0.15)
            plan.furniture.append(Prop("street_light", float(c[0]), float(c[1]), yaw))
    plan.furniture.extend(layout.props)
    plan.stripes = _plan_stripes(plan)
    return plan


# -- stripes (markings) ----------------------------------------------------------------------------


def _simplify(p: np.ndarray, tol: float = 1e-4) -> np.ndarray:
    """Drop vertices [M, 2] where the polyline goes straight on (turn under ``tol`` rad)."""
    keep = [0]
    for i in range(1, len(p) - 1):
        a, b = p[i] - p[keep[-1]], p[i + 1] - p[i]
        turn = abs(math.atan2(a[0] * b[1] - a[1] * b[0], a @ b))
        if turn > tol:
            keep.append(i)
    keep.append(len(p) - 1)
    return p[keep]


def _plan_stripes(plan: _Plan) -> list[_Stripe]:
    """Straight painted pieces of every marking, each with the cosine between it and the road under it."""
    out: list[_Stripe] = []
    for mpoly, kind in plan.markings:
        poly = _Polyline(_simplify(mpoly.p))
        pieces: list[tuple[float, float]] = []
        if kind == "dashed_white":
            s = 0.0
            while s < poly.length - 0.3:
                pieces.append((s, min(s + DASH_ON, poly.length)))
                s += DASH_ON + DASH_OFF
        else:
            pieces.append((0.0, poly.length))
        for s0, s1 in pieces:
            # split at the polyline's vertices so every piece is straight; joints get no flanks
            cuts = np.concatenate([[s0], poly.cum[(poly.cum > s0 + 1e-6) & (poly.cum < s1 - 1e-6)], [s1]])
            ends = poly.at(cuts)[0]
            for j in range(len(cuts) - 1):
                d = ends[j + 1] - ends[j]
                ln = float(np.hypot(*d))
                if ln < 1e-3:
                    continue
                c, u = 0.5 * (ends[j] + ends[j + 1]), d / ln
                free = (j == 0, j == len(cuts) - 2)
                if kind == "double_yellow":
                    st = _Stripe(
                        c, u, ln / 2, "double", DOUBLE_YELLOW_GAP / 2 + MARKING_WIDTH * 0.8, PAINT_YELLOW, free
                    )
                elif kind == "solid_yellow":
                    st = _Stripe(c, u, ln / 2, "line", MARKING_WIDTH / 2, PAINT_YELLOW, free)
                elif kind == "stop_line":
                    st = _Stripe(c, u, ln / 2, "line", STOP_LINE_WIDTH / 2, PAINT_WHITE, free)
                elif kind == "crosswalk":
                    st = _Stripe(c, u, ln / 2, "zebra", CROSSWALK_WIDTH / 2, PAINT_WHITE, free)
                else:
                    st = _Stripe(c, u, ln / 2, "line", MARKING_WIDTH / 2, PAINT_WHITE, free)
                # the road under it (nearest centreline): its direction sets how far its Gaussians reach
                best, road_dir = np.inf, u
                for rp, _w in plan.roads:
                    d_, _, s_, _ = rp.project(c[None])
                    if d_[0] < best:
                        best, road_dir = d_[0], rp.at(s_)[1][0]
                st.road_cos = float(min(1.0, abs(np.dot(u, road_dir))))
                out.append(st)
    return out


def _stripes(plan: _Plan, sig_along: float, sig_across: float) -> list[_Stripe]:
    """The plan's stripes with the road Gaussians' sigmas (along, across the road) seen along/across them."""
    out = []
    for st in plan.stripes:
        cos = st.road_cos
        sin = math.sqrt(max(0.0, 1 - cos * cos))
        out.append(
            dataclasses.replace(
                st,
                sig_par=math.hypot(sig_along * cos, sig_across * sin),
                sig_perp=math.hypot(sig_along * sin, sig_across * cos),
            )
        )
    return out


def _flank_rows(sig_road: float) -> tuple[np.ndarray, np.ndarray]:
    """Offsets from the paint edge and sigmas of the asphalt rows beside paint, until the road's own
    Gaussians (sigma ``sig_road`` across the stripe) are fine enough to take over."""
    k = min(MAX_FLANK_ROWS, max(1, sum(1 for s in FLANK_SIGMAS if s < 0.35 * sig_road)))
    return np.asarray(FLANK_OFFSETS[:k]), np.asarray(FLANK_SIGMAS[:k])


def _axis(core_half: float, core_pitch: float, core_sig: float, flanks=None, free=(True, True)):
    """Positions and sigmas along one axis of a stripe: a uniform core over [-core_half, core_half] and
    graded flank rows (offsets, sigmas) beyond each free end."""
    n = max(1, math.ceil(2 * core_half / core_pitch - 1e-9))
    pos = [(np.arange(n) + 0.5) / n * 2 * core_half - core_half]
    sig = [np.full(n, min(core_sig, SIGMA_PER_PITCH * 2 * core_half / n) if n > 1 else core_sig)]
    off, fs = flanks if flanks is not None else (np.zeros(0), np.zeros(0))
    if free[0]:
        pos.append(-core_half - off)
        sig.append(fs)
    if free[1]:
        pos.append(core_half + off)
        sig.append(fs)
    return np.concatenate(pos), np.concatenate(sig)


def _gen_stripe(parts: _Parts, rng, st: _Stripe, along_pitch: float, asphalt, on_road=None) -> None:
    """Gaussians of one stripe (paint and asphalt flanks), elongated along the stripe except for zebras.
    on_road(xy [n, 2]) -> bool [n]: where Gaussians may go (flanks stop at the road's end)."""
    if st.kind == "zebra":
        # bars across the polyline: fine columns along it (bar edges), long rows across (the bars'
        # length); the asphalt rows beyond the bars' ends need no fine columns
        u_pos, u_sig = _axis(
            st.half_len, ZEBRA_COLUMN_PITCH, 0.5 * ZEBRA_COLUMN_PITCH, _flank_rows(st.sig_par), st.ends
        )
        bar_pitch = min(along_pitch, 0.5)
        v_pos, v_sig = _axis(st.half_paint, bar_pitch, SIGMA_PER_PITCH * bar_pitch)
        off, fs = _flank_rows(st.sig_perp)
        v_fl, sv_fl = np.concatenate([-st.half_paint - off, st.half_paint + off]), np.concatenate([fs, fs])
        u_co, su_co = _axis(float(np.abs(u_pos).max()), along_pitch, SIGMA_PER_PITCH * along_pitch)
        blocks = [(u_pos, u_sig, v_pos, v_sig), (u_co, su_co, v_fl, sv_fl)]
        v_extent = float(np.abs(v_fl).max())
    else:
        u_pos, u_sig = _axis(st.half_len, along_pitch, SIGMA_PER_PITCH * along_pitch, _flank_rows(st.sig_par), st.ends)
        v_pos, v_sig = _axis(st.half_paint, PAINT_ROW_PITCH, 0.035, _flank_rows(st.sig_perp))
        blocks = [(u_pos, u_sig, v_pos, v_sig)]
        v_extent = float(np.abs(v_pos).max())
    grids = [np.meshgrid(a, c, indexing="ij") + np.meshgrid(b, d, indexing="ij") for a, b, c, d in blocks]
    U, V, SU, SV = (np.concatenate([g[i].ravel() for g in grids]) for i in range(4))
    U = U + rng.uniform(-0.15, 0.15, U.size) * SU
    V = V + rng.uniform(-0.1, 0.1, V.size) * SV
    if st.kind == "zebra":
        on = (np.abs(V) <= st.half_paint) & (np.abs(U) <= st.half_len)
        on &= ((U + st.half_len) % CROSSWALK_PERIOD) < CROSSWALK_BAR
    elif st.kind == "double":
        on = (np.abs(U) <= st.half_len) & (np.abs(V) <= st.half_paint) & (np.abs(V) >= DOUBLE_YELLOW_GAP / 2)
    else:
        on = (np.abs(U) <= st.half_len) & (np.abs(V) <= st.half_paint)
    nrm = np.array([-st.direction[1], st.direction[0]])
    xy = st.center + U[:, None] * st.direction + V[:, None] * nrm
    if on_road is not None:
        keep = on_road(xy)
        xy, U, V, SU, SV, on = xy[keep], U[keep], V[keep], SU[keep], SV[keep], on[keep]
    rgb = asphalt(xy)
    rgb[on] = _vary(rng, st.rgb, int(on.sum()), 0.04)
    z = np.where(on, MARKING_Z, 0.0) + rng.uniform(-GROUND_Z_JITTER, GROUND_Z_JITTER, len(U)) * 0.5
    yaw = np.full(len(U), math.atan2(st.direction[1], st.direction[0]))
    parts.add(
        np.column_stack([xy, z]), np.stack([SU, SV, np.full(len(U), FLAT_SIGMA)], 1), _quats_yaw(yaw), OPACITY, rgb
    )
    st.clear = (
        float(np.abs(u_pos).max() + STRIPE_CLEARANCE * st.sig_par),
        v_extent + STRIPE_CLEARANCE * st.sig_perp,
    )


def _out_of_stripes(stripes: list[_Stripe], xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Road sample points [n, 2] moved out of every stripe's clear zone to its nearest side (across the
    stripe, or past a free end), so the road stays gap-free around the paint. Returns (xy, ok [n]):
    ok is False for the few points still inside a zone after two rounds (drop them)."""
    xy = xy.copy()
    inside = np.zeros(len(xy), dtype=bool)
    for _ in range(2):
        inside[:] = False
        order = np.argsort(xy[:, 0], kind="stable")  # candidates per stripe by a search on x
        xs = xy[order, 0]
        for st in stripes:
            cu, cv = st.clear
            r = math.hypot(cu, cv)
            i0, i1 = np.searchsorted(xs, [st.center[0] - r, st.center[0] + r])
            cand = order[i0:i1]
            cand = cand[np.abs(xy[cand, 1] - st.center[1]) <= r]
            if not len(cand):
                continue
            rel = xy[cand] - st.center
            nrm = np.array([-st.direction[1], st.direction[0]])
            u, v = rel @ st.direction, rel @ nrm
            hit = (np.abs(u) < cu) & (np.abs(v) < cv)
            if not hit.any():
                continue
            idx, u, v = cand[hit], u[hit], v[hit]
            inside[idx] = True
            # beside the paint: out across the stripe; beyond a free end: out past the end
            along = ((u > st.half_len) & st.ends[1]) | ((u < -st.half_len) & st.ends[0])
            u = np.where(along, np.sign(u) * cu * 1.001, u)
            v = np.where(along, v, np.where(v >= 0, 1.0, -1.0) * cv * 1.001)
            xy[idx] = st.center + u[:, None] * st.direction + v[:, None] * nrm
    return xy, ~inside


# -- the generators ----------------------------------------------------------------------------------


def _asphalt_fn(seed: int):
    big = _Noise(_rng(seed, "asphalt", "big"), 25.0)
    mid = _Noise(_rng(seed, "asphalt", "mid"), 4.0)
    rng = _rng(seed, "asphalt", "grain")

    def asphalt(xy):
        n = len(xy)
        f = 1.0 + 0.07 * big(xy) + 0.05 * mid(xy) + rng.uniform(-0.05, 0.05, n)
        return np.asarray(ASPHALT) * f[:, None]

    return asphalt


def _gen_roads(plan: _Plan, pitch: float, stripes: list[_Stripe], asphalt) -> _Parts:
    rng = _rng(plan.seed, "road")
    parts = _Parts()
    pitch = pitch / math.sqrt(W_ROAD)
    a_along = pitch * math.sqrt(ROAD_ASPECT)
    a_across = pitch / math.sqrt(ROAD_ASPECT)
    for i, (poly, w) in enumerate(plan.roads):
        n_s = math.ceil(poly.length / a_along)
        n_t = math.ceil(w / a_across) + 1
        fs, ft = _jittered_grid(rng, n_s, n_t, closed_v=True)  # edge rows on the edges: no seam at the curb
        s = fs * poly.length
        t = (ft - 0.5) * w
        xy, tan, nrm = poly.at(s)
        xy = xy + nrm * t[:, None]
        # where roads overlap the earlier one paves; tested before paint pushes points around, so a
        # point pushed towards an earlier road still closes the gap beside the paint
        mine = ~_in_roads(plan, xy, upto=i) if i else np.ones(len(xy), dtype=bool)
        moved, keep = _out_of_stripes(stripes, xy)
        keep &= mine
        # a point pushed past the road's edge (by an edge line's clear zone) stays on the road
        t_new = t + ((moved - xy) * nrm).sum(1)
        lim = w / 2 - 0.01
        xy = moved - nrm * (t_new - np.clip(t_new, -lim, lim))[:, None]
        xy, tan = xy[keep], tan[keep]
        n = len(xy)
        yaw = np.arctan2(tan[:, 1], tan[:, 0]) + rng.uniform(-0.05, 0.05, n)
        z = rng.uniform(-GROUND_Z_JITTER, GROUND_Z_JITTER, n)
        sc = (SIGMA_PER_PITCH * poly.length / n_s, SIGMA_PER_PITCH * w / (n_t - 1), FLAT_SIGMA)
        parts.add(np.column_stack([xy, z]), sc, _quats_yaw(yaw), OPACITY, asphalt(xy))
    return parts


def _gen_edges(plan: _Plan, pitch: float) -> tuple[_Parts, _Parts]:
    """Curbs (top and road-facing face) and sidewalks along every edge."""
    rng = _rng(plan.seed, "edges")
    curbs, walks = _Parts(), _Parts()
    a_curb = float(np.clip(pitch, 0.25, 1.0))
    a_walk = pitch / math.sqrt(W_SIDEWALK)
    slab = 1.5
    slab_tint = _rng(plan.seed, "slabs").uniform(-0.06, 0.06, 4096)
    for poly, outward in plan.edges:
        n_s = math.ceil(poly.length / a_curb)
        # curb top: two rows, on its two edges
        fs, ft = _jittered_grid(rng, n_s, 2, jitter=0.2, closed_v=True)
        xy, tan, nrm = poly.at(fs * poly.length)
        xy = xy + nrm * (outward * ft * CURB_WIDTH)[:, None]
        keep = ~_in_roads(plan, xy)
        xy, tan = xy[keep], tan[keep]
        n = len(xy)
        yaw = np.arctan2(tan[:, 1], tan[:, 0])
        z = CURB_HEIGHT + rng.uniform(-0.002, 0.002, n)
        sc = (SIGMA_PER_PITCH * a_curb, SIGMA_PER_PITCH * CURB_WIDTH, FLAT_SIGMA)
        curbs.add(np.column_stack([xy, z]), sc, _quats_yaw(yaw), OPACITY, _vary(rng, CURB, n, 0.04))
        # curb face towards the road: rows at its foot, middle and top (thin: nothing pokes above it)
        fs, fz = _jittered_grid(rng, n_s, 3, jitter=0.2, closed_v=True)
        xy, tan, nrm = poly.at(fs * poly.length)
        xy = xy + nrm * (outward * 0.004)
        keep = ~_in_roads(plan, xy, margin=-0.05)
        xy, tan = xy[keep], tan[keep]
        z = fz[keep] * CURB_HEIGHT
        n = len(xy)
        t1 = np.column_stack([tan, np.zeros(n)])
        t2 = np.broadcast_to(np.array([0.0, 0.0, 1.0]), (n, 3))
        sc = (SIGMA_PER_PITCH * a_curb, SIGMA_PER_PITCH * CURB_HEIGHT / 2, FLAT_SIGMA)
        curbs.add(np.column_stack([xy, z]), sc, _quats_from_axes(t1, t2), OPACITY, _vary(rng, CURB, n, 0.04) * 0.9)
        # sidewalk: concrete slabs, each with its own tint
        n_s = math.ceil(poly.length / a_walk)
        n_t = max(2, math.ceil(SIDEWALK_WIDTH / a_walk) + 1)
        fs, ft = _jittered_grid(rng, n_s, n_t, closed_v=True)
        s = fs * poly.length
        off = CURB_WIDTH + ft * SIDEWALK_WIDTH
        xy, tan, nrm = poly.at(s)
        xy = xy + nrm * (outward * off)[:, None]
        keep = ~_in_roads(plan, xy, margin=0.1)
        xy, tan, s, off = xy[keep], tan[keep], s[keep], off[keep]
        n = len(xy)
        slab_id = (np.floor(s / slab).astype(np.int64) * 7 + np.floor(off / slab).astype(np.int64) * 131) % 4096
        rgb = _vary(rng, SIDEWALK, n, 0.04) * (1.0 + slab_tint[slab_id])[:, None]
        yaw = np.arctan2(tan[:, 1], tan[:, 0])
        z = CURB_HEIGHT + rng.uniform(-0.002, 0.002, n)
        sc = (SIGMA_PER_PITCH * poly.length / n_s, SIGMA_PER_PITCH * SIDEWALK_WIDTH / (n_t - 1), FLAT_SIGMA)
        walks.add(np.column_stack([xy, z]), sc, _quats_yaw(yaw), OPACITY, rgb)
    return curbs, walks


def _gen_grass(plan: _Plan, pitch: float, asphalt) -> tuple[_Parts, _Parts]:
    """Grass over the extent outside roads, sidewalks and buildings (finer near roads), and asphalt
    aprons where the space between curbs and road strips (intersection corners) is not a road."""
    rng = _rng(plan.seed, "grass")
    tone = _Noise(_rng(plan.seed, "grass", "tone"), 9.0)
    dry = _Noise(_rng(plan.seed, "grass", "dry"), 30.0)
    grass, apron = _Parts(), _Parts()
    xmin, ymin, xmax, ymax = plan.extent
    paved = CURB_WIDTH + SIDEWALK_WIDTH
    for w_rel, near in ((W_GRASS_NEAR, True), (W_GRASS_FAR, False)):
        a = pitch / math.sqrt(w_rel)
        fx, fy = _jittered_grid(rng, math.ceil((xmax - xmin) / a), math.ceil((ymax - ymin) / a))
        xy = np.column_stack([xmin + fx * (xmax - xmin), ymin + fy * (ymax - ymin)])
        d_road = _road_distance(plan, xy)
        xy = xy[(d_road <= GRASS_NEAR_DIST) if near else (d_road > GRASS_NEAR_DIST)]
        xy = xy[~_in_roads(plan, xy, margin=-0.1)]  # under the road's edge: no seam where there is no curb
        xy = xy[~_edge_zone(plan, xy, -0.05, paved - 0.1)]  # grass tucks under the sidewalk's edge
        # the road side of a curb that no road strip covers (corner fillets): pave it
        on_road_side = _edge_zone(plan, xy, -8.0, 0.0) if near else np.zeros(len(xy), dtype=bool)
        if on_road_side.any():
            p = xy[on_road_side]
            n = len(p)
            z = rng.uniform(-GROUND_Z_JITTER, GROUND_Z_JITTER, n)
            apron.add(
                np.column_stack([p, z]),
                (SIGMA_PER_PITCH * a,) * 2 + (FLAT_SIGMA,),
                _quats_yaw(rng.uniform(0, np.pi, n)),
                OPACITY,
                asphalt(p),
            )
        xy = xy[~on_road_side]
        for b in plan.buildings:
            loc = (xy - b.center) @ _rot2(b.yaw)
            xy = xy[~((np.abs(loc[:, 0]) < b.size[0] / 2 - 0.2) & (np.abs(loc[:, 1]) < b.size[1] / 2 - 0.2))]
        n = len(xy)
        f_dry = np.clip(0.5 + 0.5 * dry(xy), 0, 1)[:, None] * 0.6
        rgb = np.asarray(GRASS) * (1 - f_dry) + np.asarray(GRASS_DRY) * f_dry
        rgb = rgb * (1 + 0.12 * tone(xy) + rng.uniform(-0.1, 0.1, n))[:, None]
        z = GRASS_Z + rng.uniform(-0.01, 0.01, n)
        sig = SIGMA_PER_PITCH * a
        grass.add(np.column_stack([xy, z]), (sig, sig, FLAT_SIGMA), _quats_yaw(rng.uniform(0, np.pi, n)), OPACITY, rgb)
    return grass, apron


def _facade_rgb(b: _Building, rng, wall: str, u: np.ndarray, v: np.ndarray, width: float) -> np.ndarray:
    """Colours [n, 3] at wall coordinates u (along, 0..width) and v (up) metres: a window grid on the
    upper floors, a shop front or a door on the ground floor, a cornice at the top."""
    n = len(u)
    H = b.size[2]
    rgb = _vary(rng, b.wall, n, 0.05)
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


def _gen_buildings(plan: _Plan, pitch: float) -> _Parts:
    parts = _Parts()
    for b in plan.buildings:
        rng = _rng(b.seed, "building")
        W_, D_, H = b.size
        local = _Parts()
        # walls in the local frame (x along the street, y across), each with outward normal
        walls = (
            ("front", W_, np.array([-W_ / 2, b.front * D_ / 2, 0.0]), np.array([1.0, 0, 0]), W_FACADE),
            ("back", W_, np.array([-W_ / 2, -b.front * D_ / 2, 0.0]), np.array([1.0, 0, 0]), W_BACK_WALL),
            ("side", D_, np.array([W_ / 2, -D_ / 2, 0.0]), np.array([0, 1.0, 0]), W_SIDE_WALL),
            ("side", D_, np.array([-W_ / 2, -D_ / 2, 0.0]), np.array([0, 1.0, 0]), W_SIDE_WALL),
        )
        for name, width, origin, e_u, w_rel in walls:
            a = pitch / math.sqrt(w_rel)
            pts, u, v, q, sc = _rect_surface(rng, origin, e_u, (0, 0, 1), width, H, a, FACADE_ASPECT)
            if name == "front" and b.front < 0:
                u = width - u  # read the façade left to right from the street
            local.add(pts, sc, q, OPACITY, _facade_rgb(b, rng, name, u, v, width))
        # a flat roof, coarse: seen only from far away or from above
        a = 2 * pitch / math.sqrt(W_BACK_WALL)
        pts, _, _, q, sc = _rect_surface(rng, (-W_ / 2, -D_ / 2, H), (1, 0, 0), (0, 1, 0), W_, D_, a)
        local.add(pts, sc, q, OPACITY, _vary(rng, np.asarray(b.wall) * 0.55, len(pts), 0.05))
        parts.extend(_place(local, b.center[0], b.center[1], GRASS_Z - 0.02, b.yaw))
    return parts


def _gen_trees(plan: _Plan, pitch: float) -> _Parts:
    parts = _Parts()
    for t in plan.trees:
        rng = _rng(t.seed, "tree")
        local = _Parts()
        trunk_h = t.canopy_base + 0.8 * t.radii[1]
        bark = lambda z, rng=rng: _vary(rng, BARK, len(z), 0.08)  # noqa: E731
        _cylinder(local, rng, trunk_h, 0.25, bark, t.trunk_r, 0.7 * t.trunk_r, pitch_z=0.4)
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
        rgb = _vary(rng, t.leaves, n, 0.18) * (0.55 + 0.6 * height)[:, None]
        local.add(p, sc, _random_quats(rng, n), rng.uniform(0.85, 0.97, n), rgb)
        parts.extend(_place(local, t.xy[0], t.xy[1], GRASS_Z - 0.02, 0.0))
    return parts


def _gen_sky(plan: _Plan, n: int) -> _Parts:
    """A dome of large flat Gaussians on an ellipsoid around the extent; colour by elevation."""
    rng = _rng(plan.seed, "sky")
    cloud = _Noise(_rng(plan.seed, "sky", "clouds"), 0.9, waves=8)
    xmin, ymin, xmax, ymax = plan.extent
    c = np.array([(xmin + xmax) / 2, (ymin + ymax) / 2, 0.0])
    ax = np.array([(xmax - xmin) / 2 + SKY_MARGIN, (ymax - ymin) / 2 + SKY_MARGIN, 0.0])
    ax[2] = float(np.clip(0.6 * min(ax[0], ax[1]), 50.0, 120.0))
    # a Fibonacci lattice over the unit sphere's cap z >= sin(-SKY_BELOW), turned at random
    z_lo = math.sin(-SKY_BELOW)
    k = np.arange(n) + 0.5
    zs = 1 - k / n * (1 - z_lo)
    ang = k * math.pi * (3 - math.sqrt(5)) + rng.uniform(0, 2 * np.pi)
    r = np.sqrt(np.maximum(1 - zs * zs, 0))
    d = np.stack([r * np.cos(ang), r * np.sin(ang), zs], 1)
    p = c + d * ax
    h = math.sqrt(2 * math.pi * (1 - z_lo) / n)  # lattice spacing on the unit sphere
    t1 = np.stack([-np.sin(ang), np.cos(ang), np.zeros(n)], 1)
    t2 = np.cross(d, t1)
    e1, e2 = t1 * ax, t2 * ax
    s1 = SKY_SIGMA_PER_PITCH * h * np.linalg.norm(e1, axis=1)
    s2 = SKY_SIGMA_PER_PITCH * h * np.linalg.norm(e2, axis=1)
    sc = np.column_stack([s1, s2, 0.02 * np.maximum(s1, s2)])
    # colour by the elevation seen from the extent's centre at eye height
    horiz = np.hypot(p[:, 0] - c[0], p[:, 1] - c[1])
    elev = np.degrees(np.arctan2(p[:, 2] - 1.5, horiz))
    f_low = np.clip(elev / 10.0, 0, 1)[:, None]
    f_top = np.clip((elev - 10.0) / 45.0, 0, 1)[:, None]
    rgb = np.asarray(SKY_HAZE) * (1 - f_low) + np.asarray(SKY_LOW) * f_low
    rgb = rgb * (1 - f_top) + np.asarray(SKY_ZENITH) * f_top
    puff = np.clip(cloud(d[:, :2] / np.maximum(d[:, 2:3] + 0.3, 0.1)), 0.4, 1.2) - 0.4
    rgb = rgb + (np.asarray((0.93, 0.94, 0.96)) - rgb) * (0.8 * puff * (elev > 3))[:, None]
    f_down = np.clip(-elev / 4.0, 0, 1)[:, None]
    rgb = rgb * (1 - f_down) + np.asarray(FAR_GROUND) * f_down
    parts = _Parts()
    parts.add(p, sc, _quats_from_axes(e1, e2), 0.99, rgb)
    return parts


def _gen_furniture(plan: _Plan) -> list[GaussianCloud]:
    """Street lights and the layout's props (and parked vehicles), posed on the ground under them."""
    out = []
    xy = np.array([[p.x, p.y] for p in plan.furniture]).reshape(-1, 2)
    zs = _ground_z(plan, xy) if len(xy) else []
    for i, (p, z) in enumerate(zip(plan.furniture, zs)):
        seed = zlib.crc32(f"{plan.seed}:{i}:{p.kind}".encode())
        if p.kind in VEHICLE_KINDS:
            cloud, _ = build_vehicle(p.kind, None, seed)
        else:
            cloud, _ = build_prop(p.kind, seed)
        c, s = math.cos(p.yaw), math.sin(p.yaw)
        T = np.array([[c, -s, 0, p.x], [s, c, 0, p.y], [0, 0, 1, float(z)], [0, 0, 0, 1.0]])
        out.append(cloud.transform(T))
    return out


def _scalable_parts(plan: _Plan, density: float) -> dict[str, _Parts]:
    """Every part whose size follows the density (Gaussians per m^2 at relative weight 1)."""
    pitch = 1.0 / math.sqrt(density)
    a_along = pitch / math.sqrt(W_ROAD) * math.sqrt(ROAD_ASPECT)
    a_across = pitch / math.sqrt(W_ROAD) / math.sqrt(ROAD_ASPECT)
    asphalt = _asphalt_fn(plan.seed)
    stripes = _stripes(plan, SIGMA_PER_PITCH * a_along, SIGMA_PER_PITCH * a_across)
    marks = _Parts()
    rng = _rng(plan.seed, "markings")
    along = float(np.clip(pitch, 0.4, 1.0))
    for st in stripes:
        _gen_stripe(marks, rng, st, along, asphalt, lambda xy: _in_roads(plan, xy))
    road = _gen_roads(plan, pitch, stripes, asphalt)
    curbs, walks = _gen_edges(plan, pitch)
    grass, apron = _gen_grass(plan, pitch, asphalt)
    return {
        "road": road,
        "markings": marks,
        "apron": apron,
        "curbs": curbs,
        "sidewalks": walks,
        "grass": grass,
        "buildings": _gen_buildings(plan, pitch),
        "trees": _gen_trees(plan, pitch),
    }


def _sky_count(target: int) -> int:
    return int(np.clip(0.025 * target, 1200, 4000))


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
    plan = _plan(layout, int(seed))
    fixed = {"furniture": GaussianCloud.cat(_gen_furniture(plan)), "sky": _gen_sky(plan, _sky_count(target)).cloud()}
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


# --------------------------------------------------------------------------------------------------
# Demo layouts and scenes
# --------------------------------------------------------------------------------------------------


def _carriageway(center: _Polyline, lanes_each_way: int = 2, solid_edges: bool = True):
    """Markings of a two-way road along ``center`` (right-hand traffic): a double yellow centre line,
    dashed lane lines and solid edge lines."""
    ss = np.linspace(0.0, center.length, max(2, math.ceil(center.length / 2.0) + 1))
    xy, _, nrm = center.at(ss)

    def line(d):
        return xy + nrm * d

    out = [Marking(line(0.0), "double_yellow")]
    for k in range(1, lanes_each_way):
        out += [Marking(line(k * LANE_WIDTH), "dashed_white"), Marking(line(-k * LANE_WIDTH), "dashed_white")]
    if solid_edges:
        e = lanes_each_way * LANE_WIDTH
        out += [Marking(line(e), "solid_white"), Marking(line(-e), "solid_white")]
    return out


def _two_way_width(lanes_each_way: int = 2) -> float:
    return 2 * lanes_each_way * LANE_WIDTH + 2 * SHOULDER


def demo_layout(kind: str = "straight", length: float = 200.0) -> StreetLayout:
    """Ready-made layouts: "straight", "curve", "intersection" (two roads of 2 lanes each way crossing
    ahead of the ego), "merge" (an on-ramp joining from the right). Lanes are 3.5 m wide, right-hand
    traffic, and the ego can start at (0, -1.75) heading +x (the right lane of the main road's inner
    pair), with about a quarter of ``length`` behind it and the rest ahead.
    """
    if kind not in LAYOUT_KINDS:
        raise ValueError(f"demo_layout: unknown kind {kind!r}; expected one of {', '.join(LAYOUT_KINDS)}")
    if not (math.isfinite(length) and length >= 60.0):
        raise ValueError(f"demo_layout: length must be at least 60 m, got {length}")
    w = _two_way_width(2)
    hw = w / 2
    x0 = -0.25 * length
    if kind == "straight":
        c = np.array([[x0, 0.0], [x0 + length, 0.0]])
        cl = _Polyline(c)
        return StreetLayout(
            roads=(RoadSurface(c, w),),
            markings=tuple(_carriageway(cl)),
            edges=(RoadEdge(cl.offset(hw), +1), RoadEdge(cl.offset(-hw), -1)),
        )
    if kind == "curve":
        radius = 80.0
        x1 = 20.0
        arc_len = min(length - (x1 - x0) - 10.0, radius * math.pi / 2)
        ang = arc_len / radius
        arc = _arc((x1, radius), radius, -math.pi / 2, -math.pi / 2 + ang, step=2.0)
        tail_len = length - (x1 - x0) - arc_len
        end_dir = np.array([math.cos(ang), math.sin(ang)])
        c = np.concatenate([[[x0, 0.0]], arc, [arc[-1] + end_dir * tail_len]])
        cl = _Polyline(c, max_step=2.0)
        return StreetLayout(
            roads=(RoadSurface(cl.p, w),),
            markings=tuple(_carriageway(cl)),
            edges=(RoadEdge(cl.offset(hw), +1), RoadEdge(cl.offset(-hw), -1)),
        )
    if kind == "intersection":
        xc = 0.2 * length  # the crossing, ahead of the ego
        half_cross = 0.35 * length
        main = np.array([[x0, 0.0], [x0 + length, 0.0]])
        cross = np.array([[xc, -half_cross], [xc, half_cross]])
        mark: list[Marking] = []
        gap = hw + 1.0 + CROSSWALK_WIDTH + 1.0  # markings stop before the crosswalks
        for (lo, hi), along_x in (((x0, x0 + length), True), ((-half_cross, half_cross), False)):
            mid = xc if along_x else 0.0
            for a, b in ((lo, mid - gap), (mid + gap, hi)):
                if b - a < 5.0:
                    continue
                pts = np.array([[a, 0.0], [b, 0.0]]) if along_x else np.array([[xc, a], [xc, b]])
                mark += _carriageway(_Polyline(pts))
        # stop lines on the incoming half of each arm, crosswalks across each arm
        lanes = 2 * LANE_WIDTH
        cw = hw + 1.0 + CROSSWALK_WIDTH / 2
        sl = hw + 1.0 + CROSSWALK_WIDTH + 0.6
        for sx, sy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            if sx:
                x = xc + sx * cw
                mark.append(Marking(np.array([[x, -hw + 0.3], [x, hw - 0.3]]), "crosswalk"))
                xs = xc + sx * sl
                ys = (-lanes, 0.0) if sx < 0 else (0.0, lanes)  # traffic keeps right
                mark.append(Marking(np.array([[xs, ys[0] + 0.1], [xs, ys[1] - 0.1]]), "stop_line"))
            else:
                y = sy * cw
                mark.append(Marking(np.array([[xc - hw + 0.3, y], [xc + hw - 0.3, y]]), "crosswalk"))
                ysl = sy * sl
                xs = (xc, xc + lanes) if sy < 0 else (xc - lanes, xc)
                mark.append(Marking(np.array([[xs[0] + 0.1, ysl], [xs[1] - 0.1, ysl]]), "stop_line"))
        # four curb corners with rounded (6 m) returns
        edges = []
        r = 6.0
        for qx in (-1, 1):
            for qy in (-1, 1):
                far_x = (x0 - xc) if qx < 0 else (x0 + length - xc)
                a = np.array([[xc + far_x, qy * hw], [xc + qx * (hw + r), qy * hw]])
                cen = (xc + qx * (hw + r), qy * (hw + r))
                a0 = math.atan2(-qy, 0.0)
                a1 = math.atan2(0.0, -qx)
                # the short way round from a0 to a1
                da = (a1 - a0 + math.pi) % (2 * math.pi) - math.pi
                arc = _arc(cen, r, a0, a0 + da, step=0.5)
                b = np.array([[xc + qx * hw, qy * (hw + r)], [xc + qx * hw, qy * half_cross]])
                poly = np.concatenate([a, arc[1:-1], b])
                d = poly[1] - poly[0]
                left = np.array([-d[1], d[0]])
                outward = 1 if left[1] * qy > 0 else -1
                edges.append(RoadEdge(poly, outward))
        return StreetLayout(
            roads=(RoadSurface(main, w), RoadSurface(cross, w)), markings=tuple(mark), edges=tuple(edges)
        )
    # merge: a one-lane on-ramp from the right becomes an acceleration lane beside the main road
    ramp_w = LANE_WIDTH + 2 * SHOULDER
    y_acc = -hw - LANE_WIDTH / 2 + SHOULDER  # acceleration lane centre, its left line on the main edge line
    x_join, x_taper0, x_taper1 = 15.0, 60.0, 95.0
    t = np.linspace(0, 1, 30)[:, None]
    P = [
        np.array([x_join - 70.0, y_acc - 42.0]),
        np.array([x_join - 40.0, y_acc - 20.0]),
        np.array([x_join - 20.0, y_acc]),
        np.array([x_join, y_acc]),
    ]
    bez = (1 - t) ** 3 * P[0] + 3 * (1 - t) ** 2 * t * P[1] + 3 * (1 - t) * t**2 * P[2] + t**3 * P[3]
    ts = np.linspace(0, 1, 12)[:, None]
    y_end = -hw + ramp_w / 2 - 0.3
    taper = np.column_stack(
        [x_taper0 + (x_taper1 - x_taper0) * ts[:, 0], y_acc + (y_end - y_acc) * (3 * ts[:, 0] ** 2 - 2 * ts[:, 0] ** 3)]
    )
    ramp = np.concatenate([bez, taper])
    main = np.array([[x0, 0.0], [x0 + length, 0.0]])
    cl = _Polyline(main)
    rp = _Polyline(ramp, max_step=2.0)
    mark = [m for m in _carriageway(cl, solid_edges=False)]
    e = 2 * LANE_WIDTH
    mark.append(Marking(np.array([[x0, e], [x0 + length, e]]), "solid_white"))
    # the main road's right edge line: solid before the join and after the taper, dashed along the lane
    mark.append(Marking(np.array([[x0, -e], [x_join, -e]]), "solid_white"))
    mark.append(Marking(np.array([[x_join, -e], [x_taper0, -e]]), "dashed_white"))
    mark.append(Marking(np.array([[x_taper1, -e], [x0 + length, -e]]), "solid_white"))
    # ramp edge lines up to the join
    s_join = float(rp.project(np.array([[x_join, y_acc]]))[2][0])
    ss = np.linspace(0, s_join, 25)
    xy, _, nrm = rp.at(ss)
    mark.append(Marking(xy + nrm * (-LANE_WIDTH / 2), "solid_white"))
    mark.append(Marking(xy[:-4] + nrm[:-4] * (LANE_WIDTH / 2), "solid_white"))
    # curbs: the ramp's outer (right) curb all along, then the main road's; the gore between the ramp's
    # left curb and the main road's right curb up to where they meet
    right = rp.offset(-ramp_w / 2)
    right = right[right[:, 0] < x_taper1 - 2.0]
    main_right = np.array([[x_taper1 + 2.0, -hw], [x0 + length, -hw]])
    outer = np.concatenate([right, main_right])
    left = rp.offset(ramp_w / 2)
    meet = np.argmax(left[:, 1] >= -hw - 0.05)
    gore_left = left[: max(meet, 2)]
    edges = (
        RoadEdge(cl.offset(hw), +1),
        RoadEdge(np.array([[x0, -hw], [gore_left[-1, 0], -hw]]), -1),
        RoadEdge(gore_left, +1),
        RoadEdge(outer, -1),
    )
    return StreetLayout(roads=(RoadSurface(main, w), RoadSurface(rp.p, ramp_w)), markings=tuple(mark), edges=edges)


def _lane_track(poly: _Polyline, s0: float, speed: float, steps: int, dt: float):
    """Poses [steps, 4] (x, y, z=0, yaw) and presence [steps] of a vehicle driving along ``poly``."""
    s = s0 + speed * dt * np.arange(steps)
    xy, tan, _ = poly.at(s)
    yaw = np.arctan2(tan[:, 1], tan[:, 0])
    present = (s >= 0.0) & (s <= poly.length)
    return np.column_stack([xy, np.zeros(steps), yaw]), present


def _demo_traffic(kind: str, layout: StreetLayout, length: float):
    """(vehicle kind, lane polyline, start arclength, speed m/s) for the demo actors of a layout kind."""
    main = _Polyline(layout.roads[0].centerline, max_step=2.0)
    x0 = -0.25 * length
    ego_s = -x0  # the ego's arclength on the main road

    def lane(poly, offset, reverse=False):
        p = poly.offset(offset)
        return _Polyline(p[::-1] if reverse else p, max_step=2.0)

    r1, r2 = lane(main, -LANE_WIDTH / 2), lane(main, -1.5 * LANE_WIDTH)
    o1, o2 = lane(main, LANE_WIDTH / 2, True), lane(main, 1.5 * LANE_WIDTH, True)
    L = main.length
    cars = [
        ("sedan", r1, ego_s + 24.0, 7.0),
        ("suv", r2, ego_s + 12.0, 9.5),
        ("hatchback", o1, L - ego_s - 70.0, 9.0),
        ("bus", o2, L - ego_s - 110.0, 7.5),
        ("van", o1, L - ego_s - 25.0, 9.0),
        ("truck", r2, ego_s + 65.0, 0.0),  # stopped in the right lane
    ]
    if kind == "intersection":
        cross = _Polyline(layout.roads[1].centerline, max_step=2.0)
        north = lane(cross, -LANE_WIDTH / 2)  # +y, keeps right (x > xc)
        south = lane(cross, LANE_WIDTH / 2, True)
        cars = [
            *cars[:3],
            ("sedan", north, cross.length / 2 - 45.0, 8.0),
            ("suv", south, cross.length / 2 - 20.0, 0.0),  # waiting at its stop line
            ("van", south, cross.length / 2 - 60.0, 6.0),
        ]
    if kind == "merge":
        ramp = _Polyline(layout.roads[1].centerline, max_step=2.0)
        cars = [*cars[:4], ("hatchback", ramp, 20.0, 9.0), ("van", ramp, 0.0, 8.5)]
    return cars


def demo_scene(seed: int = 0, target_gaussians: int = 100_000, kind: str = "straight") -> Scene:
    """The background of ``demo_layout(kind)`` plus a handful of vehicle actors (one asset each, in
    varied kinds and colours): traffic in both directions and a stopped vehicle, with ``DEMO_STEPS``
    steps of ``DEMO_DT`` s. The ego is not among them; it can start at (0, -1.75) heading +x."""
    length = DEMO_LENGTH
    layout = demo_layout(kind, length)
    background = build_background(layout, seed, target_gaussians)
    rng = _rng(seed, "demo", kind)
    assets, actors = {}, {}
    for i, (vkind, poly, s0, speed) in enumerate(_demo_traffic(kind, layout, length)):
        name = f"{vkind}_{i}"
        assets[name], _ = build_vehicle(vkind, None, int(rng.integers(2**31)))
        s0 = s0 + rng.uniform(-3.0, 3.0)
        v = speed * rng.uniform(0.9, 1.1)
        poses, present = _lane_track(poly, s0, v, DEMO_STEPS, DEMO_DT)
        actors[f"car{i}"] = ActorTrack(name, poses, present)
    return Scene(background, assets, actors)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.procedural", description="Write a procedural street background as a 3DGS PLY."
    )
    ap.add_argument("--out", required=True, help="output folder (background.ply goes there)")
    ap.add_argument("--seed", type=int, default=0, help="scene seed")
    ap.add_argument("--kind", default="straight", choices=LAYOUT_KINDS, help="demo layout")
    ap.add_argument("--gaussians", type=int, default=100_000, help="target number of Gaussians")
    ap.add_argument("--length", type=float, default=200.0, help="main road length, metres")
    ap.add_argument("--vehicles", action="store_true", help="also write one PLY per vehicle kind")
    args = ap.parse_args(argv)
    from sim.ply import save_ply

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cloud = build_background(demo_layout(args.kind, args.length), args.seed, args.gaussians)
    path = out / "background.ply"
    save_ply(cloud, path)
    written = {"background": str(path), "gaussians": len(cloud)}
    if args.vehicles:
        for k in VEHICLE_KINDS:
            v, size = build_vehicle(k, None, args.seed)
            p = out / f"vehicle_{k}.ply"
            save_ply(v, p)
            written[f"vehicle_{k}"] = {"path": str(p), "size": [float(x) for x in size], "gaussians": len(v)}
    print(json.dumps(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
