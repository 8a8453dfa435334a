"""Road networks for generated scenarios: lanes (centre lines, widths, topology), road edges (curbs),
lane markings and road surface strips, built from reference lines.

A road is a reference polyline (its dividing line) with ``n_fwd`` lanes to its right driving along
it and ``n_back`` lanes to its left driving against it (right-hand traffic). Lane ``{road}_f{i}``
is the i-th forward lane counted from the divider (its left neighbour is ``f{i-1}``); ``{road}_b{i}``
the i-th backward lane. Every lane of a road has the road's speed limit (m/s). All geometry is world xy
metres on flat ground (z = 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from scenarios.format import DEFAULT_SPEED_LIMIT, Lane
from sim.geometry import offset_polyline, resample_polyline

SPACING = 1.0  # metres between centre-line vertices
SHOULDER = 0.5  # metres of paved shoulder between the outer lane line and the curb
LIMITS_KMH = (30, 40, 50, 60)  # urban speed limits a generated road draws from ...
LIMIT_WEIGHTS = (0.2, 0.3, 0.35, 0.15)  # ... this often


def draw_limit(rng: np.random.Generator) -> float:
    """A road's speed limit, m/s: one of ``LIMITS_KMH`` (km/h / 3.6), drawn with ``LIMIT_WEIGHTS``."""
    return LIMITS_KMH[int(rng.choice(len(LIMITS_KMH), p=LIMIT_WEIGHTS))] / 3.6


@dataclass
class Stripe:
    """A painted line: polyline [M, 2], style ``solid`` / ``dashed`` / ``double``, colour ``white`` /
    ``yellow``."""

    polyline: np.ndarray
    style: str = "solid"
    color: str = "white"


@dataclass
class Strip:
    """A piece of road surface: a centre polyline [M, 2] and its full width (m)."""

    centerline: np.ndarray
    width: float


@dataclass
class Curb:
    """A road edge: polyline [M, 2]; outward +1 when the road's outside is left of its direction."""

    polyline: np.ndarray
    outward: int


@dataclass
class RoadNet:
    """Everything of a generated map: lanes, curbs (``edges``), paint (``stripes``), surface strips."""

    lanes: list[Lane] = field(default_factory=list)
    edges: list[Curb] = field(default_factory=list)
    stripes: list[Stripe] = field(default_factory=list)
    strips: list[Strip] = field(default_factory=list)

    def lane(self, lane_id: str) -> Lane:
        for ln in self.lanes:
            if ln.id == lane_id:
                return ln
        raise KeyError(lane_id)

    def replace(self, lane: Lane) -> None:
        self.lanes = [lane if ln.id == lane.id else ln for ln in self.lanes]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(min xy [2], max xy [2]) over every lane and edge."""
        pts = np.concatenate([ln.centerline for ln in self.lanes] + [e.polyline for e in self.edges])
        return pts.min(axis=0), pts.max(axis=0)


# -- reference lines -----------------------------------------------------------------------------


def straight(start, heading: float, length: float) -> np.ndarray:
    """A straight reference line [M, 2] from ``start`` [2] along ``heading`` (rad), ``length`` m."""
    n = max(int(np.ceil(length / SPACING)), 1)
    s = np.linspace(0.0, length, n + 1)
    return np.asarray(start, dtype=np.float64) + s[:, None] * np.array([np.cos(heading), np.sin(heading)])


def arc_path(start, heading: float, pieces) -> np.ndarray:
    """A reference line [M, 2] of consecutive pieces from ``start`` [2] at ``heading``: each piece is
    (length m, curvature 1/m; positive turns left). Exact arcs sampled every ~SPACING m."""
    pts = [np.asarray(start, dtype=np.float64)]
    x, y = pts[0]
    h = heading
    for length, k in pieces:
        n = max(int(np.ceil(length / SPACING)), 1)
        ds = length / n
        for _ in range(n):
            if abs(k) < 1e-9:
                x, y = x + ds * np.cos(h), y + ds * np.sin(h)
            else:
                dh = k * ds
                x += (np.sin(h + dh) - np.sin(h)) / k
                y += (np.cos(h) - np.cos(h + dh)) / k
                h += dh
            pts.append(np.array([x, y]))
    return np.array(pts)


def smooth_step(u) -> np.ndarray:
    """Quintic 0 -> 1 on u in [0, 1] with zero slope and curvature at both ends (clipped outside)."""
    u = np.clip(np.asarray(u, dtype=np.float64), 0.0, 1.0)
    return u**3 * (10.0 - 15.0 * u + 6.0 * u * u)


# -- roads ---------------------------------------------------------------------------------------


def lane_offset(i: int, forward: bool, width: float) -> float:
    """Offset (m, left of the reference) of lane i's centre: forward lanes right, backward left."""
    return -(i + 0.5) * width if forward else (i + 0.5) * width


def add_road(
    net: RoadNet,
    name: str,
    ref: np.ndarray,
    n_fwd: int,
    n_back: int,
    width: float,
    edges: bool = True,
    paint: bool = True,
    divider: str = "double",
    speed_limit: float = DEFAULT_SPEED_LIMIT,
) -> dict[str, str]:
    """Add a road along reference line ``ref`` [M, 2]; returns {"f0": lane id, ..., "b0": ...}.

    Lanes get centre lines, neighbours (same direction), the road's ``speed_limit`` (m/s) and no
    successors (link with :func:`link`).
    ``edges`` adds curbs on both sides (``SHOULDER`` m outside the outer lanes); ``paint`` adds the
    lane lines (dashed white between lanes of one direction, the divider between directions, solid
    white along the outer lane boundaries).
    """
    ref = resample_polyline(ref, SPACING)
    ids: dict[str, str] = {}
    for i in range(n_fwd):
        ids[f"f{i}"] = f"{name}_f{i}"
    for i in range(n_back):
        ids[f"b{i}"] = f"{name}_b{i}"
    for i in range(n_fwd):
        c = offset_polyline(ref, lane_offset(i, True, width))
        left = ids.get(f"f{i - 1}") if i > 0 else None
        right = ids.get(f"f{i + 1}")
        net.lanes.append(Lane(ids[f"f{i}"], c, width, left, right, (), speed_limit))
    for i in range(n_back):
        c = offset_polyline(ref, lane_offset(i, False, width))[::-1].copy()
        left = ids.get(f"b{i - 1}") if i > 0 else None
        right = ids.get(f"b{i + 1}")
        net.lanes.append(Lane(ids[f"b{i}"], c, width, left, right, (), speed_limit))
    right_edge = offset_polyline(ref, -n_fwd * width - SHOULDER)
    left_edge = offset_polyline(ref, n_back * width + SHOULDER)
    total = n_fwd + n_back
    mid_offset = 0.5 * (n_back - n_fwd) * width
    net.strips.append(Strip(offset_polyline(ref, mid_offset), total * width + 2 * SHOULDER))
    if edges:
        net.edges.extend([Curb(right_edge, -1), Curb(left_edge, +1)])
    if paint:
        net.stripes.append(Stripe(offset_polyline(ref, -n_fwd * width), "solid", "white"))
        net.stripes.append(Stripe(offset_polyline(ref, n_back * width), "solid", "white"))
        for i in range(1, n_fwd):
            net.stripes.append(Stripe(offset_polyline(ref, -i * width), "dashed", "white"))
        for i in range(1, n_back):
            net.stripes.append(Stripe(offset_polyline(ref, i * width), "dashed", "white"))
        if n_fwd and n_back:
            net.stripes.append(Stripe(ref.copy(), divider, "yellow"))
    return ids


def link(net: RoadNet, a: str, b: str) -> None:
    """Make lane ``b`` a successor of lane ``a``."""
    la = net.lane(a)
    if b not in la.successors:
        net.replace(replace(la, successors=(*la.successors, b)))


def stop_line(ref: np.ndarray, n_fwd: int, width: float, before: float = 1.0) -> Stripe:
    """A stop line across the forward lanes of a road, ``before`` m before the end of ``ref``."""
    d = ref[-1] - ref[-2]
    d = d / np.linalg.norm(d)
    n = np.array([-d[1], d[0]])
    p = ref[-1] - before * d
    return Stripe(np.stack([p - n * 0.1, p - n * (n_fwd * width - 0.1)]), "stop_line", "white")


def simplify_polyline(p: np.ndarray, tol: float = 0.02) -> np.ndarray:
    """Douglas-Peucker: the vertices of polyline p [M, 2] needed to stay within ``tol`` metres of it
    (a straight road keeps its two ends). The map keeps 1 m vertices; the background builder's cost
    (and the reactive expert's road-edge search) grows with the vertex count, not with the shape."""
    p = np.asarray(p, dtype=np.float64)
    keep = np.zeros(len(p), dtype=bool)
    keep[[0, -1]] = True
    stack = [(0, len(p) - 1)]
    while stack:
        i, j = stack.pop()
        if j <= i + 1:
            continue
        a, b = p[i], p[j]
        ab = b - a
        L = np.hypot(*ab)
        q = p[i + 1 : j] - a
        d = np.abs(ab[0] * q[:, 1] - ab[1] * q[:, 0]) / L if L > 0 else np.hypot(q[:, 0], q[:, 1])
        k = int(np.argmax(d))
        if d[k] > tol:
            m = i + 1 + k
            keep[m] = True
            stack += [(i, m), (m, j)]
    return p[keep]
