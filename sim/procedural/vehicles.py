"""Vehicle assets: sedans, hatchbacks, SUVs, vans, trucks and buses as Gaussians in their box frame.

A body is a side profile swept across the width (with tumblehome), with glass, wheels, lights and
plates painted on, and an opaque dark volume fill (so static-collision queries find a parked one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.gaussians import GaussianCloud
from sim.geometry import clean_polyline, nearest_on_polyline
from sim.procedural.parts import (
    FLAT_SIGMA,
    OPACITY,
    SIGMA_PER_PITCH,
    Parts,
    disc,
    extrusion,
    jittered_grid,
    point_in_polygon,
    quats_from_axes,
    seeded_rng,
    volume_fill,
)

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


def build_vehicle(
    kind: str, color: tuple[float, float, float] | None = None, seed: int = 0
) -> tuple[GaussianCloud, np.ndarray]:
    """A vehicle asset in its box frame and its box size.

    kind: one of ``VEHICLE_KINDS``; color: body paint (linear RGB in [0, 1]) or None for one picked by
    ``seed`` from a palette. Returns (cloud, size) with size [3] = (length, width, height) metres; every
    Gaussian's mean lies inside the box [-L/2, L/2] x [-W/2, W/2] x [0, H]. The body has glass
    (windscreens, side windows), four wheels, headlights, taillights and plates, and an opaque dark
    volume fill (so static-collision queries find a parked one).
    """
    spec = _vehicle_spec(kind)
    rng = seeded_rng(seed, "vehicle", kind)
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
    outline = clean_polyline(prof)  # open: the bottom edge is not part of it
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
        d_edge = nearest_on_polyline(np.stack([x, z], 1), outline)[0]  # pillars: glass keeps off the outline
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

    parts = Parts()
    extrusion(parts, rng, prof, half_width, pitch, rgb_top, rgb_side, cut=wheel_cut)
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

            disc(parts, rng, (ax, y_out, r_w), (1, 0, 0), (0, 0, 1), r_w - 0.005, wheel_pitch, wheel_rgb)
            n_a = max(12, math.ceil(2 * math.pi * r_w / wheel_pitch))
            n_y = max(2, math.ceil(0.24 / wheel_pitch))
            fa, fy = jittered_grid(rng, n_a, n_y)
            a = fa * 2 * math.pi
            r_t = r_w - 0.01
            pts = np.stack([ax + r_t * np.cos(a), side * (W / 2 - 0.27 + 0.24 * fy), r_w + r_t * np.sin(a)], 1)
            t1 = np.stack([-np.sin(a), np.zeros_like(a), np.cos(a)], 1)
            t2 = np.broadcast_to(np.array([0.0, 1.0, 0.0]), pts.shape)
            sc = (SIGMA_PER_PITCH * 2 * math.pi * r_t / n_a, SIGMA_PER_PITCH * 0.24 / n_y, FLAT_SIGMA)
            parts.add(pts, sc, quats_from_axes(t1, t2), OPACITY, TYRE)
    # volume fill: dark interior, seen through the glass, and what collision queries count
    fill_lo = np.array([-L / 2 + 0.1, -W / 2 + 0.15, clearance + 0.06])
    fill_hi = np.array([L / 2 - 0.1, W / 2 - 0.15, top_z - 0.08])

    def inside(p):
        ok = point_in_polygon(p[:, [0, 2]], prof) & (np.abs(p[:, 1]) < half_width(p[:, 2]) - 0.1)
        ok &= p[:, 2] > clearance  # the arches are open only where the wheels are, at the sides
        return ok & ~(wheel_cut(p[:, 0], p[:, 2]) & (np.abs(p[:, 1]) > W / 2 - 0.35))

    volume_fill(parts, rng, fill_lo, fill_hi, VEHICLE_FILL_PITCH, INTERIOR, inside)
    return parts.cloud(), np.array([L, W, H])
