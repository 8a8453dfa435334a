"""Per-step geometry of one env in numba: what keeps a step's non-render part in microseconds.

Each kernel is the fast twin of plain numpy code in ``sim.geometry`` (the reference: the tests hold
them together on random and edge inputs):

- :func:`project_path` -- ``sim.geometry.project_to_polyline`` plus the expert yaw and ground height
  interpolated along the matched segment;
- :func:`first_overlap` -- ``sim.geometry.boxes_overlap`` (separating axes, touching counts) of
  one box against many, returning the first index that overlaps;
- :func:`nearest_features` -- the K nearest boxes (agents) and :func:`nearest_points` the M
  nearest lane points, turned into the ego frame (``envs.observation`` has the numpy versions);
- :func:`path_points` -- ``sim.geometry.interpolate_polyline`` (straight on past the ends), and
  :func:`route_features` those points ahead in the ego frame;
- :func:`route_limits` -- ``envs.observation.speed_limits``: the limit now, the next one and the
  metres to it along the route.

Frames as ``sim.frames``: world metres, yaw from +x towards +y; the ego frame is x forward, y left.
"""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np
from numba import njit


class _JitOptions(TypedDict):  # typed, so that njit(**_JIT) matches njit's keyword arguments
    cache: bool
    nogil: bool


_JIT: _JitOptions = {"cache": True, "nogil": True}


@njit(**_JIT)
def project_path(px, py, path_xy, path_s, path_yaw, path_dyaw, path_z):
    """Nearest point of the polyline path_xy [M, 2] (arclengths path_s [M]) to (px, py).

    Returns (distance m, arclength s m, yaw rad, z m): yaw = path_yaw[j] + u * path_dyaw[j] and z
    likewise, for the nearest segment j at fraction u. The first nearest segment wins ties.
    """
    best = np.inf
    bj = 0
    bu = 0.0
    for j in range(path_xy.shape[0] - 1):
        ax, ay = path_xy[j, 0], path_xy[j, 1]
        ex, ey = path_xy[j + 1, 0] - ax, path_xy[j + 1, 1] - ay
        L2 = ex * ex + ey * ey
        qx, qy = px - ax, py - ay
        u = (qx * ex + qy * ey) / L2 if L2 > 0 else 0.0
        u = min(max(u, 0.0), 1.0)
        dx, dy = qx - u * ex, qy - u * ey
        d2 = dx * dx + dy * dy
        if d2 < best:
            best, bj, bu = d2, j, u
    s = path_s[bj] + bu * (path_s[bj + 1] - path_s[bj])
    yaw = path_yaw[bj] + bu * path_dyaw[bj]
    z = path_z[bj] + bu * (path_z[bj + 1] - path_z[bj])
    return math.sqrt(best), s, yaw, z


@njit(**_JIT)
def path_points(path_xy, path_s, s_query, out):
    """Points at arclengths s_query [P] along path_xy [M, 2] into out [P, 2]; past either end the
    end segment is extended straight. Zero-length segments are never chosen (path_s increases)."""
    M = path_xy.shape[0]
    for p in range(s_query.shape[0]):
        s = s_query[p]
        j = np.searchsorted(path_s, s, side="right") - 1
        j = min(max(j, 0), M - 2)
        L = path_s[j + 1] - path_s[j]
        u = (s - path_s[j]) / L
        out[p, 0] = path_xy[j, 0] + u * (path_xy[j + 1, 0] - path_xy[j, 0])
        out[p, 1] = path_xy[j, 1] + u * (path_xy[j + 1, 1] - path_xy[j, 1])


@njit(**_JIT)
def route_features(ex, ey, eyaw, path_xy, path_s, s0, spacing, out):
    """Waypoints every ``spacing`` m along the path after arclength s0, in the ego frame (ego at
    ex, ey, heading eyaw): out [P, 2] (float32 or float64)."""
    P = out.shape[0]
    s_query = np.empty(P)
    for p in range(P):
        s_query[p] = s0 + spacing * (p + 1)
    pts = np.empty((P, 2))
    path_points(path_xy, path_s, s_query, pts)
    c, s = math.cos(eyaw), math.sin(eyaw)
    for p in range(P):
        dx, dy = pts[p, 0] - ex, pts[p, 1] - ey
        out[p, 0] = c * dx + s * dy
        out[p, 1] = -s * dx + c * dy


@njit(**_JIT)
def route_limits(path_s, limit, s0, horizon, out):
    """The speed limits at arclength s0 into out [3]: (limit now, next different limit, metres to it), or
    (now, now, horizon) with no change within horizon m. path_s [M] increasing m, limit [M] m/s from
    vertex i on (before path_s[0]: limit[0])."""
    M = path_s.shape[0]
    j = np.searchsorted(path_s, s0, side="right") - 1
    j = min(max(j, 0), M - 1)
    now = limit[j]
    out[0] = now
    out[1] = now
    out[2] = horizon
    for k in range(j + 1, M):
        if path_s[k] - s0 > horizon:
            break
        if limit[k] != now:
            out[1] = limit[k]
            out[2] = path_s[k] - s0
            break


@njit(**_JIT)
def _separated(dx, dy, ux, uy, ca, sa, hla, hwa, cb, sb, hlb, hwb):
    """True when axis (ux, uy) separates box a (heading ca, sa; half sizes) from b, centres dx, dy apart."""
    ra = hla * abs(ca * ux + sa * uy) + hwa * abs(-sa * ux + ca * uy)
    rb = hlb * abs(cb * ux + sb * uy) + hwb * abs(-sb * ux + cb * uy)
    return abs(dx * ux + dy * uy) > ra + rb


@njit(**_JIT)
def first_overlap(cx, cy, yaw, length, width, xy, yaws, sizes, mask):
    """Index of the first box i (with mask[i]) overlapping the box (centre cx, cy; yaw; length,
    width), or -1. xy [N, 2] centres, yaws [N], sizes [N, >=2] (length, width). Touching counts."""
    ca, sa = math.cos(yaw), math.sin(yaw)
    hla, hwa = 0.5 * length, 0.5 * width
    for i in range(xy.shape[0]):
        if not mask[i]:
            continue
        cb, sb = math.cos(yaws[i]), math.sin(yaws[i])
        hlb, hwb = 0.5 * sizes[i, 0], 0.5 * sizes[i, 1]
        dx, dy = xy[i, 0] - cx, xy[i, 1] - cy
        if _separated(dx, dy, ca, sa, ca, sa, hla, hwa, cb, sb, hlb, hwb):
            continue
        if _separated(dx, dy, -sa, ca, ca, sa, hla, hwa, cb, sb, hlb, hwb):
            continue
        if _separated(dx, dy, cb, sb, ca, sa, hla, hwa, cb, sb, hlb, hwb):
            continue
        if _separated(dx, dy, -sb, cb, ca, sa, hla, hwa, cb, sb, hlb, hwb):
            continue
        return i
    return -1


@njit(**_JIT)
def _nearest(d2, ok, radius2, k):
    """Indices of the up to k smallest d2 among ok entries within radius2, nearest first (stable)."""
    idx = np.empty(d2.shape[0], np.int64)
    n = 0
    for i in range(d2.shape[0]):
        if ok[i] and d2[i] <= radius2:
            idx[n] = i
            n += 1
    idx = idx[:n]
    order = np.argsort(d2[idx], kind="mergesort")
    return idx[order[:k]]


@njit(**_JIT)
def nearest_features(ex, ey, eyaw, xy, yaws, sizes, vel, ok, radius, feats, mask, start):
    """Write the nearest boxes (within radius of the ego at ex, ey, heading eyaw) into feats [K, 8]
    rows start.. as (x, y, cos, sin, length, width, vx, vy) in the ego frame, nearest first; mask
    rows set to 1. xy [N, 2], yaws [N], sizes [N, >=2], vel [N, 2] world, ok [N] bool. Returns the
    number of rows written."""
    c, s = math.cos(eyaw), math.sin(eyaw)
    N = xy.shape[0]
    d2 = np.empty(N)
    for i in range(N):
        dx, dy = xy[i, 0] - ex, xy[i, 1] - ey
        d2[i] = dx * dx + dy * dy
    room = feats.shape[0] - start
    sel = _nearest(d2, ok, radius * radius, room)
    for r in range(sel.shape[0]):
        i = sel[r]
        dx, dy = xy[i, 0] - ex, xy[i, 1] - ey
        rel = yaws[i] - eyaw
        o = start + r
        feats[o, 0] = c * dx + s * dy
        feats[o, 1] = -s * dx + c * dy
        feats[o, 2] = math.cos(rel)
        feats[o, 3] = math.sin(rel)
        feats[o, 4] = sizes[i, 0]
        feats[o, 5] = sizes[i, 1]
        feats[o, 6] = c * vel[i, 0] + s * vel[i, 1]
        feats[o, 7] = -s * vel[i, 0] + c * vel[i, 1]
        mask[o] = 1.0
    return sel.shape[0]


@njit(**_JIT)
def nearest_points(ex, ey, eyaw, points, radius, feats, mask):
    """The nearest lane points [L, 3] (x, y, heading) within radius: feats [M, 4] (x, y, cos, sin in
    the ego frame), mask [M], nearest first."""
    c, s = math.cos(eyaw), math.sin(eyaw)
    L = points.shape[0]
    d2 = np.empty(L)
    ok = np.ones(L, np.bool_)
    for i in range(L):
        dx, dy = points[i, 0] - ex, points[i, 1] - ey
        d2[i] = dx * dx + dy * dy
    sel = _nearest(d2, ok, radius * radius, feats.shape[0])
    for r in range(sel.shape[0]):
        i = sel[r]
        dx, dy = points[i, 0] - ex, points[i, 1] - ey
        rel = points[i, 2] - eyaw
        feats[r, 0] = c * dx + s * dy
        feats[r, 1] = -s * dx + c * dy
        feats[r, 2] = math.cos(rel)
        feats[r, 3] = math.sin(rel)
        mask[r] = 1.0
