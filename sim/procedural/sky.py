"""The sky: a dome of large flat Gaussians around the populated extent (blue gradient, hazy at the
horizon, a band of distant-ground colour just below it), so every view is covered.

It stops just under the horizon: a dome under the ground would be drawn (at a cost) behind every
ground pixel the ground does not quite saturate, for no visible gain.
"""

from __future__ import annotations

import math

import numpy as np

from sim.procedural.parts import Noise, Parts, quats_from_axes, seeded_rng

SKY_MARGIN = 15.0  # dome distance beyond the extent (render distances are ~200-250 m)
SKY_SIGMA_PER_PITCH = 0.68  # the dome must cover every pixel (alpha ~ 1)
SKY_BELOW = 0.12  # rad of dome below the horizon: the distant ground seen past the extent
SKY_ZENITH = (0.30, 0.50, 0.82)
SKY_LOW = (0.60, 0.73, 0.90)
SKY_HAZE = (0.80, 0.84, 0.88)
FAR_GROUND = (0.36, 0.38, 0.33)


def gen_sky(extent: tuple[float, float, float, float], seed: int, n: int) -> Parts:
    """A dome of ``n`` large flat Gaussians on an ellipsoid around ``extent`` (xmin, ymin, xmax, ymax);
    colour by elevation."""
    rng = seeded_rng(seed, "sky")
    cloud = Noise(seeded_rng(seed, "sky", "clouds"), 0.9, waves=8)
    xmin, ymin, xmax, ymax = extent
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
    parts = Parts()
    parts.add(p, sc, quats_from_axes(e1, e2), 0.99, rgb)
    return parts


def sky_count(target: int) -> int:
    """Sky Gaussians for a background of ``target`` Gaussians."""
    return int(np.clip(0.025 * target, 1200, 4000))
