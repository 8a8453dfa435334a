"""Street furniture as Gaussians in its box frame: jersey barriers, cones, sign posts, street lights,
bollards. Obstacles have opaque Gaussians through their volume, for static-collision queries.
"""

from __future__ import annotations

import math

import numpy as np

from sim.gaussians import GaussianCloud
from sim.procedural.parts import (
    Parts,
    box_shell,
    cylinder,
    disc,
    extrusion,
    place,
    point_in_polygon,
    seeded_rng,
    vary,
    volume_fill,
)
from sim.procedural.vehicles import TRIM

METAL = (0.48, 0.49, 0.51)
LAMP = (1.0, 0.97, 0.86)


PROP_KINDS = ("barrier", "cone", "pole", "street_light", "bollard")
CONCRETE = (0.72, 0.71, 0.68)
SAFETY_RED = (0.80, 0.10, 0.08)
SAFETY_WHITE = (0.92, 0.92, 0.90)
CONE_ORANGE = (0.95, 0.36, 0.06)
PROP_PITCH = 0.06
STREET_LIGHT_HEIGHT = 7.5
STREET_LIGHT_ARM = 1.8


def _prop_parts(kind: str, seed: int) -> tuple[Parts, np.ndarray]:
    rng = seeded_rng(seed, "prop", kind)
    parts = Parts()
    a = PROP_PITCH
    if kind == "barrier":
        # a jersey barrier: concrete, with a red and white striped band (road works)
        L, W, H = 2.0, 0.6, 0.8
        prof = np.array(
            [(0.30, 0.0), (0.30, 0.08), (0.13, 0.30), (0.09, H), (-0.09, H), (-0.13, 0.30), (-0.30, 0.08), (-0.30, 0.0)]
        )
        plastic = bool(rng.integers(2))

        def stripes(x, y, z):
            c = vary(rng, CONCRETE, len(x), 0.05)
            band = (z > 0.42) & (z < 0.74)
            if plastic:
                band = z > 0.05
            red = ((y + z) % 0.5) < 0.25  # y runs along the barrier here (rotated below)
            c[band & red] = SAFETY_RED
            c[band & ~red] = SAFETY_WHITE
            return c

        sub = Parts()
        # sweep the (across, up) profile along the barrier's length: build with the profile in (x, z)
        # and the length along y, then turn it 90 degrees so the length runs along box x
        extrusion(
            sub,
            rng,
            prof,
            lambda z: np.full(np.shape(z), L / 2 - 0.005),
            a,
            lambda k, x, y, z, n: stripes(x, y, z),
            stripes,
        )
        volume_fill(
            sub,
            rng,
            (-0.2, -L / 2 + 0.08, 0.05),
            (0.2, L / 2 - 0.08, H - 0.1),
            0.15,
            CONCRETE,
            lambda p: point_in_polygon(p[:, [0, 2]], prof * 0.9),
        )
        parts = place(sub, 0.0, 0.0, 0.0, math.pi / 2)
        return parts, np.array([L, W, H])
    if kind == "cone":
        H = 0.70

        def cone_rgb(z):
            c = np.empty((len(z), 3))
            c[:] = CONE_ORANGE
            c[(z > 0.36) & (z < 0.50)] = SAFETY_WHITE
            return c

        box_shell(parts, rng, (-0.19, -0.19, 0.0), (0.19, 0.19, 0.035), 0.05, TRIM, faces="xXyYZ")
        cylinder(parts, rng, H - 0.04, 0.03, cone_rgb, 0.16, 0.025, z0=0.035)
        return parts, np.array([0.38, 0.38, H])
    if kind == "pole":
        # a sign post: a round sign (red rim, white face) facing +x
        H, R = 2.75, 0.045
        cylinder(parts, rng, H - 0.01, a, METAL, R, z0=0.0)
        c = np.array([0.06, 0.0, 2.42])

        def sign_rgb(rho):
            out = np.empty((len(rho), 3))
            out[:] = SAFETY_WHITE
            out[rho > 0.72] = SAFETY_RED
            return out

        disc(parts, rng, c, (0, 1, 0), (0, 0, 1), 0.30, 0.04, sign_rgb)
        disc(parts, rng, c - (0.02, 0, 0), (0, 1, 0), (0, 0, 1), 0.30, 0.06, METAL)
        return parts, np.array([0.16, 0.62, H])
    if kind == "street_light":
        H, arm = STREET_LIGHT_HEIGHT, STREET_LIGHT_ARM
        L = arm + 0.35
        px = -L / 2 + 0.15
        cylinder(parts, rng, H - 0.05, 0.12, METAL, 0.12, 0.07, cx=px, pitch_z=0.35)
        box_shell(parts, rng, (px, -0.05, H - 0.45), (L / 2 - 0.3, 0.05, H - 0.35), 0.15, METAL, faces="yYzZ")

        def head_rgb(face, p):
            return LAMP if face == "z" else METAL

        box_shell(parts, rng, (L / 2 - 0.75, -0.16, H - 0.5), (L / 2, 0.16, H - 0.32), 0.08, head_rgb)
        return parts, np.array([L, 0.32, H])
    if kind == "bollard":
        H, R = 0.9, 0.1

        def bollard_rgb(z):
            c = np.empty((len(z), 3))
            c[:] = (0.2, 0.2, 0.21)
            c[(z > 0.68) & (z < 0.78)] = SAFETY_WHITE
            return c

        cylinder(parts, rng, H - 0.02, 0.05, bollard_rgb, R)
        disc(parts, rng, (0, 0, H - 0.01), (1, 0, 0), (0, 1, 0), R, 0.05, (0.2, 0.2, 0.21))
        return parts, np.array([2 * R, 2 * R, H])
    raise ValueError(f"build_prop: unknown kind {kind!r}; expected one of {', '.join(PROP_KINDS)}")


def build_prop(kind: str, seed: int = 0) -> tuple[GaussianCloud, np.ndarray]:
    """Street furniture in its box frame and its box size [3] (length, width, height) metres.

    kind: one of ``PROP_KINDS``. Every mean lies inside the box; obstacles (barrier, cone, bollard,
    poles) have opaque Gaussians through their volume, for static-collision queries.
    """
    parts, size = _prop_parts(kind, seed)
    return parts.cloud(), size
