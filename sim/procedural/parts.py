"""Building blocks of every procedural asset: a Gaussian accumulator, seeded generators, orientations,
noise, and shapes in a local frame (flat rectangles, box shells, volume fills, cylinders, discs,
extrusions of a side profile).

How the Gaussians are shaped, and why (the CPU renderer's cost grows with each Gaussian's on-screen
footprint and with how many overlap a pixel before it saturates): surfaces are tiled by *flat*, nearly
opaque Gaussians (normal-axis scale ``FLAT_SIGMA``, opacity ``OPACITY``) whose tangent scales follow
the sampling pitch, on jittered grids (equal depths would make the compositing order ambiguous).
Obstacles also get opaque Gaussians through their volume (``volume_fill``), so a Gaussian-count
collision query (``sim.collision``) finds them.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from sim.gaussians import GaussianCloud
from sim.geometry import clean_polyline, nearest_on_polyline

GROUND_Z_JITTER = 0.002  # ground Gaussians' height jitter (m): equal depths would make compositing ambiguous
FLAT_SIGMA = 0.008  # normal-axis scale of surface Gaussians: flat discs
OPACITY = 0.99  # the renderers cap alpha at 0.99: surfaces saturate pixels as fast as they can
FILL_OPACITY = 0.96  # volume fill of obstacles (hidden behind their surfaces)
SIGMA_PER_PITCH = 0.6  # tangent sigma / sampling pitch: neighbours overlap without holes
JITTER = 0.08  # of a grid cell: enough to break exact grids (equal depths), small enough to leave no holes


def seeded_rng(seed: int, *keys) -> np.random.Generator:
    """A generator for one component: stable across runs and independent of generation order."""
    words = [int(seed) & 0xFFFFFFFF] + [zlib.crc32(str(k).encode()) for k in keys]
    return np.random.default_rng(np.random.SeedSequence(words))


class Parts:
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

    def extend(self, other: Parts) -> None:
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


def quats_from_axes(t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
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


def quats_yaw(yaw) -> np.ndarray:
    """[n, 4] wxyz rotations about +z by ``yaw`` [n] rad (scale 0 along the yaw direction, 2 along z)."""
    yaw = np.asarray(yaw, dtype=np.float64).reshape(-1)
    z = np.zeros_like(yaw)
    return np.stack([np.cos(yaw / 2), z, z, np.sin(yaw / 2)], axis=1)


def random_quats(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


class Noise:
    """Smooth 2D value noise in about [-1, 1]: a sum of random plane waves (cheap, deterministic)."""

    def __init__(self, rng: np.random.Generator, wavelength: float, waves: int = 6):
        ang = rng.uniform(0, 2 * np.pi, waves)
        lam = wavelength * rng.uniform(0.6, 1.6, waves)
        self.k = np.stack([np.cos(ang), np.sin(ang)], 1) * (2 * np.pi / lam)[:, None]  # [W, 2]
        self.phase = rng.uniform(0, 2 * np.pi, waves)
        self.norm = 1.0 / math.sqrt(waves / 2.0)

    def __call__(self, xy: np.ndarray) -> np.ndarray:
        return np.sin(np.asarray(xy)[:, :2] @ self.k.T + self.phase).sum(1) * self.norm


def jittered_grid(rng: np.random.Generator, n_u: int, n_v: int, jitter: float = JITTER, closed_v: bool = False):
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


def vary(rng: np.random.Generator, rgb, n: int, amount: float) -> np.ndarray:
    """[n, 3] copies of ``rgb`` with per-Gaussian brightness noise (+-amount, relative) and slight tint."""
    base = np.broadcast_to(np.asarray(rgb, dtype=np.float64), (n, 3))
    gain = 1.0 + rng.uniform(-amount, amount, (n, 1))
    tint = 1.0 + rng.uniform(-amount / 4, amount / 4, (n, 3))
    return base * gain * tint


def rot2(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s], [s, c]])


def place(parts: Parts, x: float, y: float, z: float, yaw: float) -> Parts:
    """``parts`` moved from their local frame to the world by the planar pose (x, y, z, yaw)."""
    out = Parts()
    if not parts.m:
        return out
    R = np.eye(3)
    R[:2, :2] = rot2(yaw)
    qz = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
    for m, s, q, o, c in zip(parts.m, parts.s, parts.q, parts.o, parts.c):
        w, x_, y_, z_ = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
        qw, qzz = qz[0], qz[3]
        # qz * q for qz = (qw, 0, 0, qzz)
        qq = np.stack([qw * w - qzz * z_, qw * x_ - qzz * y_, qw * y_ + qzz * x_, qw * z_ + qzz * w], 1)
        out.add(m @ R.T + np.array([x, y, z]), s, qq, o, c)
    return out


def rect_surface(rng, origin, e_u, e_v, size_u: float, size_v: float, pitch: float, aspect: float = 1.0):
    """Jittered samples on a planar rectangle origin + u e_u + v e_v, u in [0, size_u], v in [0, size_v].

    The sampling pitch is ``pitch * sqrt(aspect)`` along e_u and ``pitch / sqrt(aspect)`` along e_v.
    Returns (points [n, 3], u [n], v [n], quats [n, 4], scales [n, 3]): flat Gaussians whose first two
    scales follow the pitch along e_u and e_v.
    """
    pu, pv = pitch * math.sqrt(aspect), pitch / math.sqrt(aspect)
    n_u, n_v = math.ceil(size_u / pu - 1e-9), math.ceil(size_v / pv - 1e-9)
    n_u, n_v = max(n_u, 1), max(n_v, 1)
    fu, fv = jittered_grid(rng, n_u, n_v)
    u, v = fu * size_u, fv * size_v
    e_u, e_v = np.asarray(e_u, dtype=np.float64), np.asarray(e_v, dtype=np.float64)
    pts = np.asarray(origin, dtype=np.float64) + u[:, None] * e_u + v[:, None] * e_v
    q = np.broadcast_to(quats_from_axes(e_u[None], e_v[None]), (len(pts), 4))
    sc = np.array([SIGMA_PER_PITCH * size_u / n_u, SIGMA_PER_PITCH * size_v / n_v, FLAT_SIGMA])
    return pts, u, v, q, np.broadcast_to(sc, pts.shape)


def box_shell(parts: Parts, rng, lo, hi, pitch: float, rgb_fn, faces: str = "xXyYzZ", opacity: float = OPACITY):
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
        pts, _, _, q, sc = rect_surface(rng, origin, e1, e2, ext[a1], ext[a2], pitch)
        rgb = rgb_fn(f, pts) if callable(rgb_fn) else rgb_fn
        parts.add(pts, sc, q, opacity, rgb)


def volume_fill(parts: Parts, rng, lo, hi, pitch: float, rgb, inside=None):
    """Opaque round Gaussians through the box [lo, hi] (a jittered 3D grid), optionally masked by
    ``inside(points [n, 3]) -> bool [n]``: obstacles' volume, for collision queries."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    n = np.maximum(np.ceil((hi - lo) / pitch).astype(int), 1)
    g = np.stack(np.meshgrid(*[np.arange(k) for k in n], indexing="ij"), -1).reshape(-1, 3)
    pts = lo + (g + 0.5 + rng.uniform(-JITTER, JITTER, g.shape)) / n * (hi - lo)
    if inside is not None:
        pts = pts[inside(pts)]
    sig = 0.45 * (hi - lo) / n
    parts.add(pts, np.broadcast_to(sig, pts.shape), random_quats(rng, len(pts)), FILL_OPACITY, rgb)


def cylinder(
    parts: Parts,
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
    fa, fz = jittered_grid(rng, n_a, n_z)
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
    parts.add(pts, sc, quats_from_axes(t1, t2), OPACITY, rgb)
    if fill:
        n_f = max(2, math.ceil(height / max(0.6 * min(r0, r1) + 0.05, 0.1, pitch_z or 0.0)))
        zf = z0 + (np.arange(n_f) + 0.5 + rng.uniform(-0.2, 0.2, n_f)) / n_f * height
        rf = r0 + (r1 - r0) * (zf - z0) / height
        pf = np.stack([np.full(n_f, cx), np.full(n_f, cy), zf], 1)
        sig = np.stack([0.6 * rf, 0.6 * rf, np.full(n_f, 0.5 * height / n_f)], 1)
        rgbf = rgb_fn(zf) if callable(rgb_fn) else rgb_fn
        parts.add(pf, sig, np.array([1.0, 0, 0, 0]), FILL_OPACITY, rgbf)


def disc(parts: Parts, rng, center, e_u, e_v, radius: float, pitch: float, rgb_fn):
    """Flat Gaussians on a disc in the plane spanned by unit e_u, e_v. rgb_fn(rho [n] / radius) -> colours."""
    n_r = max(2, math.ceil(radius / pitch))
    pts, rings = [], []
    for i in range(n_r):
        r = (i + 0.5) / n_r * radius
        k = max(3, math.ceil(2 * math.pi * r / pitch))
        a = (np.arange(k) + rng.uniform(-JITTER, JITTER, k)) / k * 2 * math.pi + rng.uniform(0, 2 * math.pi)
        pts.append(np.stack([r * np.cos(a), r * np.sin(a)], 1))
        rings.append(np.full(k, r / radius))
    uv = np.concatenate(pts)
    rho = np.concatenate(rings)
    e_u, e_v = np.asarray(e_u, dtype=np.float64), np.asarray(e_v, dtype=np.float64)
    p = np.asarray(center, dtype=np.float64) + uv[:, :1] * e_u + uv[:, 1:] * e_v
    sig = SIGMA_PER_PITCH * radius / n_r
    q = quats_from_axes(np.broadcast_to(e_u, p.shape), np.broadcast_to(e_v, p.shape))
    parts.add(p, (sig, sig, FLAT_SIGMA), q, OPACITY, rgb_fn(rho) if callable(rgb_fn) else rgb_fn)


def point_in_polygon(pts: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Even-odd test: points [n, 2] inside the closed polygon [k, 2] -> bool [n]."""
    x, y = pts[:, 0:1], pts[:, 1:2]
    a, b = poly, np.roll(poly, -1, axis=0)
    cond = (a[:, 1] > y) != (b[:, 1] > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        xc = a[:, 0] + (y - a[:, 1]) * (b[:, 0] - a[:, 0]) / (b[:, 1] - a[:, 1])
    return (np.count_nonzero(cond & (x < xc), axis=1) % 2) == 1


def extrusion(
    parts: Parts, rng, profile: np.ndarray, half_width, pitch: float, rgb_top, rgb_side, top_segments=None, cut=None
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
        fl, fw = jittered_grid(rng, n_l, n_w)
        xz = a + fl[:, None] * d
        hw = half_width(xz[:, 1])
        y = (2 * fw - 1) * hw
        pts = np.stack([xz[:, 0], y, xz[:, 1]], 1)
        t1 = np.broadcast_to(np.array([d[0], 0.0, d[1]]), pts.shape)
        t2 = np.broadcast_to(np.array([0.0, 1.0, 0.0]), pts.shape)
        nrm = np.broadcast_to(np.array([d[1], -d[0]]) / ln, (len(pts), 2))  # outward for a CCW profile
        sc = (SIGMA_PER_PITCH * ln / n_l, SIGMA_PER_PITCH * 2 * hw_mid / n_w, FLAT_SIGMA)
        parts.add(pts, sc, quats_from_axes(t1, t2), OPACITY, rgb_top(k, pts[:, 0], y, pts[:, 2], nrm))
    # the two side faces: the profile polygon filled, at +-half_width(z)
    lo, hi = prof.min(0), prof.max(0)
    n_x = math.ceil((hi[0] - lo[0]) / pitch)
    n_z = math.ceil((hi[1] - lo[1]) / pitch)
    for side in (1.0, -1.0):
        fx, fz = jittered_grid(rng, n_x, n_z)
        xz = lo + np.stack([fx, fz], 1) * (hi - lo)
        # keep samples half a pitch inside the outline, so the splats stay within the box
        outline = clean_polyline(np.concatenate([prof, prof[:1]]))
        keep = point_in_polygon(xz, prof) & (nearest_on_polyline(xz, outline)[0] > 0.4 * pitch)
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
        parts.add(pts, sc, quats_from_axes(t1, t2), OPACITY, rgb_side(pts[:, 0], pts[:, 1], pts[:, 2]))
