"""The public description of a street (what :func:`~sim.procedural.build_background` takes) and
ready-made demo layouts.

A :class:`StreetLayout` holds road surfaces, paint, curb lines and props in world xy metres
(``sim.frames``: z up, road surface at z = 0); the generator fills the rest (sidewalks, verges,
buildings, trees, street lights, sky) from a seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.geometry import (
    check_polyline,
    clean_polyline,
    nearest_on_polyline,
    offset_polyline,
    polyline_frames,
    polyline_stations,
)
from sim.procedural.markings import CROSSWALK_WIDTH, MARKING_KINDS
from sim.procedural.props import PROP_KINDS
from sim.procedural.vehicles import VEHICLE_KINDS

LANE_WIDTH = 3.5
SHOULDER = 0.5  # paved strip between the edge line and the curb
EXTENT_MARGIN = 32.0  # default populated margin around the roads
LAYOUT_KINDS = ("straight", "curve", "intersection", "merge")


@dataclass(frozen=True, eq=False)  # arrays inside: identity equality
class RoadSurface:
    """An asphalt strip: ``centerline`` [M, 2] world xy metres (M >= 2), ``width`` full paved width (m)."""

    centerline: np.ndarray
    width: float

    def __post_init__(self):
        object.__setattr__(
            self, "centerline", check_polyline(self.centerline, "RoadSurface.centerline", positive_length=True)
        )
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
        object.__setattr__(
            self, "polyline", check_polyline(self.polyline, f"Marking({self.kind!r}).polyline", positive_length=True)
        )
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
        object.__setattr__(self, "polyline", check_polyline(self.polyline, "RoadEdge.polyline", positive_length=True))
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


def _arc(center, radius: float, a0: float, a1: float, step: float = 2.0) -> np.ndarray:
    """Points [k, 2] on a circular arc from angle a0 to a1 (rad), at most ``step`` metres apart."""
    k = max(2, math.ceil(abs(a1 - a0) * radius / step) + 1)
    a = np.linspace(a0, a1, k)
    return np.asarray(center) + radius * np.stack([np.cos(a), np.sin(a)], 1)


def _carriageway(center: np.ndarray, lanes_each_way: int = 2, solid_edges: bool = True) -> list[Marking]:
    """Markings of a two-way road along ``center`` [M, 2] (a clean polyline; right-hand traffic): a
    double yellow centre line, dashed lane lines and solid edge lines."""
    length = float(polyline_stations(center)[-1])
    ss = np.linspace(0.0, length, max(2, math.ceil(length / 2.0) + 1))
    xy, _, nrm = polyline_frames(center, ss)

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
        cl = clean_polyline(c)
        return StreetLayout(
            roads=(RoadSurface(c, w),),
            markings=tuple(_carriageway(cl)),
            edges=(
                RoadEdge(offset_polyline(cl, hw, miter=False), +1),
                RoadEdge(offset_polyline(cl, -hw, miter=False), -1),
            ),
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
        cl = clean_polyline(c, max_step=2.0)
        return StreetLayout(
            roads=(RoadSurface(cl, w),),
            markings=tuple(_carriageway(cl)),
            edges=(
                RoadEdge(offset_polyline(cl, hw, miter=False), +1),
                RoadEdge(offset_polyline(cl, -hw, miter=False), -1),
            ),
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
                mark += _carriageway(clean_polyline(pts))
        # stop lines on the incoming half of each arm, crosswalks across each arm
        lanes = 2 * LANE_WIDTH
        cw = hw + 1.0 + CROSSWALK_WIDTH / 2
        sl = hw + 1.0 + CROSSWALK_WIDTH + 0.6
        for sx, sy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            if sx:
                x = xc + sx * cw
                mark.append(Marking(np.array([[x, -hw + 0.3], [x, hw - 0.3]]), "crosswalk"))
                xsl = xc + sx * sl
                ys = (-lanes, 0.0) if sx < 0 else (0.0, lanes)  # traffic keeps right
                mark.append(Marking(np.array([[xsl, ys[0] + 0.1], [xsl, ys[1] - 0.1]]), "stop_line"))
            else:
                y = sy * cw
                mark.append(Marking(np.array([[xc - hw + 0.3, y], [xc + hw - 0.3, y]]), "crosswalk"))
                ysl = sy * sl
                xs = (xc, xc + lanes) if sy < 0 else (xc - lanes, xc)
                mark.append(Marking(np.array([[xs[0] + 0.1, ysl], [xs[1] - 0.1, ysl]]), "stop_line"))
        # four curb corners with rounded (6 m) returns
        curbs = []
        r = 6.0
        for qx in (-1, 1):
            for qy in (-1, 1):
                far_x = (x0 - xc) if qx < 0 else (x0 + length - xc)
                curb_in = np.array([[xc + far_x, qy * hw], [xc + qx * (hw + r), qy * hw]])
                cen = (xc + qx * (hw + r), qy * (hw + r))
                a0 = math.atan2(-qy, 0.0)
                a1 = math.atan2(0.0, -qx)
                # the short way round from a0 to a1
                da = (a1 - a0 + math.pi) % (2 * math.pi) - math.pi
                arc = _arc(cen, r, a0, a0 + da, step=0.5)
                curb_out = np.array([[xc + qx * hw, qy * (hw + r)], [xc + qx * hw, qy * half_cross]])
                poly = np.concatenate([curb_in, arc[1:-1], curb_out])
                d = poly[1] - poly[0]
                left = np.array([-d[1], d[0]])
                outward = 1 if left[1] * qy > 0 else -1
                curbs.append(RoadEdge(poly, outward))
        return StreetLayout(
            roads=(RoadSurface(main, w), RoadSurface(cross, w)), markings=tuple(mark), edges=tuple(curbs)
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
    cl = clean_polyline(main)
    rp = clean_polyline(ramp, max_step=2.0)
    mark = [m for m in _carriageway(cl, solid_edges=False)]
    e = 2 * LANE_WIDTH
    mark.append(Marking(np.array([[x0, e], [x0 + length, e]]), "solid_white"))
    # the main road's right edge line: solid before the join and after the taper, dashed along the lane
    mark.append(Marking(np.array([[x0, -e], [x_join, -e]]), "solid_white"))
    mark.append(Marking(np.array([[x_join, -e], [x_taper0, -e]]), "dashed_white"))
    mark.append(Marking(np.array([[x_taper1, -e], [x0 + length, -e]]), "solid_white"))
    # ramp edge lines up to the join
    s_join = float(nearest_on_polyline(np.array([[x_join, y_acc]]), rp)[2][0])
    ss = np.linspace(0, s_join, 25)
    xy, _, nrm = polyline_frames(rp, ss)
    mark.append(Marking(xy + nrm * (-LANE_WIDTH / 2), "solid_white"))
    mark.append(Marking(xy[:-4] + nrm[:-4] * (LANE_WIDTH / 2), "solid_white"))
    # curbs: the ramp's outer (right) curb all along, then the main road's; the gore between the ramp's
    # left curb and the main road's right curb up to where they meet
    right = offset_polyline(rp, -ramp_w / 2, miter=False)
    right = right[right[:, 0] < x_taper1 - 2.0]
    main_right = np.array([[x_taper1 + 2.0, -hw], [x0 + length, -hw]])
    outer = np.concatenate([right, main_right])
    left = offset_polyline(rp, ramp_w / 2, miter=False)
    meet = np.argmax(left[:, 1] >= -hw - 0.05)
    gore_left = left[: max(meet, 2)]
    edges = (
        RoadEdge(offset_polyline(cl, hw, miter=False), +1),
        RoadEdge(np.array([[x0, -hw], [gore_left[-1, 0], -hw]]), -1),
        RoadEdge(gore_left, +1),
        RoadEdge(outer, -1),
    )
    return StreetLayout(roads=(RoadSurface(main, w), RoadSurface(rp, ramp_w)), markings=tuple(mark), edges=edges)
