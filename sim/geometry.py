"""Planar geometry both scenarios and envs need: oriented boxes, polylines, projections.

Everything is 2D in the world's xy plane (``sim.frames``: metres, yaw counter-clockwise from +x).
Functions are pure and vectorised over leading batch dimensions that broadcast against each other.

- An oriented box is (center [..., 2], yaw [...], size [..., 2] = (length along the box's x, width
  along its y)). For a 3D box from a scenario, center is the bottom-face centre's xy.
- A polyline is [M, 2] vertices (M >= 2) in order; arclength s runs from 0 at vertex 0.
- Smooth polylines (the street generator's; ``clean_polyline`` first): normals averaged at the
  vertices and blended along segments (``polyline_frames``), miter-free offsets, and
  ``nearest_on_polyline`` for many points at once with a distance cut-off and end-cap flags.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

# -- oriented boxes ------------------------------------------------------------------------------


def box_corners(center, yaw, size) -> np.ndarray:
    """Corners [..., 4, 2] (counter-clockwise: front-left, rear-left, rear-right, front-right).

    center: [..., 2] metres; yaw: [...] radians; size: [..., 2] (length, width) metres.
    """
    center = np.asarray(center, dtype=np.float64)
    yaw = np.asarray(yaw, dtype=np.float64)
    size = np.asarray(size, dtype=np.float64)
    c, s = np.cos(yaw)[..., None], np.sin(yaw)[..., None]
    ax = np.concatenate([c, s], -1) * (0.5 * size[..., 0:1])  # [..., 2] half-length along the heading
    ay = np.concatenate([-s, c], -1) * (0.5 * size[..., 1:2])  # [..., 2] half-width to the left
    return np.stack([center + ax + ay, center - ax + ay, center - ax - ay, center + ax - ay], axis=-2)


def boxes_overlap(center_a, yaw_a, size_a, center_b, yaw_b, size_b) -> np.ndarray:
    """Whether oriented boxes a and b overlap (separating-axis test), -> bool [...].

    center_*: [..., 2] metres; yaw_*: [...] radians; size_*: [..., 2] (length, width) metres.
    Batch dimensions broadcast. Boxes that only touch (separation exactly 0) count as overlapping.
    Exact for rectangles: only the four edge normals (two per box) can separate them.
    """
    ca = np.asarray(center_a, dtype=np.float64)
    cb = np.asarray(center_b, dtype=np.float64)
    ya = np.asarray(yaw_a, dtype=np.float64)
    yb = np.asarray(yaw_b, dtype=np.float64)
    ha = 0.5 * np.asarray(size_a, dtype=np.float64)
    hb = 0.5 * np.asarray(size_b, dtype=np.float64)
    d = cb - ca  # [..., 2]
    ua = np.stack([np.cos(ya), np.sin(ya)], -1)  # a's x axis
    va = np.stack([-np.sin(ya), np.cos(ya)], -1)  # a's y axis
    ub = np.stack([np.cos(yb), np.sin(yb)], -1)
    vb = np.stack([-np.sin(yb), np.cos(yb)], -1)

    def dot(p, q):
        return np.sum(p * q, axis=-1)

    sep = np.zeros(np.broadcast_shapes(d.shape[:-1], ya.shape, yb.shape, ha.shape[:-1], hb.shape[:-1]), dtype=bool)
    for axis in (ua, va, ub, vb):
        ra = ha[..., 0] * np.abs(dot(ua, axis)) + ha[..., 1] * np.abs(dot(va, axis))
        rb = hb[..., 0] * np.abs(dot(ub, axis)) + hb[..., 1] * np.abs(dot(vb, axis))
        sep = sep | (np.abs(dot(d, axis)) > ra + rb)
    return ~sep


def boxes_overlap_reference(center_a, yaw_a, size_a, center_b, yaw_b, size_b) -> bool:
    """Obviously-correct reference for one pair: some corner inside the other box, or edges cross."""
    A = box_corners(center_a, yaw_a, size_a)
    B = box_corners(center_b, yaw_b, size_b)

    def inside(p, center, yaw, size):
        q = np.asarray(p) - np.asarray(center)
        c, s = np.cos(yaw), np.sin(yaw)
        lx, ly = c * q[0] + s * q[1], -s * q[0] + c * q[1]
        return abs(lx) <= 0.5 * size[0] + 1e-12 and abs(ly) <= 0.5 * size[1] + 1e-12

    if any(inside(p, center_b, yaw_b, size_b) for p in A) or any(inside(p, center_a, yaw_a, size_a) for p in B):
        return True

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    for i in range(4):
        p1, p2 = A[i], A[(i + 1) % 4]
        for j in range(4):
            q1, q2 = B[j], B[(j + 1) % 4]
            d1, d2 = cross(q1, q2, p1), cross(q1, q2, p2)
            d3, d4 = cross(p1, p2, q1), cross(p1, p2, q2)
            if d1 * d2 < 0 and d3 * d4 < 0:
                return True
    return False


def ego_box_pose(rear_axle_xy, yaw, center_offset: float) -> np.ndarray:
    """World xy [..., 2] of the ego box centre, ``center_offset`` m ahead of the rear axle along yaw."""
    xy = np.asarray(rear_axle_xy, dtype=np.float64)
    yaw = np.asarray(yaw, dtype=np.float64)
    return xy + center_offset * np.stack([np.cos(yaw), np.sin(yaw)], -1)


def world_to_local(xy, origin_xy, origin_yaw) -> np.ndarray:
    """Points xy [..., 2] (world) in the frame at origin_xy [..., 2] turned by origin_yaw [...] -> [..., 2]."""
    d = np.asarray(xy, dtype=np.float64) - np.asarray(origin_xy, dtype=np.float64)
    yaw = np.asarray(origin_yaw, dtype=np.float64)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], -1)


def local_to_world(local_xy, origin_xy, origin_yaw) -> np.ndarray:
    """Inverse of :func:`world_to_local`: local [..., 2] -> world [..., 2]."""
    p = np.asarray(local_xy, dtype=np.float64)
    yaw = np.asarray(origin_yaw, dtype=np.float64)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.asarray(origin_xy, dtype=np.float64) + np.stack(
        [c * p[..., 0] - s * p[..., 1], s * p[..., 0] + c * p[..., 1]], -1
    )


# -- polylines -----------------------------------------------------------------------------------


def check_polyline(polyline, where: str, positive_length: bool = False) -> np.ndarray:
    """``polyline`` as float64 [M >= 2, 2], finite (and not all one point with ``positive_length``), or
    a ValueError that starts with ``where``."""
    p = np.asarray(polyline, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 2 or p.shape[0] < 2:
        raise ValueError(f"{where}: polyline must be [M >= 2, 2], got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError(f"{where}: polyline must be finite")
    if positive_length and np.hypot(*np.diff(p, axis=0).T).sum() <= 0.0:
        raise ValueError(f"{where}: polyline has zero length")
    return p


def polyline_arclength(polyline) -> np.ndarray:
    """Cumulative arclength [M] (metres) at each vertex of polyline [M, 2]; starts at 0."""
    p = check_polyline(polyline, "polyline_arclength")
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p, axis=0), axis=1))])


def polyline_heading(polyline) -> np.ndarray:
    """Heading [M] (radians) at each vertex: the direction of the segment leaving it (the last
    vertex takes its incoming segment's). Zero-length segments take the previous heading."""
    p = check_polyline(polyline, "polyline_heading")
    d = np.diff(p, axis=0)
    h = np.arctan2(d[:, 1], d[:, 0])
    zero = np.linalg.norm(d, axis=1) == 0
    for i in np.flatnonzero(zero):
        h[i] = h[i - 1] if i > 0 else 0.0
    return np.concatenate([h, h[-1:]])


def interpolate_polyline(polyline, s) -> tuple[np.ndarray, np.ndarray]:
    """Points and headings at arclengths s [...] (metres) along polyline [M, 2].

    Returns (xy [..., 2], heading [...] radians: the heading of the segment holding the point).
    Beyond either end the polyline is extended straight along its end segment.
    """
    p = check_polyline(polyline, "interpolate_polyline")
    cum = polyline_arclength(p)
    s = np.asarray(s, dtype=np.float64)
    seg_len = np.diff(cum)
    keep = seg_len > 0
    if not keep.any():
        raise ValueError("interpolate_polyline: polyline has zero length")
    # drop zero-length segments so every segment has a direction
    starts = p[:-1][keep]
    ends = p[1:][keep]
    c0 = cum[:-1][keep]
    L = seg_len[keep]
    i = np.clip(np.searchsorted(c0, s, side="right") - 1, 0, len(c0) - 1)
    u = (s - c0[i]) / L[i]
    xy = starts[i] + u[..., None] * (ends[i] - starts[i])
    d = ends[i] - starts[i]
    return xy, np.arctan2(d[..., 1], d[..., 0])


def resample_polyline(polyline, spacing: float) -> np.ndarray:
    """Polyline [K, 2] with vertices every ``spacing`` metres of arclength (and the end point)."""
    p = check_polyline(polyline, "resample_polyline")
    if not (np.isfinite(spacing) and spacing > 0):
        raise ValueError(f"resample_polyline: spacing must be > 0 metres, got {spacing}")
    total = polyline_arclength(p)[-1]
    n = max(int(np.ceil(total / spacing - 1e-9)), 1)
    s = np.linspace(0.0, total, n + 1)
    return interpolate_polyline(p, s)[0]


def project_to_polyline(points, polyline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nearest point on polyline [M, 2] to each of points [..., 2].

    Returns (s [...]: arclength of the nearest point, metres; lateral [...]: signed distance,
    positive when the point is left of the polyline's direction; heading [...]: heading of the
    nearest segment, radians). |lateral| is the Euclidean distance to the polyline.
    """
    p = check_polyline(polyline, "project_to_polyline")
    q = np.asarray(points, dtype=np.float64)
    shape = q.shape[:-1]
    q = q.reshape(-1, 2)
    a, b = p[:-1], p[1:]  # [S, 2]
    ab = b - a
    L2 = np.sum(ab * ab, axis=1)
    cum = polyline_arclength(p)
    # [N, S]: the clamped parameter of each point's foot on each segment
    t = np.einsum("nsk,sk->ns", q[:, None, :] - a[None], ab) / np.where(L2 > 0, L2, 1.0)
    t = np.clip(np.where(L2 > 0, t, 0.0), 0.0, 1.0)
    foot = a[None] + t[..., None] * ab[None]
    d2 = np.sum((q[:, None, :] - foot) ** 2, axis=-1)
    j = np.argmin(d2, axis=1)  # [N] nearest segment
    n = np.arange(len(q))
    tj = t[n, j]
    s = cum[j] + tj * np.sqrt(L2[j])
    heading = np.arctan2(ab[j, 1], ab[j, 0])
    rel = q - foot[n, j]
    cross = np.cos(heading) * rel[:, 1] - np.sin(heading) * rel[:, 0]
    dist = np.sqrt(d2[n, j])
    # the sign from the cross product with the segment direction; at a vertex foot, both
    # neighbouring segments agree for points outside the corner's wedge
    lateral = np.where(cross >= 0, dist, -dist)
    return s.reshape(shape), lateral.reshape(shape), heading.reshape(shape)


def point_polyline_distance(points, polyline) -> np.ndarray:
    """Euclidean distance [...] (metres) from points [..., 2] to polyline [M, 2]."""
    return np.abs(project_to_polyline(points, polyline)[1])


def offset_polyline(polyline, offset, miter: bool = True) -> np.ndarray:
    """Polyline [M, 2] shifted ``offset`` metres (scalar or [M]) to the left of its direction.

    Uses the averaged normal at each vertex (exact for straight lines; for arcs the result is an
    arc of radius R - offset sampled at the same angles). With ``miter`` the normal is lengthened at
    a corner so that parallel segments keep their distance; without, the unit vertex normals of
    :func:`polyline_vertex_normals` are used (the corner is cut; the polyline must have no repeated
    vertices).
    """
    p = check_polyline(polyline, "offset_polyline")
    if not miter:
        return p + np.asarray(offset, dtype=np.float64).reshape(-1, 1) * polyline_vertex_normals(p)
    d = np.diff(p, axis=0)
    d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
    t = np.concatenate([d[:1], d[:-1] + d[1:], d[-1:]], axis=0)
    t /= np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    # scale by 1/cos(half the turn) so parallel segments keep their distance at a corner
    cos_half = np.ones(len(p))
    cos_half[1:-1] = np.clip(np.sum(d[:-1] * t[1:-1], axis=1), 0.2, 1.0)
    normal = np.stack([-t[:, 1], t[:, 0]], axis=1) / cos_half[:, None]
    return p + np.asarray(offset, dtype=np.float64).reshape(-1, 1) * normal


# -- smooth polylines: vertex normals averaged over the two segments at a vertex ---------------------
# The street generator's view of a polyline: offsets along these normals are miter-free (smooth curves
# keep their shape), frames between vertices blend the two normals, and queries clamp to the span.

_PROJECT_CELL = 16.0  # metres: nearest_on_polyline tests points in groups of this size


def clean_polyline(polyline, max_step: float | None = None) -> np.ndarray:
    """Polyline [K, 2] without repeated vertices (closer than 1e-9 m to the one before), with every
    segment split into equal parts at most ``max_step`` metres long when it is given.

    The smooth-polyline functions below want a polyline without repeated vertices: pass them this.
    """
    p = check_polyline(polyline, "clean_polyline")
    keep = np.concatenate([[True], np.hypot(*np.diff(p, axis=0).T) > 1e-9])
    p = p[keep]
    if len(p) < 2:
        raise ValueError("clean_polyline: polyline has zero length")
    if max_step is not None:
        if not (np.isfinite(max_step) and max_step > 0):
            raise ValueError(f"clean_polyline: max_step must be > 0 metres, got {max_step}")
        out = [p[:1]]
        for a, b in itertools.pairwise(p):
            k = max(1, math.ceil(np.hypot(*(b - a)) / max_step))
            out.append(a + (b - a) * (np.arange(1, k + 1) / k)[:, None])
        p = np.concatenate(out)
    return p


def _segments(polyline, where: str):
    """(vertices [M, 2], segment lengths [M - 1], unit directions [M - 1, 2], stations [M])."""
    p = check_polyline(polyline, where)
    d = np.diff(p, axis=0)
    seg_len = np.hypot(d[:, 0], d[:, 1])
    if (seg_len == 0).any():
        raise ValueError(f"{where}: polyline has repeated vertices; pass it through clean_polyline first")
    return p, seg_len, d / seg_len[:, None], np.concatenate([[0.0], np.cumsum(seg_len)])


def polyline_stations(polyline) -> np.ndarray:
    """Arclength [M] (metres) at each vertex of polyline [M, 2], segment lengths by ``np.hypot``: the
    arclength of :func:`polyline_frames` and :func:`nearest_on_polyline` (``polyline_arclength``
    agrees to rounding)."""
    return _segments(polyline, "polyline_stations")[3]


def polyline_vertex_normals(polyline) -> np.ndarray:
    """Unit left normals [M, 2] at the vertices: the mean of the normals of the segments meeting there
    (what ``offset_polyline(..., miter=False)`` shifts along)."""
    p, _, u, _ = _segments(polyline, "polyline_vertex_normals")
    n_seg = np.stack([-u[:, 1], u[:, 0]], 1)
    vn = np.zeros_like(p)
    vn[:-1] += n_seg
    vn[1:] += n_seg
    return vn / np.maximum(np.linalg.norm(vn, axis=1, keepdims=True), 1e-9)


def polyline_frames(polyline, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points [n, 2], unit tangents [n, 2] and unit left normals [n, 2] at arclengths s [n] (metres,
    clamped to the polyline). The normal blends the two vertex normals linearly along a segment, so
    frames turn smoothly; the tangent is the normal turned right."""
    p, seg_len, u, cum = _segments(polyline, "polyline_frames")
    vn = polyline_vertex_normals(p)
    s = np.clip(np.asarray(s, dtype=np.float64).reshape(-1), 0.0, cum[-1])
    k = np.clip(np.searchsorted(cum, s, side="right") - 1, 0, len(seg_len) - 1)
    t = s - cum[k]
    f = (t / seg_len[k])[:, None]
    xy = p[k] + u[k] * t[:, None]
    n = vn[k] * (1 - f) + vn[k + 1] * f
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-9)
    return xy, np.stack([n[:, 1], -n[:, 0]], 1), n


def nearest_on_polyline(points, polyline, max_dist: float = np.inf):
    """The nearest point of polyline [M, 2] to each of points [n, 2], for many points at once.

    Returns (dist [n] metres, lateral [n]: signed offset from the nearest segment's line, + left,
    s [n]: arclength of the nearest point, interior [n]: the nearest point is not an end cap, i.e. the
    point lies beside the span, not beyond an end). Points farther than ``max_dist`` from every
    segment get dist = inf and interior False (and are cheap: points are tested in groups against the
    segments near them only).
    """
    p, L, u, cum = _segments(polyline, "nearest_on_polyline")
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    n = len(pts)
    dist = np.full(n, np.inf)
    lat = np.zeros(n)
    s = np.zeros(n)
    interior = np.zeros(n, dtype=bool)
    lo_all, hi_all = p.min(0), p.max(0)
    idx = np.flatnonzero(np.all((pts >= lo_all - max_dist) & (pts <= hi_all + max_dist), axis=1))
    if not len(idx):
        return dist, lat, s, interior
    a = p[:-1]
    S = len(L)
    seg_lo = np.minimum(p[:-1], p[1:]) - max_dist
    seg_hi = np.maximum(p[:-1], p[1:]) + max_dist
    # points grouped by cells: each group is tested only against the segments near it
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
        s[grp] = cum[k] + tc[r, j]
        tk = t[r, j]
        interior[grp] = ~(((k == 0) & (tk < 0.0)) | ((k == S - 1) & (tk > L[-1])))
    far = dist > max_dist
    dist[far], interior[far] = np.inf, False
    return dist, lat, s, interior
