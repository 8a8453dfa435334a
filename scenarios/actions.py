"""RAD's anchor action grid, as the expert and its IL labels use it (REFERENCE.md, "Action space").

An action is a pair of bin indices (lateral, longitudinal), ``MultiDiscrete([61, 61])``: the ego's
displacement after 0.5 s in its current frame, lateral (ego y, left positive) in
``LATERAL_BINS`` = -0.75 .. 0.75 m (step 0.025 m) and longitudinal (ego x) in
``LONGITUDINAL_BINS`` = 0 .. 15 m (step 0.25 m). Pairs that turn too sharply for the distance
run are infeasible: for longitudinal index i < 8 the lateral index must lie within
``LATERAL_HALF_WIDTH[i]`` bins of the centre (index 30); from i = 8 on every lateral bin is allowed.
"""

from __future__ import annotations

import numpy as np

NUM_LATERAL = 61
NUM_LONGITUDINAL = 61
LATERAL_BINS = np.linspace(-0.75, 0.75, NUM_LATERAL)  # metres, left positive
LONGITUDINAL_BINS = np.linspace(0.0, 15.0, NUM_LONGITUDINAL)  # metres forward
LATERAL_STEP = 0.025
LONGITUDINAL_STEP = 0.25
LATERAL_CENTER = NUM_LATERAL // 2
LATERAL_HALF_WIDTH = (0, 0, 2, 4, 8, 13, 20, 29)  # bins, for longitudinal index 0..7; full from 8
ANCHOR_HORIZON = 0.5  # seconds


def half_widths() -> np.ndarray:
    """[61] int: allowed lateral half-width (bins) for each longitudinal index."""
    hw = np.full(NUM_LONGITUDINAL, LATERAL_CENTER, dtype=np.int64)
    hw[: len(LATERAL_HALF_WIDTH)] = LATERAL_HALF_WIDTH
    return hw


def feasible_mask() -> np.ndarray:
    """[61 lateral, 61 longitudinal] bool: True where the pair is allowed."""
    lat = np.abs(np.arange(NUM_LATERAL) - LATERAL_CENTER)[:, None]
    return lat <= half_widths()[None, :]


def bins_to_displacement(idx) -> np.ndarray:
    """Bin pairs [..., 2] int (lateral index, longitudinal index) -> displacements [..., 2]
    (lateral m, longitudinal m)."""
    idx = np.asarray(idx)
    return np.stack([LATERAL_BINS[idx[..., 0]], LONGITUDINAL_BINS[idx[..., 1]]], axis=-1)


def nearest_feasible_bins(displacement) -> np.ndarray:
    """The feasible bin pair nearest (Euclidean, metres) to each displacement.

    displacement: [..., 2] (lateral m, longitudinal m) in the ego frame. Returns [..., 2] int64
    (lateral index, longitudinal index). Exact: for each longitudinal bin, the nearest allowed
    lateral bin is the rounded lateral clipped to that bin's band; the best column wins (ties go to
    the shorter longitudinal bin).
    """
    d = np.asarray(displacement, dtype=np.float64)
    if d.shape[-1:] != (2,):
        raise ValueError(f"nearest_feasible_bins: displacement must be [..., 2], got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("nearest_feasible_bins: displacement must be finite")
    lat, lon = d[..., 0:1], d[..., 1:2]  # [..., 1]
    hw = half_widths()  # [61]
    j = np.rint(lat / LATERAL_STEP).astype(np.int64) + LATERAL_CENTER  # [..., 1]
    j = np.clip(j, LATERAL_CENTER - hw, LATERAL_CENTER + hw)  # [..., 61]: best lateral per column
    err = (LATERAL_BINS[j] - lat) ** 2 + (LONGITUDINAL_BINS - lon) ** 2  # [..., 61]
    i = np.argmin(err, axis=-1)  # [...]
    jl = np.take_along_axis(j, i[..., None], axis=-1)[..., 0]
    return np.stack([jl, i], axis=-1).astype(np.int64)


def nearest_feasible_bins_reference(displacement) -> np.ndarray:
    """Brute force over all 61 x 61 pairs for one displacement [2] -> [2]; the test oracle."""
    lat, lon = (float(v) for v in displacement)
    m = feasible_mask()
    err = (LATERAL_BINS[:, None] - lat) ** 2 + (LONGITUDINAL_BINS[None, :] - lon) ** 2
    err = np.where(m, err, np.inf)
    # ties: the smaller longitudinal index first, as the fast path
    flat = np.argmin(err.T.reshape(-1))
    i, j = divmod(int(flat), NUM_LATERAL)
    return np.array([j, i])
