"""Road paint: lane lines (solid, dashed, double yellow), stop lines and crosswalks, as *stripes*.

Compositing is front to back by the depth of each Gaussian's *centre*, so a road Gaussian whose
footprint covers a lane line could paint over it. Paint is therefore laid as a stripe: rows of small
Gaussians for the paint plus graded rows of asphalt beside it ("flanks"), and the coarse road
Gaussians keep out of a clear zone around each stripe (``out_of_stripes``); lines stay crisp from
every view.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sim.geometry import clean_polyline, nearest_on_polyline, polyline_frames, polyline_stations
from sim.procedural.parts import FLAT_SIGMA, GROUND_Z_JITTER, OPACITY, SIGMA_PER_PITCH, Parts, quats_yaw, vary

MARKING_Z = 0.004  # paint sits a few mm above the asphalt

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
PAINT_WHITE = (0.93, 0.93, 0.90)
PAINT_YELLOW = (0.95, 0.74, 0.14)


@dataclass
class Stripe:
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


def plan_stripes(markings: list[tuple[np.ndarray, str]], roads: list[tuple[np.ndarray, float]]) -> list[Stripe]:
    """Straight painted pieces of every marking (polyline [M, 2], kind), each with the cosine between it
    and the road under it (the nearest of ``roads``: centreline [K, 2], width)."""
    out: list[Stripe] = []
    for mpoly, kind in markings:
        poly = clean_polyline(_simplify(mpoly))
        cum = polyline_stations(poly)
        length = float(cum[-1])
        pieces: list[tuple[float, float]] = []
        if kind == "dashed_white":
            s = 0.0
            while s < length - 0.3:
                pieces.append((s, min(s + DASH_ON, length)))
                s += DASH_ON + DASH_OFF
        else:
            pieces.append((0.0, length))
        for s0, s1 in pieces:
            # split at the polyline's vertices so every piece is straight; joints get no flanks
            cuts = np.concatenate([[s0], cum[(cum > s0 + 1e-6) & (cum < s1 - 1e-6)], [s1]])
            ends = polyline_frames(poly, cuts)[0]
            for j in range(len(cuts) - 1):
                d = ends[j + 1] - ends[j]
                ln = float(np.hypot(*d))
                if ln < 1e-3:
                    continue
                c, u = 0.5 * (ends[j] + ends[j + 1]), d / ln
                free = (j == 0, j == len(cuts) - 2)
                if kind == "double_yellow":
                    st = Stripe(c, u, ln / 2, "double", DOUBLE_YELLOW_GAP / 2 + MARKING_WIDTH * 0.8, PAINT_YELLOW, free)
                elif kind == "solid_yellow":
                    st = Stripe(c, u, ln / 2, "line", MARKING_WIDTH / 2, PAINT_YELLOW, free)
                elif kind == "stop_line":
                    st = Stripe(c, u, ln / 2, "line", STOP_LINE_WIDTH / 2, PAINT_WHITE, free)
                elif kind == "crosswalk":
                    st = Stripe(c, u, ln / 2, "zebra", CROSSWALK_WIDTH / 2, PAINT_WHITE, free)
                else:
                    st = Stripe(c, u, ln / 2, "line", MARKING_WIDTH / 2, PAINT_WHITE, free)
                # the road under it (nearest centreline): its direction sets how far its Gaussians reach
                best, road_dir = np.inf, u
                for rp, _w in roads:
                    d_, _, s_, _ = nearest_on_polyline(c[None], rp)
                    if d_[0] < best:
                        best, road_dir = d_[0], polyline_frames(rp, s_)[1][0]
                st.road_cos = float(min(1.0, abs(np.dot(u, road_dir))))
                out.append(st)
    return out


def with_road_sigmas(stripes: list[Stripe], sig_along: float, sig_across: float) -> list[Stripe]:
    """Copies of ``stripes`` with the road Gaussians' sigmas (along, across the road) seen along/across them."""
    out = []
    for st in stripes:
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


def gen_stripe(parts: Parts, rng, st: Stripe, along_pitch: float, asphalt, on_road=None) -> None:
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
    rgb[on] = vary(rng, st.rgb, int(on.sum()), 0.04)
    z = np.where(on, MARKING_Z, 0.0) + rng.uniform(-GROUND_Z_JITTER, GROUND_Z_JITTER, len(U)) * 0.5
    yaw = np.full(len(U), math.atan2(st.direction[1], st.direction[0]))
    parts.add(
        np.column_stack([xy, z]), np.stack([SU, SV, np.full(len(U), FLAT_SIGMA)], 1), quats_yaw(yaw), OPACITY, rgb
    )
    st.clear = (
        float(np.abs(u_pos).max() + STRIPE_CLEARANCE * st.sig_par),
        v_extent + STRIPE_CLEARANCE * st.sig_perp,
    )


def out_of_stripes(stripes: list[Stripe], xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
