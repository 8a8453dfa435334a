"""RAD's decoupled discrete action space: bins, the feasibility mask, and the metres <-> bins maps.

An action is a pair of bin indices ``(lat_idx, long_idx)`` (the env's ``MultiDiscrete([n_lat, n_long])``
order): the ego's target displacement over the next 0.5 s in the ego frame (x forward, y left),
``lateral`` in ``linspace(-lat_max, lat_max, n_lat)`` metres (left positive) and ``longitudinal`` in
``linspace(0, long_max, n_long)`` metres.

Feasibility (RAD): a vehicle cannot move sideways without moving forward, so the allowed lateral
band around the centre bin widens with the longitudinal bin. With RAD's 61 x 61 bins the allowed
half-width, in lateral bins, for longitudinal index 0..7 is 0, 0, 2, 4, 8, 13, 20, 29, and the full 30
from index 8 on. ``mask[long_idx, lat_idx]`` is True where the pair is allowed.

Rule for other bin counts (RAD's table scaled proportionally, never wider than RAD's band):
  1. put longitudinal index ``j`` on RAD's 61-bin grid: ``u = j * 60 / (n_long - 1)``;
  2. the allowed fraction of the full lateral half-range is ``h(u)``, the piecewise-linear
     interpolation of ``[0, 0, 2, 4, 8, 13, 20, 29, 30] / 30`` at ``u = 0, 1, ..., 8`` (1 beyond 8);
  3. the half-width in lateral bins is ``floor(h(u) * (n_lat - 1) / 2)``.
With 61 x 61 bins this gives RAD's table exactly. ``n_lat`` must be odd so that zero lateral
displacement is a bin (the only one allowed when standing still).

``envs.actions.ActionSpec`` (the env's) derives the same table from a curvature limit in metres instead.
The two agree on RAD's bins and on other bin *counts* over RAD's ranges up to a few edge bins, but differ
when the *ranges* change (e.g. long_max = 30 m). The functions here and ``policy.network.ActorCritic`` only
use ``n_lat, n_long, center, lateral_values, longitudinal_values, half_widths(), feasibility()``, so they
accept the env's spec as well: build the policy from the env's spec to get exactly the mask it enforces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# RAD's allowed lateral half-width (in bins, out of 30) for longitudinal index 0..8 on the 61 x 61 grid.
RAD_HALF_WIDTHS = (0, 0, 2, 4, 8, 13, 20, 29, 30)
_RAD_HALF_RANGE = 30
_RAD_LONG_STEPS = 60


@dataclass(frozen=True)
class ActionSpec:
    """Bins of the decoupled action space (defaults: RAD's).

    n_lat: number of lateral bins (odd, >= 3). lat_max: metres, bins span [-lat_max, lat_max].
    n_long: number of longitudinal bins (>= 2). long_max: metres, bins span [0, long_max].
    """

    n_lat: int = 61
    lat_max: float = 0.75
    n_long: int = 61
    long_max: float = 15.0

    def __post_init__(self):
        if not (isinstance(self.n_lat, int) and self.n_lat >= 3 and self.n_lat % 2 == 1):
            raise ValueError(
                f"ActionSpec.n_lat: expected an odd int >= 3 (zero lateral must be a bin), got {self.n_lat!r}"
            )
        if not (isinstance(self.n_long, int) and self.n_long >= 2):
            raise ValueError(f"ActionSpec.n_long: expected an int >= 2, got {self.n_long!r}")
        if not (np.isfinite(self.lat_max) and self.lat_max > 0):
            raise ValueError(f"ActionSpec.lat_max: expected a finite value > 0 (metres), got {self.lat_max!r}")
        if not (np.isfinite(self.long_max) and self.long_max > 0):
            raise ValueError(f"ActionSpec.long_max: expected a finite value > 0 (metres), got {self.long_max!r}")

    @property
    def center(self) -> int:
        """Index of the zero-lateral bin."""
        return (self.n_lat - 1) // 2

    @property
    def lateral_values(self) -> np.ndarray:
        """[n_lat] float64 metres, left positive."""
        return np.linspace(-self.lat_max, self.lat_max, self.n_lat)

    @property
    def longitudinal_values(self) -> np.ndarray:
        """[n_long] float64 metres, forward."""
        return np.linspace(0.0, self.long_max, self.n_long)

    def half_widths(self) -> np.ndarray:
        """[n_long] int64: allowed lateral half-width in bins around ``center`` per longitudinal bin."""
        u = np.arange(self.n_long) * (_RAD_LONG_STEPS / (self.n_long - 1))
        frac = np.interp(u, np.arange(len(RAD_HALF_WIDTHS)), np.asarray(RAD_HALF_WIDTHS) / _RAD_HALF_RANGE)
        # + 1e-9: h * center is an integer on RAD's grid and must not floor to one less.
        return np.floor(frac * self.center + 1e-9).astype(np.int64)

    def feasibility(self) -> np.ndarray:
        """[n_long, n_lat] bool: ``mask[long_idx, lat_idx]`` is True where the pair is allowed."""
        offset = np.abs(np.arange(self.n_lat) - self.center)  # [n_lat]
        return offset[None, :] <= self.half_widths()[:, None]


def _to_numpy(x, name: str, where: str) -> tuple[np.ndarray, torch.device | None]:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy(), x.device
    try:
        return np.asarray(x), None
    except Exception as e:  # e.g. ragged lists
        raise TypeError(f"{where}: {name} must be array-like, got {type(x).__name__}") from e


def nearest_bins(lateral_m, longitudinal_m, spec: ActionSpec):
    """The feasible bin pair nearest (Euclidean, in metres) to each displacement: RAD's IL target.

    lateral_m, longitudinal_m: broadcastable arrays (numpy, torch or scalars) of metres in the ego frame,
    lateral left positive. Values outside the bin ranges map to the nearest edge bin.
    Returns ``(lat_idx, long_idx)``, int64 of the broadcast shape (torch tensors on the input's device when
    either input is a tensor, else numpy). Ties go to the lower longitudinal bin; a lateral value exactly
    halfway between two bins rounds half to even (as ``envs.actions.nearest_bins``, which this matches).

    For each longitudinal bin the nearest allowed lateral bin is the unconstrained nearest one clipped
    into that bin's allowed band (distance along one axis is convex in the index), so the search is
    exact in O(N * n_long).
    """
    where = "nearest_bins"
    lat, dev_a = _to_numpy(lateral_m, "lateral_m", where)
    lon, dev_b = _to_numpy(longitudinal_m, "longitudinal_m", where)
    device = dev_a if dev_a is not None else dev_b
    lat, lon = np.broadcast_arrays(lat.astype(np.float64), lon.astype(np.float64))
    if not (np.all(np.isfinite(lat)) and np.all(np.isfinite(lon))):
        raise ValueError(f"{where}: displacements must be finite (found NaN or Inf)")
    shape = lat.shape
    lat, lon = lat.reshape(-1, 1), lon.reshape(-1, 1)  # [N, 1]

    lat_values, long_values = spec.lateral_values, spec.longitudinal_values
    lat_step = lat_values[1] - lat_values[0]
    free = np.clip(np.rint((lat - lat_values[0]) / lat_step), 0, spec.n_lat - 1)  # [N, 1], halves to even
    hw = spec.half_widths()[None, :]  # [1, n_long]
    lat_per_long = np.clip(free, spec.center - hw, spec.center + hw).astype(np.int64)  # [N, n_long]
    d2 = (lat_values[lat_per_long] - lat) ** 2 + (long_values[None, :] - lon) ** 2  # [N, n_long]
    long_idx = np.argmin(d2, axis=1)  # [N], first minimum = lower longitudinal bin
    lat_idx = np.take_along_axis(lat_per_long, long_idx[:, None], axis=1)[:, 0]
    lat_idx, long_idx = lat_idx.reshape(shape), long_idx.reshape(shape)
    if device is not None:
        return torch.as_tensor(lat_idx, device=device), torch.as_tensor(long_idx, device=device)
    return lat_idx, long_idx


def decode(lat_idx, long_idx, spec: ActionSpec):
    """Bin indices -> ``(lateral_m, longitudinal_m)``, the target displacement over the next 0.5 s.

    lat_idx, long_idx: broadcastable integer arrays (numpy, torch or scalars). Returns float64 numpy
    arrays, or torch float32 tensors on the input's device when either input is a tensor.
    """
    where = "decode"
    li, dev_a = _to_numpy(lat_idx, "lat_idx", where)
    lo, dev_b = _to_numpy(long_idx, "long_idx", where)
    device = dev_a if dev_a is not None else dev_b
    for name, x, n in (("lat_idx", li, spec.n_lat), ("long_idx", lo, spec.n_long)):
        if not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"{where}: {name} must be integer bin indices, got dtype {x.dtype}")
        if x.size and (x.min() < 0 or x.max() >= n):
            raise IndexError(f"{where}: {name} must lie in [0, {n - 1}], found values in [{x.min()}, {x.max()}]")
    li, lo = np.broadcast_arrays(li, lo)
    lat_m, long_m = spec.lateral_values[li], spec.longitudinal_values[lo]
    if device is not None:
        return (
            torch.as_tensor(lat_m, dtype=torch.float32, device=device),
            torch.as_tensor(long_m, dtype=torch.float32, device=device),
        )
    return lat_m, long_m


def is_feasible(lat_idx, long_idx, spec: ActionSpec) -> np.ndarray:
    """Bool array of the broadcast shape: whether each (lat_idx, long_idx) pair is allowed."""
    li, _ = _to_numpy(lat_idx, "lat_idx", "is_feasible")
    lo, _ = _to_numpy(long_idx, "long_idx", "is_feasible")
    return spec.feasibility()[lo, li]
